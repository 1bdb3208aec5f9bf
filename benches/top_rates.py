"""How close `framebus top --json` rates are to the rates the writer and a reader measure
themselves, on a stream written at a fixed rate (issue #17's must-show).

    python benches/top_rates.py [--fps 100 120 240] [--seconds 6]

For each rate: a writer process paces 1080p frames at --fps, a lossless and a latest reader
process count what they read; midway `framebus top --once --json --interval 2` is taken; each
process reports its own rate over the same 2 s window (frames counted between two timestamps
it shares with the monitor). Prints top's figure, the self-measured one and their ratio."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import time
import uuid

import numpy as np

import framebus


def writer(name: str, fps: float, seconds: float, marks, out) -> None:
    w = framebus.create(name, shape=(1080, 1920, 3), dtype=np.uint8, slots=6)
    frame = np.zeros((1080, 1920, 3), np.uint8)
    t0 = time.perf_counter()
    n = 0
    stamps = []
    while time.perf_counter() - t0 < seconds:
        w.write(frame, timeout=5)
        n += 1
        stamps.append(time.time())
        time.sleep(max(0.0, t0 + n / fps - time.perf_counter()))
    a, b = marks.get(timeout=5)
    out.put(("writer", sum(1 for t in stamps if a <= t < b) / (b - a)))
    w.end()
    time.sleep(0.5)
    w.unlink()


def reader(name: str, mode: str, marks, out) -> None:
    while True:
        try:
            r = framebus.open(name, mode=mode)
            break
        except FileNotFoundError:
            time.sleep(0.01)
    stamps = []
    try:
        while True:
            r.read_new(timeout=10)
            stamps.append(time.time())
    except framebus.StreamEndedError:
        pass
    a, b = marks.get(timeout=5)
    out.put((mode, sum(1 for t in stamps if a <= t < b) / (b - a)))
    r.close()


def one(fps: float, seconds: float) -> None:
    name = f"top-rates-{uuid.uuid4().hex[:6]}"
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    marks = [ctx.Queue() for _ in range(3)]
    procs = [ctx.Process(target=writer, args=(name, fps, seconds, marks[0], out))]
    procs += [ctx.Process(target=reader, args=(name, m, marks[i + 1], out)) for i, m in enumerate(("lossless", "latest"))]
    for p in procs:
        p.start()
    time.sleep(seconds / 2 - 1)
    a = time.time()
    doc = json.loads(subprocess.run([sys.executable, "-m", "framebus", "top", "--json", "--interval", "2", name], capture_output=True, text=True).stdout)
    b = time.time()
    # The window the monitor measured: its two samples, about a and b (sampling itself takes ms).
    for q in marks:
        q.put((a, b))
    got = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(30)
    (s,) = doc["streams"]
    rows = [("writer", s["write_fps"], got["writer"])]
    for r in s["readers"]:
        if r["mode"] in got and r["role"] != "writer":
            rows.append((r["mode"] + " reader", r["read_fps"], got[r["mode"]]))
    for who, top, own in rows:
        print(f"{fps:6.0f} fps  {who:16s} top {top:8.2f}  self {own:8.2f}  top/self {top / own if own else float('nan'):.3f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fps", type=float, nargs="+", default=[100.0, 120.0, 240.0])
    p.add_argument("--seconds", type=float, default=6.0)
    a = p.parse_args()
    for fps in a.fps:
        one(fps, a.seconds)


if __name__ == "__main__":
    main()
