"""Device streams against the strict fake GPU door (FRAMEBUS_CUDA=fake): everything above the
door, across processes, on machines without a GPU.

The door is chosen once per process, so every test runs its scenario in fresh interpreters with
the variable set. With the fake, "device" memory is host shared memory that other processes open
through inter-process handles, and `_native.fake_cuda_read` shows its bytes. The fake refuses
what CUDA refuses (a handle opened twice, a freed pointer, a wrong device) and an event waited
for before it was ever recorded, so an ordering bug fails here instead of on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

BOUND = 120.0

PRELUDE = textwrap.dedent(
    """
    import ctypes, json, os, signal, subprocess, sys, time
    import numpy as np
    import framebus
    from framebus import _native
    from framebus.errors import DeviceUnavailableError, InvalidArgumentError, StreamEndedError

    def frame_of(seq, shape=(6, 8, 3)):
        return ((np.arange(np.prod(shape)) + seq * 7) % 251).astype(np.uint8).reshape(shape)

    def device_bytes(f):
        return np.frombuffer(_native.fake_cuda_read(f.ptr, f.nbytes), np.uint8).reshape(f.shape)

    class DLPackOnly:
        "An array that speaks only DLPack (like a JAX array without the CUDA interface)."
        def __init__(self, a): self.a = a
        def __dlpack__(self, stream=None): return self.a.__dlpack__(stream=stream)
        def __dlpack_device__(self): return self.a.__dlpack_device__()
    """
)


def run(code: str, *args: str, door: str = "fake", timeout: float = BOUND) -> dict:
    """Runs PRELUDE + code in a fresh interpreter with FRAMEBUS_CUDA=door; returns the JSON it
    prints last."""
    env = {k: v for k, v in os.environ.items() if k != "FRAMEBUS_CUDA"}
    if door:
        env["FRAMEBUS_CUDA"] = door
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def name():
    n = f"t-gpu-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    leftovers = [f for f in os.listdir("/dev/shm") if f.startswith(f"framebus.{n}")]
    for f in leftovers:
        os.unlink(f"/dev/shm/{f}")
    assert not leftovers, leftovers


def test_one_process_write_read_view_and_loan(name):
    r = run(
        """
        name = sys.argv[1]
        out = {}
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=8, device="cuda:0")
        out["device"], out["mirror"] = s.device, s.cpu_mirror
        r = framebus.open(name, mode="lossless")
        s.write(frame_of(1), frame_id=11, meta=b"m1")                         # NumPy: uploaded
        s.write(framebus.DeviceArray.from_numpy(frame_of(2)), frame_id=12)    # __cuda_array_interface__
        s.write(DLPackOnly(framebus.DeviceArray.from_numpy(frame_of(3))))     # DLPack only
        with s.loan(frame_id=14) as loan:                                     # render into the slot
            ctypes.memmove(loan.ptr, frame_of(4).ctypes.data, loan.nbytes)    # (fake device memory is host memory)
        loan = s.loan(frame_id=15)
        cai = loan.__cuda_array_interface__
        out["loan_cai"] = [list(cai["shape"]), cai["typestr"], cai["data"][1], cai["version"]]
        loan.abort()
        s.write(framebus.DeviceArray.from_numpy(frame_of(5)), frame_id=15)
        got = []
        for _ in range(5):
            with r.wait_view(timeout=5) as f:
                got.append([f.seq, f.frame_id, f.meta.decode(), f.device, list(f.shape)])
                assert (device_bytes(f) == frame_of(f.seq)).all(), f.seq
        out["got"] = got
        copy = r.read(); out["read_type"] = type(copy).__name__
        assert (copy.to_numpy() == frame_of(5)).all()
        host = np.zeros((6, 8, 3), np.uint8); r.read(out=host); assert (host == frame_of(5)).all()
        dst = framebus.DeviceArray.empty((6, 8, 3), np.uint8); r.read(out=dst); assert (dst.to_numpy() == frame_of(5)).all()
        out["counts_open"] = list(_native.fake_cuda_counts())
        del copy, dst
        r.close(); s.unlink(); s.close()
        import gc; gc.collect()
        out["counts_after_unlink"] = list(_native.fake_cuda_counts())
        print(json.dumps(out))
        """,
        name,
    )
    assert r["device"] == "cuda:0" and r["mirror"] is False
    assert r["loan_cai"] == [[6, 8, 3], "|u1", False, 3]
    assert [g[:2] for g in r["got"]] == [[1, 11], [2, 12], [3, 12], [4, 14], [5, 15]]
    assert r["got"][0][2:] == ["m1", "cuda:0", [6, 8, 3]]
    assert r["read_type"] == "DeviceArray"
    assert r["counts_after_unlink"][0] == 0, r  # the slots' memory is freed by unlink
    assert r["counts_after_unlink"][2] == 0, r  # and their events


def test_across_processes_lossless_every_frame_in_order(name):
    r = run(
        """
        name, n = sys.argv[1], 200
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=3, device=0)
        reader = subprocess.Popen([sys.executable, "-c", '''
        import sys, json, numpy as np, framebus
        from framebus import _native
        r = framebus.open(sys.argv[1], mode="lossless")
        print("ready", flush=True)
        bad, seqs = 0, []
        while True:
            try:
                with r.wait_view(timeout=30) as f:
                    b = np.frombuffer(_native.fake_cuda_read(f.ptr, f.nbytes), np.uint8)
                    want = ((np.arange(b.size) + f.seq * 7) % 251).astype(np.uint8)
                    bad += int((b != want).any()); seqs.append(f.seq)
            except framebus.StreamEndedError:
                break
        print(json.dumps({"bad": bad, "seqs": seqs, "counts": list(_native.fake_cuda_counts())}))
        ''', name], stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline().strip() == "ready"
        staging = framebus.DeviceArray.empty((6, 8, 3), np.uint8)
        for seq in range(1, n + 1):
            staging.copy_from_numpy(frame_of(seq))
            s.write(staging, timeout=30)
        s.end()
        res = json.loads(reader.stdout.read().strip().splitlines()[-1]); reader.wait()
        s.unlink()
        print(json.dumps(res))
        """,
        name,
    )
    assert r["bad"] == 0
    assert r["seqs"] == list(range(1, 201))


def test_across_processes_latest_counts_what_it_skips(name):
    r = run(
        """
        name = sys.argv[1]
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=3, device=0)
        r = framebus.open(name)  # latest
        for seq in range(1, 11):
            s.write(frame_of(seq))
        code = '''
        import sys, json, numpy as np, framebus
        from framebus import _native
        r = framebus.open(sys.argv[1])
        with r.view() as f:
            b = np.frombuffer(_native.fake_cuda_read(f.ptr, f.nbytes), np.uint8)
            print(json.dumps({"seq": f.seq, "ok": bool((b == ((np.arange(b.size) + f.seq * 7) % 251)).all())}))
        '''
        child = json.loads(subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, check=True).stdout)
        with r.wait_view(timeout=5) as f:
            first = f.seq
        missed = r.missed
        s.unlink()
        print(json.dumps({"child": child, "first": first, "missed": missed}))
        """,
        name,
    )
    assert r["child"] == {"seq": 10, "ok": True}
    assert r["first"] == 10 and r["missed"] == 9


def test_writer_killed_mid_frame_loses_only_that_frame(name):
    r = run(
        """
        name = sys.argv[1]
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=3, device=0)
        r = framebus.open(name, mode="lossless")
        s.write(frame_of(1))
        code = '''
        import os, sys, numpy as np, framebus
        w = framebus.open(sys.argv[1])
        loan = w.loan(timeout=5)
        staged = framebus.DeviceArray.from_numpy(np.full((6, 8, 3), 99, np.uint8))
        print("loaned", loan.seq, flush=True)
        os.kill(os.getpid(), 9)
        '''
        child = subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True)
        line = child.stdout.readline().split(); child.wait()
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s.write(frame_of(2), timeout=10)
        seqs = []
        for _ in range(2):
            with r.wait_view(timeout=5) as f:
                assert (device_bytes(f) == frame_of(f.seq)).all()
                seqs.append(f.seq)
        s.unlink()
        print(json.dumps({"child": line, "rc": child.returncode, "seqs": seqs, "warned": [str(w.category.__name__) for w in caught]}))
        """,
        name,
    )
    assert r["child"] == ["loaned", "2"] and r["rc"] == -9
    assert r["seqs"] == [1, 2]
    assert "LockRecoveredWarning" in r["warned"]


def test_owner_gone_is_a_clear_error(name):
    r = run(
        """
        name = sys.argv[1]
        code = '''
        import sys, numpy as np, framebus
        s = framebus.create(sys.argv[1], shape=(4, 4), dtype=np.uint8, device=0)
        s.write(np.ones((4, 4), np.uint8))
        print("made", flush=True)
        sys.stdin.read()
        '''
        owner = subprocess.Popen([sys.executable, "-c", code, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert owner.stdout.readline().strip() == "made"
        attached = framebus.open(name)
        with attached.view() as f:
            before = int(device_bytes(f).sum())
        owner.kill(); owner.wait()
        try:
            attached.wait_view(timeout=0.2)
            waited = None
        except DeviceUnavailableError as e:
            waited = str(e)
        try:
            framebus.open(name)
            msg = None
        except DeviceUnavailableError as e:
            msg = str(e)
        framebus.unlink(name)
        print(json.dumps({"msg": msg, "waited": waited, "before": before, "pid": owner.pid}))
        """,
        name,
    )
    assert r["before"] == 16
    assert r["msg"] and f"pid {r['pid']}" in r["msg"] and "create the stream again" in r["msg"]
    assert r["waited"] and f"pid {r['pid']}" in r["waited"] and "no frame will come" in r["waited"]


def test_thousand_open_close_cycles_leak_no_handle(name):
    r = run(
        """
        name = sys.argv[1]
        code = '''
        import sys, json, gc, framebus
        from framebus import _native
        before = list(_native.fake_cuda_counts())
        for i in range(1000):
            r = framebus.open(sys.argv[1])
            if i == 0:
                during = list(_native.fake_cuda_counts())
            with r.view(timeout=5) as f:
                pass
            r.close(); del r
        gc.collect()
        print(json.dumps({"before": before, "during": during, "after": list(_native.fake_cuda_counts())}))
        '''
        s = framebus.create(name, shape=(4, 4), dtype=np.uint8, slots=2, device=0)
        s.write(np.ones((4, 4), np.uint8))
        res = json.loads(subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, check=True).stdout)
        s.unlink()
        print(json.dumps(res))
        """,
        name,
    )
    assert r["before"] == [0, 0, 0]
    assert r["during"][1] == 1 and r["during"][2] == 2  # one opening of the slots, their 2 events
    assert r["after"] == [0, 0, 0], r


def test_two_handles_in_one_process_share_one_opening(name):
    r = run(
        """
        name = sys.argv[1]
        code = '''
        import sys, json, gc, framebus
        from framebus import _native
        a, b = framebus.open(sys.argv[1]), framebus.open(sys.argv[1], mode="lossless")
        both = list(_native.fake_cuda_counts())
        a.close(); del a; gc.collect()
        one = list(_native.fake_cuda_counts())
        b.close(); del b; gc.collect()
        print(json.dumps({"both": both, "one": one, "none": list(_native.fake_cuda_counts())}))
        '''
        s = framebus.create(name, shape=(4, 4), dtype=np.uint8, slots=2, device=0)
        res = json.loads(subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, check=True).stdout)
        s.unlink()
        print(json.dumps(res))
        """,
        name,
    )
    assert r["both"][1] == 1 and r["one"][1] == 1 and r["none"] == [0, 0, 0]


def test_bad_device_arguments_are_clear_errors(name):
    r = run(
        """
        name = sys.argv[1]
        out = {}
        def err(f):
            try:
                f(); return None
            except Exception as e:
                return [type(e).__name__, str(e)]
        out["no_such_device"] = err(lambda: framebus.create(name, shape=(4, 4), dtype=np.uint8, device="cuda:7"))
        out["bad_spelling"] = err(lambda: framebus.create(name, shape=(4, 4), dtype=np.uint8, device="gpu"))
        out["big_endian"] = err(lambda: framebus.create(name, shape=(4, 4), dtype=">f4", device=0))
        out["variable"] = err(lambda: framebus.create(name, capacity=1024, device=0))
        out["mirror_on_host"] = err(lambda: framebus.create(name, shape=(4, 4), dtype=np.uint8, cpu_mirror=True))
        s = framebus.create(name, shape=(4, 4), dtype=np.uint8, device=0)
        out["wrong_shape"] = err(lambda: s.write(framebus.DeviceArray.empty((4, 5), np.uint8)))
        out["wrong_dtype"] = err(lambda: s.write(framebus.DeviceArray.empty((4, 4), np.float32)))
        out["wrong_gpu"] = err(lambda: s.write(framebus.DeviceArray.empty((4, 4), np.uint8, device=1)))
        loan = s.loan()
        def assign(): loan[:] = np.zeros((4, 4), np.uint8)
        out["host_into_loan"] = err(assign)
        loan.abort()
        out["ended_loan"] = err(lambda: loan.__cuda_array_interface__)
        out["stream_type"] = err(lambda: s.write(np.zeros((4, 4), np.uint8), stream="fast"))
        out["host_only_without_mirror"] = err(lambda: framebus.open(name, device="cpu"))
        out["other_gpu_on_open"] = err(lambda: framebus.open(name, device="cuda:1"))
        out["nothing_written"] = s.write_sequence
        s.unlink()
        print(json.dumps(out))
        """,
        name,
    )
    assert r["no_such_device"][0] == "InvalidArgumentError" and "no CUDA device 7" in r["no_such_device"][1]
    assert r["bad_spelling"][0] == "InvalidArgumentError" and "'cuda:N'" in r["bad_spelling"][1]
    assert r["big_endian"][0] == "InvalidArgumentError" and "little-endian" in r["big_endian"][1]
    assert r["variable"][0] == "InvalidArgumentError" and "host memory" in r["variable"][1]
    assert r["mirror_on_host"][0] == "InvalidArgumentError"
    assert r["wrong_shape"][0] == "InvalidArgumentError" and "(4, 5)" in r["wrong_shape"][1].replace("[4, 5]", "(4, 5)")
    assert r["wrong_dtype"][0] == "InvalidArgumentError" and "<f4" in r["wrong_dtype"][1]
    assert r["wrong_gpu"][0] == "InvalidArgumentError" and "cuda:1" in r["wrong_gpu"][1]
    assert r["host_into_loan"][0] == "TypeError"
    assert r["ended_loan"][0] == "InvalidArgumentError"
    assert r["stream_type"][0] == "TypeError" and "CUDA stream" in r["stream_type"][1]
    assert r["host_only_without_mirror"][0] == "InvalidArgumentError" and "cpu_mirror=True" in r["host_only_without_mirror"][1]
    assert r["other_gpu_on_open"][0] == "InvalidArgumentError"
    assert r["nothing_written"] == 0


def test_cpu_mirror_serves_readers_without_the_gpu(name):
    r = run(
        """
        name = sys.argv[1]
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0, cpu_mirror=True)
        for seq in (1, 2):
            s.write(framebus.DeviceArray.from_numpy(frame_of(seq)), frame_id=seq)
        code = '''
        import sys, json, numpy as np, framebus
        r = framebus.open(sys.argv[1])
        a = r.read()
        print(json.dumps({"device": r.device, "stream_device": r.device_stream, "mirror": r.cpu_mirror,
                          "type": type(a).__name__, "sum": int(a.sum()), "fid": r.frame_id}))
        '''
        no_gpu = json.loads(subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, check=True,
                                           env={k: v for k, v in os.environ.items() if k != "FRAMEBUS_CUDA"}).stdout)
        host = framebus.open(name, device="cpu")
        same = bool((host.read() == frame_of(2)).all())
        s.unlink()
        print(json.dumps({"no_gpu": no_gpu, "same": same, "want": int(frame_of(2).sum())}))
        """,
        name,
    )
    assert r["no_gpu"]["device"] is None and r["no_gpu"]["stream_device"] == "cuda:0" and r["no_gpu"]["mirror"] is True
    assert r["no_gpu"]["type"] == "ndarray" and r["no_gpu"]["sum"] == r["want"] and r["no_gpu"]["fid"] == 2
    assert r["same"] is True


def test_without_a_driver_device_streams_are_refused_and_nothing_else_changes(name):
    r = run(
        """
        name = sys.argv[1]
        out = {"available": framebus.gpu_available(), "info": framebus.gpu_info()}
        try:
            framebus.create(name, shape=(4, 4), dtype=np.uint8, device=0)
        except DeviceUnavailableError as e:
            out["error"] = str(e)
        out["left"] = [f for f in os.listdir("/dev/shm") if name in f]
        s = framebus.create(name, shape=(4, 4), dtype=np.uint8)
        s.write(np.ones((4, 4), np.uint8)); out["host_ok"] = int(framebus.open(name).read().sum())
        s.unlink()
        print(json.dumps(out))
        """,
        name,
        door="",
    )
    assert r["available"] is False and r["info"]["door"] is None and r["info"]["error"]
    assert "GPU" in r["error"] and r["left"] == [] and r["host_ok"] == 16


def test_fake_door_shows_in_gpu_info():
    r = run("print(json.dumps(framebus.gpu_info()))")
    assert r["door"] == "fake" and r["error"] is None
    assert [d["ordinal"] for d in r["devices"]] == [0, 1]


def test_tools_read_device_streams(name):
    r = run(
        """
        name = sys.argv[1]
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0)
        s.write(frame_of(1), frame_id=5)
        echo = subprocess.run([sys.executable, "-m", "framebus", "echo", name, "--json", "--count", "1"], capture_output=True, text=True)
        ls = json.loads(subprocess.run([sys.executable, "-m", "framebus", "ls", "--json"], capture_output=True, text=True).stdout)
        mine = [x for x in ls if x["name"] == name][0]
        from framebus.errors import InvalidArgumentError
        try:
            framebus.open(name, device="cpu"); refused = None
        except InvalidArgumentError as e:
            refused = str(e)
        s.unlink()
        print(json.dumps({"echo": json.loads(echo.stdout), "ls": [mine["device"], mine["cpu_mirror"], mine["bytes_written"]], "refused": refused,
                          "want_sum": int(frame_of(1).sum())}))
        """,
        name,
    )
    assert r["echo"]["device"] == "cuda:0" and r["echo"]["frame_id"] == 5
    assert r["ls"] == ["cuda:0", False, 6 * 8 * 3]
    assert "no CPU mirror" in r["refused"]


def test_reader_killed_holding_a_device_frame_does_not_stop_the_writer(name):
    r = run(
        """
        name = sys.argv[1]
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=2, device=0)
        s.write(frame_of(1))
        code = '''
        import os, sys, framebus
        r = framebus.open(sys.argv[1], mode="lossless")
        f = r.view(timeout=5)
        f.__dlpack__(stream=7)   # the frame handed to a CUDA stream, then the process dies holding it
        with r.view(timeout=5) as g:
            g.__dlpack__(stream=3)   # released on stream 3: its release event is published
        print("holding", f.seq, flush=True)
        os.kill(os.getpid(), 9)
        '''
        child = subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True)
        held = child.stdout.readline().split(); child.wait()
        for seq in range(2, 12):
            s.write(frame_of(seq), timeout=10)
        reader = framebus.open(name)
        with reader.view(timeout=5) as f:
            ok = bool((device_bytes(f) == frame_of(f.seq)).all()); last = f.seq
        s.unlink()
        print(json.dumps({"held": held, "last": last, "ok": ok}))
        """,
        name,
    )
    assert r["held"] == ["holding", "1"]
    assert r["last"] == 11 and r["ok"]


#: Every way of waiting for the next frame, each on a handle of its own (a thread per wait), with
#: no timeout and with a long one: (label, function of the handle). Used by the tests below.
WAITS = """
import asyncio, threading

