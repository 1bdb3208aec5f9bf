"""The crash matrix (issue 6): processes SIGKILLed at random points, every frame checked.

``FRAMEBUS_STRESS_ITER`` iterations per scenario (10 in CI; ``make stress`` runs 200). Each
scenario asserts that nothing torn was seen, nothing was lost by a lossless reader, every kill
was followed by a working stream, and nothing was left in /dev/shm.
"""

from __future__ import annotations

import pytest

import reliability_crash
from reliability_helpers import iterations, seed_for, shm_entries


@pytest.mark.timeout(600)
@pytest.mark.parametrize("scenario", list(reliability_crash.SCENARIOS))
def test_crash_matrix(scenario: str) -> None:
    before = shm_entries()
    tally = reliability_crash.run(scenario, iterations(), seed=seed_for(scenario))
    print(tally.summary())
    assert tally.errors == []
    assert tally.torn == 0
    assert tally.lost == 0
    assert tally.frames_checked > 0
    assert tally.kills >= iterations()
    leaked = {n for n in shm_entries() - before if n.startswith("framebus.rel-")}
    assert leaked == set()
