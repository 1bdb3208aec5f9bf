"""``python -m framebus.pyshmem list|unlink|purge``: pyshmem's command line, same commands,
output and exit codes."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import api


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m framebus.pyshmem", description="Manage framebus streams with pyshmem's commands.")
    sub = parser.add_subparsers(dest="command", metavar="command")
    unlink_p = sub.add_parser("unlink", help="Unlink (destroy) one or more named streams.")
    unlink_p.add_argument("names", nargs="+", metavar="NAME", help="stream names, as 'list' shows them")
    sub.add_parser("list", help="List the names of all existing streams.")
    purge_p = sub.add_parser("purge", help="Remove stale streams and those this command made; --include-live removes every stream.")
    purge_p.add_argument("--include-cuda-orphans", action="store_true", help="also remove dead producers' cuda.shm.* files (any PyTorch application of this account)")
    purge_p.add_argument("--include-live", action="store_true", help="also remove streams that running processes created and use (what pyshmem's purge does)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Runs one command; returns the exit status (1 and the help text without a command)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "unlink":
        for name in args.names:
            api.unlink(name)
            print(f"unlinked {name!r}")
        return 0
    if args.command == "list":
        names = api.list_streams()
        if names:
            for name in names:
                print(name)
        else:
            print("no streams found", file=sys.stderr)
        return 0
    if args.command == "purge":
        removed = api.purge(include_cuda_orphans=args.include_cuda_orphans, include_live=args.include_live)
        if removed:
            for name in removed:
                print(f"purged {name!r}")
            print(f"removed {len(removed)} stream(s)")
        else:
            print("no streams found", file=sys.stderr)
        return 0
    parser.print_help()
    return 1
