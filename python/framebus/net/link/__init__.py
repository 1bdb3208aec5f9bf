"""The link room: what every running end (a bridge's publisher or subscriber, a ROS 2 image
end) shares whatever carries its bytes: the thread and lifecycle (``Bridge``, ``BridgeStats``,
``SLICE_S``, ``TICK_S``), the status records that ``framebus ls`` and ``framebus.net.bridges()``
read (``StatusFile``, ``bridges``, ``by_stream``, ``summary``), the one rule for creating or
taking over a local stream (``local_stream``), and the foreground helpers of the commands
(``stop_bridge``, ``watch_bridge``).

Public names: those in ``__all__``; the modules behind them are this room's own business."""

from __future__ import annotations

from .base import SLICE_S, TICK_S, Bridge, BridgeStats, positive
from .console import stop_bridge, watch_bridge
from .local import local_stream
from .status import StatusFile, bridges, by_stream, summary

__all__ = [
    "SLICE_S",
    "TICK_S",
    "Bridge",
    "BridgeStats",
    "StatusFile",
    "bridges",
    "by_stream",
    "local_stream",
    "positive",
    "stop_bridge",
    "summary",
    "watch_bridge",
]
