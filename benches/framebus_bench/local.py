"""W1 and W2: write + read of a float32 frame in one process, the reader on its own handle.

Rows: framebus (``read_into``, ``read(out=)``, ``read_new(out=)``, views, loans), every peer
driven through the same transport code as the cross-process suites, and the limit: a pair of
``np.copyto`` calls (into a preallocated buffer and back out). Variants are timed in rounds,
one batch each per round, so drift on a shared machine hits all of them alike."""

from __future__ import annotations

import time
from typing import Any, Callable, List, Tuple

import numpy as np

from . import transport as tp
from .harness import Context, calibrate, case_label, make_frame, summarize, thin, time_batch, time_calls
from .records import Column, Metric, Row, SuiteResult, compute_ratios

#: Frames larger than this are measured one variant at a time (not all held in memory at once).
INTERLEAVE_MAX_BYTES = 64 * 2**20

#: Transports W1/W2 drive in-process (the futex limit needs two processes to mean anything).
KINDS = ["framebus", "framebus-view", "framebus-zc", "framebus-pyshmem", "pyshmem", "pyshmem-notify", "shm-naive", "pyzmq", "iceoryx2"]

COLUMNS = [
    Column("hz", "pairs/s", "{:,.0f}"),
    Column("gbps", "GB/s", "{:.2f}"),
    Column("us", "µs p50", "{:.1f}", "p50"),
    Column("us", "µs p99", "{:.1f}", "p99"),
    Column("hz", "spread (pairs/s)", "{:,.0f}", "spread"),
]

Variant = Tuple[str, str, str, Callable[[], Tuple[Callable[[], Any], Callable[[], None]]]]


def _framebus_direct(ctx: Context, shape: tuple, src: np.ndarray, read: str) -> Callable[[], Tuple[Callable[[], Any], Callable[[], None]]]:
    def setup() -> Tuple[Callable[[], Any], Callable[[], None]]:
        import framebus

        name = ctx.name("w1")
        w = framebus.create(name, shape=shape, dtype=np.float32)
        r = framebus.open(name)
        out = np.empty(shape, np.float32)
        write = w.write
        if read == "read_into":
            read_into = r.read_into

            def op() -> None:
                write(src)
                read_into(out)

        else:
            rd = r.read

            def op() -> None:
                write(src)
                rd(out=out)

        def close() -> None:
            r.close()
            w.unlink()

        return op, close

    return setup


def _pyshmem_direct(ctx: Context, shape: tuple, src: np.ndarray, module: str = "pyshmem") -> Callable[[], Tuple[Callable[[], Any], Callable[[], None]]]:
    def setup() -> Tuple[Callable[[], Any], Callable[[], None]]:
        import importlib

        pyshmem = importlib.import_module(module)

        name = ctx.name("w1ps")
        w = pyshmem.create(name, shape=shape, dtype=np.float32)
        r = pyshmem.open(name)
        out = np.empty(shape, np.float32)
        write, read = w.write, r.read

        def op() -> None:
            write(src)
            read(out=out)

        def close() -> None:
            r.close()
            w.unlink()

        return op, close

    return setup


def _transport(ctx: Context, kind: str, shape: tuple, src: np.ndarray) -> Callable[[], Tuple[Callable[[], Any], Callable[[], None]]]:
    def setup() -> Tuple[Callable[[], Any], Callable[[], None]]:
        t = tp.get(tp.Spec(kind, ctx.name(kind.replace("framebus", "fb")), shape, "float32", lossless=True))
        t.create()
        w = t.writer()
        r = t.reader(0)
        w.connect()
        send, recv, done = w.send, r.recv, r.done

        def op() -> None:
            send(src)
            if recv(10.0) is None:
                raise RuntimeError(f"{t.label}: a frame written in this process did not arrive within 10 s")
            done()

        def close() -> None:
            r.close()
            w.close()
            t.destroy()

        return op, close

    return setup


def _copy_pair(shape: tuple, src: np.ndarray) -> Callable[[], Tuple[Callable[[], Any], Callable[[], None]]]:
    def setup() -> Tuple[Callable[[], Any], Callable[[], None]]:
        mid = np.empty(shape, np.float32)
        out = np.empty(shape, np.float32)
        mid.fill(0)
        out.fill(0)
        copyto = np.copyto

        def op() -> None:
            copyto(mid, src)
            copyto(out, mid)

        return op, lambda: None

    return setup


def variants(ctx: Context, suite: str, shape: tuple, src: np.ndarray) -> List[Variant]:
    """(label, family, role, setup) of every variant W1/W2 measures at ``shape``."""
    out: List[Variant] = [
        ("framebus write + read_into(out)", "framebus", "framebus", _framebus_direct(ctx, shape, src, "read_into")),
        ("framebus write + read(out=)", "framebus", "framebus", _framebus_direct(ctx, shape, src, "read")),
    ]
    for kind in tp.available(KINDS, lambda line: ctx.note(suite, line)):
        cls = tp.cls_of(kind)
        if kind == "pyshmem":  # its plain snapshot read first: pyshmem's best same-process pair
            out.append(("pyshmem 1.4 write + read(out=)", "pyshmem", "peer", _pyshmem_direct(ctx, shape, src)))
        if kind == "framebus-pyshmem":  # the same calls through the compat module
            out.append(("framebus.pyshmem write + read(out=)", "framebus", "framebus", _pyshmem_direct(ctx, shape, src, "framebus.pyshmem")))
        pyshmem_api = kind.startswith("pyshmem") or kind == "framebus-pyshmem"
        out.append((cls.label + (" + read_after(out=)" if pyshmem_api else ""), cls.family, cls.role, _transport(ctx, kind, shape, src)))
    out.append(("limit: np.copyto pair", "limit", "limit", _copy_pair(shape, src)))
    return out


