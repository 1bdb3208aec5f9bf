"""Choosing the table columns that fit a terminal, shared by ``framebus ls`` and ``top``.
Output to a pipe or file has no width limit (every column is printed) unless COLUMNS is set."""

from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional, Sequence

#: The width of a table printed to a pipe or file: wide enough for any row (never wrapped).
UNLIMITED = 100_000


def terminal_width() -> Optional[int]:
    """The width to fit tables in: the terminal's when standard output is a terminal; to a
    pipe or a file, the COLUMNS environment variable if it is set, else None (no limit), so
    that ``framebus ls | grep`` and ``top --once > file`` keep every column."""
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        try:
            columns = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            return None
        return columns if columns > 0 else None
    return shutil.get_terminal_size((120, 24)).columns


def fit(widths: Sequence[int], width: int) -> List[int]:
    """Indices of the columns to show in ``width`` characters, given each column's width
    (borders and padding included): the first (the names, never cut) always, then the others in
    order while they fit whole."""
    chosen, used = [0], 1 + widths[0]
    for i in range(1, len(widths)):
        if used + widths[i] <= width:
            chosen.append(i)
            used += widths[i]
    return chosen
