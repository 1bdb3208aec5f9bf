"""``framebus ls``: the streams in /dev/shm with their spec, writer, readers and counters."""

from __future__ import annotations

import argparse
import json

HELP = "list streams: shape, dtype, slots, writer alive, readers, sequence, bytes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def bridged() -> dict:
    """Stream name -> one-line summaries of the bridges (framebus.net) running on it."""
    from .._bridge.status import by_stream

    return by_stream()


def rows() -> list:
    from ..info import list_streams

    out = []
    links = bridged()
    for s in list_streams():
        if s.problem:
            status = "unreadable"
        elif s.stale:
            status = "stale"
        else:
            status = "alive" if s.creator_alive else "creator gone"
        out.append(
            {
                "name": str(s),
                # A variable-shape stream has no shape: each frame has its own, up to its capacity.
                "shape": f"any, {human_bytes(s.capacity or 0)}/frame" if s.variable else "x".join(map(str, s.shape)) if s.shape else "?",
                "dtype": "any" if s.variable else s.dtype or "?",
                "slots": s.slots if s.slots is not None else "?",
                "writer": status,
                "readers": f"{s.attached}" + (f" ({s.lossless} lossless)" if s.lossless else ""),
                "sequence": s.sequence,
                "written": human_bytes(s.bytes_written),
                "size": human_bytes(s.total_bytes),
                "problem": s.problem or "",
                "bridge": "; ".join(links.pop(str(s), [])),
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    data = rows()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    if not data:
        print("no framebus streams in /dev/shm")
        return 0
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        cols = list(data[0])
        print("  ".join(cols))
        for r in data:
            print("  ".join(str(r[c]) for c in cols))
        return 0
    table = Table(title="framebus streams")
    for col in data[0]:
        if col not in ("problem", "bridge") or any(r[col] for r in data):
            table.add_column(col, justify="right" if col in ("slots", "sequence", "written", "size") else "left")
    shown = [k for k in data[0] if k not in ("problem", "bridge") or any(x[k] for x in data)]
    for r in data:
        table.add_row(*(str(r[k]) for k in shown))
    Console().print(table)
    return 0