def measure_case(ctx: Context, suite: str, case: str, shape: tuple) -> List[Row]:
    """All variants at ``shape``: rounds of one batch each, then per-call samples."""
    cfg = ctx.config
    nbytes = int(np.prod(shape)) * 4
    src = make_frame(shape, np.float32)
    vs = variants(ctx, suite, shape, src)
    batch_s = cfg.pick(0.15, 0.05, 0.0)
    calls_s = cfg.pick(0.25, 0.08, 0.0)
    rates: List[List[float]] = [[] for _ in vs]
    calls: List[List[float]] = [[] for _ in vs]

    failed = set()

    def one(i: int, op: Callable[[], Any], n: int, ncalls: int, reps: int) -> None:
        if i in failed:
            return
        try:
            for _ in range(reps):
                rates[i].append(1.0 / time_batch(op, n))
            if ncalls:
                calls[i].extend(time_calls(op, ncalls))
        except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
            ctx.note(suite, f"{vs[i][0]}: failed at {case} ({type(exc).__name__}: {exc})")
            failed.add(i)

    opened: List[Any] = []  # (index, op, close, batch n, calls n)
    try:
        if nbytes <= INTERLEAVE_MAX_BYTES:
            for i, (label, _fam, _role, setup) in enumerate(vs):
                try:
                    op, close = setup()
                except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                    ctx.note(suite, f"{label}: failed at {case} ({type(exc).__name__}: {exc})")
                    failed.add(i)
                    continue
                opened.append((i, op, close))
                try:
                    n = calibrate(op, batch_s, warmup_s=cfg.pick(0.05, 0.02, 0.0)) if batch_s else 2
                    m = min(calibrate(op, calls_s, warmup_s=0.0), 5000) if calls_s else 3
                except Exception as exc:  # noqa: BLE001
                    ctx.note(suite, f"{label}: failed at {case} ({type(exc).__name__}: {exc})")
                    failed.add(i)
                    n = m = 0
                opened[-1] += (n, m)
            for _rep in range(cfg.reps):  # interleaved rounds
                for i, op, _c, n, _m in opened:
                    one(i, op, n, 0, 1)
                    ctx.reporter.step(f"{suite} {case} {vs[i][0]}")
            for i, op, _c, n, m in opened:
                one(i, op, n, m, 0)
        else:
            for i, (label, _fam, _role, setup) in enumerate(vs):
                try:
                    op, close = setup()
                except Exception as exc:  # noqa: BLE001
                    ctx.note(suite, f"{label}: failed at {case} ({type(exc).__name__}: {exc})")
                    failed.add(i)
                    continue
                try:
                    n = calibrate(op, batch_s, warmup_s=0.0) if batch_s else 2
                    one(i, op, n, 3, cfg.reps)
                except Exception as exc:  # noqa: BLE001
                    ctx.note(suite, f"{label}: failed at {case} ({type(exc).__name__}: {exc})")
                    failed.add(i)
                finally:
                    close()
                for _ in range(cfg.reps):
                    ctx.reporter.step(f"{suite} {case} {label}")
    finally:
        for entry in opened:
            entry[2]()

    rows = []
    for i, (label, fam, role, _s) in enumerate(vs):
        if i in failed or not rates[i]:
            continue
        st = summarize(rates[i])
        cs = summarize([c * 1e6 for c in calls[i]])
        rows.append(
            Row(
                case=case,
                variant=label,
                family=fam,
                role=role,
                primary="hz",
                metrics={
                    "hz": Metric(st["median"], "pairs/s", True, lo=st["min"], hi=st["max"]),
                    "gbps": Metric(st["median"] * 2 * nbytes / 1e9, "GB/s", True, lo=st["min"] * 2 * nbytes / 1e9, hi=st["max"] * 2 * nbytes / 1e9),
                    "us": Metric(cs["p50"], "µs", False, p50=cs["p50"], p99=cs["p99"], lo=cs["min"], hi=cs["max"]),
                },
                extra={"bytes": nbytes},
                samples={"hz": thin(rates[i]), "us": thin([c * 1e6 for c in calls[i]])},
            )
        )
    return rows


def _suite(ctx: Context, sid: str, title: str, what: str, sizes: List[Tuple[int, int]]) -> SuiteResult:
    t0 = time.perf_counter()
    cfg = ctx.config
    suite = SuiteResult(sid, title, what, columns=COLUMNS)
    ctx.reporter.start(sid, len(cfg.cases(sizes)) * (len(KINDS) + 3) * cfg.reps)
    for size in cfg.cases(sizes):
        shape = cfg.shape(size)
        case = case_label(shape, np.float32)
        suite.rows.extend(measure_case(ctx, sid, case, shape))
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t0
    return suite


def run_w1(ctx: Context) -> SuiteResult:
    """W1: 128x128 float32 write + read, same process."""
    return _suite(
        ctx,
        "W1",
        "W1 write + read, same process, 128x128 float32",
        "One write and one read of a 128x128 float32 frame per pair, reader on its own handle; GB/s counts the bytes written plus read.",
        [(128, 128)],
    )


def run_w2(ctx: Context) -> SuiteResult:
    """W2: W1 at 100x100, 1000x1000, 4000x4000 (and 10000x10000 with --large)."""
    sizes = [(100, 100), (1000, 1000), (4000, 4000)]
    if ctx.config.large:
        sizes.append((10000, 10000))
    return _suite(ctx, "W2", "W2 write + read by frame size, same process, float32", "W1 at other frame sizes.", sizes)
