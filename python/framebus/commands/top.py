"""``framebus top``: every stream live, full screen: writer alive, frames/s and MB/s written,
and per attached handle of a live process its mode, role, frames/s read, lag (frames and ms;
none for handles that write and for monitors such as ``hz``), frames missed (latest) or writer
waits caused (lossless), and pins with their age. Keys: q quits, s changes
the sort, / filters by name (Enter applies, Esc clears). ``--once`` prints one table,
``--json`` one JSON document (see ``framebus.monitor.document``)."""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

from ._args import positive_float, stream_name

HELP = "live view of every stream: rates, lag, missed frames, writer waits, pins (q quits)"

SORTS = ("name", "write_fps", "lag")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", type=stream_name, metavar="NAME", help="streams to show (default: all)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument("--json", action="store_true", help="print one JSON document and exit (implies --once)")
    p.add_argument("--interval", type=positive_float, default=1.0, metavar="S", help="seconds between samples; rates are over this (default 1)")
    p.add_argument("--sort", choices=SORTS, default="name", help="sort streams by name, write rate or worst reader lag (key s)")
    p.add_argument("--filter", default="", metavar="TEXT", help="only streams whose name contains TEXT (key /)")


def selected(streams: List[Dict[str, Any]], sort: str, text: str) -> List[Dict[str, Any]]:
    """The streams to show, filtered by ``text`` in the name and sorted by ``sort``."""
    rows = [s for s in streams if text in s["name"]]
    if sort == "write_fps":
        return sorted(rows, key=lambda s: -s["write_fps"])
    if sort == "lag":
        return sorted(rows, key=lambda s: -max((r["lag_frames"] for r in s["readers"]), default=0))
    return sorted(rows, key=lambda s: s["name"])


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.1f}"


def gone(name: str) -> Dict[str, Any]:
    """The entry of a stream named on the command line that no longer exists (live view)."""
    return {"name": name, "gone": True, "write_fps": 0.0, "readers": []}


def cells(stream: Dict[str, Any]) -> List[List[str]]:
    """The table rows of one stream: the stream's own row (its writer), then one row per
    attached handle, indented."""
    if stream.get("gone"):
        return [[stream["name"], "gone: no such stream (shown again if it comes back)", "", "", "", "", ""]]
    writer = f"writer {stream['writer_pid']} " + ("alive" if stream["writer_alive"] else "gone") if stream["writer_pid"] else "no writer yet"
    if stream["ended"]:
        writer += ", ended"
    if stream.get("device"):
        writer += f", {stream['device']}"
    out = [[stream["name"], writer, f"{stream['write_fps']:,.1f}", f"{stream['write_mbps']:,.1f}", f"seq {stream['latest_seq']}", f"{stream['write_waits']} waits", ""]]
    for r in stream["readers"]:
        who = f"  {r['mode']} {r['role']}" + (" (download)" if r.get("download") else "") + (f" {r['label']}" if r["label"] else "")
        looks = r.get("monitor", False)  # hz, echo: watches, consumes nothing, holds nobody back
        if r["writes"] or looks:
            behind = ""
        elif r["mode"] == "lossless":
            behind = f"caused {r['writer_waits']}"
        else:
            behind = f"missed {r['missed']}"
        lag = "monitor" if looks else "" if r["writes"] else f"lag {r['lag_frames']} ({_ms(r['lag_ms'])} ms)"
        pins = f"{r['pinned_slots']}, {r['pinned_for_s']:.1f} s" if r["pinned_slots"] and r["pinned_for_s"] is not None else str(r["pinned_slots"])
        pid = f"pid {r['pid']}"  # dead processes' handles are not listed (monitor.compare)
        out.append([who, pid, f"{r['read_fps']:,.1f}", "", lag, behind, pins])
    return out


HEADERS = ["stream / handle", "process", "frames/s", "MB/s", "seq / lag", "waits / missed", "pins"]


def fitting_columns(rows: List[List[str]], width: int) -> List[int]:
    """The columns (indices into HEADERS) that fit whole in ``width`` characters, as
    ``framebus ls`` chooses them: the first (stream names, never cut) always, then the others
    in order while they fit (3 characters of borders and padding each, 1 for the last border)."""
    from ._columns import fit

    return fit([max([len(h)] + [len(r[i]) for r in rows]) + 3 for i, h in enumerate(HEADERS)], width)


def table(streams: List[Dict[str, Any]], sort: str, text: str, width: Optional[int] = None) -> Any:
    """The rich table of the selected streams. With ``width``, only the columns that fit in it
    (names are never cut); the caption names those left out."""
    from rich.table import Table

    rows = [[row for row in cells(s)] for s in selected(streams, sort, text)]
    shown = fitting_columns([r for group in rows for r in group], width) if width else list(range(len(HEADERS)))
    dropped = [HEADERS[i] for i in range(len(HEADERS)) if i not in shown]
    caption = f"({', '.join(dropped)} not shown at this width: widen the terminal or use --json)" if dropped else None
    t = Table(title=f"framebus top  (sort: {sort}{', filter: ' + text if text else ''}; q quit, s sort, / filter)", caption=caption, expand=False)
    for i in shown:
        h = HEADERS[i]
        t.add_column(h, justify="right" if h in ("frames/s", "MB/s") else "left", no_wrap=True)
    for group in rows:
        for row in group:
            t.add_row(*(row[i] for i in shown))
        t.add_section()
    return t


