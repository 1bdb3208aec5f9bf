"""framebus.pyshmem's GPU half against the strict fake CUDA door (FRAMEBUS_CUDA=fake): pyshmem's
GPU names (``gpu_available``, ``GPU_SUPPORTED_DTYPES``, ``gpu_device=``, ``cpu_mirror=``), its
errors, and a frame written through the compat layer in one process and read through it in
another, checked byte for byte with the fake's host accessor.

The door is chosen once per process, so each scenario runs in a fresh interpreter with the
variable set. Without torch (as here) GPU frames come back as framebus device objects; on a GPU
with torch they are torch tensors (tests/pyshmem_upstream.py --gpu runs pyshmem's own GPU tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

BOUND = 120.0

PRELUDE = textwrap.dedent(
    """
    import ctypes, json, os, subprocess, sys
    import numpy as np
    import framebus
    import framebus.pyshmem as pyshmem
    from framebus import _native

    def host(x):
        "The bytes of a fake-door device object, as a flat uint8 array."
        return np.frombuffer(_native.fake_cuda_read(x.ptr, x.nbytes), np.uint8)

    def fails(fn):
        try:
            fn()
        except Exception as exc:
            return [type(exc).__name__, str(exc), [c.__name__ for c in type(exc).__mro__]]
        return None
    """
)


def run(code: str, *args: str, door: str = "fake") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FRAMEBUS_CUDA"}
    if door:
        env["FRAMEBUS_CUDA"] = door
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], capture_output=True, text=True, timeout=BOUND, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


ALL_DTYPES = sorted(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "bool", "complex64", "complex128"])


def test_gpu_names_with_the_fake_door(name):
    r = run(
        """
        name = sys.argv[1]
        out = {"available": pyshmem.gpu_available(), "dtypes": sorted(d.name for d in pyshmem.GPU_SUPPORTED_DTYPES)}
        out["roundtrip"] = {}
        for dt in pyshmem.GPU_SUPPORTED_DTYPES:
            with pyshmem.stream(name, shape=(2,), dtype=dt, gpu_device="cuda:0") as s:
                s.write(np.array([1, 0], dtype=dt))
                out["roundtrip"][dt.name] = s.read().to_numpy().tolist() == np.array([1, 0], dtype=dt).tolist()
        s = pyshmem.create(name, shape=(2, 3), dtype="float32", gpu_device="cuda")
        out["type"], out["repr"] = type(s).__name__, repr(s)
        out["fields"] = [s.gpu_device, s.gpu_enabled, s.cpu_mirror, isinstance(s, pyshmem.SharedMemory)]
        out["config"] = s.to_config()
        out["describe"] = s.describe()
        st = pyshmem.stat(name)
        out["stat"] = [st["gpu_enabled"], st["gpu_device"], st["cpu_mirror"]]
        out["dlpack_device"] = list(s.__dlpack_device__())
        out["zeros_before_first_write"] = s.read().to_numpy().tolist()
        s.unlink()
        for device in (0, "cuda:0", "cuda"):
            with pyshmem.stream(name, shape=(1,), gpu_device=device, cpu_mirror=True) as m:
                out.setdefault("mirrors", []).append([m.gpu_device, m.cpu_mirror, pyshmem.stat(name)["cpu_mirror"]])
        print(json.dumps(out))
        """,
        name,
    )
    assert r["available"] is True
    assert r["dtypes"] == ALL_DTYPES
    assert all(r["roundtrip"].values()) and sorted(r["roundtrip"]) == ALL_DTYPES
    assert r["type"] == "GpuSharedMemory"
    assert r["repr"] == f"SharedMemory(name={name!r}, shape=(2, 3), dtype='float32', gpu_device='cuda:0')"
    assert r["fields"] == ["cuda:0", True, False, True]
    assert {k: r["config"][k] for k in ("gpu_device", "cpu_mirror")} == {"gpu_device": "cuda:0", "cpu_mirror": False}
    assert "gpu_enabled:  True" in r["describe"] and "cpu_mirror:   False" in r["describe"] and "cuda:0" in r["describe"]
    assert r["stat"] == [True, "cuda:0", False]
    assert r["dlpack_device"] == [2, 0]
    assert r["zeros_before_first_write"] == [[0.0] * 3] * 2
    assert r["mirrors"] == [["cuda:0", True, True]] * 3


def test_gpu_errors_are_pyshmems(name):
    r = run(
        """
        name = sys.argv[1]
        out = {}
        out["cpu_device"] = fails(lambda: pyshmem.create(name, shape=(2,), gpu_device="cpu"))
        out["bool_device"] = fails(lambda: pyshmem.create(name, shape=(2,), gpu_device=True))
        out["missing_device"] = fails(lambda: pyshmem.create(name, shape=(2,), gpu_device="cuda:7"))
        out["size"] = fails(lambda: pyshmem.create(name, shape=(2, 2), dtype="float32", size=12, gpu_device="cuda:0"))
        out["left"] = [f for f in os.listdir("/dev/shm") if name in f]
        s = pyshmem.create(name, shape=(4,), dtype="float32", gpu_device="cuda:0")
        out["exists"] = fails(lambda: pyshmem.create(name, shape=(4,), dtype="float32", gpu_device="cuda:0"))
        s.write(np.ones(4, np.float32))
        out["out"] = fails(lambda: s.read(out=np.empty(4, np.float32)))
        out["out_publication"] = fails(lambda: s.read_publication(out=np.empty(4, np.float32)))
        out["out_read_after"] = fails(lambda: s.read_after(0, timeout=0, out=np.empty(4, np.float32)))
        out["shape"] = fails(lambda: s.write(np.zeros(3, np.float32)))
        out["device_dtype"] = fails(lambda: s.write(framebus.DeviceArray.from_numpy(np.zeros(4, np.int32))))
        out["pinned"] = fails(s.pinned_buffer)
        out["cpu_only"] = fails(lambda: pyshmem.open(name, gpu_device=False))
        out["other_device"] = fails(lambda: pyshmem.open(name, gpu_device="cuda:1"))
        out["not_cuda"] = fails(lambda: pyshmem.open(name, gpu_device="cpu"))
        ro = pyshmem.open(name, readonly=True)
        out["readonly_write"] = fails(lambda: ro.write(np.zeros(4, np.float32)))
        out["readonly_pinned"] = fails(ro.pinned_buffer)
        ro.close()
        out["timeout"] = fails(lambda: s.read_new(timeout=0.01))
        s.close()
        out["closed"] = fails(s.read)
        out["closed_write"] = fails(lambda: s.write(np.zeros(4, np.float32)))
        pyshmem.unlink(name)
        print(json.dumps(out))
        """,
        name,
    )
    assert r["cpu_device"][0] == "ValueError" and "only CUDA devices" in r["cpu_device"][1]
    assert r["bool_device"][0] == "ValueError"
    assert "ValueError" in r["missing_device"][2] and "no CUDA device 7" in r["missing_device"][1]
    assert r["size"][0] == "ValueError" and "size does not match" in r["size"][1]
    assert r["left"] == []
    assert "FileExistsError" in r["exists"][2] and "already exists" in r["exists"][1]
    for key in ("out", "out_read_after"):
        assert r[key][0] == "ValueError" and "safe CPU reads" in r[key][1], r[key]
    assert r["out_publication"][0] == "ValueError" and "safe CPU publication reads" in r["out_publication"][1]
    assert r["shape"][0] == "ValueError" and "expected shape (4,), got (3,)" in r["shape"][1]
    assert "ValueError" in r["device_dtype"][2] and "not converted" in r["device_dtype"][1]
    assert r["pinned"][0] == "RuntimeError" and "needs torch" in r["pinned"][1]
    assert r["cpu_only"][0] == "ValueError" and "without a CPU mirror" in r["cpu_only"][1]
    assert r["other_device"][0] == "ValueError" and "does not match stored device cuda:0" in r["other_device"][1]
    assert r["not_cuda"][0] == "ValueError" and "only CUDA devices" in r["not_cuda"][1]
    assert "PermissionError" in r["readonly_write"][2] and "read-only" in r["readonly_write"][1]
    assert "PermissionError" in r["readonly_pinned"][2]
    assert "TimeoutError" in r["timeout"][2]
    assert "RuntimeError" in r["closed"][2] and "closed shared memory" in r["closed"][1]
    assert "RuntimeError" in r["closed_write"][2] and "closed shared memory" in r["closed_write"][1]


def test_write_in_one_process_read_in_another(name):
    r = run(
        """
        name = sys.argv[1]
        shape = (6, 8, 3)
        def frame(k):
            return ((np.arange(np.prod(shape)) * 3 + k * 11) % 251).astype(np.uint8).reshape(shape)
        child = subprocess.Popen([sys.executable, "-c", '''
        import sys, json, numpy as np
        import framebus.pyshmem as pyshmem
        from framebus import _native
        host = lambda x: np.frombuffer(_native.fake_cuda_read(x.ptr, x.nbytes), np.uint8)
        shm = pyshmem.open(sys.argv[1])
        out = {"type": type(shm).__name__, "gpu_device": shm.gpu_device, "cpu_mirror": shm.cpu_mirror}
        def answer(**kw):
            out.update(kw); print(json.dumps(out), flush=True)
        x = shm.read()
        answer(read=[type(x).__name__, host(x).tolist(), shm.count, shm.frame_id])
        sys.stdin.readline()
        p = shm.read_after(1, timeout=30)
        answer(read_new=[host(p).tolist(), shm.count])
        sys.stdin.readline()
        pub = shm.read_after_publication(2, timeout=30)
        answer(publication=[host(pub.payload).tolist(), pub.count, pub.frame_id, pub.write_time > 0])
        c = shm.read_after(2, timeout=30)
        answer(read_after=host(c).tolist())
        shm.close()
        '''.replace("\\n        ", "\\n"), name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        out = {}
        s = pyshmem.create(name, shape=shape, dtype=np.uint8, gpu_device="cuda:0")
        s.write(frame(1), frame_id=2**64 - 1)                          # NumPy: uploaded
        got = json.loads(child.stdout.readline())
        out["first"] = got["read"][:1] + [got["read"][1] == frame(1).reshape(-1).tolist()] + got["read"][2:]
        out["handle"] = [got["type"], got["gpu_device"], got["cpu_mirror"]]
        child.stdin.write("go\\n"); child.stdin.flush()                # it waits for a second write
        s.write(framebus.DeviceArray.from_numpy(frame(2)))            # device to device
        got = json.loads(child.stdout.readline())
        out["second"] = [got["read_new"][0] == frame(2).reshape(-1).tolist(), got["read_new"][1]]
        with s.write_view(frame_id=33) as v:                           # the loaned slot
            h = frame(3)
            ctypes.memmove(v.ptr, h.ctypes.data, h.nbytes)             # (fake device memory is host memory)
        child.stdin.write("go\\n"); child.stdin.flush()
        got = json.loads(child.stdout.readline())
        out["third"] = [got["publication"][0] == frame(3).reshape(-1).tolist()] + got["publication"][1:]
        got = json.loads(child.stdout.readline())
        out["read_after"] = got["read_after"] == frame(3).reshape(-1).tolist()
        child.wait(60)
        out["child_rc"] = child.returncode
        mine = s.read()
        out["own_read"] = host(mine).tolist() == frame(3).reshape(-1).tolist()
        s.unlink()
        print(json.dumps(out))
        """,
        name,
    )
    assert r["child_rc"] == 0
    assert r["handle"] == ["GpuSharedMemory", "cuda:0", False]
    assert r["first"] == ["DeviceArray", True, 1, 2**64 - 1]
    assert r["second"] == [True, 2]
    assert r["third"] == [True, 3, 33, True]
    assert r["read_after"] is True and r["own_read"] is True


def test_cpu_mirror_is_read_cpu_only_in_another_process(name):
    r = run(
        """
        name = sys.argv[1]
        s = pyshmem.create(name, shape=(2, 3), dtype=np.int16, gpu_device="cuda:0", cpu_mirror=True)
        s.write(np.arange(6, dtype=np.int16).reshape(2, 3))
        child = subprocess.run([sys.executable, "-c", '''
        import sys, json, numpy as np
        import framebus.pyshmem as pyshmem
        shm = pyshmem.open(sys.argv[1], gpu_device=False)
        x = shm.read()
        print(json.dumps([type(shm).__name__, shm.gpu_device, shm.gpu_enabled, shm.cpu_mirror, type(x).__name__, x.tolist()]))
        shm.close()
        '''.replace("\\n        ", "\\n"), name], capture_output=True, text=True, timeout=60)
        s.unlink()
        print(child.stdout.strip().splitlines()[-1] if child.returncode == 0 else json.dumps(child.stderr))
        """,
        name,
    )
    assert r == ["SharedMemory", None, True, True, "ndarray", [[0, 1, 2], [3, 4, 5]]]


def test_without_a_door_gpu_names_say_unavailable(name):
    # FRAMEBUS_CUDA unset on a machine without a driver (as here) or with one: whatever the
    # door says, pyshmem's names agree with framebus.gpu_available().
    r = run(
        """
        name = sys.argv[1]
        out = {"fb": framebus.gpu_available(), "ps": pyshmem.gpu_available(), "n": len(pyshmem.GPU_SUPPORTED_DTYPES)}
        if not out["fb"]:
            out["create"] = fails(lambda: pyshmem.create(name, shape=(1,), gpu_device="cuda:0"))
        print(json.dumps(out))
        """,
        name,
        door="",
    )
    assert r["ps"] == r["fb"]
    if not r["fb"]:
        assert r["n"] == 0
        assert r["create"][0] == "RuntimeError" and "CUDA is not available" in r["create"][1]
