"""``sensor_msgs/msg/Image`` in CDR (little-endian, XCDR1 as ROS 2 uses it), and the mapping
between a frame's shape/dtype and the message's ``encoding``.

Packing copies the pixels once (into the message's buffer); unpacking gives a NumPy view of the
message's pixel bytes (no copy). tests/test_ros2.py checks both against rosbags'
``serialize_cdr`` / ``deserialize_cdr``.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Tuple

import numpy as np

from ..errors import InvalidArgumentError

#: CDR encapsulation header: little-endian plain CDR.
CDR_LE = b"\x00\x01\x00\x00"
_U32 = struct.Struct("<I")

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


def _string(s: str) -> bytes:
    b = s.encode() + b"\x00"
    return _U32.pack(len(b)) + b


def _pad(n: int) -> bytes:
    return b"\x00" * (-n % 4)


def image_prefix(stamp_ns: int, frame_id: str, height: int, width: int, encoding: str, step: int, nbytes: int, big_endian: bool = False) -> bytes:
    """Everything of a CDR ``sensor_msgs/msg/Image`` before its pixel bytes: encapsulation
    header, header (stamp, frame_id), height, width, encoding, is_bigendian, step and the
    pixel data's length."""
    body = bytearray(struct.pack("<iI", stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000))
    body += _string(frame_id)
    body += _pad(len(body))
    body += struct.pack("<II", height, width)
    body += _string(encoding)
    body += bytes([1 if big_endian else 0])
    body += _pad(len(body))
    body += _U32.pack(step)
    body += _U32.pack(nbytes)
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


def _read_string(buf: memoryview, off: int) -> Tuple[str, int]:
    off += -off % 4
    (n,) = _U32.unpack_from(buf, off)
    off += 4
    if n == 0 or off + n > len(buf):
        raise ValueError("truncated string in a CDR message")
    return bytes(buf[off:off + n - 1]).decode("utf-8", "replace"), off + n


def unpack_image(data: bytes) -> Image:
    """Decodes a CDR ``sensor_msgs/msg/Image`` (no copy of the pixels); ValueError when it is
    truncated, big-endian CDR, or its sizes do not add up."""
    if len(data) < 4 or data[:2] != b"\x00\x01":
        raise ValueError("not a little-endian CDR message (framebus reads what rmw_zenoh sends: CDR_LE)")
    buf = memoryview(data)[4:]
    try:
        sec, nsec = struct.unpack_from("<iI", buf, 0)
        frame_id, off = _read_string(buf, 8)
        off += -off % 4
        height, width = struct.unpack_from("<II", buf, off)
        encoding, off = _read_string(buf, off + 8)
        big = bool(buf[off])
        off += 1
        off += -off % 4
        step, n = struct.unpack_from("<II", buf, off)
        off += 8
    except struct.error:
        raise ValueError("truncated sensor_msgs/msg/Image message") from None
    if off + n > len(buf) or n < step * height:
        raise ValueError(f"sensor_msgs/msg/Image of {height}x{width} step {step} carries {n} pixel bytes, {len(buf) - off} present")
    dt, shape = layout_of(encoding, height, width, big)
    row = width * dt.itemsize * (1 if len(shape) == 2 else shape[2])
    if step < row:
        raise ValueError(f"sensor_msgs/msg/Image {encoding} {width} wide needs rows of {row} bytes, step is {step}")
    pixels = np.frombuffer(data, np.uint8, count=step * height, offset=4 + off).reshape(height, step)[:, :row]
    return Image(sec * 1_000_000_000 + nsec, frame_id, encoding, pixels.view(dt).reshape(shape))
