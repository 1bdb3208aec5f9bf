"""Subcommands of the ``framebus`` CLI (see framebus.cli.COMMANDS).

The names below are what the commands share with the modules that do the work of some of them
(``framebus.media.record`` and ``framebus.media.play``): waiting for a stream, watching the
segment a handle maps, and stopping cleanly on Ctrl-C / SIGTERM with the signal's exit status.
"""

from __future__ import annotations

from ._segment import REPLACED, REPLACED_ERRORS, StreamReplaced, open_watched
from ._signals import stop_on_signals, stopped_by_signal, stopped_status
from ._wait import wait_for_stream

__all__ = ["REPLACED", "REPLACED_ERRORS", "StreamReplaced", "open_watched", "stop_on_signals", "stopped_by_signal", "stopped_status", "wait_for_stream"]
