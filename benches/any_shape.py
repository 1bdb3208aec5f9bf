"""Variable-shape streams against fixed-shape streams (issue #15), in one run: the same workloads
on a stream created with ``shape=`` and on one created with ``capacity=`` (each frame carrying its
own table), reported as ratios variable / fixed.

- W1 (BENCHMARKS.md): write + read of a 128x128 float32 frame in one process, the reader on its
  own handle; rows: ``write`` + ``read(out=)``, ``write`` + ``view()`` (array touched), ``loan``
  + ``read(out=)``; the same at 1080p RGB uint8.
- W5: fan-out, one writer process at full speed, 1 and 2 reader processes, 1080p RGB uint8,
  lossless and latest, readers copying (``read_new(out=)``) or viewing (``wait_view``):
  frames/s per reader.

W1 variants are timed in rounds (one batch of each per round, fixed and variable alternating),
so drift on a shared machine hits both alike; medians of the rounds are reported. W5 runs each
configuration for ``--seconds`` per round, fixed and variable alternating.

    python benches/any_shape.py [--rounds 7] [--seconds 1.5] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

import framebus

W1_SHAPES = {"128x128 f32": ((128, 128), np.float32), "1080p u8": ((1080, 1920, 3), np.uint8)}


def _name(tag: str) -> str:
    return f"bench-anyshape-{os.getpid()}-{tag}"


def _create(name: str, variable: bool, shape: Tuple[int, ...], dtype: Any, slots: int = 4) -> Any:
    if variable:
        return framebus.create(name, capacity=int(np.prod(shape)) * np.dtype(dtype).itemsize, slots=slots)
    return framebus.create(name, shape=shape, dtype=dtype, slots=slots)


def _w1_op(kind: str, w: Any, r: Any, src: np.ndarray, out: np.ndarray, variable: bool) -> Callable[[], None]:
    write, read = w.write, r.read
    if kind == "write+read":
        def op() -> None:
            write(src)
            read(out=out)
    elif kind == "write+view":
        view = r.view

        def op() -> None:
            write(src)
            with view() as f:
                f.array[0, 0]
    else:  # loan+read
        loan = w.loan
        kwargs = {"shape": src.shape, "dtype": src.dtype} if variable else {}

        def op() -> None:
            with loan(**kwargs) as a:
                a[0] = 1
            read(out=out)
    return op


def w1(rounds: int, quick: bool) -> List[Dict[str, Any]]:
    rows = []
    for label, (shape, dtype) in W1_SHAPES.items():
        src = np.ones(shape, dtype)
        out = np.empty(shape, dtype)
        batch = 200 if src.nbytes > 1 << 20 else 5000
        if quick:
            batch //= 20
        for kind in ("write+read", "write+view", "loan+read"):
            handles, ops = [], {}
            for variable in (False, True):
                name = _name(f"w1-{int(variable)}")
                w = _create(name, variable, shape, dtype)
                r = framebus.open(name)
                handles.append((w, r))
                ops[variable] = _w1_op(kind, w, r, src, out, variable)
            times: Dict[bool, List[float]] = {False: [], True: []}
            try:
                for i in range(rounds + 1):
                    for variable in ((False, True) if i % 2 else (True, False)):
                        op = ops[variable]
                        t0 = time.perf_counter()
                        for _ in range(batch):
                            op()
                        dt = (time.perf_counter() - t0) / batch
                        if i:  # round 0 warms up
                            times[variable].append(dt)
            finally:
                for w, r in handles:
                    r.close()
                    w.unlink()
            fixed, var = statistics.median(times[False]), statistics.median(times[True])
            rows.append({"workload": "W1", "case": f"{label} {kind}", "fixed_us": fixed * 1e6, "variable_us": var * 1e6, "ratio": fixed / var})
    return rows


def _writer(name: str, stop: Any, ready: Any) -> None:
    w = framebus.open(name)
    frame = np.ones((1080, 1920, 3), np.uint8)
    ready.wait()
    while not stop.is_set():
        try:
            w.write(frame, timeout=0.2)
        except TimeoutError:
            pass
    w.close()


def _reader(name: str, mode: str, how: str, seconds: float, q: Any, ready: Any) -> None:
    r = framebus.open(name, mode=mode)
    out = np.empty((1080, 1920, 3), np.uint8)
    ready.wait()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            if how == "copy":
                r.read_new(timeout=0.2, out=out)
            else:
                with r.wait_view(0.2) as f:
                    f.array[0, 0, 0]
            n += 1
        except TimeoutError:
            pass
    q.put(n / (time.perf_counter() - t0))
    r.close()


def _fanout(variable: bool, mode: str, how: str, readers: int, seconds: float) -> float:
    ctx = mp.get_context("fork")
    name = _name(f"w5-{int(variable)}")
    w = _create(name, variable, (1080, 1920, 3), np.uint8, slots=4)
    stop, ready, q = ctx.Event(), ctx.Barrier(readers + 2), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(name, mode, how, seconds, q, ready)) for _ in range(readers)]
    for p in procs:
        p.start()
    writer = ctx.Process(target=_writer, args=(name, stop, ready))
    writer.start()
    ready.wait()
    rates = [q.get(timeout=seconds + 60) for _ in procs]
    stop.set()
    for p in (*procs, writer):
        p.join(30)
    w.unlink()
    return statistics.mean(rates)


def w5(rounds: int, seconds: float, quick: bool) -> List[Dict[str, Any]]:
    rows = []
    configs = [(m, h, n) for m in ("lossless", "latest") for h in ("copy", "view") for n in ((1,) if quick else (1, 2))]
    for mode, how, readers in configs:
        rates: Dict[bool, List[float]] = {False: [], True: []}
        for i in range(rounds):
            for variable in ((False, True) if i % 2 == 0 else (True, False)):
                rates[variable].append(_fanout(variable, mode, how, readers, seconds))
        fixed, var = statistics.median(rates[False]), statistics.median(rates[True])
        rows.append({"workload": "W5", "case": f"1080p {mode} {how} {readers} reader(s)", "fixed_hz": fixed, "variable_hz": var, "ratio": var / fixed})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--w5-rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--quick", action="store_true", help="tiny batches (checks that it runs)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rounds = 2 if args.quick else args.rounds
    rows = w1(rounds, args.quick) + w5(1 if args.quick else args.w5_rounds, 0.3 if args.quick else args.seconds, args.quick)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, python {platform.python_version()}, numpy {np.__version__}")
    print(f"{'workload':8} {'case':40} {'fixed':>14} {'variable':>14} {'variable/fixed speed':>22}")
    for row in rows:
        if row["workload"] == "W1":
            print(f"{row['workload']:8} {row['case']:40} {row['fixed_us']:11.2f} µs {row['variable_us']:11.2f} µs {row['ratio']:21.3f}x")
        else:
            print(f"{row['workload']:8} {row['case']:40} {row['fixed_hz']:10.0f} f/s {row['variable_hz']:10.0f} f/s {row['ratio']:21.3f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": platform.platform(), "cpus": os.cpu_count(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
