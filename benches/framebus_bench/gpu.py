"""W10: GPU frames between processes. A writer process publishes RGB uint8 frames that live in
CUDA device memory (1080p and 2160p) as fast as it can for a fixed time; a reader process in
lossless or latest mode reads every frame it can. Per row: the reader's frames/s, the per-hop
latency (p50, p99: from the writer's stamp at the start of a frame to the moment the reader's
GPU work on it has completed), starved reads (timed out while the writer was publishing), torn
frames and frames lost or out of order.

Every frame is checked on the GPU: the writer fills it from its sequence number (16 header
bytes: the sequence number and the writer's ``perf_counter_ns`` stamp, both int64; every other
byte ``seq % 251``), the reader reduces it (min and max of the body, with torch or CuPy) and
copies four numbers to the host; a frame whose body is not all ``seq % 251`` is torn.

Variants: framebus loan + view (the writer renders into the loaned slot, the reader looks at
the slot through DLPack) and write + read_new (a copy in, a copy out into a preallocated
tensor), in both modes; in latest mode also the view read with CuPy (when installed: the
cross-library path) and pyshmem 1.4's GPU streams (when installed), and the limit: the same
GPU work of both sides (render, copy in, copy out, check) back to back in one process with
torch ``copy_`` into preallocated tensors, no IPC and no waiting: its latency is the floor of a
hop; its frames/s is that of one serialized pipeline, which two overlapping processes can
exceed. And the floor: the barest cross-process hand-off Python can do (a torch CUDA IPC tensor,
an inter-process CUDA event and a multiprocessing pipe; gpu_floor.py), whose latency is the floor
of a cross-process hop.

``FRAMEBUS_TRACE_HOP=1`` adds a latest-mode row that times each phase of a loan + view hop
(gpu_phases.py) and a note per frame size with the breakdown. The notes say whether NVIDIA's
Multi-Process Service (MPS) was running, and every row's ``mps`` extra records it.

Needs torch with CUDA and a framebus with GPU streams (framebus.gpu_available()); skipped with
a note otherwise. Behind framebus's fake CUDA door (``FRAMEBUS_CUDA=fake``) without torch it
runs the framebus rows with host-side checks instead: that proves the suite's processes and
bookkeeping work on a machine without a GPU; its figures mean nothing.
"""

from __future__ import annotations

import importlib.util
import queue as _queue
import time
from typing import Any, Dict, List, Optional, Tuple

from . import gpu_floor, gpu_phases
from .harness import Context, case_label, mp_context, summarize, thin
from .records import Column, Metric, Row, SuiteResult, compute_ratios

SHAPES = [(1080, 1920, 3), (2160, 3840, 3)]
#: A read waits this long before it counts as starved.
READ_TIMEOUT = 0.2
#: How long a lossless writer waits for the reader before the measurement fails.
WRITE_TIMEOUT = 10.0
SLOTS = 4
DEVICE = 0
#: Bytes at the start of each frame: the sequence number and the writer's stamp (int64 each).
HEADER_BYTES = 16

FB_VIEW = "framebus loan + view"
FB_COPY = "framebus write + read_new"
FB_CUPY = "framebus loan + view, CuPy reader"
PYSHMEM = "pyshmem 1.4 GPU write + read_new"
LIMIT = "torch copy_ pair, one process (limit)"
FLOOR = "bare floor: torch IPC tensor + IPC event + pipe"
FB_TRACE = "framebus loan + view, phases timed"

COLUMNS = [
    Column("fps", "frames/s", "{:,.0f}"),
    Column("lat", "µs p50", "{:,.0f}", "p50"),
    Column("lat", "µs p99", "{:,.0f}", "p99"),
    Column("writer_fps", "writer frames/s", "{:,.0f}", "extra"),
    Column("starved", "starved reads", "{:.0f}", "extra"),
    Column("torn", "torn", "{:.0f}", "extra"),
    Column("lost", "lost", "{:.0f}", "extra"),
]


