"""Still images (JPEG, PNG) decoded in this process by PyAV (FFmpeg's libraries; the
``framebus[video]`` extra): no subprocess, no intermediate file format. Used for ROS 2
``sensor_msgs/msg/CompressedImage`` messages (``ros2/compressed.py``).

The image's kind is read from its first bytes (PNG's signature, JPEG's start-of-image marker),
not from a name that comes with it. Each image gets a decoder of its own: FFmpeg's PNG decoder
keeps state from one picture to the next, which would corrupt a second, unrelated image.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..errors import InvalidArgumentError

#: Still-image kinds and the FFmpeg decoder of each.
DECODERS = {"png": "png", "jpeg": "mjpeg"}

#: Output layouts ``decode_still`` gives: FFmpeg's pixel format -> NumPy dtype.
OUTPUT_FORMATS = {"rgb24": np.uint8, "bgr24": np.uint8, "gray": np.uint8, "gray16le": np.dtype("<u2")}

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise ImportError("decoding JPEG/PNG images needs PyAV (FFmpeg's libraries): pip install 'framebus[video]'") from None
    return av


def kind_of(data: Any) -> Optional[str]:
    """``"png"`` or ``"jpeg"`` from the first bytes of ``data``; None for anything else."""
    head = bytes(memoryview(data)[:8])
    if head.startswith(_PNG):
        return "png"
    if head.startswith(_JPEG):
        return "jpeg"
    return None


def decode_still(data: Any, pix_fmt: str = "rgb24") -> np.ndarray:
    """Decodes one JPEG or PNG image (bytes-like) into a new array of ``pix_fmt``: ``rgb24`` /
    ``bgr24`` (H, W, 3) uint8, ``gray`` (H, W) uint8 or ``gray16le`` (H, W) uint16. The pixels are
    converted (and so copied) into the returned array; PNG is exact, JPEG is what its decoder
    gives. Raises InvalidArgumentError (ValueError) for data that is not a whole JPEG/PNG
    image or an unknown ``pix_fmt``, ImportError when PyAV is not installed."""
    if pix_fmt not in OUTPUT_FORMATS:
        raise InvalidArgumentError(f"pix_fmt must be one of {', '.join(OUTPUT_FORMATS)}, got {pix_fmt!r}")
    kind = kind_of(data)
    if kind is None:
        raise InvalidArgumentError("the image is neither PNG nor JPEG (its first bytes are no PNG signature or JPEG start marker)")
    av = _av()
    ctx = av.CodecContext.create(DECODERS[kind], "r")
    ctx.thread_type = "NONE"  # one picture: frame threads would only hold it back
    try:
        frames = ctx.decode(av.Packet(memoryview(data).cast("B"))) or ctx.decode(None)
    except av.error.FFmpegError as exc:
        raise InvalidArgumentError(f"the {kind.upper()} image could not be decoded ({exc}); is it whole?") from None
    if not frames:
        raise InvalidArgumentError(f"the {kind.upper()} image gave no picture; is it whole?")
    return frames[0].to_ndarray(format=pix_fmt)
