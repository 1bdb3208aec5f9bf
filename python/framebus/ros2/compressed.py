"""``sensor_msgs/msg/CompressedImage`` (JPEG, PNG: what image_transport's compressed plugin
sends) read from CDR by ``cdr.py`` and decoded in this process by PyAV
(``framebus.media.image``; the ``framebus[video]`` extra): no subprocess per image.

What the frame holds follows the message's ``format`` as before: a format whose first part names
a mono encoding (``mono8; jpeg compressed mono8``, ``mono16; png compressed mono16``) gives
(H, W) mono8 or mono16 frames; any other (``rgb8; ...``, ``bgr8; ...``, ``jpeg``, ``png``) gives
(H, W, 3) rgb8, whatever channel order the sender's raw image had (a compressed image stores its
colours, not their order).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import cdr

TYPE = "sensor_msgs/msg/CompressedImage"


class CompressedImage(NamedTuple):
    """A CompressedImage message as read; ``data`` is a uint8 view of the message's bytes."""

    stamp_ns: int
    frame_id: str
    format: str
    data: np.ndarray


class Decoded(NamedTuple):
    """A decoded CompressedImage: ``data`` is (H, W, 3) uint8 RGB, or (H, W) for mono images."""

    stamp_ns: int
    frame_id: str
    encoding: str
    data: np.ndarray


def unpack_compressed(data: Any) -> CompressedImage:
    """Reads a CDR CompressedImage (no copy of the compressed bytes); ValueError when it is
    truncated or not little-endian CDR."""
    r = cdr.Reader(data, TYPE)
    stamp_ns, frame_id = r.header()
    fmt = r.string()
    payload = r.octets(r.u32())
    return CompressedImage(stamp_ns, frame_id, fmt, payload)


def encoding_for(fmt: str) -> str:
    """The frame encoding a CompressedImage of ``format`` ``fmt`` is decoded to: mono8, mono16 or
    rgb8."""
    first = fmt.lower().split(";")[0]
    if "mono" in first:
        return "mono16" if "16" in first else "mono8"
    return "rgb8"


_PIX_FMT = {"mono8": "gray", "mono16": "gray16le", "rgb8": "rgb24"}


def decode(data: Any) -> Decoded:
    """Decodes a CDR CompressedImage into a new array (the pixels decoded once); ValueError for
    a truncated message or an image that is not a whole JPEG/PNG, ImportError without PyAV."""
    from ..media.image import decode_still

    msg = unpack_compressed(data)
    encoding = encoding_for(msg.format)
    return Decoded(msg.stamp_ns, msg.frame_id, encoding, decode_still(msg.data, _PIX_FMT[encoding]))
