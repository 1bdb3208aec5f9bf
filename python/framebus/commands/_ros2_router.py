"""``framebus ros2 router``: a Zenoh router with rmw_zenoh's settings (framebus.ros2.router),
until Ctrl-C or SIGTERM; either ends it normally (exit status 0), as a service manager's stop."""

from __future__ import annotations

import argparse
import sys
import threading

from ._signals import stop_on_signals


def run_router(args: argparse.Namespace) -> int:
    try:
        from ..ros2.router import DEFAULT_LISTEN, Router
    except ImportError as exc:
        print(f"framebus ros2 router: {exc}", file=sys.stderr)
        return 1
    from ..errors import FramebusError

    stop = threading.Event()
    stop_on_signals(stop)
    try:
        router = Router(args.listen or [DEFAULT_LISTEN])
    except (FramebusError, OSError, ValueError) as exc:
        from ..cli import error_text

        print(f"framebus ros2 router: {error_text(exc)}", file=sys.stderr)
        return 1
    with router:
        print(f"framebus ros2 router: listening on {', '.join(router.listen)} (Zenoh id {router.zid}); Ctrl-C to stop", flush=True)
        shown = -1
        while not stop.wait(0.5):
            n = router.sessions()
            if n != shown:
                print(f"sessions connected: {n}", flush=True)
                shown = n
    print("framebus ros2 router: stopped", flush=True)
    return 0
