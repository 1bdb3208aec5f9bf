"""The Zenoh engine of the bridge: the same two ends, protocol and credit logic as over ZeroMQ,
carried by Eclipse Zenoh (``eclipse-zenoh``) instead of a ROUTER/DEALER pair.

Only the transport changes. The publisher's ROUTER becomes a Zenoh subscriber on ``KEY/up``
(every subscriber's HELLO/ACK/HEARTBEAT/BYE, the sender's identity in the attachment) and one
Zenoh publisher per subscriber on ``KEY/down/<identity in hex>``; a subscriber's DEALER becomes a
Zenoh publisher on ``KEY/up`` and a subscriber on its own ``KEY/down/...`` key. A FRAME's header
travels as the sample's attachment and its payload as the sample's payload, so one message
stays one Zenoh sample. Frames, ACKs, END, restarts, the lossless/latest logic and encoded video
(``encode.VideoPublishing``, ``decode.VideoSubscribing``) are those of ``publisher.py`` /
``subscriber.py``, unchanged: the small transport classes below give them the few calls they
make (poll, non-blocking receive and send, "unreachable" when nobody listens, which Zenoh's
matching status tells). Neither this module nor the shared ones import pyzmq.

Zenoh's own options pass through: a configuration file (``zenoh_config``), ``listen`` and
``connect`` endpoints (``tcp/HOST:PORT``) and multicast ``scouting`` on or off. Frames are put
reliable, with congestion control BLOCK (the credit window bounds what is in flight) and
express (not batched with other messages).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

try:
    import zenoh
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("the Zenoh engine needs eclipse-zenoh: pip install 'framebus[zenoh]'") from _exc

from ..errors import InvalidArgumentError
from . import zenoh_wire
from .decode import VideoSubscribing
from .encode import VideoPublishing
from .base import BridgeStats
from .errors import BridgeError, EndpointError, EndpointInUseError
from .publisher import Publisher
from .zenoh_reach import Reach

#: How long a new subscriber's down key may take to show as matched on the publisher's side
#: (its subscription and its HELLO can travel on different priorities).
MATCH_GRACE_S = 2.0


@dataclass(frozen=True)
class ZenohLink:
    """How a Zenoh engine joins the Zenoh network.

    ``zenoh_config``: a Zenoh configuration file (JSON5), used as it is, with the fields below
    on top. ``listen`` / ``connect``: Zenoh endpoints (``"tcp/0.0.0.0:7447"``,
    ``"tcp/router-host:7447"``). ``scouting``: multicast scouting on/off (None: the
    configuration's, which is on in Zenoh's default peer mode). ``zenoh_mode``: ``"peer"`` (default)
    or ``"client"`` (through a router only)."""

    zenoh_config: Any = None
    listen: Tuple[str, ...] = ()
    connect: Tuple[str, ...] = ()
    scouting: Optional[bool] = None
    zenoh_mode: Optional[str] = None

    def __post_init__(self) -> None:
        for name in ("listen", "connect"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and "/" in v for v in value):
                raise EndpointError(f"{name} must be Zenoh endpoints such as 'tcp/127.0.0.1:7447', got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if self.zenoh_config is not None:
            if not isinstance(self.zenoh_config, (str, os.PathLike)):
                raise TypeError(f"zenoh_config must be a file path, got {self.zenoh_config!r}")
            if not os.path.isfile(self.zenoh_config):
                raise FileNotFoundError(2, f"Zenoh configuration file {os.fspath(self.zenoh_config)!r} does not exist")
        if self.zenoh_mode not in (None, "peer", "client"):
            raise InvalidArgumentError(f"zenoh_mode must be 'peer' or 'client', got {self.zenoh_mode!r}")

    @classmethod
    def take(cls, fields: Dict[str, Any]) -> "ZenohLink":
        """Pops this class's fields out of ``fields`` (keywords of ``framebus.net.publish``)."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: fields.pop(n) for n in names if n in fields})

    def config(self) -> "zenoh.Config":
        """The Zenoh configuration this link opens its session with."""
        try:
            cfg = zenoh.Config.from_file(os.fspath(self.zenoh_config)) if self.zenoh_config is not None else zenoh.Config()
        except zenoh.ZError as exc:
            raise InvalidArgumentError(f"cannot read Zenoh configuration {os.fspath(self.zenoh_config)!r}: {exc}") from None
        try:
            if self.zenoh_config is None:
                # No shared-memory transport (its file in /dev/shm outlives a killed process), a
                # deeper transmission queue for large frames. A user's configuration file
                # decides for itself.
                zenoh_wire.tune(cfg)
            if self.zenoh_mode is not None:
                cfg.insert_json5("mode", json.dumps(self.zenoh_mode))
            if self.listen:
                cfg.insert_json5("listen/endpoints", json.dumps(list(self.listen)))
            if self.connect:
                cfg.insert_json5("connect/endpoints", json.dumps(list(self.connect)))
            if self.scouting is not None:
                cfg.insert_json5("scouting/multicast/enabled", json.dumps(bool(self.scouting)))
        except zenoh.ZError as exc:
            raise EndpointError(f"bad Zenoh endpoint in listen={self.listen} connect={self.connect}: {exc}") from None
        return cfg

    def open(self, cfg: Optional["zenoh.Config"] = None) -> "zenoh.Session":
        """Opens a Zenoh session with ``cfg`` (default: ``config()``); EndpointInUseError when a
        listen endpoint is taken, BridgeError for any other failure."""
        if cfg is None:
            cfg = self.config()
        try:
            return zenoh.open(cfg)
        except zenoh.ZError as exc:
            text = str(exc)
            if "in use" in text.lower():
                raise EndpointInUseError(98, f"cannot listen on {', '.join(self.listen)}: the address is already in use ({text})") from None
            raise BridgeError(f"cannot open a Zenoh session (listen={list(self.listen)}, connect={list(self.connect)}): {text}") from None


