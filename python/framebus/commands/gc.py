"""``framebus gc``: remove stale streams (creator dead and nobody attached). Never a live one.
``--unreadable`` also removes segments this framebus cannot read whose creator is dead and that
no process this user can inspect maps; ``--zenoh`` the files of Zenoh's shared-memory transport
that no such process holds open or maps (see ``framebus.gc``).

A segment that is not initialised yet (empty, or cut before its header: ``framebus ls`` says
"not initialised yet ... run `framebus gc`") is removed once it has been left so for
CREATION_GRACE_S seconds: until then its creator may still be setting it up, and gc says so
instead of "no stale streams".

Only regular files are ever removed. An entry named ``framebus.*`` that is no framebus stream (a
FIFO, socket, directory, device file or symbolic link, or a file whose name is not a valid
stream name: ``framebus.info.not_streams()``) is never removed, with any option; gc says it leaves
it."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, List

#: How long a segment may stay uninitialised while its creator sets it up (the core's grace).
CREATION_GRACE_S = 5.0


def being_created(infos: Any = None) -> List[Any]:
    """Segments not initialised yet whose creator is unknown (pid not written yet) and that are
    younger than CREATION_GRACE_S: gc leaves them to their creator for now. Their StreamInfo."""
    from ..info import list_streams

    out = []
    for info in list_streams() if infos is None else infos:
        if info.problem_kind == "not_ready" and not info.creator_pid and not info.stale:
            out.append(info)
    return out


def age(path: str) -> float:
    """Seconds since ``path`` last changed (0 if it is gone)."""
    try:
        return max(0.0, time.time() - os.stat(path).st_mtime)
    except OSError:
        return 0.0

HELP = "remove stale streams (creator dead, nobody attached); live streams are never touched"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--dry-run", action="store_true", help="only list what would be removed")
    p.add_argument(
        "--unreadable",
        action="store_true",
        help="also remove segments this framebus cannot read (another layout version, a damaged header) whose creator is dead "
        "and that no process this user can inspect maps",
    )
    p.add_argument(
        "--zenoh",
        action="store_true",
        help="also remove the files of Zenoh's shared-memory transport (/dev/shm/*.zenoh) that no process this user can "
        "inspect holds open or maps (what a killed Zenoh process leaves)",
    )


def run(args: argparse.Namespace) -> int:
    from ..info import gc, not_streams

    removed = gc(dry_run=args.dry_run, unreadable=args.unreadable, zenoh=args.zenoh)
    verb = "would remove" if args.dry_run else "removed"
    for name in removed:
        print(f"{verb} {name}")
    young = [i for i in being_created() if str(i) not in removed]
    for info in young:
        print(
            f"left {info}: not initialised yet, {age(info.path):.1f} s old; its creator may still be setting it up. "
            f"gc removes it once it has stayed so for {CREATION_GRACE_S:g} s (run gc again then)"
        )
    for other in not_streams():
        print(f"left {other.path}: {other.reason}; gc never removes it (remove it yourself if you know what it is)")
    if not removed and not young:
        print("no stale streams")
    return 0
