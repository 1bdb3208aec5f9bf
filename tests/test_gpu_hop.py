"""W10's hop instruments, as far as they run without a GPU: the traced loan + view hop
(``FRAMEBUS_TRACE_HOP=1``) and the MPS note behind the fake CUDA door, the phase arithmetic on
made-up stamps, and the bare floor's protocol (gpu_floor.py) between two threads with stand-ins
for torch's CUDA IPC tensor and event. No test checks a speed."""

from __future__ import annotations

import importlib.util
import math
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from typing import Any, Dict, Tuple

import numpy as np
import pytest

from framebus_bench import gpu, gpu_floor, gpu_phases
from framebus_bench.records import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_traced_hop_and_mps_note_behind_the_fake_door(tmp_path) -> None:
    """FRAMEBUS_TRACE_HOP=1 adds the traced row with every phase measured, a note with the
    breakdown; the notes and every row record MPS (here: a control pipe in
    CUDA_MPS_PIPE_DIRECTORY); the floor skips with a note, the framebus rows still run."""
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: W10 measures the GPU with it and skips the fake door")
    pipes = tmp_path / "mps"
    pipes.mkdir()
    os.mkfifo(pipes / "control")
    env = dict(os.environ, COLUMNS="200", PYTHONWARNINGS="default", FRAMEBUS_CUDA="fake", FRAMEBUS_TRACE_HOP="1", CUDA_MPS_PIPE_DIRECTORY=str(pipes))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "benches"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "framebus", "bench", "W10", "--smoke", "--json", "w10.json"], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (suite,) = load(os.path.join(str(tmp_path), "w10.json")).suites
    assert any(f"running: control pipe in {pipes} (CUDA_MPS_PIPE_DIRECTORY)" in n for n in suite.notes), suite.notes
    assert any("no floor: it needs torch with CUDA" in n for n in suite.notes), suite.notes
    assert all(r.extra["mps"] is True for r in suite.rows)
    got = {(r.extra["mode"], r.variant) for r in suite.rows}
    assert ("latest", gpu.FB_TRACE) in got and ("latest", gpu.FB_VIEW) in got and ("lossless", gpu.FB_COPY) in got
    (traced,) = [r for r in suite.rows if r.variant == gpu.FB_TRACE]
    assert traced.extra["torn"] == 0 and traced.extra["disorder"] == 0 and traced.extra["got"] > 0
    phases = traced.extra["phases"]
    assert list(phases) == [key for key, _, _ in gpu_phases.PHASES]
    for key, p in phases.items():
        if key == "handover":  # only frames the reader was already waiting for
            assert 0 <= p["n"] <= traced.extra["got"]
            continue
        assert p["n"] > 0 and math.isfinite(p["p50"]) and p["p50"] >= 0, (key, p)
    assert any("phases of a loan + view hop" in n and "framebus's own calls" in n for n in suite.notes), suite.notes


def test_phases_from_made_up_stamps() -> None:
    # writer frames 1..3: (start, loaned, exported, rendered, committed), in ns
    w = [(0, 1000, 2000, 5000, 6000), (10000, 11000, 12000, 15000, 16000), (20000, 22000, 23000, 26000, 27000)]
    # reader: (seq, previous seq, wait start, woke, viewed, ready-waited, exported, checked, released)
    r = [
        (1, 0, 4000, 7000, 8000, 9000, 9500, 10500, 11000),  # waiting before frame 1's commit: hand-over 2 µs
        (3, 1, 27500, 28000, 28500, 29000, 29500, 31500, 32000),  # skipped frame 2, found frame 3 there: no hand-over
    ]
    ph = gpu_phases.phases(w, r)
    assert ph["loan"] == {"p50": 1.0, "p99": pytest.approx(1.98), "n": 3}
    assert ph["commit"]["p50"] == 1.0 and ph["render"]["p50"] == 3.0
    assert ph["handover"] == {"p50": 2.0, "p99": 2.0, "n": 1}
    assert ph["view"]["n"] == 2 and ph["view"]["p50"] == 0.75
    assert ph["check"]["p50"] == 1.5 and ph["release"]["p50"] == 0.5
    line = gpu_phases.describe("case", ph, 2, 8.0)
    assert "hand-over 2.0/2.0 (1 of 2 frames waited for)" in line and "of the hop's p50 8.0 µs" in line


def test_trace_switch() -> None:
    assert gpu_phases.enabled({"FRAMEBUS_TRACE_HOP": "1"}) and gpu_phases.enabled({"FRAMEBUS_TRACE_HOP": " yes "})
    assert not gpu_phases.enabled({}) and not gpu_phases.enabled({"FRAMEBUS_TRACE_HOP": "0"})


# -- the floor's protocol, with stand-ins for torch ------------------------------------------------

_SHARED: Dict[int, Any] = {}


def _attach(key: int) -> Any:
    return _SHARED[key]


class _SharedBuffer:
    """A "device" buffer that pickles as a reference to itself (CUDA IPC within one process)."""

    def __init__(self, shape: Tuple[int, ...]) -> None:
        self.a = np.zeros(shape, dtype=np.uint8)
        _SHARED[id(self)] = self

    def __reduce__(self) -> Any:
        return (_attach, (id(self),))


class _Event:
    def __init__(self) -> None:
        self.records = 0

    def record(self, stream: Any) -> None:
        self.records += 1

    def __reduce__(self) -> Any:
        _SHARED[id(self)] = self
        return (_attach, (id(self),))


class _Stream:
    def __init__(self) -> None:
        self.waits = 0

    def wait_event(self, event: Any) -> None:
        assert isinstance(event, _Event)
        self.waits += 1


class _Ops:
    """W10's frame work on the host: the header and body as FakeOps writes and checks them."""

    def __init__(self) -> None:
        self.cuda_stream = _Stream()

    def empty(self, shape: Tuple[int, ...]) -> _SharedBuffer:
        return _SharedBuffer(shape)

    def stamp(self, buf: _SharedBuffer, seq: int, ts: int) -> None:
        flat = buf.a.reshape(-1)
        flat[:] = seq % 251
        flat[: gpu.HEADER_BYTES].view(np.int64)[:] = (seq, ts)

    def check(self, buf: _SharedBuffer) -> Tuple[int, int, bool]:
        flat = buf.a.reshape(-1)
        seq, ts = (int(v) for v in flat[: gpu.HEADER_BYTES].view(np.int64))
        body = flat[gpu.HEADER_BYTES :]
        return seq, ts, int(body.min()) == int(body.max()) == seq % 251


class _Ipc:
    def __init__(self) -> None:
        self.collected = 0

    def event(self) -> _Event:
        return _Event()

    def collect(self) -> None:
        self.collected += 1


def test_floor_protocol_with_stand_ins() -> None:
    """Every frame the floor's writer sends is waited for, checked intact and answered, in
    order; both sides end together and the writer frees what it shared."""
    a, b = mp.Pipe()
    ipc, wops, rops = _Ipc(), _Ops(), _Ops()
    out: Dict[str, Any] = {}

    def read() -> None:
        out["r"] = gpu_floor.reader(rops, b, ipc=ipc)

    t = threading.Thread(target=read)
    t.start()
    try:
        w = gpu_floor.writer(wops, a, (8, 8, 3), 0.2, ipc=ipc)
    finally:
        t.join(30)
        a.close()
        b.close()
        _SHARED.clear()
    r = out["r"]
    assert w["sent"] > 0 and r["got"] == w["sent"] and len(r["lat_us"]) == w["sent"]
    assert r["torn"] == 0 and r["disorder"] == 0
    assert rops.cuda_stream.waits == w["sent"] and ipc.collected == 1
