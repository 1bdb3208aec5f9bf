"""What a bridge carries, apart from how: the payload half of an end, as ``typing.Protocol``
classes, and the raw payloads. A ``Publisher`` or ``Subscriber`` is one class for every engine
(its transport) and every payload: raw frames here, encoded video in ``framebus.net.video``.

A publisher's payload names the stream the publisher reads (``stream``), runs whatever stage
feeds it (``start``/``stop``/``check``), may pack a frame its own way (``pack``: an encoded
packet travels without its frame table), may hold a frame back from a subscriber (``admit``:
nothing but a keyframe after a join or a gap), hears of subscribers joining and leaving, and
adds to the WELCOME and the status record. A subscriber's payload hears the WELCOME (and may
then ask the subscriber to write into another stream, which it reads), is told of each local
stream the subscriber creates, and adds to the stats and the status record."""

from __future__ import annotations

from typing import Any, Dict, Optional, Protocol

from ..link import BridgeStats


class PublisherPayload(Protocol):
    """What a publisher sends (see the module's docstring)."""

    #: The local stream the publisher reads.
    stream: str

    def start(self) -> None:
        """Starts the payload's own stage, if any (on the publisher's thread, before its source opens)."""

    def stop(self) -> None:
        """Stops that stage and removes what it made (idempotent)."""

    def check(self) -> None:
        """Raises the error that stopped the payload's stage, if any."""

    def pack(self, frame: Any) -> Optional[bytes]:
        """The frame's bytes as they go on the wire when the payload packs them itself (the
        caller releases ``frame``), or None for the usual raw path (``frame`` may be None)."""

    def admit(self, identity: bytes, meta: bytes) -> bool:
        """Whether the frame with metadata ``meta`` may go to subscriber ``identity``."""

    def joined(self, identity: bytes) -> None:
        """Subscriber ``identity`` was welcomed."""

    def left(self, identity: bytes) -> None:
        """Subscriber ``identity`` is gone."""

    def welcome(self) -> Dict[str, Any]:
        """More for the WELCOME."""

    def record(self, record: Dict[str, Any]) -> Dict[str, Any]:
        """The status record, with what the payload adds."""

    def describe(self) -> str:
        """A word for ``repr`` ("" or ending with a space)."""


class SubscriberPayload(Protocol):
    """What a subscriber does with what it receives (see the module's docstring)."""

    #: The decoder stage of an encoded stream once it runs, else None.
    decoder: Any

    def welcome(self, body: Dict[str, Any], endpoint: str) -> Optional[str]:
        """Hears the publisher's WELCOME; returns the stream the subscriber should write into
        instead of its own (it is then this payload's to read), or None."""

    def stream_made(self, name: str) -> None:
        """The subscriber made a new local stream ``name`` (before writing into it)."""

    def check(self) -> None:
        """Raises the error that stopped the payload's stage, if any."""

    def stop(self) -> None:
        """Stops the payload's stage (idempotent)."""

    def stats(self, s: BridgeStats) -> BridgeStats:
        """The subscriber's stats as the user sees them."""

    def record(self, record: Dict[str, Any]) -> Dict[str, Any]:
        """The status record, with what the payload adds."""


class RawFrames:
    """A publisher's raw payload: the stream's frames as they are (a ``PublisherPayload``)."""

    def __init__(self, stream: str, options: Any = None) -> None:
        self.stream = stream

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def check(self) -> None:
        pass

    def pack(self, frame: Any) -> Optional[bytes]:
        return None

    def admit(self, identity: bytes, meta: bytes) -> bool:
        return True

    def joined(self, identity: bytes) -> None:
        pass

    def left(self, identity: bytes) -> None:
        pass

    def welcome(self) -> Dict[str, Any]:
        return {}

    def record(self, record: Dict[str, Any]) -> Dict[str, Any]:
        return record

    def describe(self) -> str:
        return ""


class RawReceiving:
    """A subscriber's raw payload: frames (or an encoded publisher's packets, kept as they
    are) go into the local stream as they come (a ``SubscriberPayload``)."""

    decoder = None

    def welcome(self, body: Dict[str, Any], endpoint: str) -> Optional[str]:
        return None

    def stream_made(self, name: str) -> None:
        pass

    def check(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def stats(self, s: BridgeStats) -> BridgeStats:
        return s

    def record(self, record: Dict[str, Any]) -> Dict[str, Any]:
        return record
