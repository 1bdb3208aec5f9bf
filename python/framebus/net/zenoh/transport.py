"""The Zenoh engine's transports: the same two ends, protocol and credit logic as over ZeroMQ,
carried by Eclipse Zenoh (``eclipse-zenoh``) instead of a ROUTER/DEALER pair.

Only the transport changes. The publisher's ROUTER becomes a Zenoh subscriber on ``KEY/up``
(every subscriber's HELLO/ACK/HEARTBEAT/BYE, the sender's identity in the attachment) and one
Zenoh publisher per subscriber on ``KEY/down/<identity in hex>``; a subscriber's DEALER becomes a
Zenoh publisher on ``KEY/up`` and a subscriber on its own ``KEY/down/...`` key. A FRAME's header
travels as the sample's attachment and its payload as the sample's payload, so one message
stays one Zenoh sample. Frames, ACKs, END, restarts, the lossless/latest logic and encoded video
(``framebus.net.video``) are those of ``framebus.net.ends``, unchanged: the transports below
give them the few calls of the transport contract (``framebus.net.engine.contract``: poll,
non-blocking receive and send, "unreachable" when nobody listens, which Zenoh's matching status
tells). Neither this module nor the shared ones import pyzmq.

Zenoh's own options pass through: a configuration file (``zenoh_config``), ``listen`` and
``connect`` endpoints (``tcp/HOST:PORT``) and multicast ``scouting`` on or off. Frames are put
reliable, with congestion control BLOCK (the credit window bounds what is in flight) and
express (not batched with other messages).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

try:
    import zenoh
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("the Zenoh engine needs eclipse-zenoh: pip install 'framebus[zenoh]'") from _exc

from . import frames
from .inbox import Inbox
from .link import ZenohLink, check_key
from .reach import Reach

#: How long a new subscriber's down key may take to show as matched on the publisher's side
#: (its subscription and its HELLO can travel on different priorities).
MATCH_GRACE_S = 2.0


class _Part:
    """One received message part, as the subscriber reads it (its bytes as ``buffer``)."""

    __slots__ = ("buffer",)

    def __init__(self, data: Any) -> None:
        self.buffer = memoryview(data)


def _bytes(zbytes: Any) -> bytes:
    return b"" if zbytes is None else zbytes.to_bytes()


class _PublisherSocket(Inbox):
    """The publisher's channel (a ``PublisherChannel``) over a Zenoh session."""

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


class _SubscriberSocket(Inbox):
    """The subscriber's channel (a ``SubscriberChannel``) over a Zenoh session."""

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
    if any, then the payload, each read out of Zenoh in one copy (frames.frame_bytes)."""
    if sample.attachment is None:
        return [_Part(frames.frame_bytes(sample.payload))]
    return [_Part(sample.attachment.to_bytes()), _Part(frames.frame_bytes(sample.payload))]


def _wire(part: Any) -> Any:
    """A message part as Zenoh takes it (bytes, or a ZBytes made once per frame)."""
    if isinstance(part, (bytes, zenoh.ZBytes)):
        return part
    return bytes(part)


class _Session:
    """The Zenoh session of one end, and whether it reaches a router or peer: the part both of
    the Zenoh engine's transports share. ``state`` shows "waiting for a Zenoh router at
    ENDPOINT" (or for a peer) while the session reaches no Zenoh router or peer."""

    name = "zenoh"

    def __init__(self, link: Optional[ZenohLink] = None) -> None:
        self.link = link if link is not None else ZenohLink()
        self.reach: Optional[Reach] = None
        self._zsession: Any = None

    def check_endpoint(self, endpoint: Any) -> str:
        return check_key(endpoint)

    def _open_session(self) -> Any:
        cfg = self.link.config()
        self.reach = Reach(cfg)
        self._zsession = self.link.open(cfg)
        self.reach.attach(self._zsession)
        return self._zsession

    def close(self) -> None:
        session, self._zsession = self._zsession, None
        if session is not None:
            if self.reach is not None:
                self.reach.attach(None)
            session.close()

    def state(self, state: str) -> str:
        return state if self.reach is None else self.reach.state(state)

    def reach_note(self, frames: int) -> str:
        """Empty once the session reached a Zenoh router or peer (or once frames went through);
        else a clause saying that it never did and where it looked."""
        return "" if self.reach is None or frames else self.reach.note()


class ZenohPublishing(_Session):
    """A Zenoh publisher's transport (a ``PublishTransport``); see
    ``framebus.net.publish(..., engine="zenoh")``."""

    def __init__(self, link: Optional[ZenohLink] = None) -> None:
        super().__init__(link)
        self._staging = frames.Staging()

    def open(self, endpoint: str, mode: str) -> Tuple[_PublisherSocket, str]:
        return _PublisherSocket(self._open_session(), endpoint), endpoint

    def raw_payload(self, arr: Any, frame: Any, pin_cap: int) -> Tuple[Any, bool]:
        """The frame as one Zenoh payload (see frames.frame_payload: two copies, the first
        into this publisher's staging buffer; then shared by every subscriber and kept for a
        resend). Never pins the slot."""
        return frames.frame_payload(arr, self._staging), False

    def pins_full(self, frame_bytes: int, pin_cap: int) -> bool:
        return False


class ZenohSubscribing(_Session):
    """A Zenoh subscriber's transport (a ``SubscribeTransport``); see
    ``framebus.net.subscribe(..., engine="zenoh")``."""

    def open(self, endpoint: str, identity: bytes) -> _SubscriberSocket:
        return _SubscriberSocket(self._open_session(), endpoint, identity)

    def no_answer(self, endpoint: str, timeout: Optional[float]) -> str:
        waited = "no time" if timeout is None else f"{timeout:g}"
        if self.reach is not None and not self.reach.now():
            return (
                f"no framebus publisher answered on Zenoh key {endpoint!r} within {waited} s: {self.reach.missing} "
                "(start the router, see docs/zenoh.md, or check connect/listen)"
            )
        return (
            f"no framebus publisher answered on Zenoh key {endpoint!r} within {waited} s: check the key, that "
            "`framebus bridge publish ... --engine zenoh` runs, and that both sessions reach each other (listen/connect, scouting, router)"
        )


__all__ = ["MATCH_GRACE_S", "ZenohPublishing", "ZenohSubscribing"]
