"""turbopipe 2.1's calling convention on framebus's pipe writers: code written for turbopipe
runs with ``import framebus.turbopipe as turbopipe``.

``pipe(buffer, file)`` queues the buffer for the writer thread of the descriptor ``file`` and
returns at once (nothing is copied: the buffer is held until written); ``sync(buffer)`` waits
until no queued write covers the buffer's memory (``sync()``: every write); ``close(file)``
finishes the writes to ``file`` and stops its writer thread (``close()``: every writer). The
native calls underneath are ``framebus.pipes.pipe``/``sync``/``close``; their errors
(``PipeBrokenError``, a BrokenPipeError; ``PipeError``, an OSError; ``PipeTimeoutError``) come
through unchanged. turbopipe's ``done(buffer)`` has no counterpart: nothing needs freeing.

>>> import os
>>> import framebus.turbopipe as turbopipe
>>> r, w = os.pipe()
>>> data = memoryview(b"frame")
>>> turbopipe.pipe(data, w); turbopipe.sync(data)
>>> os.read(r, 5)
b'frame'
>>> turbopipe.close(w); os.close(r); os.close(w)
"""

from __future__ import annotations

from typing import Any, Optional

from . import _native

__all__ = ["pipe", "sync", "close"]


def pipe(buffer: Any, file: Any) -> None:
    """Queues ``buffer`` for the writer thread of descriptor ``file``; returns at once, no copy."""
    _native.pipe(buffer, file)


def sync(buffer: Optional[Any] = None) -> None:
    """Waits until no queued write covers ``buffer``'s memory (every queued write if None)."""
    _native.sync(buffer)


def close(file: Optional[Any] = None) -> None:
    """Finishes the writes to ``file`` and stops its writer thread (every writer if None)."""
    _native.close(file)