def check_key(key: Any) -> str:
    """``key`` if it is a Zenoh key expression without wildcards, else EndpointError."""
    if not isinstance(key, str):
        raise TypeError(f"the Zenoh key must be a string such as 'framebus/camera', got {key!r}")
    if not key or "*" in key or "$" in key or key.startswith("/") or key.endswith("/"):
        raise EndpointError(f"Zenoh key {key!r}: expected a key expression such as 'framebus/camera' (no wildcards, no leading or trailing '/')")
    try:
        zenoh.KeyExpr(key)
    except zenoh.ZError as exc:
        raise EndpointError(f"Zenoh key {key!r} is not a valid key expression: {exc}") from None
    return key


class _Part:
    """One received message part, as the subscriber reads it (its bytes as ``buffer``)."""

    __slots__ = ("buffer",)

    def __init__(self, data: Any) -> None:
        self.buffer = memoryview(data)


class _Inbox:
    """Samples handed over by Zenoh's callback thread to the bridge's worker thread."""

    def __init__(self) -> None:
        self._items: Deque[Any] = collections.deque()
        self._cond = threading.Condition()

    def put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def poll(self, timeout_ms: int) -> bool:
        """Whether an item is waiting, after waiting up to ``timeout_ms`` for one."""
        if self._items:
            return True
        with self._cond:
            if timeout_ms > 0:
                self._cond.wait_for(lambda: bool(self._items), timeout_ms / 1000)
            return bool(self._items)

    def pop(self) -> Any:
        """The oldest item; IndexError when none is waiting."""
        return self._items.popleft()

    def take(self) -> Any:
        """The oldest item, or None when none is waiting."""
        try:
            return self._items.popleft()
        except IndexError:
            return None


def _bytes(zbytes: Any) -> bytes:
    return b"" if zbytes is None else zbytes.to_bytes()


