"""``framebus-bench`` (also run as ``framebus bench`` or ``python -m framebus_bench``): measure
framebus side by side with the peers that are installed (pyshmem, pyzmq, iceoryx2, turbopipe,
multiprocessing.shared_memory) and the physical limits, with a progress display, tables at the
end, and optional JSON, Markdown and PNG plots.

The driver lives in this package, not in framebus's wheel; ``framebus bench`` only hands its
arguments to :func:`main` when this package is installed."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time
from typing import Any, List, Optional, Sequence

import framebus_bench as bench

from . import records, report
from .load import MAX_LOAD

HELP = "benchmark framebus against pyshmem, pyzmq, iceoryx2, turbopipe and the physical limits"

#: The program name when run on its own (``framebus bench`` passes its own).
PROG = "framebus-bench"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line parser; ``prog`` names the program in usage and error messages."""
    p = argparse.ArgumentParser(prog=prog, description=HELP)
    p.add_argument("suites", nargs="*", metavar="SUITE", help="W1..W12, sweep, a family (local, pingpong, latency, fanout, pipes, pipeline, allocs, idle, gpu, video, chain) or all (default: all)")
    p.add_argument("--quick", action="store_true", help="shorter measurements (about a quarter of the time)")
    p.add_argument("--smoke", action="store_true", help="tiny frames, first case of each suite only: proves each suite runs (the test suite uses it)")
    p.add_argument("--large", action="store_true", help="add the 10000x10000 float32 case to W2 (needs several GB of /dev/shm)")
    p.add_argument("--json", metavar="FILE", help="write the run (machine, versions, every sample) as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR (needs matplotlib)")
    p.add_argument("--compare", metavar="OLD.json", help="show each row's change against an earlier --json file")
    p.add_argument("--list", action="store_true", help="list the suites and exit")
    p.add_argument("--load", type=int, default=0, metavar="N", help="run N busy processes (CPU spin loops) beside the suites, started before and stopped after (recorded in the JSON and Markdown): measure on a busy machine")
    p.add_argument("--ros-node", default="", metavar="NODE", help="W12's ROS 2 node: framebus (framebus ros2 subscribe) or hiroz:PATH (the hiroz test peer); default: the hiroz peer when scripts/build-ros2-peer.sh has built it, else framebus")
    p.add_argument("--explain", action="store_true", help="print how this machine copies frames (kernel, threads, huge pages; framebus.tuning) before running; alone, print it and exit")
    return p


def _fail(prog: str, msg: str, status: int = 2) -> int:
    """Prints ``msg``; returns ``status`` (2: a bad option value, 1: a runtime error such as a
    file that does not exist, as ``framebus --help`` says)."""
    print(f"{prog}: error: {msg}", file=sys.stderr)
    return status


def _check_output(path: Optional[str], what: str, is_dir: bool = False) -> Optional[str]:
    """An error message when ``path`` cannot be written, else None."""
    if not path:
        return None
    if is_dir:
        if os.path.exists(path) and not os.path.isdir(path):
            return f"{what} {path!r} exists and is not a directory"
        parent = os.path.dirname(os.path.abspath(path))
    else:
        if os.path.isdir(path):
            return f"{what} {path!r} is a directory; give a file name"
        parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"the directory of {what} {path!r} does not exist"
    if not os.access(parent, os.W_OK):
        return f"cannot write {what} {path!r} (no permission on {parent})"
    return None


class _RichReporter:
    """Progress bars (this suite, all suites) with notes printed above them."""

    def __init__(self, console: Any, n_suites: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}", style="bold"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}", style="dim"),
            console=console,
            auto_refresh=False,  # no refresh thread: nothing wakes up while we measure
            transient=False,
        )
        self.overall = self.progress.add_task("all suites", total=n_suites, current="")
        self.task: Optional[Any] = None
        self.done_suites = 0

    def start(self, suite: str, total: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[self.task].total)
            self.done_suites += 1
            self.progress.update(self.overall, completed=self.done_suites)
        self.task = self.progress.add_task(suite, total=max(total, 1), current="")
        self.progress.refresh()

    def step(self, description: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, advance=1, current=description[:60])
        self.progress.refresh()

    def note(self, suite: str, text: str) -> None:
        from rich.markup import escape

        self.progress.console.print(f"[yellow]{suite}[/yellow] {escape(text)}")  # a note may hold "[bench]"
        self.progress.refresh()

    def finish(self) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[self.task].total)
        self.progress.update(self.overall, completed=self.progress.tasks[self.overall].total)
        self.progress.refresh()


