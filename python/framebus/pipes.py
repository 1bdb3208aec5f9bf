"""Background writes to file descriptors: ``pipe(data, fd)`` queues a buffer for a native writer
thread of that descriptor and returns at once; ``sync`` waits; ``close`` flushes and stops.

``framebus.pipe``, ``framebus.sync``, ``framebus.configure`` and ``framebus.pipe_stats`` are the
same functions; ``close`` is ``framebus.pipes.close`` only (at the top of the package a
``close`` would read as closing a stream). turbopipe's calling convention is in
``framebus.turbopipe``.

>>> import os, framebus
>>> r, w = os.pipe()
>>> framebus.pipe(b"hello", w); framebus.sync(w)
>>> os.read(r, 5)
b'hello'
>>> framebus.pipes.close(w); os.close(r); os.close(w)

Guarantees (details in docs/pipes.md): nothing is copied (the buffer is held, export and
reference, until its bytes are written; do not modify it before ``sync``); writes to one
descriptor keep their order; a failed write raises ``PipeBrokenError`` (a ``BrokenPipeError``)
or ``PipeError`` (an ``OSError``) from the next call on that descriptor and drops its queue;
blocking waits release the GIL and let Ctrl-C through; at interpreter exit queued writes are
finished while the reader makes progress (``FRAMEBUS_PIPE_EXIT_STALL`` seconds without progress,
default 5, and they are abandoned with a warning on stderr).
"""

from __future__ import annotations

import atexit
import os
import sys

from ._native import close, configure, pipe, pipe_stats, sync

__all__ = ["pipe", "sync", "close", "configure", "pipe_stats"]


def _flush_at_exit() -> None:
    from . import _native

    try:
        stall = float(os.environ.get("FRAMEBUS_PIPE_EXIT_STALL", "5"))
    except ValueError:
        stall = 5.0
    try:
        left = _native._pipe_flush_at_exit(stall)
    except BaseException:  # noqa: BLE001 - never let exit fail because of queued writes
        return
    for fd, jobs, nbytes in left:
        print(
            f"framebus: abandoning {jobs} queued write(s) ({nbytes} bytes) to file descriptor {fd}: "
            f"its reader made no progress for {stall:g} s",
            file=sys.stderr,
        )


atexit.register(_flush_at_exit)
