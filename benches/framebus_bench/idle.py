"""W9: CPU used by a reader blocked waiting for a frame that does not come. Each variant runs in
its own process and blocks in its transport's waiting read (framebus: ``read_new`` and
``wait_view``) for a fixed time; the process's own CPU time (every thread) over that wall time
is the result, in % of one core. The variants wait side by side in one window, so a
busy-polling one costs the same whichever order they run in."""

from __future__ import annotations

import time
from typing import Any, List

from . import transport as tp
from .harness import Context, get, guarded, mp_context, start, stop
from .records import Column, Metric, Row, SuiteResult, compute_ratios

KINDS = ["framebus", "framebus-view", "pyshmem", "pyshmem-notify", "shm-naive", "pyzmq", "iceoryx2", "limit-futex"]
LABELS = {
    "framebus": "framebus read_new(timeout=)",
    "framebus-view": "framebus wait_view(timeout=)",
    "pyshmem": "pyshmem 1.4 read_after (polling)",
    "pyshmem-notify": "pyshmem 1.4 notify=True read_after",
    "shm-naive": "shared_memory seq spin (sched_yield)",
    "pyzmq": "pyzmq poll + recv",
    "iceoryx2": "iceoryx2 listener wait + receive",
    "limit-futex": "limit: FUTEX_WAIT on a word",
}

COLUMNS = [
    Column("cpu", "% of one core", "{:.3f}"),
    Column("wall", "seconds waited", "{:.1f}", "extra"),
]


@guarded
def _idle(results: Any, spec: tp.Spec, seconds: float, go: Any) -> None:
    reader = tp.get(spec).reader(0)
    results.put("ready")
    try:
        go.wait(60)
        c0, w0 = time.process_time(), time.perf_counter()
        got = reader.recv(seconds)
        c1, w1 = time.process_time(), time.perf_counter()
    finally:
        reader.close()
    if got is not None:
        raise RuntimeError("a frame arrived on a stream nobody writes")
    results.put({"cpu_s": c1 - c0, "wall_s": w1 - w0})


def run(ctx: Context) -> SuiteResult:
    """W9: every variant waits at the same time for the same duration."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W9"
    seconds = cfg.pick(5.0, 2.0, 0.3)
    suite = SuiteResult(
        sid,
        f"W9 idle CPU of a reader blocked for {seconds:g} s",
        "CPU time of the waiting process (all threads) over the wall time of the wait.",
        columns=COLUMNS,
    )
    kinds = tp.available(KINDS, lambda line: ctx.note(sid, line))
    ctx.reporter.start(sid, len(kinds))
    mpc = mp_context()
    go = mpc.Event()
    channels: List[Any] = []
    procs: List[Any] = []
    queues: List[Any] = []
    try:
        for kind in kinds:
            t = tp.get(tp.Spec(kind, ctx.name("idle"), (64,), "uint8"))
            t.create()
            channels.append(t)
            q = mpc.Queue()
            queues.append(q)
            procs.append(start(_idle, q, t.spec, seconds, go))
        for kind, q in zip(kinds, queues):
            get(q, 60, f"{kind} idle reader")
        go.set()
        for kind, q in zip(kinds, queues):
            cls = tp.cls_of(kind)
            try:
                res = get(q, seconds + 60, f"{kind} idle reader")
            except RuntimeError as exc:
                ctx.note(sid, f"{cls.label}: failed ({exc})")
                ctx.reporter.step(f"{sid} {kind}")
                continue
            pct = 100.0 * res["cpu_s"] / res["wall_s"]
            suite.rows.append(
                Row(
                    case=f"blocked {seconds:g} s",
                    variant=LABELS.get(kind, cls.label),
                    family=cls.family,
                    role=cls.role,
                    primary="cpu",
                    metrics={"cpu": Metric(pct, "% of a core", False)},
                    extra={"wall": res["wall_s"], "cpu_s": res["cpu_s"]},
                )
            )
            ctx.reporter.step(f"{sid} {kind}")
    finally:
        go.set()
        stop(procs, timeout=seconds + 10)
        for t in channels:
            t.destroy()
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
