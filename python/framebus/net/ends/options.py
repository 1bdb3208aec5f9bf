"""The engine-independent options of a bridge's two ends, said once: their names, defaults and
checks. Used by ``framebus.net.publish``/``subscribe``, by ``Publisher``/``Subscriber`` and by
``framebus bridge`` (whose command-line defaults are read from here). What only one engine
takes lives in that engine's options (``framebus.net.zmq.ZmqPublishOptions``,
``ZmqSubscribeOptions``, ``framebus.net.zenoh.ZenohLink``), carried here as ``engine_options``;
the ZeroMQ keywords of earlier versions are still taken and routed there (see
docs/moving-from-0.1.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass
from typing import Any, Optional

from ...errors import InvalidArgumentError
from ..engine import registry
from ..link import positive


@dataclass(frozen=True)
class LinkOptions:
    """What both ends of a link take.

    ``hwm``: frames in flight per link (the publisher's credit window per subscriber; what a
    subscriber accepts). ``heartbeat_ivl`` / ``peer_timeout`` (seconds): how often an idle link
    is checked, and after how long a silent other end counts as gone. ``status``: keep a record
    for ``framebus ls``."""

    hwm: int = 4
    heartbeat_ivl: float = 1.0
    peer_timeout: float = 10.0
    status: bool = True

    def __post_init__(self) -> None:
        positive("hwm", self.hwm, integer=True)
        positive("heartbeat_ivl", self.heartbeat_ivl)
        positive("peer_timeout", self.peer_timeout)
        if self.peer_timeout <= self.heartbeat_ivl:
            raise InvalidArgumentError(f"peer_timeout ({self.peer_timeout}) must be longer than heartbeat_ivl ({self.heartbeat_ivl})")

    @classmethod
    def default(cls, field: str) -> Any:
        """The default of ``field`` (for command-line help)."""
        return {f.name: f.default for f in dataclasses.fields(cls)}[field]


@dataclass(frozen=True)
class PublishOptions(LinkOptions):
    """The publisher's options (see ``framebus.net.publish``): ``mode`` ``"latest"`` or
    ``"lossless"``; ``compress`` None or ``"zstd"``/``"zstd:LEVEL"``. ``encode`` ``"h264"``,
    ``"hevc"``, ``"av1"`` or ``"mjpeg"`` sends encoded packets instead of raw frames, at
    ``bitrate`` (bits/s or "8M"), a keyframe every ``gop`` frames, with ``encoder`` ("auto": a
    hardware one that works here, else software; or an FFmpeg encoder name); ``drop_alpha``
    lets an encoded bridge take (h, w, 4) images and send their first three channels only (no
    codec here carries alpha: without it such a stream is refused); see docs/video.md.
    ``engine_options``: the options of one engine (``ZmqPublishOptions`` or ``ZenohLink``; None:
    the engine's defaults). ``copy_threshold``, ``curve_certificate`` and ``curve_location``, the
    ZeroMQ publisher's options, are still taken here: they make ``engine_options`` a
    ``ZmqPublishOptions`` (a ValueError beside another engine's options)."""

    mode: str = "latest"
    compress: Any = None
    encode: Optional[str] = None
    bitrate: Any = None
    gop: Optional[int] = None
    encoder: Optional[str] = None
    drop_alpha: bool = False
    engine_options: Any = None
    copy_threshold: InitVar[Any] = None
    curve_certificate: InitVar[Any] = None
    curve_location: InitVar[Any] = None

    def __post_init__(self, copy_threshold: Any = None, curve_certificate: Any = None, curve_location: Any = None) -> None:  # type: ignore[override]
        super().__post_init__()
        legacy = {"copy_threshold": copy_threshold, "curve_certificate": curve_certificate, "curve_location": curve_location}
        object.__setattr__(self, "engine_options", registry.engine_options("publish", self.engine_options, legacy))
        if not isinstance(self.drop_alpha, bool):
            raise TypeError(f"drop_alpha must be True or False, got {self.drop_alpha!r}")
        if self.encode is None and ((self.bitrate, self.gop, self.encoder) != (None, None, None) or self.drop_alpha):
            raise InvalidArgumentError(
                "bitrate, gop, encoder and drop_alpha apply to an encoded bridge: give encode='h264' (or hevc, av1, mjpeg) too "
                "(a raw bridge carries every channel, alpha included)"
            )
        if self.mode not in ("latest", "lossless"):
            raise InvalidArgumentError(f"mode must be 'latest' or 'lossless', got {self.mode!r}")


@dataclass(frozen=True)
class SubscribeOptions(LinkOptions):
    """The subscriber's options (see ``framebus.net.subscribe``): ``mode`` None (the
    publisher's) or one to insist on; ``shape``/``dtype`` what frames must be; ``slots`` of the
    local stream (default: the publisher's); ``timeout`` seconds to wait for the publisher's first
    answer (None: return at once); ``identity`` how the publisher knows this subscriber across
    reconnects (default ``b"HOST/local_name"``); ``keep`` the local stream when stopping;
    ``tune_malloc`` keeps received frames' buffers in the heap (see ``framebus.net.wire.heap``);
    ``packets``: from an encoded publisher, keep its packets in the local stream (a byte stream)
    instead of decoding them. ``engine_options``: the options of one engine
    (``ZmqSubscribeOptions`` or ``ZenohLink``; None: the engine's defaults);
    ``curve_certificate`` and ``curve_server_certificate``, the ZeroMQ subscriber's options, are
    still taken here and make ``engine_options`` a ``ZmqSubscribeOptions``."""

    mode: Optional[str] = None
    shape: Any = None
    dtype: Any = None
    slots: Optional[int] = None
    timeout: Optional[float] = 10.0
    identity: Optional[bytes] = None
    keep: bool = False
    tune_malloc: bool = True
    packets: bool = False
    engine_options: Any = None
    curve_certificate: InitVar[Any] = None
    curve_server_certificate: InitVar[Any] = None

    def __post_init__(self, curve_certificate: Any = None, curve_server_certificate: Any = None) -> None:  # type: ignore[override]
        super().__post_init__()
        legacy = {"curve_certificate": curve_certificate, "curve_server_certificate": curve_server_certificate}
        object.__setattr__(self, "engine_options", registry.engine_options("subscribe", self.engine_options, legacy))
        if self.mode not in (None, "latest", "lossless"):
            raise InvalidArgumentError(f"mode must be None (the publisher's), 'latest' or 'lossless', got {self.mode!r}")
        positive("slots", self.slots, integer=True, allow_none=True)
        positive("timeout", self.timeout, allow_none=True)
        if self.identity is not None and (not isinstance(self.identity, bytes) or not 0 < len(self.identity) <= 255 or self.identity[0] == 0):
            raise InvalidArgumentError(f"identity must be 1 to 255 bytes not starting with a zero byte, got {self.identity!r}")
