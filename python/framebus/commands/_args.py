"""Argument types shared by the subcommands: a bad value is a usage error (argparse prints the
subcommand's usage and the problem, exit status 2) before anything runs."""

from __future__ import annotations

import argparse
import math
from typing import Callable, TypeVar

T = TypeVar("T", int, float)


def _checked(convert: Callable[[str], T], ok: Callable[[T], bool], what: str, name: str) -> Callable[[str], T]:
    """An argparse type: ``convert(text)`` if that works and ``ok`` holds, else a usage error
    saying the value must be ``what``."""

    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = name  # what argparse names in "invalid ... value"
    return parse


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An int from ``low`` to ``high`` (inclusive)."""
    return _checked(int, lambda v: low <= v <= high, f"from {low} to {high}", "integer")


#: An int above 0.
positive_int = _checked(int, lambda v: v > 0, "a positive integer", "integer")
#: An int of 0 or more.
non_negative_int = _checked(int, lambda v: v >= 0, "0 or more", "integer")
#: A finite number above 0 (seconds, rates).
positive_float = _checked(float, lambda v: 0 < v < math.inf, "a positive number", "number")
#: A finite number of 0 or more.
non_negative_float = _checked(float, lambda v: 0 <= v < math.inf, "a number of 0 or more", "number")


def stream_name(text: str) -> str:
    """A valid stream name (1 to 200 characters of [A-Za-z0-9._-], not starting with a dot),
    checked by the core without opening or creating anything."""
    from .. import _native
    from ..errors import InvalidArgumentError

    try:
        _native.stream_info(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except (OSError, ValueError):
        pass  # a valid name: missing or unreadable is for the command to report
    return text
