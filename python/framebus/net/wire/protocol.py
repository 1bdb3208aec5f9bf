"""The bridge's wire format, version 4. Pure Python, no ZeroMQ: it only packs and checks bytes.

Every message starts with an 8-byte prefix ``<4sBBH``: magic ``b"FBNT"``, protocol version, kind,
flags. Then, by kind (all integers little-endian):

=========  =========  ======================================================================
kind       direction  body
=========  =========  ======================================================================
HELLO      sub -> pub JSON: window (frames in flight it accepts), mode it expects or null,
                      last_seq + source_id of the last frame it wrote (resume), name, host
WELCOME    pub -> sub JSON: epoch (random per publisher run), mode, window granted, stream,
                      spec (dtype, shape, slots, meta_capacity) or null, compress, and for an
                      encoded publisher video (codec, encoder)
FRAME      pub -> sub fixed header (see ``FRAME``), shape (ndim x u64), dtype string (ASCII,
                      NumPy ``dtype.str``), metadata bytes; the payload is the next message part
ACK        sub -> pub u64 source_id, u64 seq: the frame is in the local stream (returns a credit)
HEARTBEAT  both       pub -> sub: u64 epoch; sub -> pub: empty
BYE        both       empty: the sender stops (the other end forgets it at once)
RESET      pub -> sub empty: "I do not know you" (the publisher restarted); answer with HELLO
REFUSE     pub -> sub UTF-8 text: why the publisher will not serve this subscriber; the
                      prefix's flags say which refusal it is (``REFUSE_CODES``)
END        pub -> sub u64 source_id, u64 seq: the source's writer ended the stream after frame
                      ``seq``; sent after that frame, and again after WELCOME to a subscriber that
                      (re)connects while the source is still ended. The subscriber ends its local
                      stream (``Stream.end()``); the next FRAME starts it again
=========  =========  ======================================================================

A receiver checks magic and version first. A peer of another version gets REFUSE (whose format
never changes: the prefix, then the reason as text) and is not served; a message without the magic is reported as
ProtocolError. The whole frame spec travels in every FRAME header, so a subscriber checks each
frame against its local stream and can never write a frame of one spec into a stream of another.

Version 2 carries variable-shape streams: their spec is the dtype string ``VARIABLE`` ("var")
with the shape ``(capacity,)``, and a FRAME's payload is the frame as the source stores it, its
table of arrays (names, dtypes, shapes, offsets) first, then the arrays; the receiving stream
validates that table before it writes anything (see docs/layout.md, "Frame table").

Version 3 adds END, so that the end of a stream (``Stream.end()``, or its writer closing) reaches
the readers of the subscriber's local stream. Nothing else changed from version 2, but a version 2
peer would ignore END, so the two versions refuse each other like any other pair.

Version 4 adds encoded bridges: the WELCOME's ``video`` (the packets' codec) and the FRAME flag
F_PACKET (the payload is an encoded packet without its frame table, written with that codec; in
latest mode every such frame is stored, none replaced by a newer one). A version 3 subscriber
would take a packet for a frame with a table and stop on a malformed-frame error, so versions 3
and 4 refuse each other.

A REFUSE carries its code in the prefix's flags, which every version reads at the same place:
REFUSE_VERSION (another protocol version) or REFUSE_MODE (the subscriber asked for the other
reader mode); 0 (REFUSE_UNSPECIFIED) comes from a publisher that predates the codes. The
subscriber picks its exception from the code, never from the text (a peer that sends 0 gets
ProtocolError); a subscriber that predates the codes ignores the flags, so no version changed.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, NamedTuple, Tuple, Union

from .errors import ProtocolError

MAGIC = b"FBNT"
VERSION = 4

#: dtype string of the spec of a variable-shape stream (its shape is (capacity,)).
VARIABLE = "var"

HELLO, WELCOME, FRAME, ACK, HEARTBEAT, BYE, RESET, REFUSE, END = range(1, 10)

#: FRAME flags.
F_ZSTD = 0x1
F_RESENT = 0x2
#: The payload is an encoded packet alone (a byte frame of a variable-shape stream, without its
#: frame table), of the codec the WELCOME's "video" names: an encoded bridge's frames.
F_PACKET = 0x4

PREFIX = struct.Struct("<4sBBH")
#: FRAME fixed part: prefix, source_id, seq, timestamp_ns, frame_id, payload bytes (uncompressed),
#: meta length, slots, meta_capacity, ndim, dtype length.
FRAME_FIXED = struct.Struct("<4sBBHQQQqQIIIBB")
U64 = struct.Struct("<Q")
ACK_BODY = struct.Struct("<QQ")

Buffer = Union[bytes, bytearray, memoryview]


def spec_of(stream: Any) -> Tuple[str, Tuple[int, ...]]:
    """The wire spec of a local stream: (dtype string, shape), or (VARIABLE, (capacity,))."""
    if stream.variable:
        return (VARIABLE, (int(stream.capacity),))
    return (stream.dtype.str, tuple(stream.shape))


class FrameHeader(NamedTuple):
    """A FRAME header, decoded. ``spec`` is (dtype string, shape)."""

    flags: int
    source_id: int
    seq: int
    timestamp_ns: int
    frame_id: int
    nbytes: int
    slots: int
    meta_capacity: int
    spec: Tuple[str, Tuple[int, ...]]
    meta: bytes


def prefix(kind: int, flags: int = 0) -> bytes:
    """The 8-byte prefix of a message of ``kind``."""
    return PREFIX.pack(MAGIC, VERSION, kind, flags)


def peek(msg: Buffer) -> Tuple[int, int, int]:
    """(version, kind, flags) of a message; ProtocolError if it is not a framebus message."""
    if len(msg) < PREFIX.size:
        raise ProtocolError(f"a {len(msg)}-byte message is too short to be a framebus bridge message")
    magic, version, kind, flags = PREFIX.unpack_from(msg)
    if magic != MAGIC:
        raise ProtocolError(f"not a framebus bridge message (starts with {bytes(msg[:4])!r}, expected {MAGIC!r}); is the other end a framebus bridge?")
    return version, kind, flags


def pack_json(kind: int, body: Dict[str, Any]) -> bytes:
    """A HELLO or WELCOME message."""
    return prefix(kind) + json.dumps(body, separators=(",", ":")).encode()


def unpack_json(msg: Buffer) -> Dict[str, Any]:
    """The JSON body of a HELLO or WELCOME message; ProtocolError if it is not an object."""
    try:
        body = json.loads(bytes(msg[PREFIX.size:]))
    except ValueError as exc:
        raise ProtocolError(f"malformed bridge control message: {exc}") from None
    if not isinstance(body, dict):
        raise ProtocolError("malformed bridge control message: the body is not a JSON object")
    return body


def pack_ack(source_id: int, seq: int) -> bytes:
    """An ACK of frame ``seq`` of source segment ``source_id``."""
    return prefix(ACK) + ACK_BODY.pack(source_id, seq)


def unpack_ack(msg: Buffer) -> Tuple[int, int]:
    """(source_id, seq) of an ACK; ProtocolError if truncated."""
    return _unpack_source_seq(msg, "ACK")


def pack_end(source_id: int, seq: int) -> bytes:
    """An END: the source ``source_id`` was ended after its frame ``seq``."""
    return prefix(END) + ACK_BODY.pack(source_id, seq)


def unpack_end(msg: Buffer) -> Tuple[int, int]:
    """(source_id, seq) of an END; ProtocolError if truncated."""
    return _unpack_source_seq(msg, "END")


def _unpack_source_seq(msg: Buffer, what: str) -> Tuple[int, int]:
    if len(msg) < PREFIX.size + ACK_BODY.size:
        raise ProtocolError(f"truncated {what} message")
    return ACK_BODY.unpack_from(msg, PREFIX.size)


def pack_u64(kind: int, value: int) -> bytes:
    """A publisher HEARTBEAT (value = epoch)."""
    return prefix(kind) + U64.pack(value)


#: Why a publisher refuses a subscriber, carried in a REFUSE's flags: no code (a publisher that
#: predates them), another protocol version, the other reader mode.
REFUSE_UNSPECIFIED, REFUSE_VERSION, REFUSE_MODE = 0, 1, 2
REFUSE_CODES = (REFUSE_UNSPECIFIED, REFUSE_VERSION, REFUSE_MODE)


def pack_refuse(reason: str, code: int) -> bytes:
    """A REFUSE message with ``code`` (one of ``REFUSE_CODES``) and the ``reason`` for people;
    its format is the same in every protocol version."""
    return prefix(REFUSE, code) + reason.encode("utf-8", "replace")


def unpack_refuse(msg: Buffer) -> Tuple[int, str]:
    """(code, reason) of a REFUSE message: the code from its flags (REFUSE_UNSPECIFIED from a
    publisher that sends none, or one this version does not know), the reason as text."""
    code = PREFIX.unpack_from(msg)[3]
    return (code if code in REFUSE_CODES else REFUSE_UNSPECIFIED), bytes(msg[PREFIX.size:]).decode("utf-8", "replace")


class FramePacker:
    """Packs FRAME headers, caching the encoded spec (shape + dtype) between frames of one spec."""

    def __init__(self) -> None:
        self._spec: Any = None
        self._spec_bytes = b""
        self._ndim = 0
        self._dlen = 0

    def pack(
        self,
        *,
        flags: int,
        source_id: int,
        seq: int,
        timestamp_ns: int,
        frame_id: int,
        nbytes: int,
        slots: int,
        meta_capacity: int,
        spec: Tuple[str, Tuple[int, ...]],
        meta: bytes,
    ) -> bytes:
        """The header of one frame (the payload goes in the next message part)."""
        if spec != self._spec:
            dtype, shape = spec
            d = dtype.encode("ascii")
            if len(d) > 255 or len(shape) > 255:
                raise ValueError(f"frame spec {spec!r} cannot be encoded")
            self._spec_bytes = struct.pack(f"<{len(shape)}Q", *shape) + d
            self._ndim, self._dlen, self._spec = len(shape), len(d), spec
        fixed = FRAME_FIXED.pack(MAGIC, VERSION, FRAME, flags, source_id, seq, timestamp_ns, frame_id, nbytes, len(meta), slots, meta_capacity, self._ndim, self._dlen)
        return fixed + self._spec_bytes + meta


def unpack_frame(msg: Buffer) -> FrameHeader:
    """Decodes a FRAME header; ProtocolError if it is truncated or inconsistent."""
    if len(msg) < FRAME_FIXED.size:
        raise ProtocolError(f"truncated frame header ({len(msg)} bytes)")
    (_, _, _, flags, source_id, seq, ts, frame_id, nbytes, meta_len, slots, meta_cap, ndim, dlen) = FRAME_FIXED.unpack_from(msg)
    off = FRAME_FIXED.size
    end = off + 8 * ndim + dlen + meta_len
    if len(msg) != end or ndim == 0:
        raise ProtocolError(f"inconsistent frame header: {len(msg)} bytes, expected {end} (ndim={ndim}, dtype {dlen} bytes, meta {meta_len} bytes)")
    shape = struct.unpack_from(f"<{ndim}Q", msg, off)
    off += 8 * ndim
    try:
        dtype = bytes(msg[off:off + dlen]).decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("frame header carries a dtype that is not ASCII") from None
    off += dlen
    meta = bytes(msg[off:end])
    return FrameHeader(flags, source_id, seq, ts, frame_id, nbytes, slots, meta_cap, (dtype, tuple(shape)), meta)
