"""What a loan costs when its array outlives the commit (issue #21), in one process, one run.

Rows, each a loan of one frame followed by a pinned view of it on a reader handle (the W7 hop):

- ``dropped``: the loan's array is gone when the loan commits: no pin, no detach;
- ``bound``: a name still refers to the array at the commit (the ``with w.loan() as buf:``
  target): the array turns read-only and the slot stays pinned until the name goes; no detach;
- ``exported``: a memoryview of the array is kept past the commit (what a ``pipe()`` hand-off
  does): the slot stays pinned and is detached in the writer's mapping, then mapped back when the
  memoryview goes.

Rounds alternate the rows so drift on a shared machine hits both alike; medians are reported in
microseconds per frame, with kept/dropped. Run it with two builds (for example the commit before
the change in another virtualenv) to compare them.

    python benches/loan_kept.py [--rounds 9] [--frames 200] [--sizes 128x128 1080p 2160p] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Dict, List

import numpy as np

import framebus

SIZES = {"128x128": (128, 128, 4), "1080p": (1080, 1920, 3), "2160p": (2160, 3840, 3)}


ROWS = ("dropped", "bound", "exported")


def _batch(w: "framebus.Stream", r: "framebus.Stream", frames: int, row: str) -> float:
    """Seconds per frame for ``frames`` loans (each published) and a view of each."""
    t0 = time.perf_counter()
    for i in range(frames):
        loan = w.loan(timeout=5)
        buf = loan.array
        buf[0, 0, 0] = i & 0xFF
        _kept = memoryview(buf) if row == "exported" else None
        if row != "bound":
            del buf
        loan.commit()
        with r.wait_view(timeout=5) as f:
            f.array[0, 0, 0]
        buf = _kept = None
    return (time.perf_counter() - t0) / frames


def run(sizes: List[str], rounds: int, frames: int) -> Dict[str, Dict[str, float]]:
    out: Dict[str, Dict[str, float]] = {}
    for size in sizes:
        name = f"bench-loankept-{os.getpid()}-{size}"
        w = framebus.create(name, shape=SIZES[size], dtype=np.uint8, slots=4)
        r = framebus.open(name)
        try:
            for row in ROWS:
                _batch(w, r, 8, row)
            samples: Dict[str, List[float]] = {row: [] for row in ROWS}
            for _ in range(rounds):
                for row in ROWS:
                    samples[row].append(_batch(w, r, frames, row))
            out[size] = {row: statistics.median(v) * 1e6 for row, v in samples.items()}
        finally:
            r.close()
            w.close()
            framebus.unlink(name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--sizes", nargs="+", default=["128x128", "1080p", "2160p"], choices=sorted(SIZES))
    ap.add_argument("--json", help="write the medians here")
    args = ap.parse_args()
    result = run(args.sizes, args.rounds, args.frames)
    print(f"framebus {framebus.__version__} from {os.path.dirname(framebus.__file__)}, {platform.machine()}, {os.cpu_count()} cores")
    print(f"{'size':8} " + " ".join(f"{row + ' us':>12}" for row in ROWS))
    for size, med in result.items():
        print(f"{size:8} " + " ".join(f"{med[row]:12.1f}" for row in ROWS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
