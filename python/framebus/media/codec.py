"""Encoded video over a bridge: the settings, the header each packet carries, the choice of
encoder, and the rule that keeps a subscriber's pictures whole (a keyframe first, then an
unbroken run of packets).

An encoded bridge is three ordinary pieces: an encoder stage (raw stream -> packet stream, see
``net/video/encode.py``), any bridge engine moving the packet stream (a variable-shape stream of byte
frames written with ``codec=``), and a decoder stage (packet stream -> raw stream of the
source's shape and dtype, see ``net/video/decode.py``). What an engine adds for video is the keyframe
gate (:class:`KeyframeGate`): a peer gets packets only from a keyframe on, and only while
they follow one another; a peer that joins or misses a packet waits for the next keyframe,
and the encoder is asked (rate-limited) to make one at once.

Encoding and decoding run in this process through PyAV (FFmpeg's libraries; the
``framebus[video]`` extra): one packet per picture, no B-frames, no look-ahead, so a picture is
on the wire as soon as it is encoded.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import InvalidArgumentError

#: Codecs of ``encode=`` and their software encoders, hardware encoders (tried in this order by
#: ``encoder="auto"``) and decoders.
CODECS: Dict[str, Dict[str, Any]] = {
    "h264": {"software": ["libx264"], "hardware": ["h264_nvenc", "h264_qsv", "h264_vaapi"], "decoder": "h264"},
    "hevc": {"software": ["libx265"], "hardware": ["hevc_nvenc", "hevc_qsv", "hevc_vaapi"], "decoder": "hevc"},
    "av1": {"software": ["libsvtav1", "libaom-av1"], "hardware": ["av1_nvenc", "av1_qsv", "av1_vaapi"], "decoder": "libdav1d"},
    "mjpeg": {"software": ["mjpeg"], "hardware": ["mjpeg_qsv", "mjpeg_vaapi"], "decoder": "mjpeg"},
}

#: Low-latency options per encoder: no B-frames, no look-ahead, one picture in flight.
ENCODER_OPTIONS: Dict[str, Dict[str, str]] = {
    "libx264": {"preset": "ultrafast", "tune": "zerolatency", "forced-idr": "1"},
    "libx265": {"preset": "ultrafast", "tune": "zerolatency", "forced-idr": "1", "x265-params": "bframes=0:log-level=error"},
    "libsvtav1": {"preset": "10", "svtav1-params": "pred-struct=1:rc=2:lookahead=0"},
    "libaom-av1": {"cpu-used": "8", "usage": "realtime", "lag-in-frames": "0"},
    "h264_nvenc": {"preset": "p1", "tune": "ull", "zerolatency": "1", "delay": "0", "forced-idr": "1"},
    "hevc_nvenc": {"preset": "p1", "tune": "ull", "zerolatency": "1", "delay": "0", "forced-idr": "1"},
    "av1_nvenc": {"preset": "p1", "tune": "ull", "zerolatency": "1", "delay": "0", "forced-idr": "1"},
    "h264_qsv": {"preset": "veryfast", "async_depth": "1", "forced_idr": "1"},
    "hevc_qsv": {"preset": "veryfast", "async_depth": "1", "forced_idr": "1"},
}

#: Raw frames an encoded bridge takes: uint8 images, by channel count, and FFmpeg's name for them.
PIXEL_FORMATS = {1: "gray", 3: "rgb24", 4: "rgba"}

#: Fewest seconds between two keyframes forced for joining or lagging subscribers (so that many
#: joiners cannot turn the stream into keyframes only).
KEY_MIN_INTERVAL = 0.25

DEFAULT_BITRATE = 8_000_000
DEFAULT_GOP = 30

# The header before the source frame's own metadata in each packet's metadata.
_HEADER = struct.Struct("<4sBBHIIIQ")
_MAGIC = b"FBV1"
HEADER_BYTES = _HEADER.size
F_KEY = 1


@dataclass(frozen=True)
class PacketHeader:
    """What a packet says about itself: keyframe or not, the picture size and channels, the
    encoder run (``session``) and the packet's index in it (consecutive from 0)."""

    key: bool
    channels: int
    width: int
    height: int
    session: int
    index: int


def pack_header(h: PacketHeader) -> bytes:
    return _HEADER.pack(_MAGIC, F_KEY if h.key else 0, h.channels, 0, h.width, h.height, h.session, h.index)


def unpack_header(meta: Any) -> Optional[PacketHeader]:
    """The header at the start of a packet's metadata, or None when it has none."""
    meta = bytes(meta[:HEADER_BYTES])
    if len(meta) < HEADER_BYTES or meta[:4] != _MAGIC:
        return None
    _, flags, channels, _, width, height, session, index = _HEADER.unpack(meta)
    return PacketHeader(bool(flags & F_KEY), channels, width, height, session, index)


