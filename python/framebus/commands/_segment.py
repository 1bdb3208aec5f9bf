"""Which segment a command's handle maps, to tell a reader that its stream's name was given to a
new stream (a producer or bridge that restarted and created the stream anew): its handle would
never get another frame. Commands check it when a wait times out (``framebus record``; ``hz``
applies the same rule)."""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple, Type

from .. import errors

#: What the library raises when a waiting read learns that its stream was replaced; the commands
#: then say the same as after their own check.
REPLACED_ERRORS: Tuple[Type[BaseException], ...] = (errors.StreamReplacedError,)

#: How a command says it (``framebus hz`` uses the same words).
REPLACED = "was replaced by a new stream of the same name"
#: What the library's error can also mean: the name is gone and nobody writes the old segment.
REMOVED = "was removed, and no process writes it any more"


class StreamReplaced(Exception):
    """The stream a command reads was replaced; the message says so and what to do."""


def identity(path: str) -> Optional[Tuple[int, int]]:
    """(device, inode) of the file at ``path``; None once it is gone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class Segment:
    """The segment a handle was opened on (see :func:`open_watched`)."""

    def __init__(self, name: str, path: str, ident: Optional[Tuple[int, int]]) -> None:
        self.name, self.path, self.ident = name, path, ident

    def replaced(self) -> bool:
        """Whether the name now belongs to another segment (a new stream of the same name).
        A name that was only removed is not: its writer may go on writing to the handles it
        has, and ends the stream when it closes."""
        now = identity(self.path)
        return now is not None and now != self.ident

    def what(self) -> str:
        """How to say what happened to the stream, once it can get no more frames."""
        return REMOVED if identity(self.path) is None else REPLACED


def open_watched(name: str, opener: Any = None, **options: Any) -> Tuple[Any, Segment]:
    """``framebus.open(name, **options)`` (or ``opener``'s) and the segment the handle maps (the
    same file before and after the open, so a stream replaced meanwhile is not mistaken for the
    one opened)."""
    import framebus

    path = framebus.stat(name).path
    while True:
        before = identity(path)
        handle = (opener or framebus.open)(name, **options)
        if identity(path) == before:
            return handle, Segment(name, path, before)
        handle.close()
