"""The ``framebus`` command line: one subcommand per module in ``framebus.commands``."""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
import threading
from typing import List, Optional

#: Subcommands, each a module in framebus.commands with ``HELP``, ``add_arguments(parser)`` and
#: ``run(args) -> int``. Keep this list in the order ``framebus --help`` shows it. A module with
#: ``PASS_THROUGH = True`` gets every argument after its name unparsed, as ``args.argv``.
COMMANDS = ["demo", "ls", "top", "hz", "echo", "doctor", "gc", "bench", "record", "play", "bridge", "ros2"]


EXIT_STATUS = """exit status (every command):
  0    success; an ended stream (its writer called end() or closed) is a normal end
  1    a runtime error: a stream or file that does not exist, FFmpeg not found, a failed
       write or encode, a check that failed (the message says what to do)
  2    a usage error: unknown command or option, a bad argument value (a number out of
       range, an invalid stream name); the command's usage says what it takes
  130  interrupted by Ctrl-C (SIGINT), after cleaning up: streams the command created are
       removed, a file being recorded is finished
  143  stopped by SIGTERM, after the same clean-up
A closed standard output (`framebus ls | head -1`) ends a command quietly, exit status 1."""


#: What a command line user can do about a stream that does not exist (the library's message
#: tells a Python caller to call framebus.create instead).
NOT_FOUND_HINT = (
    "start the program or command that writes it first (for example `framebus play VIDEO NAME` or "
    "`framebus bridge subscribe ENDPOINT NAME`), or check the name with `framebus ls`"
)


def error_text(exc: BaseException) -> str:
    """The message of an error for the terminal: an OSError's own text without the
    ``[Errno N]`` prefix and without repeating the file name; for a missing or damaged stream,
    which command to run rather than which Python function to call (from the exception's
    ``stream``/``path``/``reason`` attributes, not from its text)."""
    from .errors import CorruptStreamError, StreamNotFoundError

    name, path = getattr(exc, "stream", None), getattr(exc, "path", None)
    if isinstance(exc, StreamNotFoundError) and name is not None:
        waited = getattr(exc, "waited", None)  # set by --wait (commands/_wait.py)
        return f'stream "{name}" does not exist{f" (waited {waited:g} s)" if waited else ""} ({path}); {NOT_FOUND_HINT}{_packets_hint(name)}'
    if isinstance(exc, CorruptStreamError) and name is not None:
        return (
            f'stream "{name}" ({path}) is corrupt or not a framebus stream: {getattr(exc, "reason", "?")}; '
            f"`framebus doctor --stream {name}` says whether it is in use and how to remove it"
        )
    return str(exc.strerror) if isinstance(exc, OSError) and exc.strerror else str(exc)


def _packets_hint(name: str) -> str:
    """For ``NAME.CODEC`` (an encoded bridge's packet stream) when ``NAME`` exists: where a
    subscriber started with --packets keeps its packets (in the stream it was given)."""
    import os

    from .media.codec import CODECS

    stem, _, codec = name.rpartition(".")
    if not stem or codec not in CODECS or not os.path.exists(f"/dev/shm/framebus.{stem}"):
        return ""
    return f'; "{stem}" exists: `framebus bridge subscribe ENDPOINT {stem} --packets` keeps the packets in "{stem}" itself'


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
        through = getattr(module, "PASS_THROUGH", False)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP, add_help=not through)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _pass_through=through)
        _know_parser(p)
    return parser


def _know_parser(parser: argparse.ArgumentParser) -> None:
    """Records in the parsed arguments which (sub)command's parser took them, so an unknown
    option is reported with that command's usage (see ``main``)."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _know_parser(child)


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line ``argv`` (default: sys.argv[1:]) and returns its exit status (see
    ``EXIT_STATUS``)."""
    import signal
    import threading

    # Commands change how SIGINT/SIGTERM are handled; a caller in the same process (a test,
    # a program calling main) gets its own handlers back.
    main_thread = threading.current_thread() is threading.main_thread()
    saved = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) if main_thread else None
    try:
        return _main(argv)
    except BrokenPipeError:  # --help or a usage message into a closed pipe
        if not stdout_closed():
            raise
        quiet_stdout()
        return 1
    finally:
        if saved is not None:
            signal.signal(signal.SIGINT, saved[0])
            signal.signal(signal.SIGTERM, saved[1])


def entry() -> None:
    """The ``framebus`` program (and ``python -m framebus``): runs :func:`main` and exits with
    its status. A command stopped by Ctrl-C or SIGTERM has cleaned up when main returns; a
    signal arriving after that (a late delivery while the interpreter shuts down) no longer
    replaces the documented status (130, 143) with death by the signal."""
    import signal

    try:
        status = main()
        if status in (130, 143):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except KeyboardInterrupt as exc:  # a second signal while main was returning
        from .commands._signals import status_of

        status = status_of(exc)
    sys.exit(status)


def _main(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    # Unknown options are left over by the subcommand's parser; argparse would report them
    # with the top-level usage. The innermost subcommand's parser reports them (exit 2).
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "_pass_through", False):
        args.argv = extra
    elif extra:
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    from .commands._signals import raise_on_sigterm, status_of
    from .errors import FramebusError

    if threading.current_thread() is threading.main_thread():
        raise_on_sigterm()  # SIGTERM cleans up as Ctrl-C does (exit status 143)
    try:
        try:
            status = int(args._run(args) or 0)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except KeyboardInterrupt as exc:
        status = status_of(exc)
        print("interrupted" if status == 130 else "terminated", file=sys.stderr)
        return status
    except BrokenPipeError as exc:
        if not stdout_closed():
            print(f"framebus {args.command}: {error_text(exc)}", file=sys.stderr)
            return 1
        quiet_stdout()
        return 1
    except (FramebusError, OSError) as exc:
        print(f"framebus {args.command}: {error_text(exc)}", file=sys.stderr)
        return 1


def stdout_closed() -> bool:
    """Whether standard output is a pipe or socket whose reading end was closed (``| head``)."""
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def quiet_stdout() -> None:
    """Points standard output at /dev/null, so that what is still buffered does not raise
    BrokenPipeError again at interpreter exit (what Python's documentation recommends)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass

if __name__ == "__main__":
    sys.exit(main())
