"""W7: a 2-stage pipeline across 3 processes, source -> filter -> sink, each hop through its own
channel of one transport, at 1080p and 2160p RGB.

Every process does the same work whatever the transport: the source renders each frame (a copy
of a prepared image) into its own buffer, or straight into a loaned slot where the transport
has loans; the filter computes its output (a copy of its input) into its own buffer or into a
loaned slot; the sink only looks. Stamps (``perf_counter_ns``, system-wide) travel in the
frame's header words: t0 when the source's frame is ready to publish, t1 when the filter holds
it as an array, t2 when the filter's output is ready, t3 when the sink holds it. A hop is
t1 - t0 or t3 - t2: publishing, waking and reading, everything a transport adds.

Two warm-up frames go first and are not counted: every process touches its own buffers for the
first time then (a 2160p buffer is about 6,000 page faults, in every transport alike), which on a
quick run (4 paced frames) decided the median. The first phase is paced (hop latency without
queueing); the second sends back to back (the pipeline's frames/s)."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

import numpy as np

from . import transport as tp
from .harness import Context, case_label, get, guarded, header, make_frame, mp_context, pace, start, stop, summarize, thin
from .records import Column, SuiteResult, compute_ratios, percentile_row

KINDS = ["framebus", "framebus-1t", "framebus-zc", "pyshmem", "pyshmem-notify", "shm-naive", "pyzmq", "iceoryx2", "limit-futex"]
#: (shape, paced rate in frames/s)
SIZES: List[Tuple[tuple, float]] = [((1080, 1920, 3), 20.0), ((2160, 3840, 3), 8.0)]
TIMEOUT = 20.0
#: Frames sent before the measured ones (first touch of every process's buffers).
WARMUP = 2
#: Phase word values.
PACED, BURST, WARM = 0, 1, 2
# Header words: 0 counter (from 1), 1 t0, 2 t1, 3 t2, 4 phase (PACED, BURST, WARM), 5 last.
W_COUNT, W_T0, W_T1, W_T2, W_PHASE, W_LAST = range(6)

COLUMNS = [
    Column("hop", "ms/hop p50", "{:.3f}", "p50"),
    Column("hop", "ms/hop p99", "{:.3f}", "p99"),
    Column("hop1", "hop 1 ms", "{:.3f}", "extra"),
    Column("hop2", "hop 2 ms", "{:.3f}", "extra"),
    Column("filter", "filter work ms", "{:.3f}", "extra"),
    Column("fps", "frames/s (back to back)", "{:,.1f}", "extra"),
    Column("lost", "lost", "{:.0f}", "extra"),
]


@guarded
def _source(results: Any, spec: tp.Spec, paced: int, rate: float, burst: int, go: Any, release: Any) -> None:
    t = tp.get(spec)
    writer = t.writer()
    image = make_frame(spec.shape, spec.dtype)
    local = np.empty_like(image)
    clock = time.perf_counter_ns
    results.put("ready")
    try:
        go.wait(60)
        writer.connect()
        period = int(1e9 / rate)
        t_start = clock()
        total = WARMUP + paced + burst
        for i in range(total):
            phase = WARM if i < WARMUP else PACED if i < WARMUP + paced else BURST
            if phase != BURST:
                pace(t_start, i, period)
            if t.loans:
                with writer.loan() as arr:
                    np.copyto(arr, image)  # render into shared memory
                    h = header(arr)
                    h[W_COUNT], h[W_PHASE], h[W_LAST] = i + 1, phase, int(i == total - 1)
                    h[W_T0] = clock()
            else:
                np.copyto(local, image)  # render into our own buffer
                h = header(local)
                h[W_COUNT], h[W_PHASE], h[W_LAST] = i + 1, phase, int(i == total - 1)
                h[W_T0] = clock()
                writer.send(local)
        results.put({"sent": total})
        release.wait(60)  # keep the endpoint until the sink has everything (ZeroMQ drops on close)
    finally:
        writer.close()


@guarded
def _filter(results: Any, a: tp.Spec, b: tp.Spec, release: Any) -> None:
    reader = tp.get(a).reader(0)
    tb = tp.get(b)
    writer = tb.writer()
    local = np.empty(b.shape, b.dtype)
    clock = time.perf_counter_ns
    results.put("ready")
    try:
        connected = False
        while True:
            frame = reader.recv(TIMEOUT)
            t1 = clock()
            if not connected:  # the sink is ready once the first frame flows
                writer.connect()
                connected = True
                t1 = clock()
            if frame is None:
                raise RuntimeError(f"the filter got no frame within {TIMEOUT:.0f} s")
            last = int(header(frame)[W_LAST])
            if tb.loans:
                with writer.loan() as out:
                    np.copyto(out, frame)  # the filter's work, straight into shared memory
                    reader.done()
                    h = header(out)
                    h[W_T1] = t1
                    h[W_T2] = clock()
            else:
                np.copyto(local, frame)  # the filter's work, into our own buffer
                reader.done()
                h = header(local)
                h[W_T1] = t1
                h[W_T2] = clock()
                writer.send(local)
            if last:
                break
        results.put({"ok": True})
        release.wait(60)
    finally:
        writer.close()
        reader.close()


@guarded
def _sink(results: Any, spec: tp.Spec) -> None:
    reader = tp.get(spec).reader(0)
    clock = time.perf_counter_ns
    results.put("ready")
    rec: List[Tuple[int, int, int, int, int, int]] = []
    try:
        while True:
            frame = reader.recv(TIMEOUT)
            t3 = clock()
            if frame is None:
                raise RuntimeError(f"the sink got no frame within {TIMEOUT:.0f} s")
            h = header(frame)
            rec.append((int(h[W_COUNT]), int(h[W_PHASE]), int(h[W_T0]), int(h[W_T1]), int(h[W_T2]), t3))
            last = int(h[W_LAST])
            reader.done()
            if last:
                break
    finally:
        reader.close()
    results.put({"rec": rec})


def _measure(ctx: Context, kind: str, shape: tuple, rate: float, paced: int, burst: int) -> Dict[str, Any]:
    lossless = tp.cls_of(kind).lossless_ok
    a = tp.Spec(kind, ctx.name("pa"), shape, "uint8", lossless=lossless)
    b = tp.Spec(kind, ctx.name("pb"), shape, "uint8", lossless=lossless)
    ta, tb = tp.get(a), tp.get(b)
    ta.create()
    tb.create()
    mpc = mp_context()
    go, release = mpc.Event(), mpc.Event()
    qs = [mpc.Queue() for _ in range(3)]
    procs = []
    try:
        # All three start at once; the source publishes only once every stage is attached.
        procs.append(start(_sink, qs[2], b))
        procs.append(start(_filter, qs[1], a, b, release))
        procs.append(start(_source, qs[0], a, paced, rate, burst, go, release))
        for q, what in ((qs[2], "sink"), (qs[1], "filter"), (qs[0], "source")):
            get(q, 60, f"{kind} {what}")
        go.set()
        expect = (WARMUP + paced) / rate + burst * 0.5 + 60
        try:
            src = get(qs[0], expect, f"{kind} source")
            sink = get(qs[2], expect, f"{kind} sink")
            get(qs[1], 30, f"{kind} filter")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}{_other_errors(qs)}") from None
        return {"sent": src["sent"], "rec": sink["rec"]}
    finally:
        go.set()
        release.set()
        stop(procs)
        ta.destroy()
        tb.destroy()


def _other_errors(queues: List[Any]) -> str:
    """Errors the other processes reported meanwhile (for a complete failure message)."""
    import queue as _q

    found = []
    for q in queues:
        try:
            while True:
                msg = q.get_nowait()
                if isinstance(msg, dict) and msg.get("error"):
                    found.append(msg["error"])
        except (_q.Empty, OSError, ValueError):
            pass
    return "; also: " + "; ".join(found) if found else ""


def _summarize(res: Dict[str, Any], paced: int) -> Dict[str, Any]:
    rec = res["rec"]
    p = [r for r in rec if r[1] == PACED]
    hop1 = [(r[3] - r[2]) / 1e6 for r in p]
    hop2 = [(r[5] - r[4]) / 1e6 for r in p]
    work = [(r[4] - r[3]) / 1e6 for r in p]
    e2e = [(r[5] - r[2]) / 1e6 for r in p]
    burst = [r for r in rec if r[1] == BURST]
    fps = float("nan")
    if len(burst) >= 2:
        span = (burst[-1][5] - burst[0][5]) / 1e9
        fps = (burst[-1][0] - burst[0][0]) / span if span > 0 else float("nan")
    return {
        "hops": hop1 + hop2,
        "hop1": summarize(hop1)["median"],
        "hop2": summarize(hop2)["median"],
        "filter": summarize(work)["median"],
        "e2e": summarize(e2e)["median"],
        "fps": fps,
        "lost": res["sent"] - len(rec),
    }


def run(ctx: Context) -> SuiteResult:
    """W7 for every transport at 1080p and 2160p; fills the suite's per-hop waterfall."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W7"
    suite = SuiteResult(
        sid,
        "W7 pipeline source -> filter -> sink across 3 processes: cost per hop",
        "Per hop: from the sender's frame being ready to the receiver holding it as an array (paced phase); frames/s from a back-to-back phase.",
        columns=COLUMNS,
    )
    kinds = tp.available(KINDS, lambda line: ctx.note(sid, line))
    sizes = cfg.cases(SIZES)
    openfilter = _openfilter_cases(ctx, sid)
    ctx.reporter.start(sid, len(sizes) * len(kinds) + len(openfilter) * len(OPENFILTER_VARIANTS))
    for shape, rate in sizes:
        shape = cfg.shape(shape)
        case = case_label(shape, "uint8")
        paced = cfg.pick(int(rate * 2), int(rate * 0.6), 3)
        burst = cfg.pick(30, 10, 3)
        for kind in kinds:
            cls = tp.cls_of(kind)
            res = ctx.attempt(sid, case, cls.label, lambda: _summarize(_measure(ctx, kind, shape, rate, paced, burst), paced))
            if res is None:
                continue
            extra = {k: res[k] for k in ("hop1", "hop2", "filter", "e2e", "fps", "lost")}
            suite.rows.append(percentile_row(case, cls, "hop", "ms/hop", summarize(res["hops"]), extra, "hop_ms", thin(res["hops"])))
            stages = [["hop 1 (source -> filter)", res["hop1"]], ["filter work", res["filter"]], ["hop 2 (filter -> sink)", res["hop2"]]]
            suite.waterfall.append({"case": case, "variant": cls.label, "stages": stages})
            ctx.reporter.step(f"{sid} {case} {cls.label}")
    _openfilter_rows(ctx, suite, sid, openfilter)
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite


