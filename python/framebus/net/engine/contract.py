"""The transport contract: what a bridge's publisher and subscriber need from an engine, as
``typing.Protocol`` classes. An engine (ZeroMQ, Zenoh) provides one transport object per end;
the ends (``framebus.net.ends``) speak framebus's protocol (``framebus.net.wire``) through it
and know nothing else of the engine.

A transport opens a *channel* in the end's thread (``open``) and releases what it opened in
``close``. The publisher's channel is a ROUTER in ZeroMQ's words: it hears every subscriber
(``recv`` gives ``[identity, message]``) and sends to one (``send(identity, parts)``). The
subscriber's channel is a DEALER: it hears its publisher (``recv`` gives the message parts, each
with a ``buffer`` memoryview) and sends to it (``send(message)``). Every call is non-blocking
except ``poll``; a ``send`` that cannot be done now (nobody listens, the connection is not up)
returns False, and the end decides what that means (a subscriber is unreachable, a HELLO is
retried).
"""

from __future__ import annotations

from typing import Any, List, Optional, Protocol, Sequence, Tuple


class PublisherChannel(Protocol):
    """The publisher's side of the link (see the module's docstring)."""

    def poll(self, timeout_ms: int) -> bool:
        """Whether a message is waiting, after waiting up to ``timeout_ms`` for one."""

    def recv(self) -> Optional[List[Any]]:
        """One subscriber message as ``[identity, message]``, or None when none is waiting."""

    def send(self, identity: bytes, parts: Sequence[Any]) -> bool:
        """Sends ``parts`` to subscriber ``identity``; False when it cannot be reached now."""

    def close(self) -> None:
        """Closes the channel (idempotent)."""


class SubscriberChannel(Protocol):
    """The subscriber's side of the link (see the module's docstring)."""

    def poll(self, timeout_ms: int) -> bool:
        """Whether a message is waiting, after waiting up to ``timeout_ms`` for one."""

    def recv(self) -> Optional[List[Any]]:
        """One publisher message as its parts (each with a ``buffer``), or None."""

    def send(self, msg: bytes) -> bool:
        """Sends ``msg`` to the publisher; False when no publisher can take it now."""

    def close(self) -> None:
        """Closes the channel (idempotent)."""


class Transport(Protocol):
    """What both ends need from their engine's transport object."""

    #: The engine's name in the registry ("zmq", "zenoh").
    name: str

    def check_endpoint(self, endpoint: Any) -> str:
        """``endpoint`` if this transport can use it, else EndpointError (TypeError for a
        non-string). Called in the caller's thread, before the end starts."""

    def close(self) -> None:
        """Releases what ``open`` opened besides the channel (a session); idempotent."""

    def state(self, state: str) -> str:
        """The state to show for an end whose own state is ``state`` (a transport that can tell
        it reaches nobody says so instead)."""

    def reach_note(self, frames: int) -> str:
        """A clause for the line printed when the end stops ("" when there is nothing to add)."""


class PublishTransport(Transport, Protocol):
    """A publisher's transport."""

    def open(self, endpoint: str, mode: str) -> Tuple[PublisherChannel, str]:
        """Opens the publisher's channel on ``endpoint`` for a publisher in ``mode``; returns it
        and the endpoint actually bound (a port chosen by the system filled in)."""

    def raw_payload(self, arr: Any, frame: Any, pin_cap: int) -> Tuple[Any, bool]:
        """A raw frame's bytes as this transport sends them, and whether a large frame was
        copied (rather than sent from its slot). ``frame`` is the view holding the slot, or None
        when ``arr`` is a copy already; ``pin_cap``: slots this publisher may keep pinned."""

    def pins_full(self, frame_bytes: int, pin_cap: int) -> bool:
        """Whether to wait before taking the next frame, because every slot this transport may
        pin is still being sent (waits a little for one itself)."""


class SubscribeTransport(Transport, Protocol):
    """A subscriber's transport."""

    def open(self, endpoint: str, identity: bytes) -> SubscriberChannel:
        """Opens the subscriber's channel to ``endpoint``, known to the publisher as ``identity``."""

    def no_answer(self, endpoint: str, timeout: Optional[float]) -> str:
        """Why no publisher answered at ``endpoint`` within ``timeout`` s, and what to check."""