def parse_bitrate(value: Any) -> int:
    """``8M``, ``800k``, ``2.5M`` or an int (bits per second) as an int; ValueError otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"bitrate must be bits per second (an int, or a string such as '8M'), got {value!r}")
    if isinstance(value, (int, float)):
        rate = value
    elif isinstance(value, str):
        text = value.strip().lower().removesuffix("bps").removesuffix("b")
        scale = {"k": 1e3, "m": 1e6, "g": 1e9}.get(text[-1:], 1)
        try:
            rate = float(text[:-1] if scale != 1 else text) * scale
        except ValueError:
            raise InvalidArgumentError(f"bitrate {value!r} is not a rate: give bits per second such as '8M', '800k' or 2000000") from None
    else:
        raise TypeError(f"bitrate must be bits per second (an int, or a string such as '8M'), got {value!r}")
    if not 10_000 <= rate <= 10_000_000_000:
        raise InvalidArgumentError(f"bitrate {value!r} is out of range: give 10k to 10G bits per second")
    return int(rate)


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise ImportError("encoded bridges need PyAV (FFmpeg's libraries): pip install 'framebus[video]'") from None
    return av


@dataclass(frozen=True)
class VideoSettings:
    """An encoded bridge's settings (checked): ``codec``, ``bitrate`` (bits/s), ``gop`` (frames
    between keyframes), ``encoder`` (a name, or ``"auto"``), ``drop_alpha`` (take 4-channel
    images and send their first three channels; without it they are refused, as no codec here
    has an alpha plane)."""

    codec: str
    bitrate: int = DEFAULT_BITRATE
    gop: int = DEFAULT_GOP
    encoder: str = "auto"
    drop_alpha: bool = False

    @classmethod
    def of(cls, codec: Any, bitrate: Any = None, gop: Any = None, encoder: Any = None, drop_alpha: bool = False) -> "VideoSettings":
        if codec not in CODECS:
            raise InvalidArgumentError(f"encode must be one of {', '.join(CODECS)} (or None for raw frames), got {codec!r}")
        gop = DEFAULT_GOP if gop is None else gop
        if isinstance(gop, bool) or not isinstance(gop, int) or not 1 <= gop <= 100_000:
            raise InvalidArgumentError(f"gop must be an int from 1 to 100000 (frames between keyframes), got {gop!r}")
        encoder = "auto" if encoder is None else encoder
        if not isinstance(encoder, str):
            raise TypeError(f"encoder must be a str ('auto' or an FFmpeg encoder name), got {encoder!r}")
        return cls(codec, parse_bitrate(DEFAULT_BITRATE if bitrate is None else bitrate), gop, encoder, bool(drop_alpha))


_probed: Dict[str, bool] = {}
_probe_lock = threading.Lock()


def encoder_works(name: str) -> bool:
    """Whether FFmpeg's encoder ``name`` opens and encodes a small picture here (cached)."""
    with _probe_lock:
        if name not in _probed:
            _probed[name] = _try_encoder(name)
        return _probed[name]