# -- OpenFilter rows: the same kind of pipeline run by OpenFilter's runner ----------------------

#: (transport of framebus_bench.openfilter_pipeline, row label, family, role)
OPENFILTER_VARIANTS = [
    ("zmq", "OpenFilter ZMQ", "openfilter", "peer"),
    ("openfilter-shm", "OpenFilter SHM", "openfilter", "peer"),
    ("framebus", "OpenFilter on framebus", "framebus", "framebus"),
]


def _openfilter_cases(ctx: Context, sid: str) -> List[str]:
    """The resolutions of the OpenFilter rows, or none (with a note) without openfilter."""
    import importlib.util

    if importlib.util.find_spec("openfilter") is None:
        ctx.note(sid, "OpenFilter rows: skipped (openfilter is not installed; pip install 'framebus[openfilter]')")
        return []
    # 16x16 ("tiny"): OpenFilter's own cost per message, the floor under every transport's hop.
    return ["tiny"] if ctx.config.smoke else ["1080p", "2160p", "tiny"]


def _openfilter_rows(ctx: Context, suite: SuiteResult, sid: str, resolutions: List[str]) -> None:
    """Source -> filter -> filter -> sink under OpenFilter's runner over its ZeroMQ, its shared
    memory and framebus (framebus_bench.openfilter_pipeline, each in a fresh interpreter); one
    row per transport, its hops in the waterfall."""
    from types import SimpleNamespace

    from . import openfilter_pipeline as ofp

    frames = ctx.config.pick(30, 10, 3)
    for res in resolutions:
        case = "OpenFilter 16x16 (its floor)" if res == "tiny" else f"OpenFilter {res}"
        for transport, label, family, role in OPENFILTER_VARIANTS:
            def measure(t: str = transport, res: str = res) -> Dict[str, Any]:
                return ofp.run_isolated(t, res, frames)

            r = ctx.attempt(sid, case, label, measure)
            if r is None:
                continue
            hops = r["per_hop_ms"]
            nan = float("nan")
            extra = {"hop1": hops[0], "hop2": hops[1], "filter": nan, "e2e": sum(h for h in hops if h is not None), "fps": nan, "lost": r["sent"] - r["frames"], "torn": r["torn"]}
            cls = SimpleNamespace(label=label, family=family, role=role)
            samples = r["hop_ms_samples"]
            suite.rows.append(percentile_row(case, cls, "hop", "ms/hop", summarize(samples), extra, "hop_ms", thin(samples)))
            suite.waterfall.append({"case": case, "variant": label, "stages": [[f"hop {k + 1} ({name})", ms] for k, (name, ms) in enumerate(zip(r["hops"], hops))]})
            ctx.reporter.step(f"{sid} {case} {label}")
