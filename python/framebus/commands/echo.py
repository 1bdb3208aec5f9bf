"""``framebus echo NAME``: one frame of a stream, like ``ros2 topic echo``: its header
(sequence, frame id, time and age, shape, dtype, metadata) and a short summary of the array.
It views the newest frame (zero-copy, pinned only while it prints) as a latest-mode handle
tagged "monitor"; ``--new`` waits for the next frame instead; ``--count`` prints several."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict

HELP = "print a frame's header (seq, id, time, age, shape, dtype, meta) and an array summary"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ._args import stream_name

    p.add_argument("name", type=stream_name, help="stream to look at")
    p.add_argument("--new", action="store_true", help="wait for the next frame instead of showing the newest")
    p.add_argument("--count", type=int, default=1, metavar="K", help="frames to print (default 1; more implies --new after the first)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="how long to wait for a frame (default 10 s)")
    p.add_argument("--json", action="store_true", help="one JSON object per frame")


def describe(frame: Any) -> Dict[str, Any]:
    import numpy as np

    arr = np.asarray(frame.array)
    meta = frame.meta
    out: Dict[str, Any] = {
        "seq": frame.seq,
        "frame_id": frame.frame_id,
        "timestamp": frame.timestamp,
        "age_ms": (time.time() - frame.timestamp) * 1e3,
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "meta": meta.decode("utf-8", "replace") if meta else "",
    }
    if arr.size and arr.dtype.kind in "biuf":
        out.update(min=float(arr.min()), max=float(arr.max()), mean=float(arr.mean(dtype=np.float64)))
    out["first"] = [v.item() for v in arr.reshape(-1)[:8]]
    return out


def run(args: argparse.Namespace) -> int:
    """Prints the frames; an ended stream (its writer called end() or closed) is a normal end:
    "stream NAME ended" and exit status 0, as ``framebus hz`` does."""
    import framebus

    s = framebus.open(args.name)
    s.set_role("monitor", "echo")
    try:
        for i in range(args.count):
            try:
                frame = s.wait_view(args.timeout) if (args.new or i > 0) else s.view(args.timeout)
            except framebus.StreamEndedError:
                print(f"stream {args.name!r} ended")
                return 0
            with frame:
                d = describe(frame)
            if args.json:
                print(json.dumps(d))
                continue
            print(f"seq: {d['seq']}\nframe_id: {d['frame_id']}\ntimestamp: {d['timestamp']:.6f} (age {d['age_ms']:.1f} ms)")
            print(f"shape: {tuple(d['shape'])}\ndtype: {d['dtype']}\nmeta: {d['meta']!r}")
            if "mean" in d:
                print(f"min: {d['min']:g}  max: {d['max']:g}  mean: {d['mean']:g}")
            print(f"first values: {d['first']}\n---")
    finally:
        s.close()
    return 0