def _try_encoder(name: str) -> bool:
    av = _av()
    try:
        ctx = _encoder_context(av, name, 64, 64, DEFAULT_BITRATE // 8, 30, 30)
        import numpy as np

        frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
        frame.pts = 0
        ctx.encode(frame)
        ctx.encode(None)
        return True
    except Exception:  # noqa: BLE001 - any failure means: not usable here
        return False


def available_encoders() -> List[Tuple[str, str, bool]]:
    """(codec, encoder, works here) for every encoder framebus knows, hardware first."""
    out = []
    for codec, info in CODECS.items():
        for name in info["hardware"] + info["software"]:
            out.append((codec, name, encoder_works(name)))
    return out


def pick_encoder(settings: VideoSettings) -> str:
    """The encoder to use: ``settings.encoder`` if it works here, or for ``auto`` the first
    hardware encoder of the codec that works, else its software one. ValueError (with what to
    do) when none works."""
    info = CODECS[settings.codec]
    if settings.encoder != "auto":
        if not encoder_works(settings.encoder):
            raise InvalidArgumentError(
                f"encoder {settings.encoder!r} does not work here (not in this FFmpeg, or no device for it); "
                f"use encoder='auto' or one of {', '.join(info['software'])}"
            )
        return settings.encoder
    for name in info["hardware"] + info["software"]:
        if encoder_works(name):
            return name
    raise InvalidArgumentError(f"no {settings.codec} encoder works here (tried {', '.join(info['hardware'] + info['software'])}); pick another encode=")


def _encoder_context(av: Any, name: str, width: int, height: int, bitrate: int, gop: int, fps: int) -> Any:
    from fractions import Fraction

    if name == "libsvtav1":
        os.environ.setdefault("SVT_LOG", "1")  # errors only: SVT-AV1 prints its banner to stderr
    ctx = av.CodecContext.create(name, "w")
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "yuvj420p" if name == "mjpeg" else "yuv420p"
    ctx.time_base = Fraction(1, 1000)
    ctx.framerate = Fraction(fps, 1)
    ctx.bit_rate = bitrate
    ctx.gop_size = gop
    ctx.max_b_frames = 0
    options = dict(ENCODER_OPTIONS.get(name, {}))
    if name != "mjpeg":
        # A rate cap with a buffer of 1/8 s: a keyframe cannot burst far above the bitrate.
        options.update(maxrate=str(bitrate), bufsize=str(bitrate // 8))
    ctx.options = options
    ctx.open()
    return ctx


class PictureEncoder:
    """One encoder run: raw pictures in, one packet each out (bytes, keyframe)."""

    def __init__(self, name: str, settings: VideoSettings, width: int, height: int, channels: int) -> None:
        av = self._av = _av()
        self.name = name
        self.format = PIXEL_FORMATS[channels]
        self._ctx = _encoder_context(av, name, width, height, settings.bitrate, settings.gop, 30)
        self._last_pts = -1
        self._key_type = av.video.frame.PictureType.I

    def encode(self, array: Any, timestamp_ns: int, force_key: bool) -> List[Tuple[bytes, bool]]:
        """Encodes one picture (copied out of ``array`` first); the packets it gave."""
        frame = self._av.VideoFrame.from_ndarray(array, format=self.format)
        pts = max(self._last_pts + 1, timestamp_ns // 1_000_000)
        frame.pts = self._last_pts = pts
        if force_key:
            frame.pict_type = self._key_type
        return [(bytes(p), bool(p.is_keyframe)) for p in self._ctx.encode(frame)]

    def flush(self) -> List[Tuple[bytes, bool]]:
        return [(bytes(p), bool(p.is_keyframe)) for p in self._ctx.encode(None)]


class PictureDecoder:
    """Decodes one codec's packets into arrays of ``channels`` channels; ``decode`` raises
    ValueError for a packet it cannot decode."""

    def __init__(self, codec: str) -> None:
        av = self._av = _av()
        self._ctx = av.CodecContext.create(CODECS[codec]["decoder"], "r")
        if codec in ("h264", "hevc"):
            self._ctx.thread_type = "SLICE"  # frame threads would hold pictures back
        self._ctx.options = {"flags": "low_delay"}

    def decode(self, data: bytes, channels: int) -> List[Any]:
        try:
            frames = self._ctx.decode(self._av.Packet(data))
        except self._av.error.FFmpegError as exc:
            raise ValueError(f"undecodable packet: {exc}") from None
        return [f.to_ndarray(format=PIXEL_FORMATS[channels]) for f in frames]


class KeyframeGate:
    """Per peer, which packets it may get: from a keyframe on, an unbroken run of one encoder
    run's packets. A peer that joins or misses one waits for the next keyframe, and
    ``request_keyframe`` is called so that one comes soon. Used by an engine's publisher (it
    passes a peer key of its own, e.g. the peer's identity); not thread-safe."""

    def __init__(self, request_keyframe: Callable[[], None]) -> None:
        self._request = request_keyframe
        # peer -> (session, index of the last packet it was given), or None while waiting
        self._peers: Dict[Any, Optional[Tuple[int, int]]] = {}
        #: Packets held back from peers waiting for a keyframe (all peers together).
        self.held = 0

    def joined(self, peer: Any) -> None:
        """A peer joined or came back: it starts with the next keyframe."""
        self._peers[peer] = None
        self._request()

    def left(self, peer: Any) -> None:
        self._peers.pop(peer, None)

    def admit(self, peer: Any, h: Optional[PacketHeader]) -> bool:
        """Whether ``peer`` may be sent the packet of header ``h`` (which it is then taken to
        have got). A packet without a header (not from an encoder stage) always passes."""
        if h is None:
            return True
        last = self._peers.get(peer)
        if h.key:
            self._peers[peer] = (h.session, h.index)
            return True
        if last is None or last != (h.session, h.index - 1):
            if last is not None:
                self._peers[peer] = None  # it missed a packet: wait for a keyframe
            self._request()
            self.held += 1
            return False
        self._peers[peer] = (h.session, h.index)
        return True