# -- what runs on the GPU (in the worker processes) ---------------------------------------------


class TorchOps:
    """Frames as torch CUDA tensors; all work on one non-default CUDA stream of this process."""

    name = "torch"

    def __init__(self) -> None:
        import torch  # type: ignore[import-not-found]

        self.torch = torch
        torch.cuda.set_device(DEVICE)
        self.device = torch.device(f"cuda:{DEVICE}")
        self.cuda_stream = torch.cuda.Stream(self.device)
        torch.cuda.set_stream(self.cuda_stream)
        self.stream = int(self.cuda_stream.cuda_stream)

    def empty(self, shape: Tuple[int, ...]) -> Any:
        return self.torch.empty(shape, dtype=self.torch.uint8, device=self.device)

    def wrap(self, x: Any) -> Any:
        """A framebus DeviceArray/DeviceFrame as a tensor (DLPack, no copy)."""
        return self.torch.from_dlpack(x)

    def stamp(self, t: Any, seq: int, ts: int) -> None:
        flat = t.view(-1)
        flat[HEADER_BYTES:].fill_(seq % 251)
        head = flat[:HEADER_BYTES].view(self.torch.int64)
        head[0].fill_(seq)
        head[1].fill_(ts)

    def check(self, t: Any) -> Tuple[int, int, bool]:
        """(seq, stamp, intact) of a frame; returns once this process's GPU work on it is done."""
        torch = self.torch
        flat = t.reshape(-1)
        head = flat[:HEADER_BYTES].view(torch.int64)
        body = flat[HEADER_BYTES:]
        seq, ts, lo, hi = torch.stack([head[0], head[1], body.min().to(torch.int64), body.max().to(torch.int64)]).tolist()
        return seq, ts, lo == hi == seq % 251

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)


class CupyOps:
    """The reader's checks with CuPy (frames taken through ``__cuda_array_interface__``)."""

    name = "cupy"

    def __init__(self) -> None:
        import cupy  # type: ignore[import-not-found]

        self.cupy = cupy
        cupy.cuda.Device(DEVICE).use()
        self.cuda_stream = cupy.cuda.Stream(non_blocking=True)
        self.cuda_stream.use()
        self.stream = int(self.cuda_stream.ptr)

    def empty(self, shape: Tuple[int, ...]) -> Any:
        return self.cupy.empty(shape, dtype=self.cupy.uint8)

    def wrap(self, x: Any) -> Any:
        return self.cupy.asarray(x)

    def check(self, a: Any) -> Tuple[int, int, bool]:
        cp = self.cupy
        flat = a.reshape(-1)
        head = flat[:HEADER_BYTES].view(cp.int64)
        body = flat[HEADER_BYTES:]
        seq, ts, lo, hi = (int(v) for v in cp.stack([head[0], head[1], body.min().astype(cp.int64), body.max().astype(cp.int64)]).get())
        return seq, ts, lo == hi == seq % 251


class FakeOps:
    """framebus's fake CUDA door without torch: "device" memory is host shared memory, frames
    are framebus.DeviceArray objects filled and checked through host copies."""

    name = "fake"

    def __init__(self) -> None:
        import framebus

        self.framebus = framebus
        self.stream = None

    def empty(self, shape: Tuple[int, ...]) -> Any:
        return self.framebus.DeviceArray.empty(shape, "uint8", device=DEVICE)

    def wrap(self, x: Any) -> Any:
        return x

    def host(self, x: Any) -> Any:
        import numpy as np

        if hasattr(x, "to_numpy"):
            return np.asarray(x.to_numpy()).reshape(-1)
        return np.frombuffer(self.framebus._native.fake_cuda_read(x.ptr, x.nbytes), dtype=np.uint8)

    def stamp(self, x: Any, seq: int, ts: int) -> None:
        import numpy as np

        host = np.full(int(np.prod(x.shape)), seq % 251, dtype=np.uint8)
        host[:HEADER_BYTES].view(np.int64)[:] = (seq, ts)
        if hasattr(x, "copy_from_numpy"):
            x.copy_from_numpy(host.reshape(x.shape))
        else:  # a DeviceLoan: the fake door's "device" memory is host memory of this process
            import ctypes

            ctypes.memmove(x.ptr, host.ctypes.data, host.nbytes)

    def check(self, x: Any) -> Tuple[int, int, bool]:
        import numpy as np

        flat = self.host(x)
        seq, ts = (int(v) for v in flat[:HEADER_BYTES].view(np.int64))
        body = flat[HEADER_BYTES:]
        return seq, ts, int(body.min()) == int(body.max()) == seq % 251

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_from_numpy(self.host(src).reshape(dst.shape))