class _PlainReporter:
    """Progress as lines on stderr (without rich)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def start(self, suite: str, total: int) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {suite}: {total} measurements", file=sys.stderr, flush=True)

    def step(self, description: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s]   {description}", file=sys.stderr, flush=True)

    def note(self, suite: str, text: str) -> None:
        print(f"{suite} note: {text}", file=sys.stderr, flush=True)

    def finish(self) -> None:
        pass


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Parses ``argv`` (default: ``sys.argv[1:]``; a usage error exits with status 2 and the
    usage), runs the suites with a progress display, prints the tables and writes the requested
    files; returns the exit status: 0, 1 when a suite failed or a file is missing or not a run,
    2 for a bad option value. Restores the SIGTERM handler it sets while running."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    command = " ".join([prog, *(shlex.quote(a) for a in argv)])
    saved = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    try:
        return _run(args, prog, command)
    finally:
        if saved is not None:
            signal.signal(signal.SIGTERM, saved)


def entry() -> None:
    """The ``framebus-bench`` program: :func:`main`, with Ctrl-C (130) and SIGTERM (143) ending
    the run after its clean-up, and an OSError a one-line message (exit status 1)."""
    try:
        status = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        status = 1
    sys.exit(status)


def _run(args: argparse.Namespace, prog: str, command: str) -> int:
    """Checks the argument values (exit code 2 with a message when they are wrong), runs the
    suites and reports. Exit code 1 when a suite failed."""
    def fail(msg: str, status: int = 2) -> int:
        return _fail(prog, msg, status)

    if args.list:
        for s in bench.SUITES:
            print(f"{s.id}  {s.module:<9} {s.title}")
        return 0
    if args.explain:
        from framebus import tuning

        print("copy plan (framebus.tuning; override with " + ", ".join(tuning.ENVIRONMENT) + "):")
        print("  " + tuning.explain().replace("\n", "\n  "))
        if not args.suites:
            return 0
    try:
        specs = bench.resolve(args.suites)
    except ValueError as exc:
        return fail(str(exc))
    if args.ros_node not in ("", "framebus") and not (args.ros_node.startswith("hiroz:") and len(args.ros_node) > 6):
        return fail(f"--ros-node takes framebus or hiroz:PATH, got {args.ros_node!r}")
    if not 0 <= args.load <= MAX_LOAD:
        return fail(f"--load takes 0 to {MAX_LOAD} busy processes, got {args.load}")
    for path, what, is_dir in ((args.json, "--json file", False), (args.markdown, "--markdown file", False), (args.plot, "--plot directory", True)):
        err = _check_output(path, what, is_dir)
        if err:
            return fail(err)
    old = None
    if args.compare:
        try:
            old = records.load(args.compare)
        except FileNotFoundError:
            return fail(f"--compare file {args.compare!r} does not exist; give a file written by `{prog} --json FILE`", 1)
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
            return fail(f"--compare: {exc}", 1)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return fail("--plot needs matplotlib: pip install './benches[peers]'")

    try:
        from rich.console import Console

        console: Any = Console()
        if not console.is_terminal:  # a file or a pipe: wide enough for every column
            console = Console(width=max(console.width, 200))
        reporter: Any = _RichReporter(console, len(specs))
    except ImportError:
        console = None
        reporter = _PlainReporter()

    failures: List[str] = []

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # unwinds through the cleanups (streams, files, helpers)

    signal.signal(signal.SIGTERM, terminated)  # also stops the --load processes

    def on_error(spec: Any, exc: BaseException) -> None:
        failures.append(spec.id)
        reporter.note(spec.id, f"[red]failed:[/red] {type(exc).__name__}: {exc}" if console else f"failed: {type(exc).__name__}: {exc}")

    ids = [s.id for s in specs]
    if console is not None:
        with reporter.progress:
            result = bench.run(ids, quick=args.quick, smoke=args.smoke, large=args.large, reporter=reporter, command=command, on_error=on_error, load=args.load, ros_node=args.ros_node)
            reporter.finish()
    else:
        result = bench.run(ids, quick=args.quick, smoke=args.smoke, large=args.large, reporter=reporter, command=command, on_error=on_error, load=args.load, ros_node=args.ros_node)

    plots = None
    if args.plot:
        from . import plots as plotting

        plots = plotting.write_plots(result, args.plot)
        if args.markdown:  # links relative to the Markdown file
            base = os.path.dirname(os.path.abspath(args.markdown))
            plots = {k: [os.path.relpath(os.path.abspath(p), base) for p in v] for k, v in plots.items()}
    if console is not None:
        report.rich_tables(result, console, compare=old)
    else:
        print(report.plain_tables(result, compare=old))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_json(), f, allow_nan=True)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(report.markdown(result, compare=old, plots=plots))
    written = [p for p in (args.json, args.markdown) if p] + ([args.plot] if args.plot else [])
    if written:
        print("wrote " + ", ".join(written), file=sys.stderr)
    print(f"{len(result.suites)} suite(s) in {result.seconds:.0f} s" + (f"; failed: {', '.join(failures)}" if failures else ""), file=sys.stderr)
    return 1 if failures else 0
