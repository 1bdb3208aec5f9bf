"""Device streams through the real CUDA driver: run on a GPU machine by scripts/gpu-test.sh.

Every test skips (with the reason) where there is no CUDA driver with a device, or where torch
with CUDA is missing; tests/test_gpu_fake.py runs the same logic against the fake door
everywhere. Torch and CuPy use the driver's primary context, as framebus does, so their pointers
and streams are framebus's too.
"""

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

BOUND = 120.0


def _cuda_reason() -> str:
    if os.environ.get("FRAMEBUS_CUDA", "cuda") not in ("", "cuda"):
        return f"FRAMEBUS_CUDA={os.environ['FRAMEBUS_CUDA']} selects another door"
    info = framebus.gpu_info()
    if info["door"] != "cuda" or not info["devices"]:
        return f"no CUDA device through the driver: {info['error']}"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    return ""


REASON = _cuda_reason()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON or "GPU present")


@pytest.fixture
def name():
    n = f"t-gpureal-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for f in os.listdir("/dev/shm"):
        if f.startswith(f"framebus.{n}"):
            os.unlink(f"/dev/shm/{f}")


def child(code: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FRAMEBUS_CUDA"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=BOUND, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_torch_and_cupy_take_frames_without_a_copy(name):
    import torch

    s = framebus.create(name, shape=(1080, 1920, 3), dtype=np.uint8, slots=4, device="cuda:0")
    r = framebus.open(name, mode="lossless")
    src = torch.randint(0, 255, (1080, 1920, 3), dtype=torch.uint8, device="cuda:0")
    s.write(src, frame_id=7, meta=b"x")
    with r.wait_view(timeout=5) as f:
        assert f.device == "cuda:0" and f.frame_id == 7 and f.meta == b"x"
        t = torch.from_dlpack(f)
        assert t.data_ptr() == f.ptr and t.device.type == "cuda"
        assert torch.equal(t, src)
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            c = cupy.asarray(f)
            assert c.data.ptr == f.ptr and int(c.sum()) == int(src.sum())
    copy = r.read()
    assert isinstance(copy, framebus.DeviceArray)
    assert torch.equal(torch.from_dlpack(copy), src)
    out = torch.empty_like(src)
    r.read(out=out)
    assert torch.equal(out, src)
    host = np.empty((1080, 1920, 3), np.uint8)
    r.read(out=host)
    assert (host == src.cpu().numpy()).all()
    s.unlink()


def test_loan_renders_on_the_callers_stream(name):
    import torch

    s = framebus.create(name, shape=(256, 256), dtype=np.float32, device=0)
    r = framebus.open(name, mode="lossless")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        with s.loan(stream=side) as loan:
            t = torch.from_dlpack(loan)
            torch.cuda._sleep(50_000_000)  # a slow kernel first: the commit must not wait on the host
            t.fill_(3.5)
    with r.wait_view(timeout=5) as f:
        mine = torch.cuda.Stream()
        with torch.cuda.stream(mine):
            v = torch.from_dlpack(f.__dlpack__(stream=mine.cuda_stream))
            total = float(v.sum())
    assert total == 3.5 * 256 * 256
    s.unlink()


def test_torch_writer_cupy_reader_across_processes(name):
    pytest.importorskip("cupy")
    s = framebus.create(name, shape=(720, 1280, 3), dtype=np.uint8, slots=4, device=0)
    reader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(
            """
            import sys, json, cupy, framebus
            r = framebus.open(sys.argv[1], mode="lossless")
            print("ready", flush=True)
            sums, seqs = [], []
            while True:
                try:
                    with r.wait_view(timeout=30) as f:
                        sums.append(int(cupy.asarray(f).sum(dtype=cupy.int64))); seqs.append(f.seq)
                except framebus.StreamEndedError:
                    break
            print(json.dumps({"sums": sums, "seqs": seqs}))
            """
        ), name],
        stdout=subprocess.PIPE, text=True,
    )
    with reader:
        assert reader.stdout.readline().strip() == "ready"
        import torch

        want = []
        for seq in range(1, 101):
            t = torch.full((720, 1280, 3), seq % 251, dtype=torch.uint8, device="cuda:0")
            want.append(int(t.sum(dtype=torch.int64)))
            s.write(t, timeout=30)
        s.end()
        res = json.loads(reader.stdout.read().strip().splitlines()[-1])
    assert res["seqs"] == list(range(1, 101))
    assert res["sums"] == want
    s.unlink()


