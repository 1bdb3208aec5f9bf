"""ROS 2 image messages, 1920x1080, per-message decode time, both ways measured in one run:

1. CompressedImage (JPEG and PNG of a 1080p picture): the earlier path (one FFmpeg subprocess per
   image writing PPM to a pipe, the pixels parsed from it; reproduced here as it was) against
   ``framebus.ros2.compressed.decode`` (PyAV in process).
2. Image rgb8: rosbags' ``deserialize_cdr`` against ``framebus.ros2.image.unpack_image`` (the
   hand-written reader in ros2/cdr.py, which gives the pixels as a view).

Run: ``python benches/ros2_decode.py [REPEATS]`` (needs PyAV, imageio-ffmpeg or ffmpeg, rosbags,
eclipse-zenoh). Prints the median time of each and the ratios.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from fractions import Fraction
from typing import Any, Callable

import av
import numpy as np
from rosbags.typesys import Stores, get_typestore

from framebus.ffmpeg import find_ffmpeg
from framebus.ros2 import compressed, image

TS = get_typestore(Stores.ROS2_JAZZY)


def picture(h: int = 1080, w: int = 1920) -> np.ndarray:
    """A camera-like picture: gradients plus a little noise (so PNG and JPEG sizes are typical)."""
    y, x = np.mgrid[0:h, 0:w]
    noise = np.random.default_rng(0).integers(0, 12, (h, w, 3))
    return (np.stack([x * 255 // w, y * 255 // h, (x + y) % 256], -1) + noise).clip(0, 255).astype(np.uint8)


def encode(arr: np.ndarray, codec: str) -> bytes:
    ctx = av.CodecContext.create(codec, "w")
    ctx.width, ctx.height = arr.shape[1], arr.shape[0]
    ctx.pix_fmt = "rgb24" if codec == "png" else "yuvj420p"
    ctx.time_base = Fraction(1, 1)
    return b"".join(bytes(p) for p in ctx.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")) + ctx.encode(None))


def message(payload: bytes, fmt: str) -> bytes:
    C, Hdr, T = TS.types["sensor_msgs/msg/CompressedImage"], TS.types["std_msgs/msg/Header"], TS.types["builtin_interfaces/msg/Time"]
    msg = C(header=Hdr(stamp=T(sec=1, nanosec=2), frame_id="cam"), format=fmt, data=np.frombuffer(payload, np.uint8))
    return bytes(TS.serialize_cdr(msg, "sensor_msgs/msg/CompressedImage"))


def subprocess_decode(data: bytes, exe: str) -> np.ndarray:
    """The earlier path: rosbags reads the message, one FFmpeg run decodes it into PPM."""
    msg = TS.deserialize_cdr(data, "sensor_msgs/msg/CompressedImage")
    cmd = [exe, "-v", "error", "-i", "pipe:0", "-frames:v", "1", "-f", "image2pipe", "-vcodec", "ppm", "-pix_fmt", "rgb24", "pipe:1"]
    out = subprocess.run(cmd, input=memoryview(np.ascontiguousarray(msg.data)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True).stdout
    w, h = (int(v) for v in out.split(maxsplit=3)[1:3])  # "P6 W H 255", one whitespace, the pixels
    return np.frombuffer(out[len(out) - w * h * 3:], np.uint8).reshape(h, w, 3)


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    exe = find_ffmpeg()
    arr = picture()
    print(f"1920x1080, median of {repeats}; FFmpeg {exe}, PyAV {av.__version__}")
    for kind, codec, fmt in (("JPEG", "mjpeg", "rgb8; jpeg compressed rgb8"), ("PNG", "png", "rgb8; png compressed rgb8")):
        data = message(encode(arr, codec), fmt)
        old_out, new_out = subprocess_decode(data, exe), compressed.decode(data).data
        assert old_out.shape == new_out.shape == arr.shape
        if kind == "PNG":
            assert np.array_equal(old_out, arr) and np.array_equal(new_out, arr)
        old = median_s(lambda: subprocess_decode(data, exe), repeats)
        new = median_s(lambda: compressed.decode(data), repeats)
        print(f"CompressedImage {kind} ({len(data) / 1e6:.2f} MB): subprocess {old * 1e3:.2f} ms, PyAV {new * 1e3:.2f} ms, ratio {old / new:.2f}x")
    raw = image.pack_image(arr, 1, "cam", "rgb8")
    theirs = median_s(lambda: TS.deserialize_cdr(raw, "sensor_msgs/msg/Image"), repeats * 10)
    ours = median_s(lambda: image.unpack_image(raw), repeats * 10)
    print(f"Image rgb8 ({len(raw) / 1e6:.2f} MB): rosbags deserialize_cdr {theirs * 1e6:.1f} us, ros2/cdr.py reader {ours * 1e6:.1f} us, ratio {theirs / ours:.1f}x")


if __name__ == "__main__":
    main()
