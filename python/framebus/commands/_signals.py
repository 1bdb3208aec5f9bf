"""Clean stops for long-running commands: the first Ctrl-C / SIGTERM asks, a second one insists."""

from __future__ import annotations

import signal
import threading
from typing import Any


def stop_on_signals(stop: threading.Event) -> None:
    """Makes the first SIGINT or SIGTERM set ``stop`` (the command finishes what it is doing
    and stops cleanly at its next check); a second one raises KeyboardInterrupt at once."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
