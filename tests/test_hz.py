"""``framebus hz`` (issue #17): bad numbers are usage errors (one line, exit status 2), and hz
notices that its stream was unlinked or replaced by a new stream of the same name, says so and
exits 1 (it printed "no new frames" forever)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import framebus


def hz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "framebus", "hz", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--every", "0", "must be a positive number, got 0"),
        ("--every", "-1", "must be a positive number, got -1"),
        ("--every", "nan", "must be a positive number, got nan"),
        ("--window", "0", "must be a positive integer, got 0"),
        ("--count", "-2", "must be 0 or more, got -2"),
    ],
)
def test_bad_numbers_are_usage_errors(name, option, value, message):
    with framebus.create(name, shape=(4,), dtype=np.uint8, auto_unlink=True):
        p = hz(name, option, value)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("usage: framebus hz") and f"argument {option}: {message}" in p.stderr and p.stdout == ""


@pytest.mark.parametrize("replace", [False, True], ids=["unlinked", "replaced"])
def test_hz_stops_when_its_stream_goes(name, replace):
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    newer = None
    p = subprocess.Popen([sys.executable, "-m", "framebus", "hz", name, "--every", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "no new frames\n"  # type: ignore[union-attr]  # watching
        framebus.unlink(name)  # by name: the writer's handle stays open, so nothing ends the stream
        if replace:
            newer = framebus.create(name, shape=(4,), dtype=np.uint8)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1
        what = "was replaced by a new stream of the same name" if replace else "was unlinked"
        assert err.strip().startswith(f"framebus hz: stream {name!r} {what}"), err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        w.close()
        if newer is not None:
            newer.unlink()
