"""Choosing the table columns that fit a terminal, shared by ``framebus ls`` and ``top``."""

from __future__ import annotations

from typing import List, Sequence


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