def _frames(r, timeout):
    for _ in r.frames(timeout):
        pass
    return "ended silently"

async def _iterate(r, timeout):
    from framebus.aio import iterate
    async for _ in iterate(r, timeout):
        pass
    return "ended silently"

WAYS = {
    "read_new": lambda r, t: r.read_new(timeout=t),
    "wait_view": lambda r, t: r.wait_view(t),
    "frames": _frames,
    "frames_copy": lambda r, t: [None for _ in r.frames(t, copy=True)] and "ended silently",
    "read_new_async": lambda r, t: asyncio.run(r.read_new_async(timeout=t)),
    "wait_view_async": lambda r, t: asyncio.run(r.wait_view_async(t)),
    "iterate": lambda r, t: asyncio.run(_iterate(r, t)),
}

def start_waits(open_handle):
    "Starts every way of waiting, with timeout None and 30, each on a handle of its own."
    results, threads = {}, []
    for label, way in WAYS.items():
        for timeout in (None, 30):
            r = open_handle()
            key = f"{label}/{timeout}"
            def body(r=r, way=way, key=key, timeout=timeout):
                try:
                    results[key] = ["returned", repr(way(r, timeout))[:80]]
                except BaseException as e:
                    results[key] = [type(e).__name__, str(e)]
            t = threading.Thread(target=body, daemon=True); t.start(); threads.append((key, t))
    return results, threads