def make_ops(kind: str) -> Any:
    return {"torch": TorchOps, "cupy": CupyOps, "fake": FakeOps}[kind]()


# -- the worker processes ---------------------------------------------------------------------


class _Writer:
    """The writer's side of one measurement."""

    def __init__(self, ops: Any, cmd: Dict[str, Any]) -> None:
        self.ops = ops
        self.variant = cmd["variant"]
        self.name = cmd["name"]
        self.shape = tuple(cmd["shape"])
        self.stream: Any = None
        self.shm: Any = None
        self.src: Any = None
        if self.variant == PYSHMEM:
            import numpy as np
            import pyshmem

            self.shm = pyshmem.create(self.name, shape=self.shape, dtype=np.uint8, gpu_device=f"cuda:{DEVICE}")
            self.src = ops.empty(self.shape)
        else:
            import framebus

            self.stream = framebus.create(self.name, shape=self.shape, dtype="uint8", slots=SLOTS, device=f"cuda:{DEVICE}")
            if self.variant == FB_COPY:
                self.src = ops.empty(self.shape)

    def run(self, seconds: float, done: Any) -> Dict[str, Any]:
        ops, s, src = self.ops, self.stream, self.src
        clock = time.perf_counter_ns
        n = 0
        t0 = clock()
        t_end = t0 + int(seconds * 1e9)
        try:
            if self.variant == PYSHMEM:
                while clock() < t_end:
                    n += 1
                    ops.stamp(src, n, clock())
                    self.shm.write(src)
            elif self.variant == FB_COPY:
                while clock() < t_end:
                    n += 1
                    ts = clock()
                    ops.stamp(src, n, ts)
                    s.write(src, stream=ops.stream, timeout=WRITE_TIMEOUT, frame_id=n)
            elif self.variant == FB_TRACE:
                return gpu_phases.writer(ops, s, seconds, done, WRITE_TIMEOUT)
            else:
                while clock() < t_end:
                    n += 1
                    ts = clock()
                    with s.loan(stream=ops.stream, timeout=WRITE_TIMEOUT, frame_id=n) as a:
                        ops.stamp(ops.wrap(a), n, ts)
        finally:
            done.set()
        return {"sent": n, "seconds": (clock() - t0) / 1e9}

    def close(self) -> None:
        if self.shm is not None:
            self.shm.unlink()
        if self.stream is not None:
            self.stream.unlink()
            self.stream.close()


