"""The metadata getters of frames, loans and device arrays (seq, timestamp_ns, timestamp,
frame_id, meta, shape, dtype, nbytes, device) are written once, on three native base classes,
and every handed-out object answers them the same way: host and device, frames and loans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import framebus
from framebus import _native

ARRAY = ("shape", "dtype", "nbytes", "device")
SLOT = ARRAY + ("seq",)
FRAME = SLOT + ("timestamp_ns", "timestamp", "frame_id", "meta")


@pytest.fixture
def name():
    n = f"t-headers-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for f in os.listdir("/dev/shm"):
        if f.startswith(f"framebus.{n}"):
            os.unlink(f"/dev/shm/{f}")


def test_each_getter_is_defined_once():
    bases = {"_ArrayHeader": ARRAY[:4], "_SlotHeader": ("seq",), "_FrameHeader": FRAME[5:]}
    for base, names in bases.items():
        for n in names:
            assert n in vars(getattr(_native, base)), (base, n)
    # A host Frame reads its metadata from its pinned slot when asked (and refuses once released):
    # the one override.
    own = {framebus.Frame: {"meta"}}
    for cls, header in [(framebus.Frame, FRAME), (framebus.DeviceFrame, FRAME), (framebus.Loan, SLOT), (framebus.DeviceLoan, SLOT), (framebus.DeviceArray, ARRAY)]:
        for n in header:
            assert hasattr(cls, n), (cls, n)
            assert (n in vars(cls)) == (n in own.get(cls, set())), (cls.__name__, n)
    assert issubclass(framebus.DeviceFrame, _native._FrameHeader) and issubclass(framebus.Frame, _native._FrameHeader)
    assert issubclass(framebus.Loan, _native._SlotHeader) and issubclass(framebus.DeviceLoan, _native._SlotHeader)
    assert issubclass(framebus.DeviceArray, _native._ArrayHeader)


def test_host_frames_and_loans_answer_the_header(name):
    with framebus.create(name, shape=(3, 4), dtype=np.uint16, auto_unlink=True) as s:
        with s.loan(frame_id=7, meta=b"m") as a:
            a[:] = 5
        loan = s.loan()
        got = [loan.shape, loan.dtype, loan.nbytes, loan.device, loan.seq]
        loan.abort()
        assert got == [(3, 4), np.dtype(np.uint16), 24, "cpu", 2]
        with s.view() as f:
            assert [f.shape, f.dtype, f.nbytes, f.device, f.seq, f.frame_id, f.meta] == [(3, 4), np.dtype(np.uint16), 24, "cpu", 1, 7, b"m"]
            assert f.timestamp == pytest.approx(f.timestamp_ns / 1e9)
    with framebus.create(name + "-v", capacity=1024, auto_unlink=True) as v:
        v.write({"a": np.zeros(3, np.float32), "b": np.ones((2, 2), np.uint8)})
        with v.view() as f:
            assert (f.shape, f.dtype, f.nbytes, f.device) == (None, None, 16, "cpu")
        loan = v.loan(nbytes=10)
        assert (loan.shape, loan.dtype, loan.nbytes) == ((10,), np.dtype(np.uint8), 10)
        loan.abort()


def test_device_frames_loans_and_arrays_answer_the_header(name):
    code = textwrap.dedent(
        """
        import json, sys, numpy as np, framebus
        name = sys.argv[1]
        out = {}
        def header(x, names):
            return [str(getattr(x, n)) for n in names]
        with framebus.create(name, shape=(2, 3), dtype=np.float32, device=1, auto_unlink=True) as s:
            a = framebus.DeviceArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), device=1)
            out["array"] = header(a, ["shape", "dtype", "nbytes", "device"])
            s.write(a, frame_id=3, meta=b"x")
            loan = s.loan()
            out["loan"] = header(loan, ["shape", "dtype", "nbytes", "device", "seq"])
            loan.abort()
            with s.view() as f:
                out["frame"] = header(f, ["shape", "dtype", "nbytes", "device", "seq", "frame_id", "meta"])
        print(json.dumps(out))
        """
    )
    env = dict(os.environ, FRAMEBUS_CUDA="fake")
    p = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["array"] == ["(2, 3)", "float32", "24", "cuda:1"]
    assert out["loan"] == ["(2, 3)", "float32", "24", "cuda:1", "2"]
    assert out["frame"] == ["(2, 3)", "float32", "24", "cuda:1", "1", "3", "b'x'"]
