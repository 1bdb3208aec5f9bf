"""The engine room: the transport contract every engine meets (``PublishTransport``,
``SubscribeTransport``, their channels; ``typing.Protocol`` classes in ``contract``) and the one
registry of engines by name (``registry``: ``ENGINES``, ``DEFAULT``, ``engine``, ``names``).
The engines themselves live in their own rooms, ``framebus.net.zmq`` and ``framebus.net.zenoh``.

Public names: those in ``__all__``, and the module ``registry``."""

from __future__ import annotations

from . import registry
from .contract import PublisherChannel, PublishTransport, SubscriberChannel, SubscribeTransport, Transport

__all__ = ["PublishTransport", "PublisherChannel", "SubscribeTransport", "SubscriberChannel", "Transport", "registry"]