class _Reader:
    """The reader's side of one measurement."""

    def __init__(self, ops: Any, cmd: Dict[str, Any]) -> None:
        self.ops = ops
        self.variant = cmd["variant"]
        self.shape = tuple(cmd["shape"])
        self.stream: Any = None
        self.shm: Any = None
        self.out: Any = None
        if self.variant == PYSHMEM:
            import pyshmem

            self.shm = pyshmem.open(cmd["name"], gpu_device=f"cuda:{DEVICE}")
        else:
            import framebus

            self.stream = framebus.open(cmd["name"], mode=cmd["mode"])
            if self.variant == FB_COPY:
                self.out = ops.empty(self.shape)

    def one(self) -> Optional[Tuple[int, int, bool]]:
        """The next frame's (seq, stamp, intact), or None after a timeout."""
        ops = self.ops
        try:
            if self.variant == PYSHMEM:
                return ops.check(self.shm.read_new(timeout=READ_TIMEOUT))
            if self.variant == FB_COPY:
                self.stream.read_new(timeout=READ_TIMEOUT, out=self.out, stream=ops.stream)
                return ops.check(self.out)
            with self.stream.wait_view(timeout=READ_TIMEOUT, stream=ops.stream) as f:
                return ops.check(ops.wrap(f))
        except TimeoutError:
            return None

    def run(self, done: Any) -> Dict[str, Any]:
        if self.variant == FB_TRACE:
            return gpu_phases.reader(self.ops, self.stream, done, READ_TIMEOUT)
        clock = time.perf_counter_ns
        got = starved = torn = gaps = disorder = 0
        last = 0
        lat: List[float] = []
        while True:
            res = self.one()
            if res is None:
                if done.is_set():
                    break
                if got:
                    starved += 1
                continue
            t_done = clock()
            seq, ts, ok = res
            got += 1
            if not ok:
                torn += 1
            if seq <= last:
                disorder += 1
            else:
                gaps += seq - last - 1
                last = seq
            lat.append((t_done - ts) / 1e3)
        return {"got": got, "starved": starved, "torn": torn, "gaps": gaps, "disorder": disorder, "lat_us": lat}

    def close(self) -> None:
        if self.shm is not None:
            self.shm.close()
        if self.stream is not None:
            self.stream.close()


def _limit(ops: Any, shape: Tuple[int, ...], seconds: float) -> Dict[str, Any]:
    """Both sides' GPU work back to back in one process: render into a tensor, copy it into a
    preallocated "shared" tensor, copy that into the reader's, check it."""
    src, shared, dst = ops.empty(shape), ops.empty(shape), ops.empty(shape)
    clock = time.perf_counter_ns
    n = torn = 0
    lat: List[float] = []
    t0 = clock()
    t_end = t0 + int(seconds * 1e9)
    while clock() < t_end:
        n += 1
        ops.stamp(src, n, clock())
        ops.copy(shared, src)
        ops.copy(dst, shared)
        seq, ts, ok = ops.check(dst)
        lat.append((clock() - ts) / 1e3)
        torn += not ok
    secs = (clock() - t0) / 1e9
    return {"sent": n, "seconds": secs, "got": n, "starved": 0, "torn": torn, "gaps": 0, "disorder": 0, "lat_us": lat}


def _worker(role: str, kind: str, cmds: Any, results: Any, done: Any, peer: Any) -> None:
    """A writer or reader process: sets up its GPU library once, then serves measurements
    (setup, run, teardown; limit; floor, over ``peer``, its end of a pipe to the other worker)
    until it gets None."""
    try:
        ops: Dict[str, Any] = {kind: make_ops(kind)}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put({"error": f"{type(exc).__name__}: {exc}"})
        return
    results.put({"ready": role})
    side: Any = None
    while True:
        cmd = cmds.get()
        if cmd is None:
            break
        try:
            op = cmd["op"]
            if op == "setup":
                lib = cmd.get("lib", kind)
                if lib not in ops:
                    ops[lib] = make_ops(lib)
                side = (_Writer if role == "writer" else _Reader)(ops[lib], cmd)
                results.put({"ok": True})
            elif op == "run":
                results.put(side.run(cmd["seconds"], done) if role == "writer" else side.run(done))
            elif op == "teardown":
                if side is not None:
                    side.close()
                    side = None
                results.put({"ok": True})
            elif op == "limit":
                results.put(_limit(ops[kind], tuple(cmd["shape"]), cmd["seconds"]))
            elif op == "floor":
                if role == "writer":
                    results.put(gpu_floor.writer(ops[kind], peer, tuple(cmd["shape"]), cmd["seconds"]))
                else:
                    results.put(gpu_floor.reader(ops[kind], peer))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            done.set()
            results.put({"error": f"{type(exc).__name__}: {exc}"})


