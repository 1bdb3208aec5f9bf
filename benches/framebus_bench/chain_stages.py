"""W12's own processes: the camera stand-in (source) and the inference stand-in, each run in a
spawned process by :mod:`framebus_bench.chain`; the other stages are framebus's own CLI commands.

Every frame carries its source stamp from the first hop to the last: the source writes it as
the frame's ``timestamp_ns`` (ns since the Unix epoch, the clock ``time.time_ns()`` reads in
every process on this host) with ``frame_id`` = its number; the inference stage keeps both and
adds ``{"n", "src_ns", "inf_ns"}`` as the frame's metadata (JSON); the H.264 bridge carries
timestamp, frame_id and metadata; the ROS 2 topic carries the stamp as ``header.stamp``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional, Tuple

import numpy as np

from .harness import guarded
from .video import _bases, _stamp


def gpu_available() -> bool:
    """True when torch is installed and sees a CUDA device (the inference stage then runs on
    a device stream)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@guarded
def source(results: Any, name: str, shape: Tuple[int, int], fps: float, go: Any, stop: Any, release: Any, device: Optional[str]) -> None:
    """Writes numbered pictures of a moving pattern at ``fps`` into the new stream ``name``
    (on ``device``, e.g. ``"cuda:0"``, when given) until ``stop`` is set; each frame's
    timestamp_ns is the moment it is handed over. Reports how many it wrote, ends the stream
    and removes it once ``release`` is set (so that ``framebus top`` still shows it)."""
    import framebus

    height, width = shape
    bases = _bases(height, width)
    stream = framebus.create(name, shape=(height, width, 3), dtype=np.uint8, slots=4, device=device)
    results.put({"ready": True})
    written = 0
    try:
        go.wait(120)
        period_ns = int(1e9 / fps)
        t0 = time.monotonic_ns()
        while not stop.is_set():
            delay = (t0 + written * period_ns - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            frame = bases[written % len(bases)].copy()
            _stamp(frame, written)
            stream.write(frame, frame_id=written, timestamp_ns=time.time_ns())
            written += 1
    finally:
        results.put({"written": written})
        stream.end()
        release.wait(60)
        stream.unlink()


def _infer_host(arr: np.ndarray) -> float:
    """The stand-in for a model on the CPU: a brightness score from a 1/8 subsample."""
    return float(arr[::8, ::8, 1].mean())


@guarded
def inference(results: Any, src: str, out: str, stop: Any, device: Optional[str]) -> None:
    """Reads every new frame of ``src`` (newest first: a frame it had no time for is counted
    as missed by the stream), runs the stand-in model (torch on ``device`` for a device stream,
    NumPy otherwise) and writes the picture into the host stream ``out`` with the frame's
    timestamp_ns and frame_id and ``{"n", "src_ns", "inf_ns", "score"}`` as metadata. Reports
    frames done, their numbers and the reader's missed count."""
    import framebus

    reader = framebus.open(src, timeout=60)
    writer = None
    torch: Any = None
    if device is not None:
        import torch
    done = 0
    ids = []
    try:
        while not stop.is_set():
            try:
                frame = reader.wait_view(0.25)
            except TimeoutError:
                continue
            except framebus.StreamEndedError:
                time.sleep(0.05)  # the source ended: stay (and keep INF) until told to stop
                continue
            with frame:
                fid, stamp = frame.frame_id, frame.timestamp_ns
                if torch is not None:
                    t = torch.from_dlpack(frame)  # zero-copy, on the GPU
                    score = float(t[::8, ::8, 1].float().mean())
                    picture = t.cpu().numpy()  # the encoder takes host pictures
                else:
                    picture = np.asarray(frame)
                    score = _infer_host(picture)
                if writer is None:
                    writer = framebus.create(out, shape=picture.shape, dtype=np.uint8, slots=4)
                    results.put({"ready": True})
                meta = json.dumps({"n": fid, "src_ns": stamp, "inf_ns": time.time_ns(), "score": round(score, 2)})
                writer.write(picture, frame_id=fid, timestamp_ns=stamp, meta=meta.encode())
            done += 1
            ids.append(fid)
    finally:
        results.put({"frames": done, "missed": int(reader.total_missed), "ids": ids})
        reader.close()
        if writer is not None:
            writer.end()
            time.sleep(0.5)
            writer.unlink()
