"""``framebus ls``: the streams in /dev/shm with their spec, writer, readers and counters."""

from __future__ import annotations

import argparse
import json
from typing import Any, Dict, List

from ..monitor import dtype_name

HELP = "list streams: shape, dtype, slots, writer alive, readers, sequence, bytes"

JSON_HELP = (
    "print a JSON list instead of a table, one object per stream with the keys name, path, shape "
    "(list of ints or null), dtype (a NumPy name such as uint8 or float32, or null), variable (true "
    "for a stream created with capacity=: each frame has its own shape and dtype), capacity (bytes "
    "per frame of such a stream, or null), device (\"cuda:N\" for a stream whose frames live in GPU "
    "memory, or null), cpu_mirror (true when such a stream's frames are also in host memory), slots, frame_bytes, total_bytes, writer (alive, creator "
    "gone, stale, unreadable, or \"not a stream\" for an entry named framebus.* that is no framebus stream: a FIFO, socket, directory, "
    "device file or symbolic link, or a file whose name is not a valid stream name; its problem says which), creator_pid, readers (handles attached that do not write: the "
    "writer's own handle is not counted), lossless (how many of them are lossless), sequence, "
    "frames_written, bytes_written (ints), problem (string or null), problem_kind (the problem as a code: not_ready, "
    "incompatible, corrupt, other, or not_a_stream; null without a problem) and bridges (list of strings)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=JSON_HELP)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def bridged() -> dict:
    """Stream name -> one-line summaries of the bridges (framebus.net) running on it."""
    from ..net.link import by_stream

    return by_stream()


def _readers(s: Any) -> "tuple[int, int]":
    """(readers, lossless readers) of stream ``s``: attached handles that do not write."""
    from ..monitor import readers

    if not s.problem:
        try:
            return readers(str(s))
        except (OSError, ValueError):
            pass
    return s.attached, s.lossless


def records() -> List[Dict[str, Any]]:
    """One JSON-ready record per stream: numbers are numbers, shapes are lists, dtypes NumPy
    names."""
    from ..info import list_streams, not_streams

    out = []
    links = bridged()
    for s in list_streams():
        if s.problem:
            status = "unreadable"
        elif s.stale:
            status = "stale"
        else:
            status = "alive" if s.creator_alive else "creator gone"
        readers, lossless = _readers(s)
        out.append(
            {
                "name": str(s),
                "path": s.path,
                "shape": list(s.shape) if s.shape else None,
                "dtype": dtype_name(s.dtype),
                # A variable-shape stream has no shape or dtype: each frame has its own, up to
                # its capacity (bytes of arrays per frame).
                "variable": bool(s.variable),
                "capacity": s.capacity,
                "device": s.device,
                "cpu_mirror": bool(s.cpu_mirror),
                "slots": s.slots,
                "frame_bytes": s.frame_bytes,
                "total_bytes": s.total_bytes,
                "writer": status,
                "creator_pid": s.creator_pid,
                "readers": readers,
                "lossless": lossless,
                "sequence": s.sequence,
                "frames_written": s.frames_written,
                "bytes_written": s.bytes_written,
                "problem": s.problem,
                "problem_kind": s.problem_kind,
                "bridges": links.pop(str(s), []),
            }
        )
    for other in not_streams():
        out.append(_not_a_stream(other))
    return out


def _not_a_stream(other: Any) -> Dict[str, Any]:
    """The record of a /dev/shm entry named ``framebus.*`` that is no framebus stream (a FIFO,
    a socket, a directory, a symbolic link, a bad name): listed so that it is not a mystery,
    never opened."""
    from ..info import PREFIX

    return {
        "name": other.file[len(PREFIX):],
        "path": other.path,
        "shape": None,
        "dtype": None,
        "variable": False,
        "capacity": None,
        "device": None,
        "cpu_mirror": False,
        "slots": None,
        "frame_bytes": None,
        "total_bytes": 0,
        "writer": "not a stream",
        "creator_pid": 0,
        "readers": 0,
        "lossless": 0,
        "sequence": 0,
        "frames_written": 0,
        "bytes_written": 0,
        "problem": other.reason,
        "problem_kind": "not_a_stream",
        "bridges": [],
    }


def rows() -> List[Dict[str, str]]:
    """The table's cells, as text, in the order of importance (columns are dropped from the
    end when the terminal is too narrow; the name is never cut)."""
    out = []
    for r in records():
        row = {
            "name": r["name"],
            "shape": f"any, {human_bytes(r['capacity'] or 0)}/frame" if r["variable"] else "x".join(map(str, r["shape"])) if r["shape"] else "?",
            "dtype": "any" if r["variable"] else r["dtype"] or "?",
            "memory": "host" if not r["device"] else r["device"] + (" + host" if r["cpu_mirror"] else ""),
            "writer": r["writer"],
            "readers": f"{r['readers']}" + (f" ({r['lossless']} lossless)" if r["lossless"] else ""),
            "sequence": str(r["sequence"]),
            "slots": "?" if r["slots"] is None else str(r["slots"]),
            "size": human_bytes(r["total_bytes"]),
            "written": human_bytes(r["bytes_written"]),
            "problem": _problem(r),
            "bridge": "; ".join(r["bridges"]),
        }
        if r["writer"] == "not a stream":  # nothing framebus could tell about it
            row.update(dict.fromkeys(("shape", "dtype", "memory", "readers", "sequence", "slots", "size", "written"), "-"))
        out.append(row)
    return out


def _problem(r: Dict[str, Any]) -> str:
    """The problem column: the core's text, and for a segment not initialised that gc would
    not remove yet (too young: its creator may be setting it up), when gc will."""
    from .gc import CREATION_GRACE_S

    text = r["problem"] or ""
    if r["problem_kind"] == "not_ready" and r["writer"] != "stale" and not r["creator_pid"]:
        text += f" (once it is {CREATION_GRACE_S:g} s old)"
    return text


#: Right-aligned columns; these never wrap either.
_NUMERIC = ("slots", "sequence", "written", "size")


def fitting_columns(data: List[Dict[str, str]], width: int) -> List[str]:
    """The columns that fit in ``width`` characters, most important first: the name always,
    then the others in order while they fit whole (3 characters of padding each)."""
    from ._columns import fit

    cols = [c for c in data[0] if c not in ("problem", "bridge") or any(r[c] for r in data)]
    return [cols[i] for i in fit([max(len(c), *(len(r[c]) for r in data)) + 3 for c in cols], width)]


def run(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(records(), indent=2))
        return 0
    data = rows()
    if not data:
        print("no framebus streams in /dev/shm")
        return 0
    from ._columns import UNLIMITED, terminal_width

    width = terminal_width() or UNLIMITED  # to a pipe or file: every column
    shown = fitting_columns(data, width)
    dropped = [c for c in data[0] if c not in shown and any(r[c] for r in data)]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print("  ".join(shown))
        for r in data:
            print("  ".join(r[c] for c in shown))
    else:
        table = Table(title="framebus streams", box=None, pad_edge=False)
        for col in shown:
            table.add_column(col, justify="right" if col in _NUMERIC else "left", no_wrap=col in _NUMERIC or col == "name", overflow="fold")
        for r in data:
            table.add_row(*(r[k] for k in shown))
        if width == UNLIMITED:  # the table's own width: no line is wrapped or padded
            width = sum(max(len(c), *(len(r[c]) for r in data)) + 3 for c in shown)
        Console(width=max(width, len(max((r["name"] for r in data), key=len)) + 4)).print(table)
    if dropped:
        print(f"({', '.join(dropped)} not shown at this width: widen the terminal or use --json)")
    return 0
