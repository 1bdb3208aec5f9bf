"""A copy write may rewrite the newest frame's slot once every reader has taken that frame
(frames of 1 MiB and more; docs/design.md, "Rewriting the newest frame's slot"): readers in
lock-step and readers that look at any moment never see a torn or mislabelled frame."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import framebus
from framebus.errors import StreamEmptyError
from framebus.pyshmem.errors import InconsistentStreamError, as_pyshmem_read

SHAPE = (1024, 1024)  # 1 MiB of uint8: the smallest frame whose slot is rewritten


@pytest.fixture
def name():
    n = f"t-rewrite-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for leftover in (n, n + "-pong"):
        try:
            framebus.unlink(leftover)
        except FileNotFoundError:
            pass


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE, text=True)


def test_lock_step_and_snapshot_readers_never_see_a_torn_frame(name):
    frames = 300
    w = framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=2)
    # The lock-step reader answers each frame on a second stream, as a ping-pong does.
    pong = framebus.create(name + "-pong", shape=(1,), dtype=np.int64)
    try:
        stepper = spawn(
            """
            import sys, numpy as np, framebus
            r = framebus.open(sys.argv[1]); pong = framebus.open(sys.argv[1] + "-pong")
            out = np.empty((1024, 1024), np.uint8)
            print("ready", flush=True)
            bad = 0
            for i in range(1, int(sys.argv[2]) + 1):
                r.read_new(out=out, timeout=20)
                if not (out == out[0, 0]).all() or out[0, 0] != i % 251:
                    bad += 1
                pong.write(np.array([i], np.int64), timeout=20)
            print(bad, flush=True)
            """,
            name,
            str(frames),
        )
        looker = spawn(
            """
            import sys, numpy as np, framebus
            r = framebus.open(sys.argv[1])
            print("ready", flush=True)
            bad = looks = 0
            last = 0
            while True:
                try:
                    frame = r.read()
                except framebus.StreamEmptyError:
                    continue
                looks += 1
                if not (frame == frame[0, 0]).all():
                    bad += 1
                if r.write_sequence >= int(sys.argv[2]):
                    break
            print(bad, looks, flush=True)
            """,
            name,
            str(frames),
        )
        with stepper, looker:
            assert stepper.stdout.readline().strip() == "ready"
            assert looker.stdout.readline().strip() == "ready"
            for i in range(1, frames + 1):
                w.write(np.full(SHAPE, i % 251, np.uint8), timeout=20)
                pong.wait_after(i - 1, timeout=20)
            bad_steps = int(stepper.stdout.readline())
            bad_looks, looks = map(int, looker.stdout.readline().split())
        assert stepper.returncode == 0 and looker.returncode == 0
        assert bad_steps == 0, f"{bad_steps} torn or wrong frames in lock-step"
        assert bad_looks == 0, f"{bad_looks} torn frames of {looks} snapshot reads"
    finally:
        pong.unlink()
        pong.close()
        w.unlink()
        w.close()


def test_a_frame_lost_with_its_rewrite_is_pyshmems_inconsistent_stream():
    def failing(reason):
        def read(**_):
            e = StreamEmptyError("stream 's' has no frame")
            e.reason = reason
            raise e

        return read

    with pytest.raises(InconsistentStreamError, match="exited during a write"):
        as_pyshmem_read(failing("lost"), "s", lambda out=None: 0)()
    # Before the first write pyshmem reads zeros: the fallback answers.
    assert as_pyshmem_read(failing("empty"), "s", lambda out=None: ("zeros", out))(out=5) == ("zeros", 5)
    assert as_pyshmem_read(lambda out=None: 7, "s", lambda out=None: 0)(out=None) == 7