def outcomes(results, threads, bound=10.0):
    "Each wait's outcome; 'still waiting' for one that did not end within the bound."
    end = time.monotonic() + bound
    for key, t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return {key: results.get(key, ["still waiting", ""]) for key, _ in threads}
"""


def test_waits_on_a_device_stream_whose_owner_is_killed_end_with_device_unavailable(name):
    """Whatever the timeout (none, or 30 s), every wait on a device stream learns within a
    bounded time that the process owning its GPU memory was SIGKILLed: read_new, wait_view,
    frames() (both forms), the async forms and async iteration raise DeviceUnavailableError
    naming the pid (frames() does not end silently). Each wait must end before a generous join
    bound; nothing is asserted about how long it took."""
    r = run(
        WAITS
        + textwrap.dedent(
            """
        name = sys.argv[1]
        code = '''
        import sys, numpy as np, framebus
        s = framebus.create(sys.argv[1], shape=(4, 4), dtype=np.uint8, device=0)
        s.write(np.ones((4, 4), np.uint8))
        print("made", flush=True)
        sys.stdin.read()
        '''
        owner = subprocess.Popen([sys.executable, "-c", code, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert owner.stdout.readline().strip() == "made"
        results, threads = start_waits(lambda: framebus.open(name))
        time.sleep(0.5)   # the waits are under way (not asserted)
        owner.kill(); owner.wait()
        got = outcomes(results, threads)
        framebus.unlink(name)
        print(json.dumps({"got": got, "pid": owner.pid}))
        """
        ),
        name,
    )
    assert len(r["got"]) == 14
    for key, (kind, msg) in r["got"].items():
        assert kind == "DeviceUnavailableError", (key, kind, msg)
        assert f"pid {r['pid']}" in msg and "no frame will come" in msg, (key, msg)


def test_a_writer_waiting_on_a_killed_readers_frames_goes_on(name):
    """A writer blocked (no timeout) on slots a lossless reader holds (a frame handed to a CUDA
    stream, and frames not yet read) goes on once that reader is SIGKILLed: its hold is
    reclaimed. The write must end before a generous join bound."""
    r = run(
        """
        import threading
        name = sys.argv[1]
        s = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=3, device=0)
        s.write(frame_of(1))
        code = '''
        import os, sys, framebus
        r = framebus.open(sys.argv[1], mode="lossless")
        with r.view(timeout=5) as g:
            g.__dlpack__(stream=3)   # released on stream 3: its release event is published
        f = r.view(timeout=5)
        f.__dlpack__(stream=7)       # handed to a CUDA stream and held
        print("holding", f.seq, flush=True)
        sys.stdin.read()
        '''
        child = subprocess.Popen([sys.executable, "-c", code, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        held = child.stdout.readline().split()
        done = {}
        def writer():
            try:
                for seq in range(2, 8):
                    s.write(frame_of(seq), timeout=None)   # blocks: the reader holds the ring
                done["last"] = seq
            except BaseException as e:
                done["error"] = f"{type(e).__name__}: {e}"
        t = threading.Thread(target=writer, daemon=True); t.start()
        time.sleep(0.5)   # the writer is blocked by now (not asserted)
        blocked = t.is_alive()
        child.kill(); child.wait()
        t.join(10)
        reader = framebus.open(name)
        with reader.view(timeout=5) as f:
            ok = bool((device_bytes(f) == frame_of(f.seq)).all()); last = f.seq
        s.unlink()
        print(json.dumps({"held": held, "blocked": blocked, "finished": not t.is_alive(), "done": done, "last": last, "ok": ok}))
        """,
        name,
    )
    assert r["held"] == ["holding", "1"]
    assert r["blocked"], "the writer was never held back: the test shows nothing"
    assert r["finished"] and "error" not in r["done"], r
    assert r["last"] == 7 and r["ok"]


def test_door_setting_not_understood_and_missing_driver_are_said_plainly(name):
    """FRAMEBUS_CUDA=bogus is reported as a setting not understood, listing what it accepts
    (not as a CUDA error code); without a driver, the message names libcuda.so.1 once."""
    code = """
        name = sys.argv[1]
        out = {"error": framebus.gpu_info()["error"]}
        try:
            framebus.create(name, shape=(4, 4), dtype=np.uint8, device=0)
        except DeviceUnavailableError as e:
            out["create"] = str(e)
        print(json.dumps(out))
        """
    bogus = run(code, name, door="bogus")
    for text in (bogus["error"], bogus["create"]):
        assert 'FRAMEBUS_CUDA="bogus" is not understood' in text, text
        assert '"cuda"' in text and '"fake"' in text, text
        assert "CUDA_ERROR" not in text and "failed with" not in text, text
    unset = run(code, name, door="")
    if unset["error"] is None:
        pytest.skip("this machine has a CUDA driver")
    for text in (unset["error"], unset["create"]):
        assert text.count("libcuda.so.1") == 1 and "FRAMEBUS_NO_CUDA_DRIVER" not in text and "failed with" not in text, text
        assert "FRAMEBUS_CUDA=fake" in text, text


def test_device_streams_are_their_own_class_and_host_streams_take_no_cuda_stream(name):
    """create(device=)/open() give a DeviceStream (a Stream subclass whose frame methods take a
    CUDA stream=); host streams have no stream= keyword at all, and the native host methods
    refuse a device handle."""
    r = run(
        """
        import pickle
        from framebus.errors import StreamPermissionError
        name = sys.argv[1]
        out = {}
        def err(f):
            try:
                f(); return None
            except Exception as e:
                return [type(e).__name__, str(e)]
        s = framebus.create(name, shape=(4, 4), dtype=np.uint8, device=0, cpu_mirror=True)
        s.write(np.full((4, 4), 3, np.uint8), stream=0)
        r = framebus.open(name)
        ro = framebus.open(name, readonly=True)
        mirror = framebus.open(name, device="cpu")
        again = pickle.loads(pickle.dumps(r))
        out["types"] = [type(x).__name__ for x in (s, r, ro, mirror, again)]
        out["is_stream"] = [isinstance(x, framebus.Stream) for x in (s, r, ro, mirror, again)]
        out["is_device"] = [isinstance(x, framebus.DeviceStream) for x in (s, r, ro, mirror, again)]
        out["ro_write"] = err(lambda: ro.write(np.zeros((4, 4), np.uint8), stream=0))
        out["ro_loan"] = err(lambda: ro.loan(stream=0))
        with r.view(timeout=5, stream=0) as f:
            out["view"] = [type(f).__name__, int(device_bytes(f).sum())]
        out["mirror_read"] = int(mirror.read().sum())
        out["native_host_on_device"] = err(lambda: _native.Stream.write(s, np.zeros((4, 4), np.uint8)))
        out["native_host_loan_on_device"] = err(lambda: _native.Stream.loan(s))
        out["native_open_device"] = err(lambda: _native.Stream(name))
        h = framebus.create(name + "-host", shape=(4, 4), dtype=np.uint8)
        out["host_type"] = type(h).__name__
        for call, f in [("write", lambda: h.write(np.zeros((4, 4), np.uint8), stream=0)), ("read", lambda: h.read(stream=0)),
                        ("read_new", lambda: h.read_new(timeout=0, stream=0)), ("view", lambda: h.view(stream=0)),
                        ("wait_view", lambda: h.wait_view(0, stream=0)), ("loan", lambda: h.loan(stream=0)),
                        ("view_seq", lambda: h.view_seq(1, stream=0)), ("read_into", lambda: h.read_into(np.zeros((4, 4), np.uint8), stream=0))]:
            out["host_" + call] = err(f)
        for x in (again, mirror, ro, r):
            x.close()
        h.unlink(); s.unlink()
        print(json.dumps(out))
        """,
        name,
    )
    assert r["types"] == ["DeviceStream", "DeviceStream", "_ReadOnlyDeviceStream", "Stream", "DeviceStream"]
    assert r["is_stream"] == [True] * 5 and r["is_device"] == [True, True, True, False, True]
    assert r["ro_write"][0] == "StreamPermissionError" and r["ro_loan"][0] == "StreamPermissionError"
    assert r["view"] == ["DeviceFrame", 3 * 16] and r["mirror_read"] == 3 * 16
    for key in ("native_host_on_device", "native_host_loan_on_device"):
        assert r[key][0] == "InvalidArgumentError" and "DeviceStream" in r[key][1], r[key]
    assert r["native_open_device"][0] == "InvalidArgumentError" and "DeviceStream" in r["native_open_device"][1]
    assert r["host_type"] == "Stream"
    for call in ("write", "read", "read_new", "view", "wait_view", "loan", "view_seq", "read_into"):
        assert r["host_" + call][0] == "TypeError" and "'stream'" in r["host_" + call][1], (call, r["host_" + call])


def test_door_errors_reach_python_as_values(name):
    """A door error is an exception whose code, code_name and call are the door's (what
    `framebus doctor` decides from), for a missing door and for a failed CUDA call alike."""
    code = """
        name = sys.argv[1]
        out = {}
        def values(f):
            try:
                f(); return None
            except Exception as e:
                return [type(e).__name__, getattr(e, "code", "-"), getattr(e, "code_name", "-"), getattr(e, "call", "-")]
        out["create"] = values(lambda: framebus.create(name, shape=(4, 4), dtype=np.uint8, device=0).unlink())
        out["array"] = values(lambda: framebus.DeviceArray.empty((4, 4), np.uint8, device=5))
        out["codes"] = _native.DOOR_CODES
        print(json.dumps(out))
        """
    bogus = run(code, name, door="bogus")
    assert bogus["create"] == ["DeviceUnavailableError", bogus["codes"]["FRAMEBUS_BAD_SETTING"], "FRAMEBUS_BAD_SETTING", "FRAMEBUS_CUDA"]
    assert bogus["array"] == ["DeviceUnavailableError", bogus["codes"]["FRAMEBUS_BAD_SETTING"], "FRAMEBUS_BAD_SETTING", "FRAMEBUS_CUDA"]
    fake = run(code, name, door="fake")
    assert fake["create"] is None
    assert fake["array"] == ["DeviceError", 101, "CUDA_ERROR_INVALID_DEVICE", "cuMemAlloc"]
