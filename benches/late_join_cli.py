"""A late joiner launched from the command line: the time from starting
``framebus bridge subscribe ENDPOINT NAME`` to the first picture in NAME, for a raw bridge and an
H.264 one (libx264, the defaults), while a writer sends 1080p RGB at 30 frames/s. Each run starts
a new subscriber process; runs of the two kinds interleave; the report is the median (and the
range) per kind.

    python benches/late_join_cli.py [--runs 7] [--width 1920 --height 1080] [--baseline DIR]

The publishers run in this process; the time is from Popen() of the subscriber to the moment
this process sees a frame in NAME (polled every 2 ms). ``--baseline DIR`` also runs subscribers
from another framebus (DIR is put first on their PYTHONPATH: a checkout's ``python``
directory with its native module), interleaved with this one's, to compare two versions in
the same run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Optional

import numpy as np

import framebus
import framebus.net as net


def first_picture_s(endpoint: str, local: str, pythonpath: Optional[str] = None, bound: float = 30.0) -> float:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "framebus", "bridge", "subscribe", endpoint, local, "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        path = f"/dev/shm/framebus.{local}"
        s = None
        while time.perf_counter() - t0 < bound:
            if s is None and os.path.exists(path):
                try:
                    s = framebus.open(local)
                except (FileNotFoundError, ValueError, TimeoutError):
                    s = None
            if s is not None and s.write_sequence > 0:
                took = time.perf_counter() - t0
                s.close()
                return took
            time.sleep(0.002)
        raise TimeoutError(f"no picture in {local} within {bound} s")
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--baseline", metavar="DIR", help="also run subscribers of the framebus in DIR (interleaved)")
    args = ap.parse_args()
    tag = f"ljc-{os.getpid()}"
    src = framebus.create(f"{tag}-src", shape=(args.height, args.width, 3), dtype=np.uint8, slots=4)
    stop = threading.Event()
    yy, xx = np.mgrid[0 : args.height, 0 : args.width]

    def write() -> None:
        i = 0
        frame = np.empty((args.height, args.width, 3), np.uint8)
        while not stop.is_set():
            i += 1
            frame[..., 0] = (xx + 5 * i) & 255
            frame[..., 1] = (yy + 3 * i) & 255
            frame[..., 2] = 64
            src.write(frame, frame_id=i)
            stop.wait(1 / 30)

    threading.Thread(target=write, daemon=True).start()
    pubs = {"raw": net.publish(src.name, "tcp://127.0.0.1:*"), "h264": net.publish(src.name, "tcp://127.0.0.1:*", encode="h264")}
    versions = {"this": None, **({"baseline": args.baseline} if args.baseline else {})}
    times: dict = {(v, k): [] for v in versions for k in pubs}
    try:
        time.sleep(2)  # warm-up
        for run in range(args.runs):
            for v, path in versions.items():
                for kind, pub in pubs.items():
                    times[(v, kind)].append(first_picture_s(pub.endpoint, f"{tag}-{v}-{kind}-{run}", path))
                    time.sleep(0.5)
    finally:
        for pub in pubs.values():
            pub.stop()
        stop.set()
        time.sleep(0.1)
        src.unlink()
    load = os.getloadavg()[0]
    print(f"{args.width}x{args.height} RGB at 30 frames/s, {args.runs} runs each, {os.cpu_count()} CPUs, load average {load:.2f} at the end")
    for (v, kind), t in times.items():
        print(f"{v:8s} {kind:5s} launch -> first picture: median {statistics.median(t) * 1000:.0f} ms (min {min(t) * 1000:.0f}, max {max(t) * 1000:.0f})")


if __name__ == "__main__":
    main()
