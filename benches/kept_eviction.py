"""What a kept loan frame costs the writer that needs its slot: a 2-slot ring, a loan whose
array stays bound (`with w.loan() as buf:`), one write into the free slot, then the timed write,
which must take the kept frame's slot (the frame is given a private copy first). Beside it, the
same write when the array was dropped (a free slot). Medians of --frames writes per round.

    python benches/kept_eviction.py [--rounds 3] [--frames 60] [--shape 1080x1920x3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import framebus


def timed_write(w: framebus.Stream, frame: np.ndarray, keep: bool, frames: int) -> float:
    times = []
    for i in range(frames):
        with w.loan() as buf:
            buf.flat[0] = i
        if not keep:
            del buf
        w.write(frame)
        t = time.perf_counter()
        w.write(frame)
        times.append(time.perf_counter() - t)
        if keep:
            del buf
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--shape", default="1080x1920x3")
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split("x"))
    frame = np.ones(shape, np.uint8)
    name = f"bench-kept-eviction-{os.getpid()}"
    with framebus.create(name, shape=shape, dtype=np.uint8, slots=2, auto_unlink=True) as w:
        for _ in range(10):
            w.write(frame)
        for r in range(args.rounds):
            free = timed_write(w, frame, False, args.frames)
            evict = timed_write(w, frame, True, args.frames)
            print(f"round {r + 1}: write into a free slot {free:.3f} ms, write that evicts a kept frame {evict:.3f} ms ({evict / free:.1f}x)")


if __name__ == "__main__":
    main()
