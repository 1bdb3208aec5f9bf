"""``foxglove_msgs/msg/CompressedVideo``: one access unit of an H.264 stream per message, what
Foxglove and Lichtblick play live. Read and written in CDR with ``cdr.py`` (the one CDR reader);
:class:`VideoDecoder` turns a subscription's messages back into pictures (PyAV, the
``framebus[video]`` extra), from the first keyframe on.

The message: ``builtin_interfaces/Time timestamp``, ``string frame_id``, ``uint8[] data``,
``string format`` (``"h264"``). ``data`` is an Annex B byte stream (start codes before each NAL
unit) holding exactly one picture; a keyframe (an IDR picture) carries the sequence and picture
parameter sets (SPS, PPS) before it, so that a viewer that joins late can start there.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

import numpy as np

from . import cdr, rmw

TYPE = "foxglove_msgs/msg/CompressedVideo"

#: The message's fields, as its ``.msg`` file declares them (the type hash in the topic's key
#: and tokens is computed from it, see ``rmw.EXTRA_TYPES``).
DEFINITION = rmw.EXTRA_TYPES[TYPE]

#: ``format`` of each codec framebus sends (Foxglove's names).
FORMATS = {"h264": "h264"}

# H.264 NAL unit types (ITU-T H.264 table 7-1).
NAL_IDR, NAL_SPS, NAL_PPS = 5, 7, 8


class CompressedVideo(NamedTuple):
    """A CompressedVideo message as read; ``data`` is a uint8 view of the message's bytes."""

    stamp_ns: int
    frame_id: str
    data: np.ndarray
    format: str


class Decoded(NamedTuple):
    """A decoded picture: ``data`` is (H, W, 3) uint8 RGB."""

    stamp_ns: int
    frame_id: str
    encoding: str
    data: np.ndarray


def pack_video(data: Any, stamp_ns: int, frame_id: str, fmt: str = "h264") -> bytes:
    """A CDR CompressedVideo carrying ``data`` (bytes-like; copied once, into the message)."""
    body = cdr.header(stamp_ns, frame_id)  # Time then a string: laid out as a std_msgs/Header
    body += cdr.pad(len(body))
    payload = memoryview(data).cast("B")
    body += cdr.u32(len(payload))
    tail = bytearray(cdr.pad(len(body) + len(payload)))
    tail += cdr.string(fmt)
    return b"".join((cdr.CDR_LE, body, payload, tail))


def unpack_video(data: Any) -> CompressedVideo:
    """Reads a CDR CompressedVideo (no copy of its data); ValueError when it is truncated or
    not little-endian CDR."""
    r = cdr.Reader(data, TYPE)
    stamp_ns, frame_id = r.header()
    payload = r.octets(r.u32())
    return CompressedVideo(stamp_ns, frame_id, payload, r.string())


def nal_units(data: Any) -> List[bytes]:
    """The NAL units of an Annex B byte stream, each without its start code."""
    buf = bytes(data)
    starts = []
    i = buf.find(b"\x00\x00\x01")
    while i >= 0:
        starts.append(i + 3)
        i = buf.find(b"\x00\x00\x01", i + 3)
    out = []
    for n, s in enumerate(starts):
        end = starts[n + 1] - 3 if n + 1 < len(starts) else len(buf)
        unit = buf[s:end]
        if n + 1 < len(starts) and unit.endswith(b"\x00"):
            unit = unit[:-1]  # the 4-byte start code's leading zero belongs to the next unit
        if unit:
            out.append(unit)
    return out


def nal_types(data: Any) -> List[int]:
    """The NAL unit types of an Annex B byte stream, in order."""
    return [u[0] & 0x1F for u in nal_units(data)]


def is_keyframe(data: Any) -> bool:
    """Whether an access unit is an IDR picture with its SPS and PPS (a decoder can start at it)."""
    types = set(nal_types(data))
    return {NAL_IDR, NAL_SPS, NAL_PPS} <= types


class ParameterSets:
    """Keeps the last SPS and PPS an encoder gave, and puts them in front of a keyframe that
    comes without them (encoders that send them once, out of band or in the first keyframe
    only): each keyframe message then starts a decoder on its own."""

    def __init__(self) -> None:
        self._sets: bytes = b""

    def complete(self, data: bytes, key: bool) -> bytes:
        """``data`` (one access unit), with the SPS and PPS before it when it is a keyframe
        without them."""
        if not key:
            return data
        units = nal_units(data)
        sets = [u for u in units if u[0] & 0x1F in (NAL_SPS, NAL_PPS)]
        if sets:
            self._sets = b"".join(b"\x00\x00\x00\x01" + u for u in sets)
            return data
        return self._sets + data


class VideoDecoder:
    """Decodes one subscription's CompressedVideo messages into (H, W, 3) rgb8 pictures, from
    the first keyframe on, one decoder per subscription. A message that is not a keyframe while
    none came yet, one after a gap (``gap``: the publisher's sequence numbers skipped some, or
    the message before came from another publisher: another encoder run), and one that does
    not decode, are skipped (counted in ``skipped``); the decoder then waits for
    the next keyframe. ImportError (naming the extra) without PyAV."""

    def __init__(self) -> None:
        from ..media.codec import PictureDecoder

        self._new = PictureDecoder
        self._dec = PictureDecoder("h264")  # ImportError with the install command, before any message is taken
        self._started = False
        #: Messages skipped (before the first keyframe, after a gap, undecodable); pictures
        #: decoded; whether the first picture came from a keyframe.
        self.skipped = self.pictures = 0
        self.first_from_keyframe: Optional[bool] = None

    def decode(self, message: Any, gap: bool = False) -> Optional[Decoded]:
        """The picture of one CDR CompressedVideo message, or None when it was skipped (or gave
        no picture). ValueError for a message that is not a CompressedVideo or not H.264."""
        msg = unpack_video(message)
        if msg.format.lower() not in ("h264", "avc"):
            raise ValueError(f"a CompressedVideo in format {msg.format!r}: framebus decodes h264")
        key = is_keyframe(msg.data)
        if gap or not key and not self._started:
            self._started = False
            if not key:
                self.skipped += 1
                return None
        try:
            pictures = self._dec.decode(bytes(msg.data), 3)
        except ValueError:
            self._started, self._dec = False, self._new("h264")  # a fresh decoder for the next keyframe
            self.skipped += 1
            return None
        self._started = True
        if not pictures:
            return None
        if self.first_from_keyframe is None:
            self.first_from_keyframe = key
        self.pictures += 1
        return Decoded(msg.stamp_ns, msg.frame_id, "rgb8", pictures[-1])
