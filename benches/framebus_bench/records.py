"""Result records of a benchmark run (rows, suites, the whole run), the ratios every table
shows, and the machine/version information stored with them. Everything here turns into JSON
with :meth:`Run.to_json` and back with :func:`load`."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

#: Who a row measures: framebus itself, a tool a user would pick instead, or a physical limit.
ROLES = ("framebus", "peer", "limit")


@dataclass
class Metric:
    """One measured quantity of a row: the headline ``value`` (median over repetitions), its
    unit, whether higher is better, percentiles and the min-max spread over repetitions."""

    value: float
    unit: str
    higher_is_better: bool = True
    p50: Optional[float] = None
    p99: Optional[float] = None
    lo: Optional[float] = None
    hi: Optional[float] = None


@dataclass
class Row:
    """One measured variant (``variant``) of one case (``case``, e.g. a frame size)."""

    case: str
    variant: str
    family: str
    role: str
    metrics: Dict[str, Metric] = field(default_factory=dict)
    primary: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)
    samples: Dict[str, List[float]] = field(default_factory=dict)
    note: str = ""
    ratios: Dict[str, Optional[float]] = field(default_factory=dict)

    def value(self, metric: Optional[str] = None) -> float:
        """The headline value of ``metric`` (the primary one by default), NaN if absent."""
        m = self.metrics.get(metric or self.primary)
        return float("nan") if m is None else m.value


def percentile_row(case: str, cls: Any, key: str, unit: str, summary: Dict[str, float], extra: Dict[str, Any], sample_key: str, samples: List[float]) -> Row:
    """A row whose headline is the median of a ``summary`` (see harness.summarize; lower is
    better), with p50/p99 and the min-max spread; ``cls`` is the transport class."""
    return Row(
        case=case,
        variant=cls.label,
        family=cls.family,
        role=cls.role,
        primary=key,
        metrics={key: Metric(summary["p50"], unit, False, p50=summary["p50"], p99=summary["p99"], lo=summary["min"], hi=summary["max"])},
        extra=extra,
        samples={sample_key: samples},
    )


@dataclass
class Column:
    """A table column: a metric (``key``) or an ``extra`` field, its header and format."""

    key: str
    header: str
    fmt: str = "{:.3g}"
    source: str = "metric"  # "metric", "p50", "p99", "spread" or "extra"


@dataclass
class SuiteResult:
    """The rows of one workload (W1..W10) plus how to show them."""

    id: str
    title: str
    what: str
    rows: List[Row] = field(default_factory=list)
    columns: List[Column] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    seconds: float = 0.0
    waterfall: List[Dict[str, Any]] = field(default_factory=list)

    def cases(self) -> List[str]:
        """Case names in first-seen order."""
        seen: List[str] = []
        for r in self.rows:
            if r.case not in seen:
                seen.append(r.case)
        return seen


def better_ratio(value: float, ref: float, higher_is_better: bool) -> Optional[float]:
    """How many times better ``value`` is than ``ref`` (>1 = better), or None when either is
    missing or zero."""
    if value is None or ref is None or not math.isfinite(value) or not math.isfinite(ref):
        return None
    if higher_is_better:
        return value / ref if ref > 0 else None
    if value <= 0:
        return None if ref <= 0 else float("inf")
    return ref / value


def _best(rows: List[Row], metric: str) -> Optional[Row]:
    vals = [r for r in rows if metric in r.metrics and math.isfinite(r.metrics[metric].value)]
    if not vals:
        return None
    hib = vals[0].metrics[metric].higher_is_better
    return (max if hib else min)(vals, key=lambda r: r.metrics[metric].value)


def compute_ratios(suite: SuiteResult) -> None:
    """Fills every row's ``ratios``: against the best peer of its case (``best_peer``), the
    best pyshmem row (``pyshmem``) and the best limit row (``limit``), on the primary metric.
    Each ratio says how many times better the row is than the reference (>1 = better)."""
    for case in suite.cases():
        rows = [r for r in suite.rows if r.case == case]
        for r in rows:
            metric = r.primary
            if metric not in r.metrics:
                continue
            hib = r.metrics[metric].higher_is_better
            refs = {
                "best_peer": _best([x for x in rows if x.role == "peer" and x is not r], metric),
                "pyshmem": _best([x for x in rows if x.family == "pyshmem" and x is not r], metric),
                "limit": _best([x for x in rows if x.role == "limit" and x is not r], metric),
            }
            r.ratios = {}
            for key, ref in refs.items():
                r.ratios[key] = None if ref is None else better_ratio(r.value(metric), ref.value(metric), hib)
            best = refs["best_peer"]
            r.extra.setdefault("best_peer", best.variant if best is not None else "")


@dataclass
class Run:
    """A whole benchmark run: command, machine, versions, settings and the suites."""

    command: str
    machine: Dict[str, Any]
    versions: Dict[str, str]
    settings: Dict[str, Any]
    suites: List[SuiteResult] = field(default_factory=list)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S %z"))
    seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        """The run as plain JSON data (samples thinned to at most 1000 per list)."""
        return {"format": "framebus-bench/1", **asdict(self)}


def load(path: str) -> Run:
    """Reads a JSON file written by ``framebus bench --json`` (ValueError if it is not one)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("format") != "framebus-bench/1":
        raise ValueError(f"{path} is not a framebus bench JSON file (no 'format': 'framebus-bench/1')")
    suites = []
    for s in data.get("suites", []):
        rows = []
        for r in s.get("rows", []):
            metrics = {k: Metric(**m) for k, m in r.get("metrics", {}).items()}
            rows.append(Row(**{**r, "metrics": metrics}))
        cols = [Column(**c) for c in s.get("columns", [])]
        suites.append(SuiteResult(**{**s, "rows": rows, "columns": cols}))
    fields = {k: data[k] for k in ("command", "machine", "versions", "settings", "started", "seconds") if k in data}
    return Run(suites=suites, **fields)


# -- machine and versions ------------------------------------------------------------------------


def machine_info() -> Dict[str, Any]:
    """CPU model, cores usable, memory, kernel, Python and /dev/shm size of this machine."""
    info: Dict[str, Any] = {
        "platform": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    try:
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
                    break
    except OSError:
        pass
    try:
        st = os.statvfs("/dev/shm")
        info["dev_shm_gib"] = round(st.f_blocks * st.f_frsize / 2**30, 1)
    except OSError:
        pass
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        from framebus import tuning

        plan = tuning.copy_plan()
        info["copy_plan"] = {k: v for k, v in plan.items() if k != "explain"}
    except (ImportError, AttributeError):
        pass
    return info


#: Distributions whose versions a run records (those not installed are left out).
PACKAGES = ("framebus", "numpy", "pyshmem", "pyzmq", "iceoryx2", "turbopipe", "imageio-ffmpeg", "memray", "rich", "matplotlib", "torch")


def versions() -> Dict[str, str]:
    """Installed versions of framebus, NumPy and every peer, plus libzmq and FFmpeg."""
    from importlib import metadata

    out: Dict[str, str] = {}
    for dist in PACKAGES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        import zmq

        out["libzmq"] = zmq.zmq_version()
    except ImportError:
        pass
    try:
        from .ffmpeg_tool import ffmpeg_version

        v = ffmpeg_version()
        if v:
            out["ffmpeg"] = v
    except Exception:  # noqa: BLE001 - FFmpeg is optional
        pass
    return out
