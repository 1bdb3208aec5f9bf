"""The shared harness of the benchmark suites: run settings, timing loops, statistics, unique
names and cleanup, helper processes, and the progress/notes channel back to the CLI.

Every suite gets one :class:`Context`. Timings use ``time.perf_counter_ns`` (CLOCK_MONOTONIC on
Linux, so stamps taken in different processes compare directly)."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Sequence

import numpy as np

#: Prefix of every stream, segment and socket a benchmark run creates (``<prefix><pid>-<n>``).
NAME_PREFIX = "bench-"


@dataclass
class Config:
    """How long and how big a run is. ``quick`` shortens every measurement; ``smoke`` shrinks
    frames to tiny sizes and runs each measurement a handful of times (for the test suite);
    ``large`` adds the 10000x10000 case to W2; ``ros_node`` picks W12's ROS 2 node."""

    quick: bool = False
    smoke: bool = False
    large: bool = False
    #: W12's ROS 2 node: "" (the hiroz peer when scripts/build-ros2-peer.sh has built it, else framebus's
    #: own subscriber), "framebus", or "hiroz:PATH".
    ros_node: str = ""

    def pick(self, full: Any, quick: Any, smoke: Any) -> Any:
        """The value for this run's size class."""
        if self.smoke:
            return smoke
        return quick if self.quick else full

    @property
    def reps(self) -> int:
        """Repetitions of each interleaved round (the spread is taken over these)."""
        return self.pick(5, 3, 1)

    @property
    def cross_reps(self) -> int:
        """Repetitions of measurements that start helper processes (costlier to repeat)."""
        return self.pick(2, 1, 1)

    def shape(self, shape: Sequence[int]) -> tuple:
        """``shape`` as used in this run: smoke runs divide height and width by 16 (at least 8)."""
        if not self.smoke or len(shape) < 2:
            return tuple(shape)
        return tuple(max(8, d // 16) if i < 2 else d for i, d in enumerate(shape))

    def cases(self, cases: Sequence[Any]) -> list:
        """The cases (frame sizes, reader counts) this run measures: all of them, except a
        smoke run, which proves each suite works on the first case only."""
        return list(cases[:1]) if self.smoke else list(cases)


# -- statistics --------------------------------------------------------------------------------


def summarize(samples: Iterable[float]) -> Dict[str, float]:
    """median, p50, p99, min, max, mean and count of ``samples`` (NaN when there are none)."""
    a = np.asarray(list(samples), dtype=np.float64)
    if a.size == 0:
        nan = float("nan")
        return {"median": nan, "p50": nan, "p99": nan, "min": nan, "max": nan, "mean": nan, "n": 0}
    return {
        "median": float(np.median(a)),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "min": float(a.min()),
        "max": float(a.max()),
        "mean": float(a.mean()),
        "n": int(a.size),
    }


def thin(samples: Sequence[float], keep: int = 1000) -> List[float]:
    """At most ``keep`` samples, evenly strided, for the JSON file (statistics use them all)."""
    if len(samples) <= keep:
        return [float(x) for x in samples]
    idx = np.linspace(0, len(samples) - 1, keep).astype(int)
    return [float(samples[i]) for i in idx]


# -- timing loops -------------------------------------------------------------------------------


def calibrate(op: Callable[[], Any], target_s: float, *, warmup_s: float = 0.05, min_n: int = 3, max_n: int = 1_000_000) -> int:
    """Warms ``op`` up for about ``warmup_s`` and returns how many calls fill ``target_s``."""
    t_end = time.perf_counter_ns() + int(warmup_s * 1e9)
    n = 0
    t0 = time.perf_counter_ns()
    while True:
        op()
        n += 1
        now = time.perf_counter_ns()
        if now >= t_end and n >= 2:
            break
    per = max((now - t0) / n, 1.0)
    return int(min(max(target_s * 1e9 / per, min_n), max_n))


def time_batch(op: Callable[[], Any], n: int) -> float:
    """Seconds per call of ``op`` over one batch of ``n`` back-to-back calls."""
    rng = itertools.repeat(None, n)
    t0 = time.perf_counter_ns()
    for _ in rng:
        op()
    return (time.perf_counter_ns() - t0) / 1e9 / n


def time_calls(op: Callable[[], Any], n: int) -> List[float]:
    """Seconds taken by each of ``n`` calls of ``op`` (for percentiles)."""
    out = [0.0] * n
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        op()
        out[i] = (clock() - t0) / 1e9
    return out


def pace(t0_ns: int, index: int, period_ns: int) -> None:
    """Sleeps until ``t0_ns + index * period_ns`` (a paced writer's schedule)."""
    delay = (t0_ns + index * period_ns - time.perf_counter_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def case_label(shape: Sequence[int], dtype: Any) -> str:
    """A short name of a frame size: ``64 B``, ``128x128 f32``, ``1920x1080x3 u8`` (width first
    for images)."""
    dt = np.dtype(dtype)
    short = {"float32": "f32", "float64": "f64", "uint8": "u8", "uint16": "u16"}.get(dt.name, dt.name)
    if len(shape) == 1:
        return f"{shape[0] * dt.itemsize} B"
    if len(shape) == 3:
        return f"{shape[1]}x{shape[0]}x{shape[2]} {short}"
    return "x".join(str(d) for d in shape) + f" {short}"


# -- frames --------------------------------------------------------------------------------------

#: Bytes at the start of every benchmark frame that carry a counter and timestamps (u64 words).
HEADER_WORDS = 8


def make_frame(shape: Sequence[int], dtype: Any, seed: int = 1) -> np.ndarray:
    """A C-contiguous frame of random content (so nothing compresses or short-circuits)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    raw = rng.integers(0, 255, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape).copy()


def header(arr: np.ndarray) -> np.ndarray:
    """The first ``HEADER_WORDS`` u64 words of ``arr``'s bytes, as a writable-if-possible view
    (frames must be at least 64 bytes)."""
    flat = arr.reshape(-1).view(np.uint8)
    return flat[: HEADER_WORDS * 8].view(np.uint64)


# -- context --------------------------------------------------------------------------------------


class Reporter:
    """Where suites send progress and notes; the CLI replaces it with a rich display."""

    def start(self, suite: str, total: int) -> None:
        """A suite begins; it will call :meth:`step` about ``total`` times."""

    def step(self, description: str) -> None:
        """One measurement done (``description`` says which)."""

    def note(self, suite: str, text: str) -> None:
        """A one-line note (a peer that is skipped, an unusual condition)."""


@dataclass
class Context:
    """What a suite needs: the run's settings, progress/notes, names and cleanup."""

    config: Config = field(default_factory=Config)
    reporter: Reporter = field(default_factory=Reporter)
    notes: Dict[str, List[str]] = field(default_factory=dict)
    _counter: Any = field(default_factory=itertools.count)
    _cleanups: List[Callable[[], None]] = field(default_factory=list)

    def name(self, tag: str = "") -> str:
        """A stream/segment name unique to this run: ``bench-<pid>-<n>[-tag]``."""
        base = f"{NAME_PREFIX}{os.getpid()}-{next(self._counter)}"
        return f"{base}-{tag}" if tag else base

    def note(self, suite: str, text: str) -> None:
        """Records a note for ``suite`` (shown under its table) and forwards it."""
        lst = self.notes.setdefault(suite, [])
        if text not in lst:
            lst.append(text)
            self.reporter.note(suite, text)

    def attempt(self, suite: str, case: str, variant: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or None after noting its failure and stepping the progress bar: one failing
        peer never stops a run."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            self.note(suite, f"{variant}: failed at {case} ({exc})")
            self.reporter.step(f"{suite} {case} {variant}")
            return None

    def on_cleanup(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` when the run ends (even on error)."""
        self._cleanups.append(fn)

    def cleanup(self) -> None:
        """Runs the registered cleanups (newest first) and removes anything this process's runs
        left under /dev/shm or /tmp."""
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception:  # noqa: BLE001 - cleanup is best effort
                pass
        sweep(os.getpid())


def sweep(pid: int) -> List[str]:
    """Removes /dev/shm and /tmp entries named by a run of process ``pid`` (streams
    ``framebus.bench-<pid>-*``, naive segments, pipes' raw files, ZeroMQ sockets)."""
    removed = []
    marker = f"{NAME_PREFIX}{pid}-"
    for d in ("/dev/shm", "/tmp"):
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            if e.startswith(marker) or e.startswith("framebus." + marker):
                try:
                    os.unlink(os.path.join(d, e))
                    removed.append(e)
                except OSError:
                    pass
    return removed


# -- helper processes ----------------------------------------------------------------------------


def mp_context() -> Any:
    """The multiprocessing context of every helper process: spawn (fresh interpreters)."""
    return mp.get_context("spawn")


def start(target: Callable[..., Any], *args: Any) -> Any:
    """Starts ``target(*args)`` in a spawned daemon process and returns the Process."""
    p = mp_context().Process(target=target, args=args, daemon=True)
    p.start()
    return p


def stop(procs: Iterable[Any], timeout: float = 5.0) -> None:
    """Joins ``procs``; any still alive after ``timeout`` seconds (shared) is killed."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(2)


def get(queue: Any, timeout: float, what: str) -> Any:
    """The next message on ``queue``, or RuntimeError naming ``what`` after ``timeout``."""
    import queue as _q

    try:
        msg = queue.get(timeout=timeout)
    except _q.Empty:
        raise RuntimeError(f"no answer from {what} within {timeout:.0f} s") from None
    if isinstance(msg, dict) and msg.get("error"):
        raise RuntimeError(f"{what} failed: {msg['error']}")
    return msg


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a helper-process body so an exception is sent to its result queue (first argument
    named ``results``) as ``{"error": ...}`` instead of leaving the parent waiting."""
    import functools

    @functools.wraps(fn)
    def run(results: Any, *args: Any) -> None:
        try:
            fn(results, *args)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            results.put({"error": f"{type(exc).__name__}: {exc}"})

    return run
