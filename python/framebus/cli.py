"""The ``framebus`` command line: one subcommand per module in ``framebus.commands``."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

#: Subcommands, each a module in framebus.commands with ``HELP``, ``add_arguments(parser)`` and
#: ``run(args) -> int``. Keep this list in the order ``framebus --help`` shows it.
COMMANDS = ["demo", "ls", "top", "hz", "echo", "doctor", "gc", "bench", "record", "play", "bridge"]


EXIT_STATUS = """exit status (every command):
  0    success
  1    a runtime error: a stream or file that does not exist, FFmpeg not found, a failed
       write or encode, a check that failed (the message says what to do)
  2    a usage error: unknown command or option, a bad argument value
  130  interrupted (Ctrl-C)"""


def error_text(exc: BaseException) -> str:
    """The message of an error for the terminal: an OSError's own text without the
    ``[Errno N]`` prefix and without repeating the file name."""
    if isinstance(exc, OSError) and exc.strerror:
        return str(exc.strerror)
    return str(exc)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="framebus",
        description="Move frames between processes at memory speed.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"framebus {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"framebus.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    from .commands._args import UsageError
    from .errors import FramebusError

    try:
        return int(args._run(args) or 0)
    except UsageError as exc:
        print(f"framebus {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (FramebusError, OSError) as exc:
        print(f"framebus {args.command}: {error_text(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
