"""``--wait SECONDS``: commands that read a stream (record, echo, hz, bridge publish) can be
started before its writer. The stream is polled by name until it exists and can be read."""

from __future__ import annotations

import argparse
import time

from ._args import non_negative_float

#: How often the stream's existence is checked.
POLL_S = 0.05


def add_wait_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the stream to appear (default 0: fail at once when it does not exist)",
    )


def wait_for_stream(name: str, seconds: float) -> None:
    """Returns once stream ``name`` exists and its header can be read (its creator finished
    setting it up), polling every POLL_S s for up to ``seconds``. Raises the
    StreamNotFoundError (FileNotFoundError) of the last look when it did not appear in time,
    and what ``framebus.stat`` raises for another reason (PermissionError...). Ctrl-C
    interrupts the wait (KeyboardInterrupt)."""
    import framebus

    deadline = time.monotonic() + seconds
    while True:
        try:
            info = framebus.stat(name)
        except FileNotFoundError as exc:
            if time.monotonic() >= deadline:
                if seconds > 0 and exc.strerror:
                    waited = exc.strerror.replace("does not exist", f"does not exist (waited {seconds:g} s)", 1)
                    gave_up = type(exc)(exc.errno, waited)
                    # What the command line says about a missing stream (cli.error_text: start
                    # the program that writes it) needs the stream's name and path, as without --wait.
                    for attr in ("stream", "path"):
                        if hasattr(exc, attr):
                            setattr(gave_up, attr, getattr(exc, attr))
                    gave_up.waited = seconds  # type: ignore[attr-defined]
                    raise gave_up from None
                raise
        else:
            # A segment being created is empty or has no readable header for a moment.
            if not info.problem or time.monotonic() >= deadline:
                return
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())) or POLL_S)
