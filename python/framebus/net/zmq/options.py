"""The ZeroMQ engine's own options, one class per end. Importing this module needs no pyzmq
(``framebus.net`` routes keywords to these classes before any engine is started)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidArgumentError

#: Frames smaller than this many bytes are copied into the message rather than sent from their
#: slot (pyzmq's own zero-copy threshold, 64 KiB).
COPY_THRESHOLD = 65536


@dataclass(frozen=True)
class ZmqPublishOptions:
    """A ZeroMQ publisher's options: frames smaller than ``copy_threshold`` bytes are copied
    into the message, larger ones sent zero-copy from their slot; ``curve_certificate`` this
    end's secret certificate file (CURVE encryption), ``curve_location`` a directory of the
    public certificates of the subscribers allowed in (without it, any subscriber that has the
    publisher's public key may connect)."""

    copy_threshold: int = COPY_THRESHOLD
    curve_certificate: Any = None
    curve_location: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.copy_threshold, bool) or not isinstance(self.copy_threshold, int) or self.copy_threshold < 0:
            raise TypeError(f"copy_threshold must be an int >= 0, got {self.copy_threshold!r}")
        if self.curve_location is not None and self.curve_certificate is None:
            raise InvalidArgumentError("curve_location needs curve_certificate (the publisher's secret certificate)")

    @classmethod
    def default(cls, field: str) -> Any:
        """The default of ``field`` (for command-line help)."""
        return {f.name: f.default for f in dataclasses.fields(cls)}[field]


@dataclass(frozen=True)
class ZmqSubscribeOptions:
    """A ZeroMQ subscriber's options: ``curve_server_certificate`` the publisher's public
    certificate file (turns CURVE on); ``curve_certificate`` this end's secret certificate file
    (needed when the publisher authenticates subscribers; without it a new key pair is made)."""

    curve_certificate: Any = None
    curve_server_certificate: Any = None

    def __post_init__(self) -> None:
        if self.curve_certificate is not None and self.curve_server_certificate is None:
            raise InvalidArgumentError("curve_certificate needs curve_server_certificate (the publisher's public certificate)")
