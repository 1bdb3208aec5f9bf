"""What a command does with a running end while it runs in the foreground: show its state
(a live table, or a line per change) until it stops or a signal asks it to, then stop it and
say why it failed, if it did. Shared by ``framebus bridge`` and ``framebus ros2``."""

from __future__ import annotations

import sys
import threading
from typing import Any, List


def stop_bridge(bridge: Any, action: str) -> bool:
    """Stops ``bridge`` (its ``stop()``; signals do not interrupt it: see the commands'
    stop_on_signals_and_clean_up); True, after printing why on stderr as ``framebus ACTION
    failed: ...``, when it had failed. Raises nothing."""
    try:
        bridge.stop()
    except Exception as exc:  # noqa: BLE001 - the bridge's own error, reported to the user
        from ...cli import error_text

        print(f"framebus {action} failed: {error_text(exc)}", file=sys.stderr)
        return True
    return False


def _row(s: Any) -> List[str]:
    return [s.state, str(s.peers), str(s.frames), f"{s.fps:.1f}", f"{s.bytes_per_s / 1e6:.1f}", str(s.dropped), str(s.last_seq)]


def watch_bridge(bridge: Any, stop: threading.Event, *, quiet: bool, title: str = "framebus bridge") -> None:
    """Shows ``bridge``'s state until it stops or ``stop`` is set: a live rich table (when rich
    is installed and ``quiet`` is False), or one line per change of state."""
    cols = ["state", "peers", "frames", "fps", "MB/s", "dropped", "source seq"]
    try:
        from rich.live import Live
        from rich.table import Table
    except ImportError:
        quiet = True
    if quiet:
        last = None
        while bridge.running and not stop.wait(0.25):
            state = bridge.stats.state
            if state != last:
                print(f"state: {state}", flush=True)
                last = state
        return

    def table() -> Any:
        t = Table(title=f"{title} {bridge.role} {bridge.stream_name} {bridge.endpoint}")
        for c in cols:
            t.add_column(c, justify="left" if c == "state" else "right")
        t.add_row(*_row(bridge.stats))
        return t

    with Live(table(), refresh_per_second=2, transient=False) as live:
        while bridge.running and not stop.wait(0.5):
            live.update(table())
