"""framebus bench: every speed claim measured side by side with the tools a user would pick
instead, in one run on one machine (see docs/benchmarks.md).

Suites are plain modules, one per workload family (W1..W11 of the project's benchmark plan),
sharing :mod:`framebus_bench.harness`. ``framebus-bench`` (:mod:`framebus_bench.cli`; also
``framebus bench`` once this package is installed) runs them with a progress display and writes
tables, JSON and plots; :func:`run` does the same from Python::

    from framebus_bench import run
    result = run(["W1", "W3"], quick=True)
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional, Sequence

from .harness import Config, Context, Reporter
from .load import Load
from .records import Run, SuiteResult, machine_info, versions


@dataclass(frozen=True)
class SuiteSpec:
    """A runnable suite: its id (W1..W11), the module and function that run it, what it shows."""

    id: str
    module: str
    function: str
    title: str

    def load(self) -> Callable[[Context], SuiteResult]:
        """The suite's run function."""
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), self.function)


SUITES: List[SuiteSpec] = [
    SuiteSpec("W1", "local", "run_w1", "write + read, same process, 128x128 float32"),
    SuiteSpec("W2", "local", "run_w2", "W1 by frame size"),
    SuiteSpec("W3", "pingpong", "run", "lock-step ping-pong between two processes"),
    SuiteSpec("W4", "latency", "run", "one-way latency to another process at 200 frames/s"),
    SuiteSpec("W5", "fanout", "run", "fan-out to 1, 2, 4 reader processes, lossless and latest"),
    SuiteSpec("W6", "pipes", "run", "feeding FFmpeg through a pipe"),
    SuiteSpec("W7", "pipeline", "run", "3-process pipeline: cost per hop"),
    SuiteSpec("W8", "allocs", "run", "allocator calls per frame"),
    SuiteSpec("W9", "idle", "run", "idle CPU of a blocked reader"),
    SuiteSpec("W10", "gpu", "run", "GPU frames (CUDA device memory) between two processes, 1080p and 2160p"),
    SuiteSpec("W11", "video", "run", "video over a bridge on loopback, 1080p30: H.264, raw, FFmpeg over UDP and SRT"),
    SuiteSpec("W12", "chain", "run", "camera -> inference -> H.264 over Zenoh across a network namespace -> ROS 2 node and recorder, 1080p30"),
    SuiteSpec("sweep", "sweep", "run", "one-way latency and throughput by payload size, 64 B to 32 MiB"),
]


def resolve(names: Sequence[str]) -> List[SuiteSpec]:
    """Suites named by id (``W3``, ``w3``) or module (``pingpong``), or ``all``; all of them for
    an empty list. ValueError naming the valid choices for anything else."""
    if not names:
        return list(SUITES)
    chosen: List[SuiteSpec] = []
    for raw in names:
        key = raw.strip().lower()
        if key == "all":
            matches = list(SUITES)
        else:
            matches = [s for s in SUITES if s.id.lower() == key or s.module == key]
        if not matches:
            valid = ", ".join(s.id for s in SUITES) + ", " + ", ".join(sorted({s.module for s in SUITES})) + ", all"
            raise ValueError(f"unknown suite {raw!r}; choose from {valid}")
        for s in matches:
            if s not in chosen:
                chosen.append(s)
    return sorted(chosen, key=SUITES.index)


def run(
    names: Sequence[str] = (),
    *,
    quick: bool = False,
    smoke: bool = False,
    large: bool = False,
    reporter: Optional[Reporter] = None,
    command: Optional[str] = None,
    on_error: Optional[Callable[[SuiteSpec, BaseException], None]] = None,
    load: int = 0,
    ros_node: str = "",
) -> Run:
    """Runs the named suites (all by default) and returns the :class:`Run`. Streams and files
    the run creates are removed when it ends, also on error or Ctrl-C. A suite that raises is
    reported to ``on_error`` (re-raised when there is none) and the others still run. With
    ``load``, that many busy processes (:class:`framebus_bench.load.Load`) spin beside every
    suite; they are stopped when the run ends, however it ends, and recorded in
    ``settings["load"]``. ``ros_node``: W12's ROS 2 node (see :class:`Config`). ValueError for an unknown suite or a load outside 0..64."""
    specs = resolve(names)
    busy = Load(load)
    config = Config(quick=quick, smoke=smoke, large=large, ros_node=ros_node)
    ctx = Context(config, reporter or Reporter())
    result = Run(
        command=command or " ".join(["framebus-bench", *names] + (["--quick"] if quick else []) + (["--smoke"] if smoke else []) + ([f"--load {load}"] if load else [])),
        machine=machine_info(),
        versions=versions(),
        settings={**asdict(config), "suites": [s.id for s in specs], "argv0": os.path.basename(sys.argv[0])},
    )
    t0 = time.perf_counter()
    try:
        busy.start()
        result.settings["load"] = busy.describe()
        if busy.n:
            ctx.reporter.note("load", f"{busy.n} busy process(es) beside the run: pids {', '.join(map(str, busy.pids))}")
        for spec in specs:
            try:
                suite = spec.load()(ctx)
            except Exception as exc:  # noqa: BLE001 - one broken suite must not lose the others
                if on_error is None:
                    raise
                on_error(spec, exc)
                continue
            result.suites.append(suite)
    finally:
        busy.stop()
        ctx.cleanup()
        result.seconds = time.perf_counter() - t0
    return result


__all__ = ["Load", "SUITES", "SuiteSpec", "resolve", "run", "Run", "SuiteResult", "Config", "Context", "Reporter"]
