"""sweep: payloads from 64 B to 32 MiB, one writer (this process) and one reader in another
process, for framebus and every installed peer, in the style IPC systems are compared in.

Per size and transport, two phases through one channel (latest mode, the reader takes the
newest frame):

- latency: the writer publishes at a pace the slowest transport keeps up with at that size,
  stamping ``perf_counter_ns`` (system-wide) just before the publish call; the reader takes the
  difference once it holds the frame as an array (after its copy, for copying transports):
  p50/p95/p99 one-way latency.
- throughput: the writer publishes back to back for a fixed time; the reader counts the frames
  it receives: frames/s and GB/s delivered.

The table marks, for each peer, the size from which framebus is ahead of it (lower p50 latency)
at every larger size: the crossover."""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional

import numpy as np

from . import transport as tp
from .harness import Context, get, guarded, header, make_frame, mp_context, pace, start, stop, summarize, thin
from .records import Column, Metric, Row, SuiteResult, compute_ratios

KINDS = ["framebus", "framebus-view", "pyshmem", "pyzmq", "iceoryx2", "limit-futex"]
#: Payload sizes in bytes: powers of 4 from 64 B, then 32 MiB.
SIZES: List[int] = [64 << (2 * i) for i in range(10)] + [32 << 20]
#: Header words: 0 counter, 1 t0 (ns), 2 phase.
W_COUNT, W_T0, W_PHASE = range(3)
LATENCY, THROUGHPUT, MARKER = 0, 1, 3

COLUMNS = [
    Column("lat", "µs p50", "{:,.1f}", "p50"),
    Column("p95", "µs p95", "{:,.1f}", "extra"),
    Column("lat", "µs p99", "{:,.1f}", "p99"),
    Column("gbps", "GB/s", "{:.2f}", "extra"),
    Column("fps", "frames/s", "{:,.0f}", "extra"),
]


