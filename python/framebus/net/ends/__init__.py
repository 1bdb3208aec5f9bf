"""The ends room: a bridge's two ends, one class each for every engine and every payload
(``Publisher``, ``Subscriber``), their engine-independent options (``LinkOptions``,
``PublishOptions``, ``SubscribeOptions``) and the payload contract with the raw payloads
(``PublisherPayload``, ``SubscriberPayload``, ``RawFrames``, ``RawReceiving``).

Public names: those in ``__all__``; ``framebus.net`` is the door users go through."""

from __future__ import annotations

from .options import LinkOptions, PublishOptions, SubscribeOptions
from .payload import PublisherPayload, RawFrames, RawReceiving, SubscriberPayload
from .publisher import Publisher
from .subscriber import Subscriber

__all__ = [
    "LinkOptions",
    "PublishOptions",
    "Publisher",
    "PublisherPayload",
    "RawFrames",
    "RawReceiving",
    "SubscribeOptions",
    "Subscriber",
    "SubscriberPayload",
]