class Pair:
    """A writer and a reader process, started once and reused for every measurement (torch's
    and CUDA's start-up take seconds); restarted after a failure."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.procs: List[Any] = []
        self.q: Dict[str, Tuple[Any, Any]] = {}
        self.done: Any = None

    def start(self) -> bool:
        """Starts both processes and waits until each has set up its GPU library."""
        mpc = mp_context()
        self.done = mpc.Event()
        ends = dict(zip(("writer", "reader"), mpc.Pipe()))
        for role in ("writer", "reader"):
            cq, rq = mpc.Queue(), mpc.Queue()
            p = mpc.Process(target=_worker, args=(role, self.kind, cq, rq, self.done, ends[role]), daemon=True)
            p.start()
            self.procs.append(p)
            self.q[role] = (cq, rq)
        for end in ends.values():  # the workers hold theirs: one that dies closes the pipe
            end.close()
        for role in ("writer", "reader"):
            self.get(role, 120)
        return True

    def send(self, role: str, **cmd: Any) -> None:
        self.q[role][0].put(cmd)

    def get(self, role: str, timeout: float) -> Dict[str, Any]:
        try:
            msg = self.q[role][1].get(timeout=timeout)
        except _queue.Empty:
            raise RuntimeError(f"no answer from the {role} process within {timeout:.0f} s") from None
        if msg.get("error"):
            raise RuntimeError(f"{role}: {msg['error']}")
        return msg

    def call(self, role: str, timeout: float, **cmd: Any) -> Dict[str, Any]:
        self.send(role, **cmd)
        return self.get(role, timeout)

    def stop(self) -> None:
        for role, (cq, _) in self.q.items():
            try:
                cq.put(None)
            except Exception:  # noqa: BLE001 - best effort
                pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(2)
        self.procs, self.q = [], {}

    def measure(self, name: str, variant: str, mode: str, shape: Tuple[int, ...], seconds: float, lib: str) -> Dict[str, Any]:
        """One writer/reader measurement; the stream is gone afterwards, also on failure."""
        self.done.clear()
        setup = {"op": "setup", "name": name, "variant": variant, "mode": mode, "shape": list(shape)}
        wrote = False
        try:
            self.call("writer", 60, **setup, lib=self.kind)
            wrote = True
            self.call("reader", 60, **setup, lib=lib)
            self.send("reader", op="run")
            self.send("writer", op="run", seconds=seconds)
            w = self.get("writer", seconds + WRITE_TIMEOUT + 30)
            r = self.get("reader", WRITE_TIMEOUT + 30)
            return {**r, "sent": w["sent"], "seconds": w["seconds"], "writer_trace": w.get("trace")}
        finally:
            self.done.set()
            self.call("reader", 30, op="teardown")
            if wrote:
                self.call("writer", 30, op="teardown")

    def floor(self, shape: Tuple[int, ...], seconds: float) -> Dict[str, Any]:
        """The bare floor (gpu_floor.py) between the two workers."""
        self.send("reader", op="floor")
        self.send("writer", op="floor", shape=list(shape), seconds=seconds)
        try:
            w = self.get("writer", seconds + 2 * 60 + 30)
        except RuntimeError as exc:  # the reader's side may say why (it failed first)
            try:
                self.get("reader", 2)
            except RuntimeError as why:
                raise RuntimeError(f"{exc}; {why}") from None
            raise
        r = self.get("reader", 60)
        return {**r, "sent": w["sent"], "seconds": w["seconds"]}


# -- the suite -------------------------------------------------------------------------------------


class _GiveUp(Exception):
    """The worker processes cannot be restarted: the rest of W10 is skipped (noted)."""


def backend(note: Any) -> Optional[str]:
    """"torch" (a GPU: torch with CUDA and framebus GPU streams), "fake" (framebus's fake door
    without torch), or None with a note saying why W10 is skipped."""
    try:
        import framebus
    except ImportError as exc:
        note(f"framebus does not import ({exc}): W10 skipped")
        return None
    if not hasattr(framebus, "gpu_info"):
        note("this framebus has no GPU streams: W10 skipped")
        return None
    info = framebus.gpu_info()
    if not info.get("devices"):
        note(f"no CUDA device for framebus ({info.get('error') or 'no driver'}; `framebus doctor` says why): W10 skipped")
        return None
    if info.get("door") == "fake":
        if importlib.util.find_spec("torch") is None:
            return "fake"
        note("framebus uses its fake CUDA door (FRAMEBUS_CUDA=fake) and torch is installed: unset FRAMEBUS_CUDA to measure the GPU; W10 skipped")
        return None
    if importlib.util.find_spec("torch") is None:
        note("torch is not installed (W10 renders and checks frames with torch): W10 skipped")
        return None
    import torch

    if not torch.cuda.is_available():
        note("torch sees no CUDA device: W10 skipped")
        return None
    return "torch"


def plan(kind: str, note: Any, trace: bool = False) -> List[Tuple[str, str, str]]:
    """(mode, variant, reader library) measured per frame size; ``trace`` adds the traced hop."""
    out = [(mode, v, kind) for mode in ("lossless", "latest") for v in (FB_VIEW, FB_COPY)]
    if trace:
        out.append(("latest", FB_TRACE, kind))
    if kind != "torch":
        note("fake CUDA door: framebus rows only, checked on the host; the figures mean nothing (no floor: it needs torch with CUDA)")
        return out
    if importlib.util.find_spec("cupy") is not None:
        out.append(("latest", FB_CUPY, "cupy"))
    else:
        note("CuPy is not installed: no cross-library (CuPy reader) row")
    try:
        import pyshmem  # noqa: F401

        if getattr(pyshmem, "__name__", "") != "pyshmem" or not hasattr(pyshmem, "gpu_available"):
            raise ImportError("not pyshmem")
        out.append(("latest", PYSHMEM, "torch"))
    except ImportError:
        note("pyshmem is not installed: no pyshmem GPU row")
    return out


def mps_active(note: Any) -> Optional[bool]:
    """Whether this run's CUDA processes go through NVIDIA's Multi-Process Service (the control
    pipe is in their pipe directory), with a note saying what was found; None if this framebus
    cannot tell."""
    try:
        from framebus._mps import mps_status
    except ImportError:
        note("MPS: not known (this framebus cannot tell whether NVIDIA's Multi-Process Service runs)")
        return None
    status = mps_status()
    note(f"MPS (NVIDIA's CUDA Multi-Process Service) {status.describe()}")
    return status.control_pipe


def _row(case: str, variant: str, role: str, family: str, res: Dict[str, Any], mode: str) -> Row:
    secs = res["seconds"] or float("nan")
    fps = res["got"] / secs
    lat = summarize(res["lat_us"])
    lost = res["sent"] - res["got"]
    return Row(
        case=case,
        variant=variant,
        family=family,
        role=role,
        primary="fps",
        metrics={
            "fps": Metric(fps, "frames/s", True),
            "lat": Metric(lat["p50"], "µs", False, p50=lat["p50"], p99=lat["p99"], lo=lat["min"], hi=lat["max"]),
        },
        extra={
            "writer_fps": res["sent"] / secs,
            "sent": res["sent"],
            "got": res["got"],
            "lost": lost if mode == "lossless" or role == "limit" else res["gaps"],
            "starved": res["starved"],
            "torn": res["torn"],
            "disorder": res["disorder"],
            "mode": mode,
        },
        samples={"lat_us": thin(res["lat_us"])},
    )


def run(ctx: Context) -> SuiteResult:
    """W10 for 1080p and 2160p RGB uint8 frames, lossless and latest."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W10"
    suite = SuiteResult(
        sid,
        "W10 GPU frames between processes (CUDA IPC), RGB uint8",
        "A writer process publishes frames in device memory back to back; a reader process reads every frame it can and checks it on the GPU. Latency: writer's stamp to the reader's GPU work done.",
        columns=COLUMNS,
    )

    def note(text: str) -> None:
        ctx.note(sid, text)

    kind = backend(note)
    if kind is None:
        suite.notes = ctx.notes.get(sid, [])
        return suite
    mps = mps_active(note)
    shapes = [cfg.shape(s) for s in cfg.cases(SHAPES)]
    if cfg.smoke:  # the header and the check need a few bytes; smoke frames stay tiny
        shapes = [(8, 8, 3)]
    seconds = cfg.pick(2.0, 0.6, 0.2)
    trace = gpu_phases.enabled()
    variants = plan(kind, note, trace)
    if not trace:
        note(f"{gpu_phases.ENV}=1 adds a row that times each phase of a loan + view hop")
    ctx.reporter.start(sid, len(shapes) * (len(variants) + (2 if kind == "torch" else 0)))
    pair = Pair(kind)

    def add(row: Row) -> None:
        row.extra["mps"] = mps
        suite.rows.append(row)

    try:
        started = ctx.attempt(sid, "start", "writer and reader processes", pair.start)
        for shape in shapes if started else []:
            label = case_label(shape, "uint8")
            limit_res = floor_res = None
            if kind == "torch":
                limit_res = ctx.attempt(sid, label, LIMIT, lambda: pair.call("reader", seconds + 60, op="limit", shape=list(shape), seconds=seconds))
                ctx.reporter.step(f"{sid} {label} limit")
                floor_res = ctx.attempt(sid, label, FLOOR, lambda: pair.floor(shape, seconds))
                ctx.reporter.step(f"{sid} {label} floor")
                if floor_res is None:
                    pair.stop()  # a worker may be stuck in the floor's pipe: start afresh
                    if not ctx.attempt(sid, label, "restarting the writer and reader", pair.start):
                        raise _GiveUp
            for mode in ("lossless", "latest"):
                case = f"{label}, {mode}"
                for m, variant, lib in variants:
                    if m != mode:
                        continue
                    name = ctx.name("w10")
                    res = ctx.attempt(sid, case, variant, lambda: pair.measure(name, variant, mode, shape, seconds, lib))
                    if res is None:
                        pair.stop()  # a worker may be stuck mid-measurement: start afresh
                        if not ctx.attempt(sid, case, "restarting the writer and reader", pair.start):
                            raise _GiveUp
                        continue
                    family = "pyshmem" if variant == PYSHMEM else "framebus"
                    row = _row(case, variant, "peer" if variant == PYSHMEM else "framebus", family, res, mode)
                    if variant == FB_TRACE:
                        ph = gpu_phases.phases(res.get("writer_trace") or [], res.get("trace") or [])
                        row.extra["phases"] = ph
                        row.extra["missed"] = res.get("missed", 0)
                        note(gpu_phases.describe(case, ph, res["got"], row.metrics["lat"].p50 or float("nan")))
                    add(row)
                    ctx.reporter.step(f"{sid} {case} {variant}")
                if floor_res is not None:
                    add(_row(case, FLOOR, "limit", "floor", floor_res, mode))
                    _floor_note(note, case, suite.rows, floor_res)
                if limit_res is not None:
                    add(_row(case, LIMIT, "limit", "limit", limit_res, mode))
    except _GiveUp:
        pass
    finally:
        pair.stop()
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite


def _floor_note(note: Any, case: str, rows: List[Row], floor_res: Dict[str, Any]) -> None:
    """How far framebus's view hop is above the floor, in this run."""
    floor = summarize(floor_res["lat_us"])["p50"]
    for r in rows:
        if r.case == case and r.variant == FB_VIEW:
            hop = r.metrics["lat"].p50
            if hop is not None and floor > 0:
                note(f"{case}: framebus loan + view hop p50 {hop:,.0f} µs, {hop / floor:.2f}x the floor's {floor:,.0f} µs (+{hop - floor:,.0f} µs)")


__all__ = ["run", "SHAPES", "TorchOps", "CupyOps", "FakeOps", "Pair", "backend", "plan", "mps_active", "FLOOR", "FB_TRACE"]
