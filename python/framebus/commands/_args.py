"""Argument types shared by the subcommands: a bad value is a usage error (argparse prints the
subcommand's usage and the problem, exit status 2) before anything runs."""

from __future__ import annotations

import argparse
from typing import Callable


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An int from ``low`` to ``high`` (inclusive)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    parse.__name__ = "integer"  # what argparse names in "invalid integer value"
    return parse


def positive_int(text: str) -> int:
    """An int above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An int of 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer of 0 or more, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {text}")
    return value


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