def test_cupy_writer_torch_reader_across_processes(name):
    cupy = pytest.importorskip("cupy")
    s = framebus.create(name, shape=(64, 64), dtype=np.float32, slots=3, device=0)
    r = framebus.open(name, mode="lossless")
    # The writer runs beside this reader: 20 frames on 3 slots wait for the reads.
    code = """
        import sys, json, cupy, framebus
        w = framebus.open(sys.argv[1])
        for seq in range(1, 21):
            w.write(cupy.full((64, 64), float(seq), dtype=cupy.float32), timeout=30)
        print(json.dumps({"ok": True}))
        """
    env = {k: v for k, v in os.environ.items() if k != "FRAMEBUS_CUDA"}
    import torch

    got = []
    with subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), name], stdout=subprocess.PIPE, text=True, env=env) as writer:
        for _ in range(20):
            with r.wait_view(timeout=60) as f:
                got.append(float(torch.from_dlpack(f).mean()))
        out = writer.stdout.read()
    assert writer.returncode == 0, out
    res = json.loads(out.strip().splitlines()[-1])
    assert res["ok"] and got == [float(i) for i in range(1, 21)]
    del cupy
    s.unlink()


def test_open_close_cycles_and_unlink_give_memory_back(name):
    import torch

    free_before, _ = torch.cuda.mem_get_info()
    s = framebus.create(name, shape=(2160, 3840, 3), dtype=np.uint8, slots=4, device=0)
    s.write(np.zeros((2160, 3840, 3), np.uint8))
    res = child(
        """
        import sys, json, framebus
        for _ in range(1000):
            r = framebus.open(sys.argv[1])
            with r.view(timeout=5):
                pass
            r.close()
        print(json.dumps({"ok": True}))
        """,
        name,
    )
    assert res["ok"]
    s.unlink()
    s.close()
    del s
    import gc

    gc.collect()
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    # Four 2160p slots are about 100 MB; what unlink gave back is within a few MB of it.
    assert free_after >= free_before - 8 * 1024 * 1024


def test_cpu_arrays_and_wrong_shapes_are_clear(name):
    import torch

    s = framebus.create(name, shape=(4, 4), dtype=np.float32, device=0)
    with pytest.raises(ValueError):
        s.write(torch.zeros((4, 5), device="cuda:0"))
    with pytest.raises(ValueError):
        s.write(torch.zeros((4, 4), dtype=torch.float64, device="cuda:0"))
    s.write(torch.ones((4, 4)))  # a CPU tensor is uploaded (through NumPy)
    assert float(torch.from_dlpack(s.read()).sum()) == 16.0
    s.unlink()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("mode", ["latest", "lossless"])
def test_a_forked_child_is_told_to_spawn_and_the_parent_downloads_on(name, mode):
    """tests/test_gpu_download_fork.py's scenario through the real driver (a CUDA context does
    not survive fork()): every frame read of the inherited host reader and device handle in the
    child raises DeviceUnavailableError naming fork(), the parent's pid and what to do; the
    parent reads on byte for byte."""
    from test_gpu_download import PRELUDE
    from test_gpu_download_fork import SCENARIO

    r = child(PRELUDE + SCENARIO, name, mode, "keep")
    assert r["first"] is True
    assert len(r["child"]) == 8
    for what, err in r["child"].items():
        assert "fork()" in err and "spawn" in err and f"pid {r['parent']}" in err, (what, err)
    assert r["got"] == [[k + 1, True] for k in range(1, 8)]
    assert r["status"] == 0
