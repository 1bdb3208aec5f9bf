"""The Zenoh room: everything framebus does over Eclipse Zenoh, used by the Zenoh engine of
``framebus.net`` and by ``framebus.ros2`` through these public names only.

Here (no eclipse-zenoh needed to import them): ``ZenohLink`` (how an end joins the Zenoh
network: the Zenoh engine's options), ``check_key``, ``Inbox`` (the queue from Zenoh's callback
thread to an end's thread) and ``Reach`` (whether a session reaches a router or peer, and the
state to show while it does not). Modules to import by name, which need eclipse-zenoh:
``frames`` (frames into Zenoh payloads and back; session tuning) and ``transport`` (the Zenoh
engine's transports behind the contract of ``framebus.net.engine``)."""

from __future__ import annotations

from .inbox import Inbox
from .link import ZenohLink, check_key
from .reach import Reach

__all__ = ["Inbox", "Reach", "ZenohLink", "check_key"]
