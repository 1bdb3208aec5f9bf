"""A 3-process pipeline with one slow lossless reader, to watch with `framebus top`:

    source --(stream "<prefix>.cam", 1080p RGB at --fps)--> filter --("<prefix>.boxes")--> slow sink

The filter reads the camera in lossless mode and republishes a small result stream; a second,
slow lossless reader of the camera (it sleeps --slow-ms per frame) holds the source back, so
`framebus top` shows the writer waits it causes, its lag and its pins. Runs --seconds (default
20), then ends the streams (readers see the end) and removes them.

    python examples/slow_pipeline.py --seconds 30 &   framebus top
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import numpy as np

import framebus


def source(prefix: str, fps: float, seconds: float, ready) -> None:
    with framebus.create(f"{prefix}.cam", shape=(1080, 1920, 3), dtype=np.uint8, slots=6, exist_ok=True, auto_unlink=True) as cam:
        ready.wait(30)
        frame = np.zeros((1080, 1920, 3), np.uint8)
        period, start = 1.0 / fps, time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            frame[0, 0, 0] = n % 256
            cam.write(frame, frame_id=n, timeout=5)
            n += 1
            time.sleep(max(0.0, start + n * period - time.perf_counter()))
        cam.end()
        time.sleep(1.0)


def filter_(prefix: str, ready) -> None:
    cam = _open(f"{prefix}.cam", "lossless")
    cam.set_role("handle", "filter")
    with framebus.create(f"{prefix}.boxes", shape=(16, 4), dtype=np.float32, exist_ok=True, auto_unlink=True) as out:
        ready.set()
        for f in cam.frames(timeout=10):
            out.write(np.full((16, 4), float(f.frame_id), np.float32))
        out.end()
    cam.close()


def slow_sink(prefix: str, slow_ms: float) -> None:
    cam = _open(f"{prefix}.cam", "lossless")
    cam.set_role("handle", f"slow sink ({slow_ms:g} ms a frame)")
    for f in cam.frames(timeout=10):
        time.sleep(slow_ms / 1e3)  # holds the view while "working": a pin top shows
    cam.close()


def _open(name: str, mode: str):
    while True:
        try:
            return framebus.open(name, mode=mode)
        except FileNotFoundError:
            time.sleep(0.01)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", default="demo", help="stream names start with this: PREFIX.cam and PREFIX.boxes (default demo)")
    p.add_argument("--fps", type=float, default=60.0, help="frames per second the source writes (default 60)")
    p.add_argument("--slow-ms", type=float, default=25.0, help="milliseconds the slow sink spends on each frame (default 25)")
    p.add_argument("--seconds", type=float, default=20.0, help="how long the source writes before it ends the streams (default 20)")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    procs = [
        ctx.Process(target=source, args=(a.prefix, a.fps, a.seconds, ready)),
        ctx.Process(target=filter_, args=(a.prefix, ready)),
        ctx.Process(target=slow_sink, args=(a.prefix, a.slow_ms)),
    ]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()


if __name__ == "__main__":
    main()
