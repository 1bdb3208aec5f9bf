"""Exceptions of the bridge. Each subclasses the builtin a caller would catch (ValueError,
OSError, TimeoutError) and ``framebus.FramebusError``, like the rest of framebus."""

from __future__ import annotations

import errno as _errno

from ...errors import FramebusError

__all__ = [
    "BridgeError",
    "EndpointError",
    "EndpointInUseError",
    "SpecMismatchError",
    "PeerTimeoutError",
    "ProtocolError",
]


class BridgeError(FramebusError):
    """A bridge could not start, or had to stop (base class of the bridge's errors)."""


class EndpointError(BridgeError, ValueError):
    """The endpoint is malformed, of a transport the bridge does not take, or names a host
    that does not resolve."""


class EndpointInUseError(BridgeError, OSError):
    """Another socket is already bound to the endpoint (EADDRINUSE)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        if self.errno is None:
            self.errno = _errno.EADDRINUSE


class SpecMismatchError(BridgeError, ValueError):
    """The frames on the wire do not match what the subscriber was told to expect (shape,
    dtype, mode), or its local stream exists with another spec and is not the bridge's to
    replace."""


class PeerTimeoutError(BridgeError, TimeoutError):
    """No framebus bridge answered at the endpoint in time (unreachable host, nothing
    listening, a firewall, or CURVE keys the other side does not accept)."""


class ProtocolError(BridgeError, ValueError):
    """The peer is not a framebus bridge or speaks another version of its protocol."""