def name_width(streams: List[Dict[str, Any]]) -> int:
    """Characters the first column needs (the longest stream name or handle line)."""
    return max([len(HEADERS[0])] + [len(row[0]) for s in streams for row in cells(s)])


def plain(streams: List[Dict[str, Any]], sort: str, text: str) -> str:
    """The table as plain text (no rich)."""
    lines = ["\t".join(HEADERS)]
    for s in selected(streams, sort, text):
        lines += ["\t".join(row) for row in cells(s)]
    return "\n".join(lines)


@contextmanager
def keys() -> Iterator[Any]:
    """Single key presses from the terminal (cbreak mode), or None when stdin is not a tty."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Keys:
    """What the user typed: sort changes, the filter, quit."""

    def __init__(self, sort: str, text: str) -> None:
        self.sort, self.text, self.quit = sort, text, False
        self.typing: Optional[str] = None

    def feed(self, ch: str) -> None:
        if self.typing is not None:
            if ch in ("\n", "\r"):
                self.text, self.typing = self.typing, None
            elif ch == "\x1b":
                self.text, self.typing = "", None
            elif ch in ("\x7f", "\b"):
                self.typing = self.typing[:-1]
            else:
                self.typing += ch
        elif ch in ("q", "Q"):
            self.quit = True
        elif ch == "s":
            self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        elif ch == "/":
            self.typing = ""


def live(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from ..info import list_streams, stat
    from ..monitor import compare, snapshot

    state = Keys(args.sort, args.filter)

    def sample() -> Dict[str, Any]:
        infos = []
        for n in args.names:
            try:
                infos.append(stat(n))
            except (OSError, ValueError):  # gone since: shown as gone until it comes back
                continue
        if not args.names:
            infos = [i for i in list_streams() if not i.problem]
        out = {}
        for info in infos:
            try:
                out[str(info)] = (info, snapshot(str(info)))
            except (OSError, ValueError):
                continue
        return out

    console = Console()
    before = sample()
    streams: List[Dict[str, Any]] = []

    def view_table(text: str) -> Any:
        return table(streams, state.sort, text, console.width)

    with keys() as fd, Live(view_table(state.text), console=console, screen=True, auto_refresh=False) as view:
        while not state.quit:
            deadline = time.monotonic() + args.interval
            while not state.quit and time.monotonic() < deadline:
                if fd is None:
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                    continue
                ready, _, _ = select.select([fd], [], [], min(0.05, max(0.0, deadline - time.monotonic())))
                if ready:
                    state.feed(os.read(fd, 1).decode(errors="replace"))
                    view.update(view_table(state.text if state.typing is None else state.typing), refresh=True)
            after = sample()
            streams = [compare(info, before[n][1], snap) for n, (info, snap) in after.items() if n in before]
            streams += [gone(n) for n in args.names if n not in after]
            before = after
            view.update(view_table(state.text), refresh=True)
    return 0


def run(args: argparse.Namespace) -> int:
    from ..monitor import document

    check_names(args.names)
    if args.json or args.once:
        doc = document(args.names or None, args.interval)
        if args.json:
            doc["streams"] = selected(doc["streams"], args.sort, args.filter)
            print(json.dumps(doc, indent=2))
            return 0
        try:
            from rich.console import Console
        except ImportError:
            print(plain(doc["streams"], args.sort, args.filter))
            return 0
        from ._columns import UNLIMITED, terminal_width

        width = terminal_width()  # None to a pipe or file: every column
        shown = selected(doc["streams"], args.sort, args.filter)
        # A name longer than the terminal is printed whole (the line wraps) rather than cut.
        Console(width=max(width or UNLIMITED, name_width(shown) + 4)).print(table(doc["streams"], args.sort, args.filter, width))
        return 0
    try:
        import rich  # noqa: F401
    except ImportError:
        print("framebus top: the live view needs rich: pip install 'framebus[cli]' (or use --once / --json)", file=sys.stderr)
        return 1
    return live(args)  # q: 0; Ctrl-C: KeyboardInterrupt, exit status 130 (cli.py)


def check_names(names: List[str]) -> None:
    """Each stream named on the command line exists (StreamNotFoundError otherwise: exit 1)
    and can be read: a damaged or foreign segment is a runtime error (exit 1) saying what is
    wrong, as ``framebus ls`` and ``doctor`` report it, not an empty table."""
    from ..errors import FramebusError
    from ..info import stat

    for n in names:
        info = stat(n)
        if info.problem:
            raise FramebusError(f"stream {n!r} cannot be read: {info.problem}; `framebus doctor --stream {n}` says what to do")
