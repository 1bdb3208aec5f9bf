"""Helpers shared by the bridge tests (ZeroMQ and Zenoh engines, ROS 2, video): free ports,
Zenoh links on loopback, waiting for a condition, unique stream names that must not be left
behind, and bridges that are stopped when a test ends. Test modules import the fixtures by
name."""

from __future__ import annotations

import os
import socket
import time
import uuid

import pytest

import framebus

BOUND = 30.0  # seconds: upper bound of any wait in the bridge tests


def wait_until(cond, what, timeout=BOUND):
    """Polls ``cond`` every 10 ms; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def bench_streams_left() -> list:
    """Streams of benches/w5_bridge.py runs whose creator has exited: what a run that cleaned
    up after itself leaves is nothing (another run may be live beside it: its streams count only
    once their creator is gone)."""
    out = []
    for n in os.listdir("/dev/shm"):
        if n.startswith("framebus.w5net-"):
            try:
                if not framebus.stat(n[len("framebus."):]).creator_alive:
                    out.append(n)
            except OSError:
                pass
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackLink:
    """A unique key and port: the publisher listens, subscribers connect, no scouting."""

    def __init__(self, key_prefix: str = "fbtest"):
        self.key = f"{key_prefix}/{uuid.uuid4().hex[:12]}"
        self.port = free_port()

    @property
    def pub(self):
        return dict(engine="zenoh", listen=[f"tcp/127.0.0.1:{self.port}"], scouting=False)

    @property
    def sub(self):
        return dict(engine="zenoh", connect=[f"tcp/127.0.0.1:{self.port}"], scouting=False)


@pytest.fixture
def names(request):
    """Unique stream names; any left at the end is removed and fails the test."""
    tag = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    prefix = f"t-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    made = []

    def make(suffix):
        made.append(f"{prefix}-{suffix}")
        return made[-1]

    yield make
    # Every stream with the prefix counts, also those a bridge made from a name it was given.
    left = sorted(n[len("framebus."):] for n in os.listdir("/dev/shm") if n.startswith(f"framebus.{prefix}"))
    for n in left:
        framebus.unlink(n)
    assert not left, f"streams left behind: {left}"


@pytest.fixture
def bridges():
    """Collects bridges and stops them (even when the test failed)."""
    started = []
    yield started.append
    for b in reversed(started):
        try:
            b.stop()
        except Exception:
            pass
