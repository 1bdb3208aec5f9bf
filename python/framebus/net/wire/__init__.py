"""The wire room: framebus's own bridge protocol (``protocol``, versioned, pure Python), the
optional per-frame compression (``codec``), the heap tuning for received frames (``heap``) and
the bridge's exceptions (``errors``). No transport here: every engine carries these bytes.

Public names: the four modules, and the exception classes."""

from __future__ import annotations

from . import codec, heap, protocol
from .errors import BridgeError, EndpointError, EndpointInUseError, PeerTimeoutError, ProtocolError, SpecMismatchError

__all__ = [
    "BridgeError",
    "EndpointError",
    "EndpointInUseError",
    "PeerTimeoutError",
    "ProtocolError",
    "SpecMismatchError",
    "codec",
    "heap",
    "protocol",
]
