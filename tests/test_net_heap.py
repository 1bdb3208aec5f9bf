"""framebus.net: the subscriber keeps ZeroMQ's receive buffers in the heap (net/wire/heap.py).

glibc settings are process-wide, so everything that depends on the process's malloc state runs
in a fresh interpreter. Counts are page faults, never times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

pytest.importorskip("zmq")
from framebus.net.wire import heap  # noqa: E402

BOUND = 120.0
GLIBC = sys.platform == "linux" and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")

# Sends 1080p frames through a lossless bridge over ipc:// in this one process and reports the
# page faults of each batch of frames in steady state (after every slot and receive buffer was
# touched once). The local reader takes frames in batches of 4 from a 2-slot stream, so the subscriber waits
# for it while ZeroMQ has received the rest of the window: several receive buffers are alive at
# once, which is when glibc's own dynamic thresholds give pages back and take new ones per frame.
CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, tempfile
    import numpy as np
    import framebus, framebus.net as net
    from framebus.net.wire import heap

    tune, prefix = sys.argv[1] == "1", sys.argv[2]
    shape, batch, warm, measured = (1080, 1920, 3), 4, 8, 16
    sock = os.path.join(tempfile.mkdtemp(), "b.sock")
    src = framebus.create(prefix + "-src", shape=shape, dtype=np.uint8, slots=batch + 2)
    pub = net.publish(src.name, "ipc://" + sock, mode="lossless", hwm=batch, status=False)
    sub = net.subscribe("ipc://" + sock, prefix + "-dst", hwm=batch, slots=2, status=False, tune_malloc=tune)
    dst = framebus.open(prefix + "-dst", mode="lossless")
    i, per_batch = 0, []
    for b in range(warm + measured):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(batch):
            i += 1
            with src.loan(timeout=60, frame_id=i) as a:
                a[0, 0, 0] = i % 251
            del a  # a bound target keeps its frame; a writer that needs the slot copies it (faults)
        for k in range(i - batch + 1, i + 1):
            with dst.wait_view(timeout=60) as f:
                assert f.frame_id == k and int(f.array[0, 0, 0]) == k % 251
        if b >= warm:
            per_batch.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    per_batch.sort()
    out = {"batches": per_batch, "reserved": sub.heap_reserved, "applied": heap.applied(), "size": src.size}
    dst.close(); sub.stop(); pub.stop(); src.unlink()
    print(json.dumps(out))
    """
)


def run_child(tune: bool, env: dict = None) -> dict:
    prefix = f"t-heap-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "1" if tune else "0", prefix], capture_output=True, text=True, timeout=BOUND,
        env={**{k: v for k, v in os.environ.items() if k not in heap.USER_SETTINGS}, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"framebus.{prefix}")]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_received_frames_reuse_heap_pages():
    """With the subscriber's default, batches of 1080p frames do not fault receive buffers in again
    (half a frame's 1519 pages of faults or more): ZeroMQ's buffers come back from the heap.
    Two such batches of 16 are allowed for the heap reaching a new high-water mark once. Without
    the setting, glibc trims the heap as buffers are freed: 0 to 11 of 16 batches re-fault
    (8 runs on a 2-core VM; with it, 0 or 1)."""
    r = run_child(tune=True)
    assert r["reserved"] is True
    assert r["applied"][0] == r["size"] + heap.SLACK and r["applied"][1] >= r["applied"][0] * 5
    pages = r["size"] // 4096
    assert len([b for b in r["batches"] if b >= pages // 2]) <= 2, r


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_tune_malloc_false_and_user_settings_leave_malloc_alone():
    off = run_child(tune=False)
    assert off["reserved"] is False and off["applied"] == [0, 0]
    # The user's own tuning wins: nothing is changed, whatever the subscriber was asked.
    env = run_child(tune=True, env={"MALLOC_TRIM_THRESHOLD_": str(256 << 20)})
    assert env["reserved"] is False and env["applied"] == [0, 0]


def test_reserve_refuses_what_it_cannot_cover(monkeypatch):
    for var in heap.USER_SETTINGS:
        monkeypatch.delenv(var, raising=False)
    assert heap.reserve(0, 4) is False
    assert heap.reserve(1 << 20, 0) is False
    assert heap.reserve(heap.MMAP_THRESHOLD_MAX, 4) is False  # too large for glibc's heap
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert heap.reserve(1 << 20, 4) is False


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_reserve_only_raises():
    """In a fresh interpreter: a smaller frame after a larger one keeps the larger setting."""
    code = textwrap.dedent(
        """
        import json
        from framebus.net.wire import heap
        a = heap.reserve(8 << 20, 4); big = heap.applied()
        b = heap.reserve(1 << 20, 2); after = heap.applied()
        print(json.dumps([a, b, big, after]))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in heap.USER_SETTINGS}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, env=env)
    assert proc.returncode == 0, proc.stderr
    a, b, big, after = json.loads(proc.stdout)
    assert a is True and b is True
    assert big == after == [(8 << 20) + heap.SLACK, ((8 << 20) + heap.SLACK) * 5]
