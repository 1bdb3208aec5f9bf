"""``framebus gc``: remove stale streams (creator dead and nobody attached). Never a live one.
``--unreadable`` also removes segments this framebus cannot read whose creator is dead and that
no process this user can inspect maps (see ``framebus.gc``)."""

from __future__ import annotations

import argparse

HELP = "remove stale streams (creator dead, nobody attached); live streams are never touched"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--dry-run", action="store_true", help="only list what would be removed")
    p.add_argument(
        "--unreadable",
        action="store_true",
        help="also remove segments this framebus cannot read (another layout version, a damaged header) whose creator is dead "
        "and that no process this user can inspect maps",
    )


def run(args: argparse.Namespace) -> int:
    from ..info import gc

    removed = gc(dry_run=args.dry_run, unreadable=args.unreadable)
    verb = "would remove" if args.dry_run else "removed"
    for name in removed:
        print(f"{verb} {name}")
    if not removed:
        print("no stale streams")
    return 0
