"""Checks of numeric command-line values: a bad one is a usage error (``framebus CMD: ...`` in
one line, exit status 2; see ``cli.main``)."""

from __future__ import annotations

import math


class UsageError(ValueError):
    """A command-line value that cannot be used; ``cli.main`` prints it in one line, exit 2."""


def positive(value: float, option: str, unit: str = "seconds") -> float:
    """``value`` if it is a finite number above 0, else UsageError naming ``option``."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{option} must be a positive number of {unit}, got {value:g}")
    return value


def at_least(value: int, low: int, option: str) -> int:
    """``value`` if it is at least ``low``, else UsageError naming ``option``."""
    if value < low:
        raise UsageError(f"{option} must be at least {low}, got {value}")
    return value
