"""``sensor_msgs/msg/CompressedImage`` (JPEG, PNG: what image_transport's compressed plugin
sends) decoded into a frame by FFmpeg (``framebus.ffmpeg.find_ffmpeg``: imageio-ffmpeg's
binary, or one on PATH). One FFmpeg run per image, which costs milliseconds: fine at camera
rates, not for hundreds of images per second.
"""

from __future__ import annotations

import subprocess
from typing import Any, List, NamedTuple, Optional

import numpy as np

from ..errors import InvalidArgumentError


class Decoded(NamedTuple):
    """A decoded CompressedImage: ``data`` is (H, W, 3) uint8 RGB, or (H, W) for mono images."""

    stamp_ns: int
    frame_id: str
    encoding: str
    data: np.ndarray


def unpack_compressed(data: bytes) -> Any:
    """The CompressedImage message (rosbags' CDR; its ``data`` is a view)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY).deserialize_cdr(data, "sensor_msgs/msg/CompressedImage")


def _netpbm(out: bytes) -> np.ndarray:
    """The pixels of one binary PPM (P6) or PGM (P5) image."""
    fields: List[bytes] = []
    pos = 0
    while len(fields) < 4:
        while pos < len(out) and out[pos:pos + 1].isspace():
            pos += 1
        if out[pos:pos + 1] == b"#":
            pos = out.index(b"\n", pos) + 1
            continue
        end = pos
        while end < len(out) and not out[end:end + 1].isspace():
            end += 1
        fields.append(out[pos:end])
        pos = end
    pos += 1
    kind, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    dt = np.dtype(">u2") if maxval > 255 else np.dtype(np.uint8)
    shape = (height, width, 3) if kind == b"P6" else (height, width)
    arr = np.frombuffer(out, dt, count=int(np.prod(shape)), offset=pos).reshape(shape)
    return arr.astype(np.uint16) if dt.itemsize == 2 else arr


def decode(data: bytes, ffmpeg: Optional[str] = None) -> Decoded:
    """Decodes a CDR CompressedImage; ValueError when FFmpeg cannot decode it."""
    from ..ffmpeg import find_ffmpeg

    msg = unpack_compressed(data)
    fmt = str(msg.format).lower()
    mono = "mono" in fmt.split(";")[0] or fmt.startswith(("mono8", "mono16"))
    deep = "16" in fmt.split(";")[0]
    pix, codec = ("gray16be" if deep else "gray", "pgm") if mono else ("rgb24", "ppm")
    cmd = [find_ffmpeg(ffmpeg), "-v", "error", "-i", "pipe:0", "-frames:v", "1", "-f", "image2pipe", "-vcodec", codec, "-pix_fmt", pix, "pipe:1"]
    payload: Any = np.ascontiguousarray(msg.data)
    proc = subprocess.run(cmd, input=memoryview(payload), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0 or not proc.stdout:
        raise InvalidArgumentError(f"FFmpeg could not decode a CompressedImage of format {msg.format!r}: {proc.stderr.decode(errors='replace').strip()[-300:]}")
    arr = _netpbm(proc.stdout)
    encoding = ("mono16" if deep else "mono8") if mono else "rgb8"
    stamp = int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
    return Decoded(stamp, str(msg.header.frame_id), encoding, arr)
