"""``framebus bench``: runs the benchmark suite's driver, ``framebus-bench``, with the same
arguments. The suite and its driver are the framebus-bench package in the repository's
``benches/`` folder, not part of framebus's wheel; without it, says how to install it."""

from __future__ import annotations

import argparse
import sys

HELP = "benchmark framebus against its peers and the physical limits (runs framebus-bench)"

#: framebus.cli hands every argument after ``bench`` to :func:`run` unparsed (``args.argv``).
PASS_THROUGH = True

NEEDS_SUITE = (
    "the benchmark suite is not installed: it is the framebus-bench package in the benches/ folder of "
    "framebus's repository; from a checkout: pip install -e ./benches (or pip install './benches[peers]' "
    "to measure pyshmem, turbopipe, pyzmq, iceoryx2 and imageio-ffmpeg beside framebus); "
    "then run `framebus-bench --help`"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """None: ``framebus-bench`` parses the arguments (``framebus bench --help`` shows its usage)."""


def run(args: argparse.Namespace) -> int:
    """``framebus_bench.cli.main`` on the arguments, in this interpreter; exit status 1 with
    how to install the suite when it is missing."""
    try:
        from framebus_bench.cli import main
    except ImportError as exc:
        if exc.name not in ("framebus_bench", "framebus_bench.cli", None):
            raise  # the suite is there but something it needs is not: its own message says what
        print(f"framebus bench: error: {NEEDS_SUITE}", file=sys.stderr)
        return 1
    return main(args.argv, prog="framebus bench")
