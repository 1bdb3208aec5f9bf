"""The one reader (and the writing pieces) of CDR, the encoding of ROS 2 messages, for the
messages framebus reads and writes: ``sensor_msgs/msg/Image`` (``image.py``),
``sensor_msgs/msg/CompressedImage`` (``compressed.py``) and ``foxglove_msgs/msg/CompressedVideo``
(``video.py``). Plain CDR, little-endian (XCDR1, the
``CDR_LE`` encapsulation that rmw_zenoh sends): each primitive aligned to its size, counted from
the end of the 4-byte encapsulation header; strings are a uint32 length (with the NUL) and
their bytes; ``uint8[]`` is a uint32 count and the bytes.

Why not rosbags, the project's library for ROS 2 messages: its ``deserialize_cdr`` copies a
message's byte arrays out of the message, which for a 1080p rgb8 Image costs about 27 times
this reader's parse (benches/ros2_decode.py); this reader gives the pixel bytes as a NumPy view
(no copy). tests/test_ros2_cdr.py checks what this module reads and writes against rosbags'
``serialize_cdr`` / ``deserialize_cdr`` and the message definitions rosbags ships.
"""

from __future__ import annotations

import struct
from typing import Any, Tuple

import numpy as np

#: CDR encapsulation header: little-endian plain CDR.
CDR_LE = b"\x00\x01\x00\x00"
_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")


class Reader:
    """Reads one little-endian CDR message field by field (no copies until asked). Each method
    raises ValueError (saying which message) when the message ends before the field does."""

    def __init__(self, data: Any, what: str) -> None:
        """``data``: the whole message, encapsulation header first (bytes-like); ``what``: the
        message's type, for errors. ValueError when it is not little-endian CDR."""
        self.data = data
        self.what = what
        if len(data) < 4 or bytes(data[:2]) != CDR_LE[:2]:
            raise ValueError(f"a {what} that is not a little-endian CDR message (framebus reads what rmw_zenoh sends: CDR_LE)")
        self.buf = memoryview(data)[4:]
        self.off = 0

    def _take(self, st: struct.Struct) -> Tuple[Any, ...]:
        self.off += -self.off % min(st.size, 4)
        try:
            out = st.unpack_from(self.buf, self.off)
        except struct.error:
            raise ValueError(f"truncated {self.what} message") from None
        self.off += st.size
        return out

    def u32(self) -> int:
        return int(self._take(_U32)[0])

    def u8(self) -> int:
        if self.off >= len(self.buf):
            raise ValueError(f"truncated {self.what} message")
        self.off += 1
        return int(self.buf[self.off - 1])

    def string(self) -> str:
        """A CDR string (UTF-8; bad bytes replaced), without its NUL."""
        n = self.u32()
        if n == 0 or self.off + n > len(self.buf):
            raise ValueError(f"truncated string in a {self.what} message")
        text = bytes(self.buf[self.off:self.off + n - 1]).decode("utf-8", "replace")
        self.off += n
        return text

    def header(self) -> Tuple[int, str]:
        """A ``std_msgs/msg/Header``: (stamp in ns, frame_id)."""
        sec, nsec = self._take(_STAMP)
        return sec * 1_000_000_000 + nsec, self.string()

    def octets(self, n: int) -> np.ndarray:
        """The next ``n`` bytes as a uint8 NumPy view of the message (no copy)."""
        if self.off + n > len(self.buf):
            raise ValueError(f"{self.what} says {n} bytes follow, {len(self.buf) - self.off} are present")
        view = np.frombuffer(self.data, np.uint8, count=n, offset=4 + self.off)
        self.off += n
        return view

    def remaining(self) -> int:
        """Bytes left after the fields read so far."""
        return len(self.buf) - self.off


def string(s: str) -> bytes:
    """A CDR string: uint32 length (with the NUL), UTF-8 bytes, NUL (unaligned: see ``pad``)."""
    b = s.encode() + b"\x00"
    return _U32.pack(len(b)) + b


def pad(n: int) -> bytes:
    """The zero bytes that align a body of ``n`` bytes to 4."""
    return b"\x00" * (-n % 4)


def header(stamp_ns: int, frame_id: str) -> bytearray:
    """The start of a message body: its ``std_msgs/msg/Header`` (stamp, frame_id), unpadded."""
    body = bytearray(_STAMP.pack(stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000))
    body += string(frame_id)
    return body


def u32(value: int) -> bytes:
    return _U32.pack(value)
