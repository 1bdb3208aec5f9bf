"""W5: fan-out. One writer process publishes 1080p RGB frames back to back for a fixed time;
1, 2 and 4 reader processes read every frame they can (lossless: the writer waits for all of
them; latest: they skip to the newest). Reported per reader: frames/s, frames lost (lossless
should lose none; latest skips by design), reads that starved (timed out while the writer was
still publishing) and frames out of order.

"in place" rows publish a frame rendered directly in the loaned slot (only the header words are
written), the case where a producer decodes or renders into shared memory; the other rows copy
a ready frame in."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

from . import transport as tp
from .harness import Context, case_label, get, guarded, header, make_frame, mp_context, start, stop, summarize
from .records import Column, Metric, Row, SuiteResult, compute_ratios

SHAPE = (1080, 1920, 3)
#: (transport, in place?) per mode.
LOSSLESS: List[Tuple[str, bool]] = [
    ("framebus", False), ("framebus-view", False), ("framebus-zc", False), ("framebus-zc", True),
    ("iceoryx2", False), ("iceoryx2", True), ("pyzmq", False), ("shm-naive", False),
]
LATEST: List[Tuple[str, bool]] = [
    ("framebus", False), ("framebus-view", False), ("iceoryx2", False),
    ("pyshmem", False), ("shm-naive", False), ("pyzmq", False),
]
#: A read waits this long before it counts as starved.
READ_TIMEOUT = 0.2

COLUMNS = [
    Column("fps", "frames/s per reader", "{:,.0f}"),
    Column("fps", "slowest reader", "{:,.0f}", "lo"),
    Column("writer_fps", "writer frames/s", "{:,.0f}", "extra"),
    Column("lost", "lost", "{:.0f}", "extra"),
    Column("starved", "starved reads", "{:.0f}", "extra"),
    Column("disorder", "out of order", "{:.0f}", "extra"),
]


def label(kind: str, inplace: bool) -> str:
    """The row name of ``kind`` (in place or copying in)."""
    return tp.label(kind, inplace)


@guarded
def _writer(results: Any, spec: tp.Spec, inplace: bool, seconds: float, go: Any, done: Any, release: Any) -> None:
    """Publishes as fast as it can for ``seconds`` once ``go`` is set, then sets ``done``; keeps
    its endpoint open until ``release`` (some transports drop what is queued when a writer
    closes)."""
    writer = tp.get(spec).writer()
    src = make_frame(spec.shape, spec.dtype)
    h = header(src)
    send = writer.send_inplace if inplace else writer.send
    results.put("ready")
    try:
        go.wait(60)
        writer.connect()
        n = 0
        clock = time.perf_counter_ns
        t0 = clock()
        t_end = t0 + int(seconds * 1e9)
        while clock() < t_end:
            n += 1
            h[0] = n
            send(src)
        elapsed = (clock() - t0) / 1e9
        done.set()
        results.put({"sent": n, "seconds": elapsed})
        release.wait(60)
    finally:
        done.set()
        writer.close()


@guarded
def _reader(results: Any, spec: tp.Spec, index: int, done: Any, timeout: float) -> None:
    """Reads until the writer is done and nothing is left; reports counts."""
    reader = tp.get(spec).reader(index)
    results.put("ready")
    got = starved = gaps = disorder = 0
    last = 0
    try:
        while True:
            frame = reader.recv(timeout)
            if frame is None:
                if done.is_set():
                    break
                if got:
                    starved += 1
                continue
            c = int(header(frame)[0])
            reader.done()
            if c <= last:
                disorder += 1
            else:
                gaps += c - last - 1
                last = c
            got += 1
    finally:
        reader.close()
    results.put({"got": got, "starved": starved, "gaps": gaps, "disorder": disorder})


def _measure(ctx: Context, kind: str, inplace: bool, lossless: bool, readers: int, shape: tuple, seconds: float, timeout: float = READ_TIMEOUT) -> Dict[str, Any]:
    spec = tp.Spec(kind, ctx.name("fan"), shape, "uint8", readers=readers, lossless=lossless)
    t = tp.get(spec)
    t.create()
    mpc = mp_context()
    go, done, release = mpc.Event(), mpc.Event(), mpc.Event()
    rq = [mpc.Queue() for _ in range(readers)]
    wq = mpc.Queue()
    procs = []
    try:
        # Everyone starts at once; the writer publishes only once every reader is attached.
        for i in range(readers):
            procs.append(start(_reader, rq[i], spec, i, done, timeout))
        procs.append(start(_writer, wq, spec, inplace, seconds, go, done, release))
        for i in range(readers):
            get(rq[i], 60, f"{kind} reader {i}")
        get(wq, 60, f"{kind} writer")
        go.set()
        w = get(wq, seconds + 60, f"{kind} writer")
        rs = [get(q, 60, f"{kind} reader") for q in rq]
        return {"writer": w, "readers": rs}
    finally:
        done.set()
        release.set()
        stop(procs)
        t.destroy()


def run(ctx: Context) -> SuiteResult:
    """W5 for 1, 2 and 4 readers, lossless and latest."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W5"
    shape = cfg.shape(SHAPE)
    suite = SuiteResult(
        sid,
        f"W5 fan-out: one writer at full speed, {case_label(shape, 'uint8')}",
        "One writer process publishes back to back; each reader process reads every frame it can (copy-out readers copy, view readers look at the header).",
        columns=COLUMNS,
    )
    seconds = cfg.pick(1.5, 0.6, 0.2)
    counts = cfg.pick([1, 2, 4], [1, 2], [2])
    read_timeout = cfg.pick(READ_TIMEOUT, READ_TIMEOUT, 0.05)
    plan = []
    for mode, variants in (("lossless", LOSSLESS), ("latest", LATEST)):
        ok = tp.available(sorted({k for k, _ in variants}, key=tp.ORDER.index), lambda line: ctx.note(sid, line))
        for kind, inplace in variants:
            if kind in ok and (mode != "lossless" or tp.cls_of(kind).lossless_ok):
                plan.append((mode, kind, inplace))
    if cfg.smoke:  # each transport and each mode once is enough to prove the suite runs
        seen: set = set()
        smoke_plan = []
        for p in plan:
            if p[1] not in seen or p[1] == "framebus":
                smoke_plan.append(p)
            seen.add(p[1])
        plan = smoke_plan
    ctx.reporter.start(sid, len(plan) * len(counts))
    for readers in counts:
        for mode, kind, inplace in plan:
            case = f"{mode}, {readers} reader{'s' if readers > 1 else ''}"
            name = label(kind, inplace)
            cls = tp.cls_of(kind)
            res = ctx.attempt(sid, case, name, lambda: _measure(ctx, kind, inplace, mode == "lossless", readers, shape, seconds, read_timeout))
            if res is None:
                continue
            w = res["writer"]
            secs = w["seconds"] or float("nan")
            fps = [r["got"] / secs for r in res["readers"]]
            st = summarize(fps)
            lost = sum(w["sent"] - r["got"] for r in res["readers"])
            suite.rows.append(
                Row(
                    case=case,
                    variant=name,
                    family=cls.family,
                    role=cls.role,
                    primary="fps",
                    metrics={"fps": Metric(st["mean"], "frames/s", True, lo=st["min"], hi=st["max"])},
                    extra={
                        "writer_fps": w["sent"] / secs,
                        "sent": w["sent"],
                        "lost": lost,
                        "starved": sum(r["starved"] for r in res["readers"]),
                        "disorder": sum(r["disorder"] for r in res["readers"]),
                        "mode": mode,
                        "readers": readers,
                    },
                    samples={"fps": fps},
                )
            )
            ctx.reporter.step(f"{sid} {case} {name}")
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
