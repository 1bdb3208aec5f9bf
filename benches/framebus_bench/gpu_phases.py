"""W10's traced hop: where framebus's own time goes in a device-stream hop, phase by phase.

Opt-in: ``FRAMEBUS_TRACE_HOP=1 framebus bench W10`` adds, in latest mode, the row "framebus
loan + view, phases timed": the loan + view hop with each call timed from Python
(``time.perf_counter_ns``, which is CLOCK_MONOTONIC: stamps of the two processes compare
directly). The reader splits ``wait_view`` into its two halves (``wait_after``, then
``view_seq``) and touches ``__cuda_array_interface__`` before the DLPack export, so that each
step is a call of its own:

writer: ``loan``  ``loan()``: a free slot; the writer's CUDA stream is made to wait for the
                  readers' release events of that slot
        ``loan export``  the loan as a tensor (DLPack export and the library's import)
        ``render``       the frame's GPU work (queued; the user's, not framebus's)
        ``commit``       the slot's ready event recorded, the frame published, readers woken
hand-over               from the writer's commit call to the reader's wait returning, over the
                        frames the reader was already waiting for (not those it found there)
reader: ``view``         ``view_seq``: the frame pinned, a DeviceFrame made
        ``ready wait``   the view's CUDA stream made to wait for the frame's ready event
        ``export``       the frame as a tensor (DLPack export and the library's import)
        ``check``        the frame's GPU work and its four numbers back to the host (the
                         user's; on a GPU it also waits for the writer's render)
        ``release``      the reader's release event recorded, the frame unpinned

Behind the fake CUDA door the exports are framebus's ``__dlpack__`` alone (nothing imports the
capsule), and CUDA events complete when recorded.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .harness import summarize

ENV = "FRAMEBUS_TRACE_HOP"

#: (key, label) of each phase, in the order of a hop; "own" marks framebus's calls.
PHASES = [
    ("loan", "writer loan", True),
    ("loan_export", "loan export", True),
    ("render", "render", False),
    ("commit", "commit", True),
    ("handover", "hand-over", True),
    ("view", "view", True),
    ("ready_wait", "ready wait", True),
    ("export", "export", True),
    ("check", "check", False),
    ("release", "release", True),
]


def enabled(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``FRAMEBUS_TRACE_HOP`` asks for the traced hop."""
    value = (os.environ if env is None else env).get(ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def export(ops: Any, x: Any) -> Any:
    """``x`` (a loan or a frame) as the library's array, through DLPack. The fake door has no
    library to import the capsule: framebus's export alone is timed, ``x`` comes back."""
    if ops.name == "fake":
        x.__dlpack__()
        return x
    return ops.wrap(x)


def writer(ops: Any, s: Any, seconds: float, done: Any, timeout: float) -> Dict[str, Any]:
    """Loans, renders and commits back to back for ``seconds``; ``trace`` holds each frame's
    (start, loaned, exported, rendered, committed) stamps, frame ``n`` at index ``n - 1``."""
    clock = time.perf_counter_ns
    trace: List[tuple] = []
    n = 0
    t_start = clock()
    t_end = t_start + int(seconds * 1e9)
    try:
        while clock() < t_end:
            n += 1
            t0 = clock()
            loan = s.loan(stream=ops.stream, timeout=timeout, frame_id=n)
            t1 = clock()
            try:
                x = export(ops, loan)
                t2 = clock()
                ops.stamp(x, n, t0)
                del x
                t3 = clock()
            except BaseException:
                loan.abort()
                raise
            loan.commit()
            trace.append((t0, t1, t2, t3, clock()))
    finally:
        done.set()
    return {"sent": n, "seconds": (clock() - t_start) / 1e9, "trace": trace}


def reader(ops: Any, s: Any, done: Any, timeout: float) -> Dict[str, Any]:
    """Reads the newest frame, phase by phase, until the writer is done and nothing new comes;
    ``trace`` holds (seq, previous seq, wait start, woke, viewed, ready-waited, exported,
    checked, released) per frame read."""
    clock = time.perf_counter_ns
    trace: List[tuple] = []
    got = starved = torn = gaps = disorder = missed = 0
    last = 0
    lat: List[float] = []
    while True:
        t0 = clock()
        try:
            seq = s.wait_after(last, timeout=timeout)
        except TimeoutError:
            if done.is_set():
                break
            if got:
                starved += 1
            continue
        t1 = clock()
        f = s.view_seq(seq, stream=ops.stream)
        if f is None:  # overwritten between the wake-up and the pin: take the newest again
            missed += 1
            continue
        t2 = clock()
        try:
            f.__cuda_array_interface__  # noqa: B018 - the view's stream now waits for the ready event
            t3 = clock()
            x = export(ops, f)
            t4 = clock()
            fseq, ts, ok = ops.check(x)
            del x
            t5 = clock()
        finally:
            f.release()
        t6 = clock()
        got += 1
        torn += not ok or fseq != seq
        if seq <= last:
            disorder += 1
        else:
            gaps += seq - last - 1
        trace.append((seq, last, t0, t1, t2, t3, t4, t5, t6))
        last = max(last, seq)
        lat.append((t5 - ts) / 1e3)
    return {"got": got, "starved": starved, "torn": torn, "gaps": gaps, "disorder": disorder, "missed": missed, "lat_us": lat, "trace": trace}


def phases(writer_trace: Sequence[Sequence[int]], reader_trace: Sequence[Sequence[int]]) -> Dict[str, Dict[str, float]]:
    """Per phase (see PHASES): p50, p99 and count of its durations in µs. The hand-over counts
    only frames the reader was waiting for when their commit began, and that were the next one
    after the reader's previous frame (so that this commit is the one that woke it)."""
    us: Dict[str, List[float]] = {key: [] for key, _, _ in PHASES}
    for t0, t1, t2, t3, t4 in writer_trace:
        us["loan"].append((t1 - t0) / 1e3)
        us["loan_export"].append((t2 - t1) / 1e3)
        us["render"].append((t3 - t2) / 1e3)
        us["commit"].append((t4 - t3) / 1e3)
    for seq, prev, t0, t1, t2, t3, t4, t5, t6 in reader_trace:
        if seq == prev + 1 and 1 <= seq <= len(writer_trace):
            commit_start = writer_trace[seq - 1][3]
            if t0 <= commit_start:
                us["handover"].append((t1 - commit_start) / 1e3)
        us["view"].append((t2 - t1) / 1e3)
        us["ready_wait"].append((t3 - t2) / 1e3)
        us["export"].append((t4 - t3) / 1e3)
        us["check"].append((t5 - t4) / 1e3)
        us["release"].append((t6 - t5) / 1e3)
    out = {}
    for key, samples in us.items():
        s = summarize(samples)
        out[key] = {"p50": s["p50"], "p99": s["p99"], "n": s["n"]}
    return out


def describe(case: str, ph: Dict[str, Dict[str, float]], got: int, hop_p50: float) -> str:
    """One note line: each phase's p50/p99 and framebus's own share of the hop."""
    parts = []
    for key, label, _ in PHASES:
        p = ph.get(key) or {}
        if not p.get("n"):
            parts.append(f"{label} -")
            continue
        extra = f" ({p['n']} of {got} frames waited for)" if key == "handover" else ""
        parts.append(f"{label} {p['p50']:,.1f}/{p['p99']:,.1f}{extra}")
    own = sum(ph[k]["p50"] for k, _, mine in PHASES if mine and ph.get(k, {}).get("n"))
    return f"{case}, phases of a loan + view hop (µs p50/p99): " + ", ".join(parts) + f"; framebus's own calls {own:,.1f} µs (sum of p50s) of the hop's p50 {hop_p50:,.1f} µs"


__all__ = ["ENV", "PHASES", "enabled", "writer", "reader", "phases", "describe"]
