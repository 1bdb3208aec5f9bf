"""Signals and exit statuses shared by the commands.

Every command exits 130 after Ctrl-C (SIGINT) and 143 after SIGTERM (128 + the signal number,
as shells report a process killed by it), once it has cleaned up: ``cli.main`` makes SIGTERM
raise :class:`Terminated` (a KeyboardInterrupt), so ``finally`` blocks run for both. Long-running
commands call :func:`stop_on_signals`: the first signal asks them to stop at their next check,
a second one insists (KeyboardInterrupt / Terminated at once). Commands that must always
clean up (bridges) call :func:`stop_on_signals_and_clean_up` instead: no signal interrupts
them, their stop is bounded."""

from __future__ import annotations

import signal
import threading
from typing import Any, List

#: Exit status after Ctrl-C (SIGINT) and after SIGTERM.
INTERRUPTED = 128 + signal.SIGINT
TERMINATED = 128 + signal.SIGTERM

#: The signals received since stop_on_signals was called, in order.
_received: List[int] = []


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM (see :func:`raise_on_sigterm`): handled like Ctrl-C, exit status 143."""


def interrupt(signum: int) -> KeyboardInterrupt:
    """The exception a signal raises: KeyboardInterrupt for SIGINT, Terminated for SIGTERM."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def raise_on_sigterm() -> None:
    """Makes SIGTERM raise :class:`Terminated` in the main thread, as Ctrl-C raises
    KeyboardInterrupt, so a command cleans up (removes the streams it created, stops FFmpeg)."""

    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)


def status_of(exc: BaseException) -> int:
    """The exit status of a command stopped by ``exc`` (a KeyboardInterrupt)."""
    return TERMINATED if isinstance(exc, Terminated) else INTERRUPTED


def stop_on_signals(stop: threading.Event) -> None:
    """Makes the first SIGINT or SIGTERM set ``stop`` (the command finishes what it is doing
    and stops cleanly at its next check); a second one raises KeyboardInterrupt (SIGINT) or
    Terminated (SIGTERM) at once. :func:`stopped_status` gives the exit status afterwards."""
    _received.clear()

    def handler(signum: int, frame: Any) -> None:
        _received.append(signum)
        if stop.is_set():
            raise interrupt(signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def stop_on_signals_and_clean_up(stop: threading.Event) -> None:
    """For commands whose clean-up must always finish (a bridge removes the streams it created,
    its encoder's packet stream included): every SIGINT or SIGTERM sets ``stop`` and none
    raises, so two signals in quick succession (a second Ctrl-C, or ``timeout -s INT`` and a
    terminal signalling the whole process group) still let the command stop cleanly; its own
    waits are bounded. :func:`stopped_status` gives the exit status afterwards."""
    _received.clear()

    def handler(signum: int, frame: Any) -> None:
        _received.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def stopped_by_signal() -> bool:
    """Whether a signal arrived since :func:`stop_on_signals`."""
    return bool(_received)


def stopped_status() -> int:
    """The exit status of a command stopped by the first signal since :func:`stop_on_signals`:
    130 for SIGINT, 143 for SIGTERM (0 when no signal arrived)."""
    if not _received:
        return 0
    return TERMINATED if _received[0] == signal.SIGTERM else INTERRUPTED
