"""The soak (issue 6): a writer and four readers at 1080p for FRAMEBUS_SOAK_SECONDS (30 s in
CI, 10 minutes with ``make stress``): zero corrupt frames, zero lost in lossless mode, steady
RSS, no leaked /dev/shm entries or file descriptors."""

from __future__ import annotations

import gc

import pytest

import reliability_soak
from reliability_helpers import ctx, fd_count, seed_for, soak_seconds


@pytest.mark.timeout(900)
def test_soak_1080p_two_lossless_two_latest() -> None:
    ctx()
    gc.collect()
    fds = fd_count()
    tally = reliability_soak.soak(soak_seconds(), seed=seed_for("soak"))
    print(tally.summary(), tally.extra)
    assert tally.errors == []
    assert tally.torn == 0
    assert tally.lost == 0
    assert tally.extra["frames_written"] > 0
    assert min(tally.extra["lossless_read"]) == tally.extra["frames_written"]
    assert tally.extra["shm_leaked"] == []
    assert tally.extra["parent_fds_leaked"] == 0
    assert reliability_soak.rss_growth_problems(tally.extra["rss"]) == []
    gc.collect()
    assert fd_count() == fds