class _PublisherSocket(_Inbox):
    """The publisher's transport (see ``publisher.py``) over a Zenoh session."""

    def __init__(self, session: Any, key: str) -> None:
        super().__init__()
        self._zsession = session
        self._key = key
        self._downs: Dict[bytes, List[Any]] = {}
        self._up = session.declare_subscriber(f"{key}/up", self._on_sample)

    def _on_sample(self, sample: Any) -> None:
        self.put((_bytes(sample.attachment), sample.payload))

    def recv(self) -> Optional[List[bytes]]:
        item = self.take()
        if item is None:
            return None
        identity, payload = item
        down = self._downs.get(identity)
        if down is not None and not down[1] and not down[0].matching_status.matching:
            down[1] = time.monotonic() + MATCH_GRACE_S  # back again: give its subscription time to show
        return [identity, payload.to_bytes()]

    def send(self, identity: bytes, body: Sequence[Any]) -> bool:
        """Puts one message on the subscriber's down key; False when it is not listening."""
        down = self._downs.get(identity)
        if down is None:
            pub = self._zsession.declare_publisher(
                f"{self._key}/down/{identity.hex()}", congestion_control=zenoh.CongestionControl.BLOCK,
                reliability=zenoh.Reliability.RELIABLE, express=True,
            )
            # [publisher, until when to wait for a new subscriber's subscription to show]
            down = self._downs[identity] = [pub, time.monotonic() + MATCH_GRACE_S]
        pub = down[0]
        while not pub.matching_status.matching:
            # Only a subscriber never seen yet is waited for (its subscription and its HELLO
            # may travel apart); one that was there and is not any more is unreachable now.
            if time.monotonic() >= down[1]:
                return False
            time.sleep(0.002)
        down[1] = 0.0
        if len(body) == 2:
            pub.put(_wire(body[1]), attachment=_wire(body[0]))
        else:
            pub.put(_wire(body[0]))
        return True

    def close(self) -> None:
        for pub, _ in self._downs.values():
            pub.undeclare()
        self._downs.clear()
        self._up.undeclare()


class _SubscriberSocket(_Inbox):
    """The subscriber's transport (see ``subscriber.py``) over a Zenoh session."""

    def __init__(self, session: Any, key: str, identity: bytes) -> None:
        super().__init__()
        self._identity = identity
        self._down = session.declare_subscriber(f"{key}/down/{identity.hex()}", self._on_sample)
        self._up = session.declare_publisher(
            f"{key}/up", congestion_control=zenoh.CongestionControl.BLOCK, reliability=zenoh.Reliability.RELIABLE, express=True,
        )

    def _on_sample(self, sample: Any) -> None:
        # Runs on zenoh-python's callback thread: the copy out of Zenoh's fragments (GIL held)
        # happens here, while the bridge's thread writes the previous frame into its slot (GIL
        # released), and Zenoh's receive buffers are freed at once. In latest mode a frame that a
        # newer one replaces before it is stored was copied for nothing (the credit window bounds
        # how many). A failure is handed to the bridge's thread (Zenoh would only log it, and the
        # frame would be lost).
        try:
            item: Any = _parts(sample)
        except Exception as exc:  # noqa: BLE001 - re-raised by recv() on the bridge's thread
            item = exc
        self.put(item)

    def recv(self) -> Optional[List[_Part]]:
        item = self.take()
        if isinstance(item, Exception):
            raise item
        return item

    def send(self, msg: bytes) -> bool:
        # Like a DEALER with IMMEDIATE: nothing is queued while no publisher listens.
        if not self._up.matching_status.matching:
            return False
        self._up.put(msg, attachment=self._identity)
        return True

    def close(self) -> None:
        self._up.undeclare()
        self._down.undeclare()


def _parts(sample: Any) -> List[_Part]:
    """A received sample as the subscriber's message parts: the attachment (a FRAME's header),
    if any, then the payload, each read out of Zenoh in one copy (zenoh_wire.frame_bytes)."""
    if sample.attachment is None:
        return [_Part(zenoh_wire.frame_bytes(sample.payload))]
    return [_Part(sample.attachment.to_bytes()), _Part(zenoh_wire.frame_bytes(sample.payload))]


def _wire(part: Any) -> Any:
    """A message part as Zenoh takes it (bytes, or a ZBytes made once per frame)."""
    if isinstance(part, (bytes, zenoh.ZBytes)):
        return part
    return bytes(part)


