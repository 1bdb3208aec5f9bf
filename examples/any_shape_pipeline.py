"""Frames of any shape through a three-process pipeline: source -> filter -> sink.

The source renders frames whose resolution changes every few frames, each with a variable
number of detection boxes, straight into shared memory through a loan of two named arrays. The
filter takes zero-copy read-only views of them, checks every array, and writes its result
(the inverted image, the boxes scaled to another resolution, and a score per box) through a loan
into a second stream. The sink views those and checks every array of every frame. Both streams
are variable-shape (created with a capacity instead of a shape) and lossless, so no frame is
skipped.

    python examples/any_shape_pipeline.py [--frames 120]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from typing import Any, Dict, Tuple

import numpy as np

import framebus

#: Resolutions the camera switches between (height, width).
RESOLUTIONS = [(240, 320), (480, 640), (720, 1280), (360, 480)]


def expected(i: int) -> Tuple[np.ndarray, np.ndarray]:
    """What the source sends as frame ``i``: an image and its boxes."""
    h, w = RESOLUTIONS[(i // 7) % len(RESOLUTIONS)]
    image = np.empty((h, w, 3), np.uint8)
    image[...] = (np.arange(w, dtype=np.uint32)[None, :, None] + i * 3 + np.arange(3)[None, None, :]) % 256
    n = (i * 5) % 9  # 0 to 8 boxes
    boxes = (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + i) % max(w, 1)
    return image, boxes


def source(name: str, frames: int) -> None:
    with framebus.open(name) as out:
        for i in range(frames):
            image, boxes = expected(i)
            with out.loan(arrays={"image": (image.shape, np.uint8), "boxes": (boxes.shape, np.float32)}, frame_id=i, timeout=30) as a:
                a["image"][...] = image  # rendered straight into the slot
                a["boxes"][...] = boxes
    print(f"source: {frames} frames written", flush=True)


def filter_(src_name: str, dst_name: str, frames: int, ready: Any) -> None:
    with framebus.open(src_name, mode="lossless") as src, framebus.open(dst_name) as dst:
        ready.set()
        for _ in range(frames):
            with src.wait_view(30) as f:
                image, boxes = f.arrays["image"], f.arrays["boxes"]  # zero-copy, read-only
                want_image, want_boxes = expected(f.frame_id)
                assert f.names == ("image", "boxes"), f.names
                assert np.array_equal(image, want_image) and np.array_equal(boxes, want_boxes), f"filter: frame {f.frame_id} differs"
                layout = {"image": (image.shape, np.uint8), "boxes": (boxes.shape, np.float32), "scores": ((len(boxes),), np.float16)}
                with dst.loan(arrays=layout, frame_id=f.frame_id, timeout=30) as o:
                    np.subtract(255, image, out=o["image"])
                    np.multiply(boxes, 2.0, out=o["boxes"])
                    o["scores"][...] = np.linspace(0, 1, len(boxes), dtype=np.float16)
    print(f"filter: {frames} frames checked and transformed", flush=True)


def sink(name: str, frames: int, ready: Any, results: Any) -> None:
    seen: Dict[Tuple[int, int], int] = {}
    box_counts = set()
    with framebus.open(name, mode="lossless") as src:
        ready.set()
        for n in range(frames):
            with src.wait_view(30) as f:
                a = f.arrays
                want_image, want_boxes = expected(f.frame_id)
                assert f.frame_id == n, f"sink: frame {f.frame_id} arrived as number {n}"
                assert a["image"].shape == want_image.shape and a["image"].dtype == np.uint8
                assert np.array_equal(a["image"], 255 - want_image), f"sink: image of frame {n} differs"
                assert np.array_equal(a["boxes"], want_boxes * 2), f"sink: boxes of frame {n} differ"
                assert np.array_equal(a["scores"], np.linspace(0, 1, len(want_boxes), dtype=np.float16))
                seen[want_image.shape[:2]] = seen.get(want_image.shape[:2], 0) + 1
                box_counts.add(len(want_boxes))
    results.put((seen, sorted(box_counts)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=120)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    tag = f"any-shape-demo-{os.getpid()}"
    raw, done = f"{tag}.camera", f"{tag}.detections"
    start = time.perf_counter()
    # Both streams hold frames of up to 4 MiB of arrays, whatever their shapes.
    with framebus.create(raw, capacity="4MiB", slots=4) as a, framebus.create(done, capacity="4MiB", slots=4) as b:
        try:
            ready_f, ready_s, results = ctx.Event(), ctx.Event(), ctx.Queue()
            procs = [
                ctx.Process(target=sink, args=(done, args.frames, ready_s, results)),
                ctx.Process(target=filter_, args=(raw, done, args.frames, ready_f)),
            ]
            for p in procs:
                p.start()
            if not (ready_f.wait(60) and ready_s.wait(60)):
                raise SystemExit("the filter or the sink did not start")
            procs.append(ctx.Process(target=source, args=(raw, args.frames)))
            procs[-1].start()
            seen, box_counts = results.get(timeout=120)
            for p in procs:
                p.join(60)
            if any(p.exitcode != 0 for p in procs):
                raise SystemExit(f"a stage failed: exit codes {[p.exitcode for p in procs]}")
        finally:
            a.unlink()
            b.unlink()
    resolutions = ", ".join(f"{w}x{h}: {n}" for (h, w), n in sorted(seen.items()))
    print(f"sink: {args.frames} frames, every array of every frame exact (frames per resolution {resolutions}; boxes per frame {box_counts[0]}..{box_counts[-1]})")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
