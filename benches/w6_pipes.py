"""W6 (BENCHMARKS.md): feeding FFmpeg raw RGB24 frames, in one run.

Workloads: 720p, 1080p and 2160p into ``ffmpeg -f rawvideo ... -i - -f null -`` and 1080p into
libx264 ultrafast (``-c:v libx264 -preset ultrafast -f null -``). Methods, each timed from
starting FFmpeg to FFmpeg's exit, for the same frames (4 rotating buffers):

- framebus      ``framebus.pipe(frame, fd)`` (vmsplice on), then ``framebus.pipes.close(fd)``
- framebus-copy the same with vmsplice off (write(2) into the enlarged pipe)
- stdin.write   ``proc.stdin.write(frame)`` in the loop
- py-thread     a Python thread doing ``proc.stdin.write`` from a queue of 16 frames
- turbopipe     ``turbopipe.pipe(frame, fd)``, then ``turbopipe.sync(buf)`` (when installed)
- file          FFmpeg reading the same bytes from a /dev/shm file: the ceiling

Rounds run every method once in a rotated order, so drift on a shared machine hits all alike;
the median of the rounds is reported, with ratios to turbopipe and to the ceiling.

    python benches/w6_pipes.py [--rounds 5] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List

import numpy as np

import framebus
from framebus.ffmpeg import find_ffmpeg
from framebus.pipes import configure

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080), "2160p": (3840, 2160)}
#: Bytes pushed per run (frames = BYTES // frame size), and frames for the x264 workload.
BYTES = 1_600_000_000
X264_FRAMES = 120


def ffmpeg_cmd(ff: str, w: int, h: int, source: str, x264: bool) -> List[str]:
    cmd = [ff, "-hide_banner", "-nostdin", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", "30", "-i", source]
    if x264:
        cmd += ["-c:v", "libx264", "-preset", "ultrafast"]
    return cmd + ["-f", "null", "-"]


def run_framebus(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    fd = p.stdin.fileno()
    for i in range(n):
        framebus.pipe(frames[i & 3], fd)
    framebus.pipes.close(fd)
    p.stdin.close()
    p.wait()


def run_framebus_copy(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    configure(vmsplice=False)
    try:
        run_framebus(cmd, frames, n)
    finally:
        configure(vmsplice=True)


def run_stdin(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    for i in range(n):
        p.stdin.write(frames[i & 3])
    p.stdin.close()
    p.wait()


def run_thread(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    q: "queue.Queue" = queue.Queue(maxsize=16)

    def writer() -> None:
        while True:
            item = q.get()
            if item is None:
                return
            p.stdin.write(item)

    t = threading.Thread(target=writer)
    t.start()
    for i in range(n):
        q.put(frames[i & 3])
    q.put(None)
    t.join()
    p.stdin.close()
    p.wait()


def run_turbopipe(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    import turbopipe

    p = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    fd = p.stdin.fileno()
    for i in range(n):
        turbopipe.pipe(frames[i & 3], fd)
    for f in frames:
        turbopipe.sync(f)
    p.stdin.close()
    p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a tenth of the bytes, 2 rounds (a smoke run)")
    ap.add_argument("--json", default=None, help="write every sample here")
    ap.add_argument("--only", default=None, help="comma-separated workloads (720p,1080p,2160p,1080p-x264)")
    args = ap.parse_args()
    ff = find_ffmpeg()
    budget = BYTES // 10 if args.quick else BYTES
    rounds = 2 if args.quick else args.rounds
    methods: Dict[str, Callable] = {"framebus": run_framebus, "framebus-copy": run_framebus_copy, "stdin.write": run_stdin, "py-thread": run_thread}
    try:
        import turbopipe  # noqa: F401

        methods["turbopipe"] = run_turbopipe
        tp_version = getattr(turbopipe, "__version__", "?")
    except ImportError:
        tp_version = None
    workloads = [(f"{k} null", w, h, False) for k, (w, h) in SIZES.items()] + [("1080p x264 ultrafast", 1920, 1080, True)]
    if args.only:
        keep = {s.strip() for s in args.only.split(",")}
        workloads = [wl for wl in workloads if wl[0].split()[0] + ("-x264" if wl[3] else "") in keep]
    out: Dict[str, Dict[str, List[float]]] = {}
    meta = {"machine": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0], "framebus": framebus.__version__, "turbopipe": tp_version, "ffmpeg": ff}
    for label, w, h, x264 in workloads:
        size = w * h * 3
        n = max(8, (X264_FRAMES // (10 if args.quick else 1)) if x264 else budget // size)
        rng = np.random.default_rng(0)
        frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(4)]
        path = f"/dev/shm/framebus-w6-{os.getpid()}.raw"
        with open(path, "wb") as f:
            for i in range(n):
                f.write(frames[i & 3])
        runs: Dict[str, List[float]] = {m: [] for m in [*methods, "file"]}
        order = list(runs)
        try:
            for r in range(rounds):
                rot = order[r % len(order):] + order[: r % len(order)]
                for m in rot:
                    t0 = time.perf_counter()
                    if m == "file":
                        subprocess.run(ffmpeg_cmd(ff, w, h, path, x264), check=True)
                    else:
                        methods[m](ffmpeg_cmd(ff, w, h, "-", x264), frames, n)
                    runs[m].append(n / (time.perf_counter() - t0))
                print(f"  {label}: round {r + 1}/{rounds} done", file=sys.stderr)
        finally:
            os.unlink(path)
        out[label] = runs
        ceiling = statistics.median(runs["file"])
        tp = statistics.median(runs["turbopipe"]) if "turbopipe" in runs else None
        print(f"\n{label}: {n} frames of {w}x{h} RGB24 ({size / 1e6:.1f} MB), {rounds} rounds, median")
        print(f"  {'method':<14}{'fps':>9}{'GB/s':>8}{'vs turbopipe':>14}{'vs file':>9}")
        for m, samples in runs.items():
            fps = statistics.median(samples)
            vs_tp = f"{fps / tp:.2f}x" if tp else "-"
            print(f"  {m:<14}{fps:>9.1f}{fps * size / 1e9:>8.2f}{vs_tp:>14}{fps / ceiling:>8.0%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "fps": out}, f, indent=1)
    print(f"\n{meta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