class _Reaching:
    """The state a Zenoh end reports (``stats.state``, hence its status line and ``framebus
    ls``): "waiting for a Zenoh router at ENDPOINT" (or for a peer) while its session reaches no
    Zenoh router or peer, else the end's own (``state``, which its logic keeps comparing)."""

    link: ZenohLink
    frames: int
    _reach: Optional[Reach] = None

    @property
    def stats(self) -> BridgeStats:
        s = super().stats  # type: ignore[misc]
        return s if self._reach is None else dataclasses.replace(s, state=self._reach.state(s.state))

    def reach_note(self) -> str:
        """Empty once the session reached a Zenoh router or peer; else a clause saying that it
        never did and where it looked (for the line printed when the end stops)."""
        return "" if self._reach is None or self.frames else self._reach.note()

    def _open_session(self) -> Any:
        cfg = self.link.config()
        self._reach = Reach(cfg)
        session = self.link.open(cfg)
        self._reach.attach(session)
        return session

    def _close_session(self, session: Any) -> None:
        if self._reach is not None:
            self._reach.attach(None)
        session.close()


class ZenohPublisher(_Reaching, Publisher):
    """Publishes a local stream over Zenoh; see ``framebus.net.publish(..., engine="zenoh")``."""

    engine = "zenoh"

    def __init__(self, stream_name: str, key: str, options: Any, link: ZenohLink) -> None:
        if options.curve_certificate is not None:
            raise InvalidArgumentError("CURVE is a ZeroMQ feature; secure a Zenoh link with Zenoh's TLS/access control in zenoh_config")
        self.link = link
        self.key = key
        self._zsession: Any = None
        self._staging = zenoh_wire.Staging()
        super().__init__(stream_name, key, options)

    def _check_endpoint(self, endpoint: Any) -> str:
        return check_key(endpoint)

    def _open_transport(self) -> _PublisherSocket:
        self._zsession = self._open_session()
        return _PublisherSocket(self._zsession, self.key)

    def _close_transport(self) -> None:
        if self._zsession is not None:
            self._close_session(self._zsession)
            self._zsession = None

    def _raw_payload(self, arr: Any, frame: Any) -> Any:
        """The frame as one Zenoh payload (see zenoh_wire.frame_payload: two copies, the first
        into this publisher's staging buffer; then shared by every subscriber and kept for a
        resend)."""
        return zenoh_wire.frame_payload(arr, self._staging)


class ZenohVideoPublisher(VideoPublishing, ZenohPublisher):
    """Encodes the local stream and publishes its packets over Zenoh; see
    ``framebus.net.publish(..., engine="zenoh", encode=...)``."""


class ZenohSubscriber(_Reaching, VideoSubscribing):
    """Receives a stream published over Zenoh (decoding an encoded publisher's packets); see
    ``framebus.net.subscribe(..., engine="zenoh")``."""

    engine = "zenoh"

    def __init__(self, key: str, local_name: str, options: Any, link: ZenohLink) -> None:
        if options.curve_server_certificate is not None:
            raise InvalidArgumentError("CURVE is a ZeroMQ feature; secure a Zenoh link with Zenoh's TLS/access control in zenoh_config")
        self.link = link
        self.key = key
        self._zsession: Any = None
        super().__init__(key, local_name, options)

    def _check_endpoint(self, endpoint: Any) -> str:
        return check_key(endpoint)

    def _open_transport(self) -> _SubscriberSocket:
        self._zsession = self._open_session()
        return _SubscriberSocket(self._zsession, self.key, self.identity)

    def _close_transport(self) -> None:
        if self._zsession is not None:
            self._close_session(self._zsession)
            self._zsession = None

    def _no_answer(self) -> str:
        if self._reach is not None and not self._reach.now():
            return (
                f"no framebus publisher answered on Zenoh key {self.key!r} within {self.timeout} s: {self._reach.missing} "
                "(start the router, see docs/zenoh.md, or check connect/listen)"
            )
        return (
            f"no framebus publisher answered on Zenoh key {self.key!r} within {self.timeout} s: check the key, that "
            "`framebus bridge publish ... --engine zenoh` runs, and that both sessions reach each other (listen/connect, scouting, router)"
        )


__all__ = ["ZenohLink", "ZenohPublisher", "ZenohSubscriber", "ZenohVideoPublisher", "check_key"]
