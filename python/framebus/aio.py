"""asyncio support: awaiting new frames without a thread per call.

Each stream handle that is awaited gets one daemon thread (started on demand, gone after a second
without awaiters) that sleeps on the stream's futex and resolves the futures of every coroutine
waiting on that handle. The coroutines then read without blocking. Cancelling a coroutine drops
its future; no frame is consumed by a cancelled wait.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, List, Optional, Tuple

import numpy as np

from ._convert import timeout_seconds
from .errors import StreamClosedError, StreamTimeoutError

if TYPE_CHECKING:
    # The native handle (framebus.Stream is a subclass): this module never imports _stream,
    # which imports it back for Stream's async methods.
    from ._native import Stream

__all__ = ["read_new_async", "wait_view_async", "wait_after_async", "iterate"]

#: How long the waiter thread lingers without awaiters before it exits.
_IDLE_EXIT = 1.0
#: Longest single native wait of the waiter thread (it re-checks its awaiters after each).
_SLICE = 0.1


class _Waiter:
    """The per-handle thread that turns futex wake-ups into resolved asyncio futures."""

    def __init__(self, stream: "Stream") -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._pending: List[Tuple[asyncio.AbstractEventLoop, asyncio.Future, int]] = []
        self._thread: Optional[threading.Thread] = None
        self._wakeup = threading.Event()

    def wait(self, after: int) -> "asyncio.Future[int]":
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        with self._lock:
            self._pending.append((loop, fut, after))
            self._wakeup.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"framebus-aio-{self._stream.name}", daemon=True)
                self._thread.start()
        return fut

    def _run(self) -> None:
        while True:
            with self._lock:
                self._pending = [p for p in self._pending if not p[1].done()]
                target = min((after for _, _, after in self._pending), default=None)
                if target is None:
                    self._wakeup.clear()
            if target is None:
                # Sleep until an awaiter arrives; exit after a while without one.
                if not self._wakeup.wait(_IDLE_EXIT):
                    with self._lock:
                        if not self._pending:
                            self._thread = None
                            return
                continue
            try:
                seq = self._stream.wait_after(target, timeout=_SLICE)
            except StreamTimeoutError:
                continue
            except BaseException as exc:  # closed handle or anything else: hand it to awaiters
                self._resolve(lambda after: True, exc=exc)
                if isinstance(exc, StreamClosedError):
                    with self._lock:
                        self._thread = None
                    return
                continue
            self._resolve(lambda after: after < seq, value=seq)

    def _resolve(self, which: Any, value: Any = None, exc: Optional[BaseException] = None) -> None:
        with self._lock:
            keep = []
            for loop, fut, after in self._pending:
                if fut.done():
                    continue
                if not which(after):
                    keep.append((loop, fut, after))
                    continue
                try:
                    loop.call_soon_threadsafe(_settle, fut, value, exc)
                except RuntimeError:  # the awaiting loop has been closed meanwhile
                    pass
            self._pending = keep


def _settle(fut: asyncio.Future, value: Any, exc: Optional[BaseException]) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _waiter(stream: "Stream") -> _Waiter:
    w = stream.__dict__.get("_aio_waiter")
    if w is None:
        w = stream.__dict__.setdefault("_aio_waiter", _Waiter(stream))
    return w


async def _await_new(stream: "Stream", deadline: Optional[float]) -> None:
    fut = _waiter(stream).wait(stream.last_seq)
    if deadline is None:
        await fut
        return
    remaining = deadline - time.monotonic()
    try:
        await asyncio.wait_for(fut, max(remaining, 0.0))
    except asyncio.TimeoutError:
        raise StreamTimeoutError(f"timed out waiting to receive a new frame on stream {stream.name!r}") from None


async def wait_after_async(stream: "Stream", after: int, *, timeout: Optional[float] = None) -> int:
    """Awaits a frame newer than sequence ``after`` (level-triggered: returns at once if there
    is one) and returns the newest sequence, as ``Stream.wait_after``. Raises
    StreamTimeoutError (TimeoutError) after ``timeout``, StreamClosedError if the handle is
    closed, also while waiting. InvalidArgumentError (ValueError) for a negative timeout or one
    too large for a float."""
    timeout = timeout_seconds(timeout)
    try:
        return stream.wait_after(after, timeout=0)
    except StreamTimeoutError:
        pass
    fut = _waiter(stream).wait(after)
    if timeout is None:
        return await fut
    try:
        return await asyncio.wait_for(fut, max(timeout, 0.0))
    except asyncio.TimeoutError:
        raise StreamTimeoutError(f"timed out waiting for a frame after {after} on stream {stream.name!r}") from None


async def read_new_async(stream: "Stream", *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Awaits the next frame this handle has not seen and returns a copy (into ``out``)."""
    timeout = timeout_seconds(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return stream.read_new(timeout=0, out=out)
        except StreamTimeoutError:
            pass
        await _await_new(stream, deadline)


async def wait_view_async(stream: "Stream", *, timeout: Optional[float] = None) -> Any:
    """Awaits the next frame this handle has not seen and returns a zero-copy Frame."""
    timeout = timeout_seconds(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return stream.wait_view(timeout=0)
        except StreamTimeoutError:
            pass
        await _await_new(stream, deadline)


async def iterate(stream: "Stream", timeout: Optional[float] = None) -> AsyncIterator[Any]:
    """Yields each new frame as a zero-copy Frame; the previous one is released when the loop
    asks for the next. Ends when the handle is closed or no frame arrives within ``timeout``;
    raises StreamReplacedError or DeviceUnavailableError as ``Stream.frames()`` does."""
    timeout = timeout_seconds(timeout)
    frame = None
    try:
        while True:
            try:
                nxt = await wait_view_async(stream, timeout=timeout)
            except (TimeoutError, StreamClosedError):
                return
            if frame is not None:
                frame.release()
            frame = nxt
            yield frame
    finally:
        if frame is not None:
            frame.release()
