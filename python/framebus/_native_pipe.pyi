# Stubs of the pipe functions of framebus._native (crates/framebus-python/src/pipe.rs).
# A fragment for the lead to merge into _native.pyi.
from typing import Any, Dict, List, Optional, Protocol, Tuple, Union

class _HasFileno(Protocol):
    def fileno(self) -> int: ...

_Fd = Union[int, _HasFileno]

def pipe(data: Any, fd: _Fd, /) -> None:
    """Queues the bytes of ``data`` (any C-contiguous buffer: bytes, bytearray, memoryview,
    NumPy array, mmap, a moderngl.Buffer or its ``.mglo``) for the writer thread of ``fd`` and
    returns at once. Does not copy: ``data`` is held until written; do not modify it before
    ``sync(fd)``. Writes to one descriptor keep call order. Waits (GIL released) only while the
    queue is full or ``data``'s memory is still queued to ``fd``.

    Raises TypeError (not a buffer, not C-contiguous, dtype=object, bad ``fd`` type),
    InvalidArgumentError (fd out of range), PipeError (OSError; EBADF: not open for writing),
    PipeBrokenError (BrokenPipeError) / PipeError for an earlier failed write to ``fd``,
    KeyboardInterrupt while waiting."""

def sync(fd: Optional[Union[_Fd, Any]] = None, timeout: Optional[float] = None) -> None:
    """Waits (GIL released) until the writes queued to ``fd`` (every descriptor if None) are
    finished, then releases their buffers. Given a buffer instead of a descriptor (turbopipe 2's
    ``sync(data)``), waits until no queued write to any descriptor covers its memory. No copy. Raises PipeTimeoutError (TimeoutError; the
    writes stay queued), PipeBrokenError / PipeError for a failed write (reported once),
    InvalidArgumentError for a negative timeout."""

def close(fd: Optional[_Fd] = None, timeout: Optional[float] = None) -> None:
    """``sync(fd, timeout)``, then stops the writer thread of ``fd`` (of every descriptor if
    None). Does not close the descriptor. Raises like ``sync``."""

def configure(*, queue: Optional[int] = None, vmsplice: Optional[bool] = None, pipe_size: Optional[int] = -1) -> Dict[str, Any]:
    """Options for writers started from now on; returns the options in force. ``queue``:
    unfinished writes per descriptor (1 to 2**20, default 16); ``vmsplice``: hand pages to pipes
    instead of copying (default on unless FRAMEBUS_PIPE_VMSPLICE=0); ``pipe_size``: bytes to ask
    for (None: /proc/sys/fs/pipe-max-size, 0: leave pipes alone, -1: unchanged).
    Raises InvalidArgumentError (ValueError)."""

def pipe_stats(fd: _Fd) -> Optional[Dict[str, Any]]:
    """Counters of the writer of ``fd`` or None: bytes, spliced, jobs, pending, pending_bytes,
    pipe_size, vmsplice, fifo."""

def _pipe_flush_at_exit(stall: float) -> List[Tuple[int, int, int]]:
    """Exit hook: waits for queued writes while they progress; returns (fd, jobs, bytes) given up."""
