"""W8: allocator calls per frame in steady state.

The counter is a tiny shared library this module compiles on first use with the system C
compiler (``cc``) into a cache directory (``$XDG_CACHE_HOME/framebus/bench``, else
``~/.cache/framebus/bench``). It interposes malloc, calloc, realloc, posix_memalign,
aligned_alloc, memalign and free, forwarding to glibc's ``__libc_*`` functions and counting
each call. Each family of measurements runs in a fresh interpreter started with
``LD_PRELOAD=<counter>`` and ``PYTHONMALLOC=malloc`` (so Python objects go through malloc too);
after a warm-up it reads the counters around N repetitions of one operation and subtracts an
empty loop. Counts include every thread of the process (a pipe's writer thread too)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .harness import Context
from .records import Column, Metric, Row, SuiteResult

COUNTER_SOURCE = r"""
/* framebus bench: counts allocator calls (built by framebus_bench.allocs). */
#include <stddef.h>
#include <errno.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static unsigned long long n_alloc, n_free;
#define BUMP(x) __atomic_fetch_add(&(x), 1, __ATOMIC_RELAXED)
void *malloc(size_t n) { BUMP(n_alloc); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { BUMP(n_alloc); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { BUMP(n_alloc); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { BUMP(n_alloc); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { BUMP(n_alloc); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    BUMP(n_alloc);
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void free(void *p) { if (p) BUMP(n_free); __libc_free(p); }
unsigned long long framebus_bench_allocs(void) { return __atomic_load_n(&n_alloc, __ATOMIC_RELAXED); }
unsigned long long framebus_bench_frees(void) { return __atomic_load_n(&n_free, __ATOMIC_RELAXED); }
"""

COLUMNS = [
    Column("allocs", "allocator calls / frame", "{:.2f}"),
    Column("frees", "frees / frame", "{:.2f}", "extra"),
    Column("peer_same_op", "peer, same operation", "{}", "extra"),
]

#: framebus operation -> (peer family, the peer's operation doing the same job)
SAME_OP = {
    "write()": ("pyshmem", "write()"),
    "read(out=)": ("pyshmem", "read(out=)"),
    "read_into(out)": ("pyshmem", "read(out=)"),
    "read_new(out=) alone": ("pyshmem", "read_after(out=) alone"),
    "write() + read_new(out=)": ("pyshmem", "write() + read_after(out=)"),
    "wait_view() + .array + release() alone": ("iceoryx2", "receive view + release alone"),
    "loan() + .array + commit()": ("iceoryx2", "loan + send"),
    "pipe(frame, fd) + sync(fd)": ("turbopipe", "pipe(frame, fd) + sync(frame)"),
}


def _link_same_ops(rows: List[Row]) -> None:
    """Fills ``peer_same_op`` of each framebus row with the matching peer row's count."""
    by = {(r.family, r.extra.get("operation")): r for r in rows}
    for r in rows:
        if r.family != "framebus":
            continue
        match = SAME_OP.get(r.extra.get("operation", ""))
        if match is None:
            continue
        fam, op = match
        peer = by.get((fam, op))
        if peer is not None:
            r.extra["peer_same_op"] = f"{FAMILIES[fam][0]} {op}: {peer.value():.2f}"


def cache_dir() -> str:
    """Where the compiled counter lives."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "framebus", "bench")


def build_counter() -> str:
    """Path of the compiled counter library, building it if needed (RuntimeError with the
    compiler's message when that fails, or when there is no C compiler)."""
    digest = hashlib.sha256(COUNTER_SOURCE.encode()).hexdigest()[:16]
    d = cache_dir()
    lib = os.path.join(d, f"alloccount-{digest}.so")
    if os.path.exists(lib):
        return lib
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler (cc, gcc or clang) to build the allocation counter")
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, f"alloccount-{digest}.c")
    with open(src, "w", encoding="utf-8") as f:
        f.write(COUNTER_SOURCE)
    tmp = f"{lib}.{os.getpid()}.tmp"
    proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, src], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the allocation counter failed: {proc.stderr.strip()[-400:]}")
    os.replace(tmp, lib)
    return lib


# -- inside the measured interpreter ---------------------------------------------------------------


class _Counter:
    def __init__(self, lib: str) -> None:
        import ctypes

        dll = ctypes.CDLL(lib)
        self.allocs = dll.framebus_bench_allocs
        self.frees = dll.framebus_bench_frees
        self.allocs.restype = self.frees.restype = ctypes.c_ulonglong

    def per_call(self, op: Callable[[], Any], n: int, warm: int) -> Tuple[float, float]:
        """(allocations, frees) per call of ``op`` over ``n`` calls after ``warm`` calls."""
        import itertools

        for _ in itertools.repeat(None, warm):
            op()
        a0, f0 = self.allocs(), self.frees()
        for _ in itertools.repeat(None, n):
            op()
        a1, f1 = self.allocs(), self.frees()
        return (a1 - a0) / n, (f1 - f0) / n


def _ops_framebus(prefix: str, shape: tuple) -> Tuple[List[Tuple[str, Callable[[], Any], Optional[str]]], Callable[[], None]]:
    import numpy as np

    import framebus

    w = framebus.create(f"{prefix}-fb", shape=shape, dtype=np.float32)
    r = framebus.open(f"{prefix}-fb")
    src = np.ones(shape, np.float32)
    out = np.empty(shape, np.float32)
    write, read, read_into, read_new = w.write, r.read, r.read_into, r.read_new
    w.write(src)
    ops: List[Tuple[str, Callable[[], Any], Optional[str]]] = [
        ("write()", lambda: write(src), None),
        ("read(out=)", lambda: read(out=out), None),
        ("read_into(out)", lambda: read_into(out), None),
        ("write() + read_new(out=)", lambda: (write(src), read_new(timeout=1.0, out=out)), "write()"),
    ]
    if hasattr(r, "view"):
        view = r.view

        def view_release() -> None:
            f = view()
            f.release()

        def view_array() -> None:
            f = view()
            f.array
            f.release()

        def view_with() -> None:
            with view() as f:
                f.array

        ops.append(("view() + release()", view_release, None))
        ops.append(("view() + .array + release()", view_array, None))
        # CPython 3.11 binds __enter__ and __exit__ of an extension type per `with`: +2 calls.
        ops.append(("with view() as f: f.array", view_with, None))
    if hasattr(r, "wait_view"):
        wait_view = r.wait_view

        def write_wait_view() -> None:
            write(src)
            f = wait_view(1.0)
            f.array
            f.release()

        ops.append(("write() + wait_view() + .array + release()", write_wait_view, "write()"))
    if hasattr(w, "loan"):
        loan = w.loan

        def loan_commit() -> None:
            lo = loan()
            lo.array[0, 0] = 1.0
            lo.commit()

        def loan_with() -> None:
            with loan() as a:
                a[0, 0] = 1.0

        ops.append(("loan() + .array + commit()", loan_commit, None))
        ops.append(("with loan() as a: (publish on exit)", loan_with, None))
    closers: List[Callable[[], None]] = [r.close, w.unlink]
    if hasattr(framebus, "pipe") and hasattr(framebus, "sync"):
        fd = os.open("/dev/null", os.O_WRONLY)
        pipe, sync = framebus.pipe, framebus.sync

        def pipe_sync() -> None:
            pipe(src, fd)
            sync(fd)

        ops.append(("pipe(frame, fd) + sync(fd)", pipe_sync, None))

        def close_fd() -> None:
            try:
                import importlib

                importlib.import_module("framebus.pipe").close(fd)
            except (ImportError, AttributeError):
                pass
            os.close(fd)

        closers.insert(0, close_fd)

    def close() -> None:
        for c in closers:
            c()

    return ops, close


def _ops_pyshmem(prefix: str, shape: tuple) -> Tuple[List[Tuple[str, Callable[[], Any], Optional[str]]], Callable[[], None]]:
    import numpy as np
    import pyshmem

    w = pyshmem.create(f"{prefix}-ps", shape=shape, dtype=np.float32)
    r = pyshmem.open(f"{prefix}-ps")
    src = np.ones(shape, np.float32)
    out = np.empty(shape, np.float32)
    w.write(src)

    def write_read_after() -> None:
        n = r.count
        w.write(src)
        r.read_after(n, out=out, timeout=1.0)

    ops = [
        ("write()", lambda: w.write(src), None),
        ("read(out=)", lambda: r.read(out=out), None),
        ("write() + read_after(out=)", write_read_after, "write()"),
    ]

    def close() -> None:
        r.close()
        w.unlink()

    return ops, close


def _ops_turbopipe(prefix: str, shape: tuple) -> Tuple[List[Tuple[str, Callable[[], Any], Optional[str]]], Callable[[], None]]:
    import numpy as np
    import turbopipe

    src = np.ones(shape, np.float32)
    fd = os.open("/dev/null", os.O_WRONLY)

    def pipe_sync() -> None:
        turbopipe.pipe(src, fd)
        turbopipe.sync(src)

    return [("pipe(frame, fd) + sync(frame)", pipe_sync, None)], lambda: os.close(fd)


def _ops_iceoryx2(prefix: str, shape: tuple) -> Tuple[List[Tuple[str, Callable[[], Any], Optional[str]]], Callable[[], None]]:
    import numpy as np

    from . import transport as tp

    spec = tp.Spec("iceoryx2", f"{prefix}-iox", shape, "float32")
    t = tp.get(spec)
    w, r = t.writer(), t.reader(0)
    src = np.ones(shape, np.float32)

    def send_recv() -> None:
        w.send_inplace(src)
        r.recv(1.0)
        r.done()

    def close() -> None:
        r.close()
        w.close()

    ops = [
        ("loan + send", lambda: w.send_inplace(src), None),
        ("loan + send + receive view + release", send_recv, "loan + send"),
    ]
    return ops, close


def _ops_zmq(prefix: str, shape: tuple) -> Tuple[List[Tuple[str, Callable[[], Any], Optional[str]]], Callable[[], None]]:
    import numpy as np
    import zmq

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    addr = f"ipc:///tmp/{prefix}-zmq.ipc"
    a.bind(addr)
    b.connect(addr)
    src = np.ones(shape, np.float32)

    def send_recv() -> None:
        a.send(src, copy=False)  # type: ignore[call-overload]
        m = b.recv(copy=False)
        np.frombuffer(m.buffer, np.float32)

    def close() -> None:
        a.close(0)
        b.close(0)
        ctx.term()
        try:
            os.unlink(addr[len("ipc://") :])
        except FileNotFoundError:
            pass

    return [("send(copy=False) + recv(copy=False)", send_recv, None)], close


#: family -> (label, role, builder)
FAMILIES: Dict[str, Tuple[str, str, Callable[..., Any]]] = {
    "framebus": ("framebus", "framebus", _ops_framebus),
    "pyshmem": ("pyshmem 1.4", "peer", _ops_pyshmem),
    "turbopipe": ("turbopipe 2.1", "peer", _ops_turbopipe),
    "iceoryx2": ("iceoryx2", "peer", _ops_iceoryx2),
    "pyzmq": ("pyzmq ipc://", "peer", _ops_zmq),
}


def child_main(argv: List[str]) -> None:
    """Entry point of the measured interpreter: ``python -c ... FAMILY PREFIX SHAPE N LIB``;
    prints one JSON line: [[label, allocs per call, frees per call], ...] (after subtracting an
    empty loop and, for pair rows, the row they build on)."""
    family, prefix, shape_s, n_s, lib = argv
    shape = tuple(int(x) for x in shape_s.split("x"))
    n = int(n_s)
    counter = _Counter(lib)
    ops, close = FAMILIES[family][2](prefix, shape)
    try:
        base_a, base_f = counter.per_call(lambda: None, n, 100)
        out: Dict[str, Tuple[float, float]] = {}
        for label, op, minus in ops:
            a, f = counter.per_call(op, n, max(50, n // 10))
            out[label] = (a - base_a, f - base_f)
        rows = []
        for label, op, minus in ops:
            a, f = out[label]
            rows.append([label, a, f, None])
            if minus is not None and minus in out:
                ma, mf = out[minus]
                rows.append([label.replace(minus + " + ", "") + " alone", a - ma, f - mf, f"{label} minus {minus}"])
        print(json.dumps(rows))
    finally:
        close()


def _available(family: str) -> Optional[str]:
    mod = {"framebus": "framebus", "pyshmem": "pyshmem", "turbopipe": "turbopipe", "iceoryx2": "iceoryx2", "pyzmq": "zmq"}[family]
    import importlib.util

    if importlib.util.find_spec(mod) is None:
        return f"{mod} is not installed"
    return None


def run(ctx: Context) -> SuiteResult:
    """W8: one fresh interpreter per family under the counter."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W8"
    shape = cfg.shape((128, 128))
    case = f"{shape[0]}x{shape[1]} f32"
    suite = SuiteResult(
        sid,
        "W8 allocator calls per frame in steady state",
        f"{case} frames; malloc/calloc/realloc/memalign calls per operation, counted by an LD_PRELOAD counter with PYTHONMALLOC=malloc, empty loop subtracted.",
        columns=COLUMNS,
    )
    try:
        lib = build_counter()
    except RuntimeError as exc:
        ctx.note(sid, f"W8 skipped: {exc}")
        suite.notes = ctx.notes.get(sid, [])
        return suite
    n = cfg.pick(2000, 1000, 50)
    families = [f for f in FAMILIES if f == "framebus" or _available(f) is None]
    for f in FAMILIES:
        if f not in families:
            ctx.note(sid, f"{FAMILIES[f][0]}: skipped ({_available(f)})")
    ctx.reporter.start(sid, len(families))
    env = dict(os.environ, LD_PRELOAD=lib, PYTHONMALLOC="malloc")
    for fam in families:
        label, role, _b = FAMILIES[fam]
        prefix = ctx.name("w8")
        code = "import sys; from framebus_bench.allocs import child_main; child_main(sys.argv[1:])"
        args = [sys.executable, "-c", code, fam, prefix, "x".join(map(str, shape)), str(n), lib]
        try:
            proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError((proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1])
            rows = json.loads(proc.stdout.strip().splitlines()[-1])
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            ctx.note(sid, f"{label}: failed ({exc})")
            ctx.reporter.step(f"{sid} {label}")
            continue
        for op, a, fr, derived in rows:
            suite.rows.append(
                Row(
                    case=case,
                    variant=f"{label} {op}",
                    family=fam,
                    role=role,
                    primary="allocs",
                    metrics={"allocs": Metric(max(a, 0.0), "calls/frame", False)},
                    extra={"frees": max(fr, 0.0), "operation": op, "derived": derived or ""},
                    note=derived or "",
                )
            )
        ctx.reporter.step(f"{sid} {label}")
    _link_same_ops(suite.rows)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
