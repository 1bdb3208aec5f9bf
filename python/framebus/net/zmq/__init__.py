"""The ZeroMQ room: the ZeroMQ engine of ``framebus.net``. ``options`` (its options, one class
per end; no pyzmq needed), ``sockets`` (endpoint checks, CURVE certificates, ZeroMQ's errors as
framebus exceptions) and ``transport`` (the publisher's ROUTER and the subscriber's DEALER
behind the transport contract of ``framebus.net.engine``); the last two import pyzmq.

Public names: ``ZmqPublishOptions``, ``ZmqSubscribeOptions``, ``COPY_THRESHOLD`` here, and the
modules ``sockets`` and ``transport`` (import them by name; they need ``framebus[net]``)."""

from __future__ import annotations

from .options import COPY_THRESHOLD, ZmqPublishOptions, ZmqSubscribeOptions

__all__ = ["COPY_THRESHOLD", "ZmqPublishOptions", "ZmqSubscribeOptions"]
