"""PNG plots of a benchmark run (matplotlib, no display needed): throughput against frame size
(W1/W2), latency percentiles (W3, W4), fan-out frames/s (W5), pipe GB/s (W6), the per-hop
waterfall (W7) and the size sweep (latency and GB/s by payload). :func:`write_plots` returns the files it wrote, per suite."""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional

from .records import Row, Run, SuiteResult

#: Colour of each family, so a peer looks the same in every plot.
COLOURS = {
    "framebus": "#1f77b4",
    "pyshmem": "#d62728",
    "shm-naive": "#8c564b",
    "pyzmq": "#9467bd",
    "iceoryx2": "#2ca02c",
    "turbopipe": "#ff7f0e",
    "stdin": "#7f7f7f",
    "thread": "#bcbd22",
    "limit": "#000000",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _suite(run: Run, sid: str) -> Optional[SuiteResult]:
    return next((s for s in run.suites if s.id == sid and s.rows), None)


def _style(row: Row, k: int) -> Dict[str, Any]:
    dashes = ["-", "--", ":", "-."]
    return {"color": COLOURS.get(row.family, None), "linestyle": dashes[k % len(dashes)] if row.family == "framebus" else "-"}


def throughput(run: Run, path: str) -> Optional[str]:
    """GB/s against frame bytes for every W1/W2 variant (log-log)."""
    rows = [r for sid in ("W1", "W2") for s in [_suite(run, sid)] if s for r in s.rows if "gbps" in r.metrics]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 5.5))
    variants: List[str] = []
    for r in rows:
        if r.variant not in variants:
            variants.append(r.variant)
    n_fb = sum(1 for v in variants if next(r for r in rows if r.variant == v).family == "framebus")
    fb = 0
    for v in variants:
        pts = sorted((r.extra.get("bytes", 0), r.metrics["gbps"].value) for r in rows if r.variant == v)
        pts = [(x, y) for x, y in pts if x and math.isfinite(y) and y > 0]
        if not pts:
            continue
        row = next(r for r in rows if r.variant == v)
        st = _style(row, fb)
        if row.family == "framebus":  # shades of the framebus colour, one per variant
            st["color"] = plt.cm.Blues(0.45 + 0.55 * fb / max(n_fb - 1, 1))
            fb += 1
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=v, linewidth=2.2 if row.family == "framebus" else 1.4, **st)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("frame size (bytes)")
    ax.set_ylabel("GB/s (bytes written + read)")
    ax.set_title("W1/W2 write + read in one process: throughput by frame size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def percentiles(suite: SuiteResult, metric: str, unit: str, path: str, scale: float = 1.0) -> Optional[str]:
    """p50 bars with p99 whiskers per variant, one panel per case (log scale)."""
    cases = suite.cases()
    if not cases:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(cases), figsize=(5.2 * len(cases), 5.2), squeeze=False)
    for ax, case in zip(axes[0], cases):
        rows = [r for r in suite.rows if r.case == case and metric in r.metrics]
        names = [r.variant for r in rows]
        p50 = [(r.metrics[metric].p50 or r.metrics[metric].value) * scale for r in rows]
        p99 = [(r.metrics[metric].p99 or r.metrics[metric].value) * scale for r in rows]
        y = list(range(len(rows)))
        ax.barh(y, p50, color=[COLOURS.get(r.family, "#999999") for r in rows], alpha=0.85, label="p50")
        ax.scatter(p99, y, marker="|", s=200, color="black", label="p99", zorder=3)
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel(unit)
        ax.set_title(case, fontsize=9)
        ax.grid(True, axis="x", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(suite.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bars(suite: SuiteResult, metric: str, unit: str, path: str, title: Optional[str] = None) -> Optional[str]:
    """One horizontal bar per variant and case (the primary value of ``metric``)."""
    cases = suite.cases()
    if not cases:
        return None
    plt = _plt()
    cols = min(len(cases), 3)
    nrows = -(-len(cases) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.4 * cols, 3.6 * nrows), squeeze=False)
    for k, case in enumerate(cases):
        ax = axes[k // cols][k % cols]
        rows = [r for r in suite.rows if r.case == case and metric in r.metrics]
        y = list(range(len(rows)))
        ax.barh(y, [r.metrics[metric].value for r in rows], color=[COLOURS.get(r.family, "#999999") for r in rows])
        ax.set_yticks(y)
        ax.set_yticklabels([r.variant for r in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_title(case, fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for k in range(len(cases), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(title or suite.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def waterfall(suite: SuiteResult, path: str) -> Optional[str]:
    """W7: stacked horizontal bars (hop 1, filter work, hop 2) per variant, one panel per case."""
    if not suite.waterfall:
        return None
    plt = _plt()
    cases: List[str] = []
    for w in suite.waterfall:
        if w["case"] not in cases:
            cases.append(w["case"])
    fig, axes = plt.subplots(1, len(cases), figsize=(6.2 * len(cases), 4.8), squeeze=False)
    stage_colours = ["#1f77b4", "#c5b0d5", "#2ca02c"]
    for ax, case in zip(axes[0], cases):
        items = [w for w in suite.waterfall if w["case"] == case]
        for y, w in enumerate(items):
            left = 0.0
            for i, (name, v) in enumerate(w["stages"]):
                v = v if math.isfinite(v) else 0.0
                ax.barh(y, v, left=left, color=stage_colours[i % 3], label=name if y == 0 else None, edgecolor="white")
                left += v
        ax.set_yticks(range(len(items)))
        ax.set_yticklabels([w["variant"] for w in items], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ms (medians, paced phase)")
        ax.set_title(case, fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("W7 source -> filter -> sink: where the time goes", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sweep(suite: SuiteResult, path: str) -> Optional[str]:
    """The size sweep: p50 one-way latency (p99 shaded) and delivered GB/s against payload size,
    one line per variant (log-log)."""
    rows = [r for r in suite.rows if "lat" in r.metrics and r.extra.get("bytes")]
    if not rows:
        return None
    plt = _plt()
    fig, (ax_lat, ax_bw) = plt.subplots(1, 2, figsize=(14, 5.5))
    variants = list(dict.fromkeys(r.variant for r in rows))
    for k, v in enumerate(variants):
        mine = sorted((r for r in rows if r.variant == v), key=lambda r: r.extra["bytes"])
        style = _style(mine[0], k)
        xs = [r.extra["bytes"] for r in mine]
        p50 = [r.metrics["lat"].value for r in mine]
        p99 = [r.metrics["lat"].p99 or float("nan") for r in mine]
        ax_lat.plot(xs, p50, marker="o", markersize=3, label=v, **style)
        ax_lat.fill_between(xs, p50, p99, color=style["color"], alpha=0.08)
        bw = [(r.extra["bytes"], r.extra.get("gbps", float("nan"))) for r in mine]
        bw = [(x, y) for x, y in bw if math.isfinite(y) and y > 0]
        if bw:
            ax_bw.plot([x for x, _ in bw], [y for _, y in bw], marker="o", markersize=3, label=v, **style)
    for ax, label in ((ax_lat, "one-way latency µs (p50 line, to p99 shaded)"), (ax_bw, "GB/s delivered (back to back)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("payload bytes")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_lat.legend(fontsize=7)
    fig.suptitle(suite.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(run: Run, directory: str) -> Dict[str, List[str]]:
    """Writes every plot the run has data for into ``directory`` (created if needed); returns
    {suite id: [paths]}."""
    os.makedirs(directory, exist_ok=True)
    out: Dict[str, List[str]] = {}

    def add(sid: str, p: Optional[str]) -> None:
        if p:
            out.setdefault(sid, []).append(p)

    add("W2" if _suite(run, "W2") else "W1", throughput(run, os.path.join(directory, "w1w2_throughput.png")))
    s = _suite(run, "W3")
    if s:
        add("W3", percentiles(s, "us", "µs per round trip (p50 bar, p99 tick)", os.path.join(directory, "w3_pingpong.png")))
    s = _suite(run, "W4")
    if s:
        add("W4", percentiles(s, "lat", "µs one way (p50 bar, p99 tick)", os.path.join(directory, "w4_latency.png")))
    s = _suite(run, "W5")
    if s:
        add("W5", bars(s, "fps", "frames/s per reader", os.path.join(directory, "w5_fanout.png")))
    s = _suite(run, "W6")
    if s:
        add("W6", bars(s, "gbps", "GB/s into FFmpeg", os.path.join(directory, "w6_pipes.png")))
    s = _suite(run, "W7")
    if s:
        add("W7", waterfall(s, os.path.join(directory, "w7_waterfall.png")))
        add("W7", percentiles(s, "hop", "ms per hop (p50 bar, p99 tick)", os.path.join(directory, "w7_hops.png")))
    s = _suite(run, "sweep")
    if s:
        add("sweep", sweep(s, os.path.join(directory, "sweep.png")))
    return out
