"""``sensor_msgs/msg/Image`` in CDR (read and written with ``cdr.py``, the one CDR reader), and
the mapping between a frame's shape/dtype and the message's ``encoding``.

Packing copies the pixels once (into the message's buffer); unpacking gives a NumPy view of the
message's pixel bytes (no copy). tests/test_ros2.py and tests/test_ros2_cdr.py check both
against rosbags' ``serialize_cdr`` / ``deserialize_cdr``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import numpy as np

from ..errors import InvalidArgumentError
from . import cdr
from .cdr import CDR_LE

__all__ = ["CDR_LE", "Image", "encoding_of", "image_prefix", "layout_of", "pack_image", "unpack_image"]

_COLOR = {3: ("rgb", "bgr"), 4: ("rgba", "bgra")}
_KIND = {"u": "U", "i": "S", "f": "F"}


def encoding_of(shape: Tuple[int, ...], dtype: np.dtype, *, bgr: bool = False) -> str:
    """The ROS image encoding of frames of ``shape`` (H, W) or (H, W, C) and ``dtype``:
    mono8/mono16, rgb8/bgr8, rgba8/bgra8, rgb16/bgr16, rgba16/bgra16, else ``<bits><U|S|F>C<C>``
    (e.g. 32FC1). ``bgr``: 3/4-channel frames are BGR(A). ValueError for other shapes."""
    dt = np.dtype(dtype)
    if len(shape) not in (2, 3) or (len(shape) == 3 and not 1 <= shape[2] <= 4):
        raise InvalidArgumentError(f"a ROS image is (height, width) or (height, width, 1..4 channels); frames of shape {tuple(shape)} are not")
    if dt.kind not in _KIND or dt.itemsize not in (1, 2, 4, 8) or (dt.kind == "f" and dt.itemsize < 4):
        raise InvalidArgumentError(f"a ROS image holds uint8/16, int8/16/32, float32/64 pixels; dtype {dt} is not one")
    channels = 1 if len(shape) == 2 else shape[2]
    if dt.kind == "u" and dt.itemsize in (1, 2):
        bits = 8 * dt.itemsize
        if channels == 1:
            return f"mono{bits}"
        if channels in _COLOR:
            return f"{_COLOR[channels][bool(bgr)]}{bits}"
    return f"{8 * dt.itemsize}{_KIND[dt.kind]}C{channels}"


_NAMED = {
    "mono8": ("u1", 1), "mono16": ("u2", 1), "rgb8": ("u1", 3), "bgr8": ("u1", 3), "rgba8": ("u1", 4), "bgra8": ("u1", 4),
    "rgb16": ("u2", 3), "bgr16": ("u2", 3), "rgba16": ("u2", 4), "bgra16": ("u2", 4),
    "yuv422": ("u1", 2), "uyvy": ("u1", 2), "yuyv": ("u1", 2), "yuv422_yuy2": ("u1", 2), "nv21": ("u1", 1), "nv24": ("u1", 1),
}


def layout_of(encoding: str, height: int, width: int, big_endian: bool) -> Tuple[np.dtype, Tuple[int, ...]]:
    """The NumPy dtype and frame shape of an image of ``encoding`` (Bayer patterns: one uint8 or
    uint16 channel); ValueError for an encoding framebus does not know."""
    enc = encoding.lower()
    if enc in _NAMED:
        code, channels = _NAMED[enc]
    elif enc.startswith("bayer_") and enc.endswith(("8", "16")):
        code, channels = ("u1" if enc.endswith("8") else "u2"), 1
    else:
        try:
            bits, rest = enc[:-3].rstrip("usfc"), enc
            kind = {"u": "u", "s": "i", "f": "f"}[rest[len(bits)]]
            channels = int(rest.split("c")[-1])
            code = f"{kind}{int(bits) // 8}"
        except (KeyError, ValueError, IndexError):
            raise InvalidArgumentError(f"image encoding {encoding!r} is not one framebus knows (mono8, rgb8, bgr8, rgba8, mono16, 32FC1, ...)") from None
    dt = np.dtype(code).newbyteorder(">" if big_endian else "<")
    shape = (height, width) if channels == 1 else (height, width, channels)
    return dt, shape


def image_prefix(stamp_ns: int, frame_id: str, height: int, width: int, encoding: str, step: int, nbytes: int, big_endian: bool = False) -> bytes:
    """Everything of a CDR ``sensor_msgs/msg/Image`` before its pixel bytes: encapsulation
    header, header (stamp, frame_id), height, width, encoding, is_bigendian, step and the
    pixel data's length."""
    body = cdr.header(stamp_ns, frame_id)
    body += cdr.pad(len(body))
    body += cdr.u32(height) + cdr.u32(width)
    body += cdr.string(encoding)
    body += bytes([1 if big_endian else 0])
    body += cdr.pad(len(body))
    body += cdr.u32(step) + cdr.u32(nbytes)
    return CDR_LE + bytes(body)


def pack_image(frame: np.ndarray, stamp_ns: int, frame_id: str, encoding: str) -> bytes:
    """A CDR ``sensor_msgs/msg/Image`` of ``frame`` (C-contiguous (H, W[, C])); the pixels are
    copied once, into the returned bytes."""
    height, width = frame.shape[:2]
    big = frame.dtype.byteorder == ">"
    step = frame.strides[0] if frame.flags.c_contiguous else width * frame.itemsize * (1 if frame.ndim == 2 else frame.shape[2])
    prefix = image_prefix(stamp_ns, frame_id, height, width, encoding, step, frame.nbytes, big)
    pixels: Any = np.ascontiguousarray(frame)
    return b"".join((prefix, memoryview(pixels).cast("B")))


class Image(NamedTuple):
    """A decoded Image message; ``data`` is a view of the message's bytes, (H, W[, C])."""

    stamp_ns: int
    frame_id: str
    encoding: str
    data: np.ndarray


def unpack_image(data: Any) -> Image:
    """Decodes a CDR ``sensor_msgs/msg/Image`` (no copy of the pixels); ValueError when it is
    truncated, big-endian CDR, or its sizes do not add up."""
    r = cdr.Reader(data, "sensor_msgs/msg/Image")
    stamp_ns, frame_id = r.header()
    height, width = r.u32(), r.u32()
    encoding = r.string()
    big = bool(r.u8())
    step, n = r.u32(), r.u32()
    if n > r.remaining() or n < step * height:
        raise ValueError(f"sensor_msgs/msg/Image of {height}x{width} step {step} carries {n} pixel bytes, {r.remaining()} present")
    dt, shape = layout_of(encoding, height, width, big)
    row = width * dt.itemsize * (1 if len(shape) == 2 else shape[2])
    if step < row:
        raise ValueError(f"sensor_msgs/msg/Image {encoding} {width} wide needs rows of {row} bytes, step is {step}")
    pixels = r.octets(step * height).reshape(height, step)[:, :row]
    return Image(stamp_ns, frame_id, encoding, pixels.view(dt).reshape(shape))
