"""W3: lock-step ping-pong between two processes. This process writes a frame and waits for the
echo process's acknowledgement (a 64-byte frame on a second channel of the same transport)
before the next one. Limits: a futex wake/wait with one copy each way, and a pipe ping-pong of
one byte with no payload at all (the cost of two process wake-ups)."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Tuple

import numpy as np

from . import transport as tp
from .harness import Context, case_label, get, guarded, header, make_frame, start, stop, summarize, thin
from .records import Column, Metric, Row, SuiteResult, compute_ratios

#: (transport, in place?): in-place rows render the request in the loaned slot (only its header
#: words are written), the zero-copy case of a producer that renders or decodes into shared memory.
VARIANTS: List[Tuple[str, bool]] = [
    ("framebus", False), ("framebus-view", False), ("framebus-zc", True), ("framebus-pyshmem", False), ("pyshmem", False), ("pyshmem-notify", False),
    ("shm-naive", False), ("pyzmq", False), ("iceoryx2", False), ("iceoryx2", True), ("limit-futex", False),
]
SIZES: List[Tuple[tuple, str]] = [((64,), "uint8"), ((128, 128), "float32"), ((1080, 1920, 3), "uint8")]
ACK_SHAPE = (64,)
#: Seconds a reply may take before the run is declared broken (never a performance bar).
REPLY_TIMEOUT = 20.0

COLUMNS = [
    Column("rt", "round trips/s", "{:,.0f}"),
    Column("us", "µs p50", "{:.1f}", "p50"),
    Column("us", "µs p99", "{:.1f}", "p99"),
    Column("rt", "spread (rt/s)", "{:,.0f}", "spread"),
]


@guarded
def _echo(results: Any, req: tp.Spec, ack: tp.Spec) -> None:
    """Echo process: waits for each request and answers with its counter until told to stop."""
    reader = tp.get(req).reader(0)
    writer = tp.get(ack).writer()
    reply = np.zeros(ack.shape, ack.dtype)
    results.put("ready")
    try:
        while True:
            frame = reader.recv(REPLY_TIMEOUT)
            if frame is None:
                raise RuntimeError(f"no request within {REPLY_TIMEOUT:.0f} s")
            h = header(frame)
            n, last = int(h[0]), int(h[1])
            reader.done()
            header(reply)[0] = n
            if n == 0:
                writer.connect()
            writer.send(reply)
            if last:
                break
    finally:
        writer.close()
        reader.close()
    results.put({"ok": True})


@guarded
def _pipe_echo(results: Any, req_path: str, ack_path: str) -> None:
    """Echo process of the pipe ping-pong limit: reads one byte, writes one byte back, until
    it reads ``q``."""
    rfd = os.open(req_path, os.O_RDONLY)
    wfd = os.open(ack_path, os.O_WRONLY)
    results.put("ready")
    while os.read(rfd, 1) not in (b"q", b""):
        os.write(wfd, b"a")
    os.close(rfd)
    os.close(wfd)
    results.put({"ok": True})


def _ping(ctx: Context, kind: str, shape: tuple, dtype: str, warm: int, seconds: float, max_n: int, inplace: bool = False) -> List[float]:
    """One measurement: round-trip times (s) of ``kind`` at ``shape`` over ``seconds``."""
    req = tp.Spec(kind, ctx.name("req"), shape, dtype, lossless=True)
    ack = tp.Spec(kind, ctx.name("ack"), ACK_SHAPE, "uint8", lossless=True)
    treq, tack = tp.get(req), tp.get(ack)
    treq.create()
    tack.create()
    results = ctx_queue()
    proc = start(_echo, results, req, ack)
    writer = reader = None
    try:
        get(results, 60, f"{kind} echo process")
        writer, reader = treq.writer(), tack.reader(0)
        writer.connect()
        src = make_frame(shape, dtype)
        send = writer.send_inplace if inplace else writer.send
        h = header(src)
        h[1] = 0
        times: List[float] = []
        clock = time.perf_counter_ns
        i = 0
        t_end = None
        while True:
            h[0] = i
            t0 = clock()
            send(src)
            a = reader.recv(REPLY_TIMEOUT)
            t1 = clock()
            if a is None:
                raise RuntimeError(f"{kind}: no acknowledgement within {REPLY_TIMEOUT:.0f} s")
            if int(header(a)[0]) != i:
                raise RuntimeError(f"{kind}: acknowledgement {int(header(a)[0])} for request {i}")
            reader.done()
            i += 1
            if i > warm:
                times.append((t1 - t0) / 1e9)
                if t_end is None:
                    t_end = clock() + int(seconds * 1e9)
                if clock() >= t_end or len(times) >= max_n:
                    break
        h[0], h[1] = i, 1
        writer.send(src)
        reader.recv(REPLY_TIMEOUT)
        reader.done()
        get(results, 30, f"{kind} echo process")
        return times
    finally:
        for end in (writer, reader):
            if end is not None:
                end.close()
        stop([proc])
        treq.destroy()
        tack.destroy()


def _pipe_ping(ctx: Context, warm: int, seconds: float, max_n: int) -> List[float]:
    """The pipe ping-pong limit through two FIFOs: round-trip times (s)."""
    req_path, ack_path = f"/tmp/{ctx.name('fifo-req')}", f"/tmp/{ctx.name('fifo-ack')}"
    os.mkfifo(req_path, 0o600)
    os.mkfifo(ack_path, 0o600)
    results = ctx_queue()
    proc = start(_pipe_echo, results, req_path, ack_path)
    wfd = rfd = -1
    try:
        wfd = os.open(req_path, os.O_WRONLY)
        rfd = os.open(ack_path, os.O_RDONLY)
        get(results, 60, "pipe echo process")
        times: List[float] = []
        clock = time.perf_counter_ns
        t_end = None
        for i in range(warm + max_n):
            t0 = clock()
            os.write(wfd, b"p")
            os.read(rfd, 1)
            t1 = clock()
            if i >= warm:
                times.append((t1 - t0) / 1e9)
                if t_end is None:
                    t_end = clock() + int(seconds * 1e9)
                if clock() >= t_end:
                    break
        os.write(wfd, b"q")
        get(results, 30, "pipe echo process")
        return times
    finally:
        for fd in (wfd, rfd):
            if fd >= 0:
                os.close(fd)
        stop([proc])
        for p in (req_path, ack_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def ctx_queue() -> Any:
    """A queue the spawned helper processes can report on."""
    from .harness import mp_context

    return mp_context().Queue()


def _row(case: str, label: str, family: str, role: str, per_rep: List[List[float]]) -> Row:
    pooled = [t * 1e6 for rep in per_rep for t in rep]
    rates = [len(rep) / sum(rep) for rep in per_rep if rep]
    st = summarize(rates)
    us = summarize(pooled)
    return Row(
        case=case,
        variant=label,
        family=family,
        role=role,
        primary="rt",
        metrics={
            "rt": Metric(st["median"], "round trips/s", True, lo=st["min"], hi=st["max"]),
            "us": Metric(us["p50"], "µs", False, p50=us["p50"], p99=us["p99"], lo=us["min"], hi=us["max"]),
        },
        extra={"round_trips": len(pooled)},
        samples={"us": thin(pooled)},
    )


def run(ctx: Context) -> SuiteResult:
    """W3 for every size, transport and the pipe limit, interleaved over repetitions."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W3"
    suite = SuiteResult(
        sid,
        "W3 lock-step ping-pong between two processes",
        "The writer publishes a frame, the echo process reads it and answers with a 64-byte acknowledgement on a second channel of the same transport; the next frame waits for it.",
        columns=COLUMNS,
    )
    ok = tp.available(sorted({k for k, _ in VARIANTS}, key=tp.ORDER.index), lambda line: ctx.note(sid, line))
    kinds = [(k, inplace) for k, inplace in VARIANTS if k in ok]
    reps = cfg.pick(3, 1, 1)  # wake-up costs swing with the machine's load: more rounds
    seconds = cfg.pick(0.6, 0.3, 0.0)
    warm = cfg.pick(100, 30, 2)
    max_n = cfg.pick(200_000, 50_000, 5)
    ctx.reporter.start(sid, len(cfg.cases(SIZES)) * (len(kinds) + 1) * reps)
    samples: Dict[Tuple[str, str], List[List[float]]] = {}
    cases = [(case_label(cfg.shape(shape), dtype), cfg.shape(shape), dtype) for shape, dtype in cfg.cases(SIZES)]
    for label, shape, dtype in cases:
        for _rep in range(reps):
            for kind, inplace in kinds:
                name = tp.label(kind, inplace)
                try:
                    times = _ping(ctx, kind, shape, dtype, warm, seconds, max_n, inplace)
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    ctx.note(sid, f"{name}: failed at {label} ({exc})")
                    times = []
                samples.setdefault((label, name), []).append(times)
                ctx.reporter.step(f"{sid} {label} {name}")
            samples.setdefault((label, "pipe"), []).append(_pipe_ping(ctx, warm, seconds, max_n))
            ctx.reporter.step(f"{sid} {label} pipe ping-pong")
    for label, _shape, _dtype in cases:
        for kind, inplace in kinds:
            cls, name = tp.cls_of(kind), tp.label(kind, inplace)
            reps_ = [r for r in samples.get((label, name), []) if r]
            if reps_:
                suite.rows.append(_row(label, name, cls.family, cls.role, reps_))
        suite.rows.append(_row(label, "limit: pipe ping-pong (1 byte, no payload)", "limit", "limit", samples[(label, "pipe")]))
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
