"""pyshmem's lock scopes and zero-copy write scope, on the native write lock and loans."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from ..errors import StreamClosedError, StreamTimeoutError
from . import errors as _err
from . import values as _values

if TYPE_CHECKING:
    from .handle import SharedMemory

__all__ = ["LockScope", "WriteView", "LockedMany", "locked_many"]


class LockScope:
    """``shm.locked()``: takes the write lock on entry (yielding the handle), releases one
    level on exit."""

    __slots__ = ("_handle", "_timeout", "_poll_interval")

    def __init__(self, handle: "SharedMemory", timeout: Optional[float], poll_interval: float) -> None:
        self._handle = handle
        self._timeout = timeout
        self._poll_interval = poll_interval

    def __enter__(self) -> "SharedMemory":
        self._handle.acquire(timeout=self._timeout, poll_interval=self._poll_interval)
        return self._handle

    def __exit__(self, *exc: object) -> None:
        self._handle.release()


class WriteView:
    """``shm.write_view()`` / ``write_view_locked()``: a native loan. Entering yields the
    writable array of the next free slot; a normal exit publishes it, an exception discards it
    (readers never see it). ``take_lock`` holds the write lock for the block."""

    __slots__ = ("_handle", "_frame_id", "_take_lock", "_timeout", "_loan", "_locked")

    def __init__(self, handle: "SharedMemory", frame_id: Optional[int], *, take_lock: bool, timeout: Optional[float]) -> None:
        self._handle = handle
        self._frame_id = frame_id
        self._take_lock = take_lock
        self._timeout = timeout
        self._loan: Any = None
        self._locked = False

    def __enter__(self) -> Any:

        h = self._handle
        h._ensure_open("write to")
        h._ensure_writable("write to")
        if self._take_lock:
            h.acquire(timeout=self._timeout)
            self._locked = True
        else:
            h._require_lock("write_view_locked()")
        try:
            self._loan = h._s.loan(_values.at_least_zero(self._timeout), frame_id=_values.frame_id_out(self._frame_id), **self._loan_kwargs())
            return self._array_of(self._loan)
        except StreamTimeoutError:
            self._unlock()
            raise _err.lock_timeout() from None
        except StreamClosedError:
            self._unlock()
            raise _err.closed(h.name, "write to") from None
        except BaseException:
            self._unlock()
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self._loan.commit()
            else:
                self._loan.abort()
        finally:
            self._loan = None
            self._unlock()

    def _loan_kwargs(self) -> dict:
        """Extra arguments of the native loan (a GPU handle's CUDA stream)."""
        return {}

    def _array_of(self, loan: Any) -> Any:
        """What the block gets: the loaned slot's array."""
        return loan.array

    def _unlock(self) -> None:
        if self._locked:
            self._locked = False
            self._handle.release()


def _remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class LockedMany:
    """``locked_many()``: takes every handle's lock in name order under one deadline and
    yields the handles in the caller's order; releases them last-first."""

    __slots__ = ("_streams", "_timeout", "_poll_interval", "_scopes")

    def __init__(self, streams: Sequence[Any], timeout: Optional[float], poll_interval: float) -> None:
        self._streams = streams
        self._timeout = timeout
        self._poll_interval = poll_interval
        self._scopes: List[Any] = []

    def __enter__(self) -> Tuple[Any, ...]:
        handles = tuple(self._streams)
        ordered = sorted(handles, key=lambda h: h.name)
        for previous, current in zip(ordered, ordered[1:]):
            if previous.name == current.name:
                raise ValueError("locked_many() requires unique stream names")
        if self._timeout is not None and float(self._timeout) < 0.0:
            raise ValueError("timeout must be non-negative")
        poll = float(self._poll_interval)
        if not math.isfinite(poll) or poll <= 0.0:
            raise ValueError("poll_interval must be positive")
        deadline = None if self._timeout is None else time.monotonic() + float(self._timeout)
        try:
            for handle in ordered:
                scope = handle.locked(timeout=_remaining(deadline), poll_interval=poll)
                scope.__enter__()
                self._scopes.append(scope)
        except BaseException:
            self._release()
            raise
        return handles

    def __exit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._scopes:
            scope = self._scopes.pop()
            try:
                scope.__exit__(None, None, None)
            except BaseException:
                self._release()
                raise


def locked_many(streams: Sequence[Any], *, timeout: Optional[float] = None, poll_interval: float = 1e-3) -> LockedMany:
    """Holds the write locks of several streams (taken in name order, one deadline for all)
    for a ``with`` block, which gets the handles in the order given. ValueError for repeated
    names, a negative timeout or a non-positive poll_interval; TimeoutError when a lock is not
    had in time (the ones taken are released)."""
    return LockedMany(streams, timeout, poll_interval)
