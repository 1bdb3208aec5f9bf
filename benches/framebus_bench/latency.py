"""W4: one-way latency from a writer (this process, paced at 200 frames/s) to a reader in
another process, latest mode. The writer stamps each frame with ``perf_counter_ns`` (the
system-wide monotonic clock) just before publishing; the reader takes the difference once it
holds the frame as an array (after its copy, for copying transports). Frames lost = frames
published that the reader never saw."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

from . import transport as tp
from .harness import Context, case_label, get, guarded, header, make_frame, mp_context, pace, start, stop, summarize, thin
from .records import Column, SuiteResult, compute_ratios, percentile_row

KINDS = ["framebus", "framebus-view", "pyshmem", "pyshmem-notify", "shm-naive", "pyzmq", "iceoryx2", "limit-futex"]
SIZES: List[Tuple[tuple, str]] = [((128, 128), "float32"), ((1080, 1920, 3), "uint8"), ((2160, 3840, 3), "uint8")]
RATE_HZ = 200.0

COLUMNS = [
    Column("lat", "µs p50", "{:,.0f}", "p50"),
    Column("lat", "µs p99", "{:,.0f}", "p99"),
    Column("lost", "frames lost", "{:.0f}", "extra"),
    Column("sent_hz", "writer frames/s", "{:.0f}", "extra"),
]


@guarded
def _reader(results: Any, spec: tp.Spec, stop_evt: Any) -> None:
    """Reads until the writer is done; reports latencies (µs) and the frames it saw."""
    reader = tp.get(spec).reader(0)
    results.put("ready")
    lat: List[float] = []
    seen = 0
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
            if int(h[2]) == 1:  # the writer's start marker, not a timed frame
                reader.done()
                continue
            lat.append((now - int(h[1])) / 1e3)
            seen += 1
            reader.done()
    finally:
        reader.close()
    results.put({"lat": lat, "seen": seen})


def _measure(ctx: Context, kind: str, shape: tuple, dtype: str, frames: int, settle: float = 0.1) -> Dict[str, Any]:
    spec = tp.Spec(kind, ctx.name("lat"), shape, dtype)
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
        src = make_frame(shape, dtype)
        h = header(src)
        # A marker frame first, so connection set-up (ZeroMQ, iceoryx2) is not timed.
        h[2] = 1
        writer.send(src)
        time.sleep(settle)
        h[2] = 0
        period = int(1e9 / RATE_HZ)
        t0 = time.perf_counter_ns()
        for i in range(frames):
            pace(t0, i, period)
            h[0] = i
            h[1] = time.perf_counter_ns()
            writer.send(src)
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        time.sleep(settle)
        stop_evt.set()
        res = get(results, 60, f"{kind} reader process")
        res["sent_hz"] = frames / elapsed if elapsed > 0 else float("nan")
        res["lost"] = frames - res["seen"]
        return res
    finally:
        if writer is not None:
            writer.close()
        stop_evt.set()
        stop([proc])
        t.destroy()


def run(ctx: Context) -> SuiteResult:
    """W4 for every transport and size."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W4"
    suite = SuiteResult(
        sid,
        f"W4 one-way latency to another process, paced at {RATE_HZ:.0f} frames/s",
        "Writer -> reader in another process, latest mode; latency from just before the publish call until the reader holds the frame as an array.",
        columns=COLUMNS,
    )
    kinds = tp.available(KINDS, lambda line: ctx.note(sid, line))
    frames = cfg.pick(400, 100, 5)
    ctx.reporter.start(sid, len(cfg.cases(SIZES)) * len(kinds))
    for shape, dtype in cfg.cases(SIZES):
        shape = cfg.shape(shape)
        case = case_label(shape, dtype)
        for kind in kinds:
            cls = tp.cls_of(kind)
            res = ctx.attempt(sid, case, cls.label, lambda: _measure(ctx, kind, shape, dtype, frames, cfg.pick(0.1, 0.1, 0.02)))
            if res is None:
                continue
            extra = {"lost": res["lost"], "sent": frames, "sent_hz": res["sent_hz"]}
            suite.rows.append(percentile_row(case, cls, "lat", "µs", summarize(res["lat"]), extra, "lat", thin(res["lat"])))
            ctx.reporter.step(f"{sid} {case} {cls.label}")
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