def size_label(n: int) -> str:
    """``64 B``, ``4 KiB``, ``32 MiB``."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def rate_for(nbytes: int) -> float:
    """Paced rate of the latency phase: 500/s for small payloads, fewer as frames grow (about
    0.2 GB/s), so that every transport keeps up and latency is measured without queueing."""
    return max(5.0, min(500.0, 2e8 / nbytes))


@guarded
def _reader(results: Any, spec: tp.Spec, stop_evt: Any) -> None:
    reader = tp.get(spec).reader(0)
    results.put("ready")
    lat: List[float] = []
    got = 0
    clock = time.perf_counter_ns
    try:
        while True:
            frame = reader.recv(0.05)
            if frame is None:
                if stop_evt.is_set():
                    break
                continue
            now = clock()
            h = header(frame)
            phase = int(h[W_PHASE])
            if phase == LATENCY:
                lat.append((now - int(h[W_T0])) / 1e3)
            elif phase == THROUGHPUT:
                got += 1
            reader.done()
    finally:
        reader.close()
    results.put({"lat": lat, "n": got})


def _measure(ctx: Context, kind: str, nbytes: int, frames: int, burst_s: float) -> Dict[str, Any]:
    spec = tp.Spec(kind, ctx.name("sw"), (nbytes,), "uint8")
    t = tp.get(spec)
    t.create()
    results = mp_context().Queue()
    stop_evt = mp_context().Event()
    proc = start(_reader, results, spec, stop_evt)
    writer = None
    try:
        get(results, 60, f"{kind} reader process")
        writer = t.writer()
        writer.connect()
        src = make_frame((nbytes,), "uint8")
        h = header(src)
        h[W_PHASE] = MARKER  # connection set-up (ZeroMQ, iceoryx2) and first touch are not timed
        for pause in (0.15, 0.05):  # ZeroMQ's reader reconnects every 100 ms until the writer binds
            writer.send(src)
            time.sleep(pause)
        h[W_PHASE] = LATENCY
        period = int(1e9 / rate_for(nbytes))
        t0 = time.perf_counter_ns()
        for i in range(frames):
            pace(t0, i, period)
            h[W_COUNT] = i
            h[W_T0] = time.perf_counter_ns()
            writer.send(src)
        time.sleep(0.02)
        h[W_PHASE] = THROUGHPUT
        t_burst = time.perf_counter()
        end = t_burst + burst_s
        sent = 0
        while time.perf_counter() < end:
            h[W_COUNT] = sent
            writer.send(src)
            sent += 1
        burst = time.perf_counter() - t_burst
        time.sleep(0.05)
        stop_evt.set()
        res = get(results, 60, f"{kind} reader process")
        # Frames the reader received while the writer ran back to back, over the writer's
        # window (a reader that got a few frames in a short burst and then starved must not
        # count as fast).
        res["fps"] = res["n"] / burst if burst > 0 else float("nan")
        res["sent"] = sent
        return res
    finally:
        if writer is not None:
            writer.close()
        stop_evt.set()
        stop([proc])
        t.destroy()


def crossovers(suite: SuiteResult) -> Dict[str, Optional[str]]:
    """For each peer (and the limit): the smallest size from which framebus's best p50 latency
    is lower than the peer's at that size and every larger one (None: never; the first size:
    always)."""
    cases = suite.cases()
    out: Dict[str, Optional[str]] = {}
    peers = [r.variant for r in suite.rows if r.role != "framebus"]
    for peer in dict.fromkeys(peers):
        ahead: List[bool] = []
        for case in cases:
            fb = [r.value("lat") for r in suite.rows if r.case == case and r.role == "framebus" and math.isfinite(r.value("lat"))]
            other = [r.value("lat") for r in suite.rows if r.case == case and r.variant == peer]
            if not fb or not other or not math.isfinite(other[0]):
                ahead.append(False)
                continue
            ahead.append(min(fb) < other[0])
        start_at: Optional[str] = None
        for i in range(len(cases) - 1, -1, -1):
            if not ahead[i]:
                break
            start_at = cases[i]
        out[peer] = start_at
    return out


def run(ctx: Context) -> SuiteResult:
    """The sweep for every installed transport; notes the crossover size of each peer."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "sweep"
    suite = SuiteResult(
        sid,
        "sweep one-way latency and throughput by payload size, 64 B to 32 MiB, reader in another process",
        "Latency: paced writer, from just before the publish call to the reader holding the frame as an array (p50/p95/p99). Throughput: back-to-back writer, frames the reader receives per second.",
        columns=COLUMNS,
    )
    kinds = tp.available(KINDS, lambda line: ctx.note(sid, line))
    sizes = cfg.pick(SIZES, SIZES, [64, 4096])
    ctx.reporter.start(sid, len(sizes) * len(kinds))
    for nbytes in sizes:
        case = size_label(nbytes)
        rate = rate_for(nbytes)
        frames = int(min(cfg.pick(300, 80, 5), max(cfg.pick(10, 6, 3), rate * cfg.pick(3.0, 1.0, 0.05))))
        burst_s = cfg.pick(1.0, 0.4, 0.05)
        for kind in kinds:
            cls = tp.cls_of(kind)
            res = ctx.attempt(sid, case, cls.label, lambda: _measure(ctx, kind, nbytes, frames, burst_s))
            if res is None:
                continue
            s = summarize(res["lat"])
            p95 = float(np.percentile(res["lat"], 95)) if res["lat"] else float("nan")
            gbps = res["fps"] * nbytes / 1e9
            suite.rows.append(Row(
                case=case, variant=cls.label, family=cls.family, role=cls.role, primary="lat",
                metrics={"lat": Metric(s["p50"], "µs", False, p50=s["p50"], p99=s["p99"], lo=s["min"], hi=s["max"])},
                extra={"bytes": nbytes, "p95": p95, "gbps": gbps, "fps": res["fps"], "frames": len(res["lat"]), "sent": frames, "burst_sent": res["sent"]},
                samples={"lat": thin(res["lat"])},
            ))
            ctx.reporter.step(f"{sid} {case} {cls.label}")
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    for peer, at in crossovers(suite).items():
        suite.notes.append(f"{peer}: framebus has the lower p50 latency " + (f"from {at} up" if at else "at no size from which it stays ahead"))
    suite.seconds = time.perf_counter() - t_start
    return suite
