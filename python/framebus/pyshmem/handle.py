"""``SharedMemory``: pyshmem's handle, translated onto one native framebus stream handle.

Everything a frame goes through (the ring, the write lock, futex waits, loans) is the native
handle's; this class only renames, keeps pyshmem's per-handle read accounting
(``last_read_count``, ``missed_writes``) and turns framebus errors into pyshmem's messages.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .. import _native
from .. import _stream as _fb
from ..errors import InvalidArgumentError, StreamClosedError, StreamNotFoundError, StreamTimeoutError
from . import errors as _err
from . import values as _values
from .locking import LockScope, WriteView
from .publication import Publication

__all__ = ["SharedMemory"]



def _non_negative_int(after: Any) -> int:
    try:
        baseline = int(after)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError("after must be an integer") from exc
    if baseline < 0:
        raise ValueError("after must be non-negative")
    return baseline


def _zeros_of(shape: Tuple[int, ...], dtype: np.dtype) -> Any:
    """What a read returns before the first write, as pyshmem's untouched buffer: a new array
    of zeros, or ``out`` (already checked by the native read) filled with zeros."""

    def zeros(out: Optional[np.ndarray] = None) -> np.ndarray:
        if out is None:
            return np.zeros(shape, dtype)
        out[...] = 0
        return out

    return zeros


def _native_property(attr: str, operation: str, doc: str) -> Any:
    """A read-only property passing the native handle's ``attr`` through, with pyshmem's error
    on a closed handle."""

    def get(self: "SharedMemory") -> Any:
        try:
            return getattr(self._s, attr)
        except StreamClosedError:
            raise _err.closed(self.name, operation) from None

    return property(get, doc=doc)


class SharedMemory:
    """A named shared-memory stream (pyshmem's handle) over a framebus stream.

    Made by :func:`framebus.pyshmem.create` / :func:`framebus.pyshmem.open`. Reads return
    copies (never torn), ``read_new`` waits for a write published after the call started,
    ``read_after``/``wait_for_count`` are level-triggered, ``write_view`` is a zero-copy loan
    that is discarded if the block raises."""

    #: pyshmem's module-level ``create`` (it builds host and GPU handles), set by ``api``, which
    #: imports this module; ``create_from_config`` calls it.
    _create: "Callable[..., SharedMemory]"

    def __init__(self, stream: _fb.Stream, *, owner: bool, readonly: bool, creator_pid: int, instance_id: Optional[str]) -> None:
        if stream.shape is None:
            # pyshmem's API has one shape per stream; frames of any shape need the native API.
            stream.close()
            raise InvalidArgumentError(
                f"stream {stream.name!r} has variable-shape frames (created with capacity=); "
                "the pyshmem API needs a fixed shape: use framebus.open() for this stream"
            )
        self._s = stream
        # The native calls of the hot paths, bound once. The class's write (the native one, or
        # a read-only handle's refusal), not the instance's first-write hook: pyshmem has no end
        # of stream, so a compat handle is never marked as the writer (see close()).
        self._native_write = type(stream).write.__get__(stream)
        zeros = _zeros_of(tuple(stream.shape), np.dtype(stream.dtype))
        self._read_info = _err.as_pyshmem_read(stream._read_info, stream.name, lambda out=None: (zeros(out), 0, 0, 0, b""))
        self._native_read = _err.as_pyshmem_read(stream.read, stream.name, zeros)
        self._native_wait_after = stream.wait_after
        self.name: str = stream.name
        self.shape: Tuple[int, ...] = tuple(stream.shape)
        self.dtype: np.dtype = np.dtype(stream.dtype)
        self.size: int = int(stream.size)
        self.owner = bool(owner)
        self.readonly = bool(readonly)
        self.gpu_device: Optional[str] = None
        self.gpu_enabled = False
        self.cpu_mirror = True
        self._creator_pid = int(creator_pid)
        self._instance_id = instance_id
        self._closed = False
        self._auto_unlink = False
        # Lock levels taken through this handle and by which thread (close() must know).
        self._held_depth = 0
        self._held_by: Optional[int] = None

    # -- guards ------------------------------------------------------------------------------
    def _ensure_open(self, operation: str) -> None:
        if self._closed:
            raise _err.closed(self.name, operation)

    def _ensure_writable(self, operation: str) -> None:
        if self.readonly:
            raise _err.read_only(self.name, operation)

    # -- identity and metadata -----------------------------------------------------------------
    @property
    def instance_id(self) -> Optional[str]:
        """Hex identifier of this stream generation (a new stream under the same name gets a new one)."""
        return self._instance_id

    @property
    def notify(self) -> bool:
        """Always True: framebus readers park on a futex and writers wake them (pyshmem's notify=True)."""
        return True

    def __repr__(self) -> str:
        return f"SharedMemory(name={self.name!r}, shape={self.shape!r}, dtype={str(self.dtype)!r}, gpu_device={self.gpu_device!r})"

    count = _native_property("write_sequence", "read count from", "Number of completed writes on the stream.")
    last_read_count = _native_property("last_seq", "read last_read_count from", "The count of the frame returned by this handle's last read.")
    missed_writes = _native_property("missed", "read missed_writes from", "Writes skipped between this handle's last two reads.")
    total_missed_writes = _native_property("total_missed", "read total_missed_writes from", "All writes this handle skipped since it was opened.")
    write_time = _native_property("write_time", "read write_time from", "UNIX time of the newest completed write (0.0 before the first).")

    @property
    def write_sequence(self) -> int:
        """pyshmem's seqlock counter: twice the count (even: no write half-published; framebus
        never exposes a write in progress)."""
        try:
            return 2 * self._s.write_sequence
        except StreamClosedError:
            raise _err.closed(self.name, "read write_sequence from") from None

    @property
    def frame_id(self) -> int:
        """The uint64 token of the newest write (0 until a write sets one; kept by writes without one)."""
        try:
            return _values.frame_id_in(self._s.frame_id)
        except StreamClosedError:
            raise _err.closed(self.name, "read frame_id from") from None

    @property
    def creator_pid(self) -> int:
        self._ensure_open("read creator_pid from")
        return self._creator_pid

    @property
    def age(self) -> float:
        """Seconds since the newest completed write; ``math.inf`` before the first."""
        self._ensure_open("read age from")
        if self._s.write_sequence == 0:
            return math.inf
        return max(0.0, time.time() - self._s.write_time)

    def is_stale(self, max_age: float) -> bool:
        """Whether the newest write is older than ``max_age`` seconds (ValueError unless positive)."""
        if max_age <= 0:
            raise ValueError("max_age must be positive")
        return self.age > float(max_age)

    def producer_alive(self) -> bool:
        """Whether the creating process still runs (by PID, single host, as pyshmem)."""
        self._ensure_open("check producer liveness for")
        return _values.pid_alive(self._creator_pid)

    # -- locking (the native cross-process write lock, re-entrant per thread) ------------------
    def acquire(self, *, timeout: Optional[float] = None, poll_interval: float = 1e-3) -> None:
        """Takes the stream's cross-process write lock (re-entrant in this thread).
        TimeoutError after ``timeout`` seconds."""
        self._ensure_open("acquire")
        self._ensure_writable("acquire the write lock for")
        try:
            self._s.acquire(_values.at_least_zero(timeout))
        except StreamTimeoutError:
            raise _err.lock_timeout() from None
        except StreamClosedError:
            raise _err.closed(self.name, "acquire") from None
        self._held_depth += 1
        self._held_by = threading.get_ident()

    def release(self) -> None:
        """Releases one level of this thread's write lock."""
        self._ensure_open("release")
        if not self._s.lock_held():
            if self._s.lock_owner is None:
                raise RuntimeError("cannot release an unlocked shared memory lock")
            raise RuntimeError("cannot release a lock owned by another thread")
        self._s.release()
        if self._held_depth > 0 and self._held_by == threading.get_ident():
            self._held_depth -= 1
            if self._held_depth == 0:
                self._held_by = None

    def locked(self, *, timeout: Optional[float] = None, poll_interval: float = 1e-3) -> LockScope:
        """Context manager: holds the write lock for the block and yields this handle."""
        return LockScope(self, timeout, poll_interval)

    def _require_lock(self, call: str) -> None:
        if self._closed or not self._s.lock_held():
            self._ensure_open("write to")
            raise RuntimeError(f"{call} requires an active 'with shm.locked()' block")

    # -- lifecycle ---------------------------------------------------------------------------
    def _release_for_close(self) -> None:
        """Releases the lock levels this thread took through this handle; RuntimeError if
        another thread is inside this handle's lock scope."""
        if self._held_depth > 0:
            if self._held_by != threading.get_ident():
                raise RuntimeError("cannot close shared memory while another thread owns its lock")
            while self._held_depth > 0 and self._s.lock_held():
                self._s.release()
                self._held_depth -= 1
            self._held_depth, self._held_by = 0, None

    def close(self, *, timeout: float = 5.0) -> None:
        """Closes this handle (idempotent); the stream stays until unlinked. Reads blocked on
        this handle in other threads raise RuntimeError at once. Raises RuntimeError if
        another thread is inside this handle's lock scope. ``timeout`` is accepted for pyshmem
        compatibility; framebus never has to wait for readers to leave."""
        if self._closed:
            return
        self._release_for_close()
        self._closed = True
        # The native close, not framebus.Stream.close(): that ends the stream when the handle
        # wrote to it, and pyshmem readers know no end of stream (a waiting compat reader would
        # raise "closed" because another handle closed).
        _native.Stream.close(self._s)

    def unlink(self) -> None:
        """Destroys the stream this handle belongs to and closes the handle. StaleStreamError
        if the name now belongs to a newer stream, which is left alone; silent if the stream is
        already gone."""
        self._ensure_writable("unlink")
        removed = False
        if not self._closed:
            self._release_for_close()
            removed = _native.Stream.unlink(self._s)
            self.close()
        if removed:
            return
        try:
            current = _values.generation(self.name)[1]
        except (OSError, ValueError):
            return
        if self._instance_id is not None and current != self._instance_id:
            raise _err.StaleStreamError(f"stream {self.name!r} has been replaced by a newer generation")
        try:
            _native.unlink(self.name)
        except StreamNotFoundError:
            pass  # already gone, as pyshmem's unlink is silent then

    def delete(self) -> None:
        """Alias of :meth:`unlink`."""
        self.unlink()

    def __enter__(self) -> "SharedMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._auto_unlink:
            self.unlink()
        else:
            self.close()

    # -- writes ------------------------------------------------------------------------------
    def write(self, value: Any, *, frame_id: Optional[int] = None) -> None:
        """Copies ``value`` (converted to the stream's dtype) in as the next frame. ``frame_id``
        stamps a uint64 token on it; omitted, the stream's token stays as it was. Raises
        ValueError for another shape, PermissionError on a read-only handle, RuntimeError on a
        closed one."""
        try:
            if frame_id is None:
                self._native_write(value)
            else:
                self._native_write(value, frame_id=_values.frame_id_out(frame_id))
        except StreamClosedError:
            raise _err.closed(self.name, "write to") from None
        except PermissionError:
            self._ensure_open("write to")  # pyshmem names a closed handle first
            raise _err.read_only(self.name, "write to") from None
        except (TypeError, InvalidArgumentError):
            # pyshmem converts with np.asarray(value, dtype); framebus refuses what it cannot take as is.
            array = np.asarray(value, dtype=self.dtype)
            if array.shape != self.shape:
                raise ValueError(f"expected shape {self.shape}, got {array.shape}") from None
            self._native_write(array, frame_id=_values.frame_id_out(frame_id))

    def write_locked(self, value: Any, *, frame_id: Optional[int] = None) -> None:
        """:meth:`write` for a caller that holds the lock (RuntimeError otherwise)."""
        self._ensure_open("write to")
        self._ensure_writable("write to")
        self._require_lock("write_locked()")
        self.write(value, frame_id=frame_id)

    def write_view(self, *, timeout: Optional[float] = None, frame_id: Optional[int] = None) -> WriteView:
        """Context manager yielding a writable array in the next free slot (zero-copy), holding
        the write lock; published on normal exit, discarded if the block raises. A closed or
        read-only handle raises on entering the block (as pyshmem's)."""
        return WriteView(self, frame_id, take_lock=True, timeout=timeout)

    def write_view_locked(self, *, frame_id: Optional[int] = None) -> WriteView:
        """:meth:`write_view` for a caller that already holds the lock."""
        return WriteView(self, frame_id, take_lock=False, timeout=None)

    def clear(self) -> None:
        """Publishes a frame of zeros (a new write; copies a zero frame in). The frame id stays
        as it was, as pyshmem's. Waits for the write lock like :meth:`write`."""
        self._ensure_open("clear")
        self._ensure_writable("clear")
        try:
            self._native_write(np.zeros(self.shape, self.dtype))
        except StreamClosedError:
            raise _err.closed(self.name, "clear") from None

    def pinned_buffer(self) -> Any:
        """GPU handles only (framebus GPU streams): RuntimeError on a CPU handle."""
        self._ensure_open("allocate a pinned buffer for")
        self._ensure_writable("allocate a pinned write buffer for")
        raise RuntimeError("pinned_buffer() requires a GPU-attached stream handle")

    # -- reads -------------------------------------------------------------------------------
    def _copy_out(self, out: Any, info: bool) -> Any:
        """pyshmem's ``out=``: ``np.copyto(out, frame)``, so any layout, a same-kind cast and
        broadcasting are allowed. Taken only where the native read refused ``out`` (it fills a
        C-contiguous array of the stream's shape and dtype directly). NumPy checks ``out``
        first (``where=False`` writes nothing), so a bad one raises NumPy's own TypeError or
        ValueError before anything is read, as under pyshmem; then one native read (a copy)
        and NumPy's copy into ``out``."""
        np.copyto(out, np.broadcast_to(np.zeros((), self.dtype), self.shape), where=False)
        if info:
            arr, seq, ts, fid, meta = self._read_info()
            np.copyto(out, arr)
            return out, seq, ts, fid, meta
        np.copyto(out, self._native_read())
        return out

    def _unsafe_frame(self, operation: str) -> Any:
        """The newest frame as a read-only zero-copy view (lock held), or None before the
        first write (then the caller returns zeros, as pyshmem's untouched buffer: nothing can
        be published while this thread holds the write lock)."""
        self._ensure_writable(operation)
        if not self._s.lock_held():
            raise RuntimeError("safe=False requires an active 'with shm.locked()' block")
        if self._s.write_sequence == 0:
            return None
        return self._s.view()

    def _zeros_view(self) -> np.ndarray:
        zeros = self._native_read()
        zeros.flags.writeable = False
        return zeros

    def read(self, *, safe: bool = True, poll_interval: float = 1e-6, out: Optional[np.ndarray] = None, timeout: Optional[float] = None) -> np.ndarray:
        """A copy of the newest frame (zeros before the first write); never torn. ``out``
        receives it as ``np.copyto`` would (a matching C-contiguous array is filled directly;
        another layout, a same-kind dtype or a broadcastable shape goes through one extra
        copy) and is returned. ``safe=False`` (lock held) returns a read-only zero-copy view
        of it instead."""
        if safe:
            try:
                return self._native_read(out=out)
            except StreamClosedError:
                raise _err.closed(self.name, "read from") from None
            except (TypeError, ValueError):
                if out is None:
                    raise
                return self._copy_out(out, False)
        self._ensure_open("read from")
        self._ensure_writable("take an unsafe shared view from")
        if out is not None:
            raise ValueError("out is supported only for safe CPU reads; pass a NumPy destination buffer to a CPU-backed handle")
        frame = self._unsafe_frame("take an unsafe shared view from")
        return self._zeros_view() if frame is None else frame.array

    def read_publication(self, *, safe: bool = True, poll_interval: float = 1e-6, out: Optional[np.ndarray] = None, timeout: Optional[float] = None) -> Publication:
        """The newest frame with its count, frame_id and write_time, read as one snapshot
        (``out`` as in :meth:`read`)."""
        if not safe:
            self._ensure_open("read a publication from")
            self._ensure_writable("take an unsafe publication view from")
            if out is not None:
                raise ValueError("out is supported only for safe CPU publication reads; pass a NumPy destination buffer to a CPU-backed handle")
            frame = self._unsafe_frame("take an unsafe publication view from")
            if frame is None:
                return Publication(self._zeros_view(), 0, _values.frame_id_in(self._s.frame_id), 0.0, self._s.missed)
            return Publication(frame.array, frame.seq, _values.frame_id_in(frame.frame_id), frame.timestamp_ns / 1e9, self._s.missed)
        try:
            arr, seq, ts, fid, _meta = self._read_info(out=out)
        except StreamClosedError:
            raise _err.closed(self.name, "read a publication from") from None
        except (TypeError, ValueError):
            if out is None:
                raise
            arr, seq, ts, fid, _meta = self._copy_out(out, True)
        return Publication(arr, seq, _values.frame_id_in(fid), ts / 1e9, self._s.missed)

    def _wait_after(self, baseline: int, timeout: Optional[float], edge: bool) -> int:
        """The native level-triggered wait with pyshmem's errors. Callers check the handle is
        open first, so a StreamClosedError here means it was closed while waiting. A count
        past 2**64 - 1 is never reached: it waits for 2**64 - 1 (the same, as no count
        passes it) and names the caller's number on a timeout."""
        try:
            return self._native_wait_after(min(baseline, _values.U64_MAX), timeout=timeout)
        except StreamTimeoutError:
            raise (_err.no_new_write(self.name) if edge else _err.count_not_passed(self.name, baseline)) from None
        except StreamClosedError:
            raise _err.closed_while_waiting(self.name) from None

    @staticmethod
    def _level_timeout(timeout: Optional[float]) -> Optional[float]:
        """The level waits' timeout check, as pyshmem's (before any wait); NaN is refused
        too (pyshmem would wait forever)."""
        if timeout is not None and not timeout >= 0:
            raise ValueError("timeout must be non-negative")
        return timeout

    def read_new(self, *, timeout: Optional[float] = None, safe: bool = True, poll_interval: float = 1e-5, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Waits for a write published after this call began (edge-triggered, as pyshmem) and
        returns the newest frame. TimeoutError after ``timeout`` (at once when it is 0 or
        negative and nothing new is there)."""
        try:
            baseline = self._s.write_sequence
        except StreamClosedError:
            raise _err.closed(self.name, "read from") from None
        self._wait_after(baseline, _values.at_least_zero(timeout), True)
        return self.read(safe=safe, out=out)

    def read_new_publication(self, *, timeout: Optional[float] = None, safe: bool = True, poll_interval: float = 1e-5, out: Optional[np.ndarray] = None) -> Publication:
        """:meth:`read_new` returning a :class:`Publication` (pyshmem's errors of
        :meth:`wait_for_count`: a negative timeout is a ValueError)."""
        try:
            baseline = self._s.write_sequence
        except StreamClosedError:
            raise _err.closed(self.name, "read from") from None
        self._wait_after(baseline, self._level_timeout(timeout), False)
        return self.read_publication(safe=safe, out=out)

    def wait_for_count(self, *, after: int, timeout: Optional[float] = None, poll_interval: float = 1e-5) -> int:
        """Waits until the count exceeds ``after`` (level-triggered) and returns the count."""
        self._ensure_open("read from")
        baseline = _non_negative_int(after)
        return self._wait_after(baseline, self._level_timeout(timeout), False)

    def read_after(self, after: int, *, timeout: Optional[float] = None, safe: bool = True, poll_interval: float = 1e-5, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Waits until the count exceeds ``after`` (level-triggered), then reads the newest frame.
        (The wait and the read are spelled out here: this is the lock-step hot path.)"""
        if self._closed:
            raise _err.closed(self.name, "read from")
        if type(after) is not int or after < 0:
            after = _non_negative_int(after)
        if timeout is not None and not timeout >= 0:
            raise ValueError("timeout must be non-negative")
        try:
            if self._s.write_sequence <= after:  # else the level is already passed: no wait call
                self._native_wait_after(min(after, _values.U64_MAX), timeout=timeout)
            if safe:
                return self._native_read(out=out)
        except StreamTimeoutError:
            raise _err.count_not_passed(self.name, after) from None
        except StreamClosedError:
            raise _err.closed_while_waiting(self.name) from None
        except (TypeError, ValueError):
            # Only the read can refuse now (after and timeout were checked): out= as np.copyto.
            if out is None:
                raise
            return self._copy_out(out, False)
        return self.read(safe=False, out=out)

    def read_after_publication(self, after: int, *, timeout: Optional[float] = None, safe: bool = True, poll_interval: float = 1e-5, out: Optional[np.ndarray] = None) -> Publication:
        """:meth:`read_after` returning a :class:`Publication`."""
        self._ensure_open("read from")
        self._wait_after(_non_negative_int(after), self._level_timeout(timeout), False)
        return self.read_publication(safe=safe, out=out)

    async def read_new_async(self, *, timeout: Optional[float] = None, safe: bool = True, poll_interval: float = 1e-5, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Awaits a write published after this call began (no thread per call) and returns the
        newest frame. TimeoutError after ``timeout``; RuntimeError if the handle is closed."""
        from ..aio import wait_after_async

        try:
            baseline = self._s.write_sequence
        except StreamClosedError:
            raise _err.closed(self.name, "read from") from None
        try:
            await wait_after_async(self._s, baseline, timeout=_values.at_least_zero(timeout))
        except StreamTimeoutError:
            raise _err.no_new_write(self.name) from None
        except StreamClosedError:
            raise _err.closed_while_waiting(self.name) from None
        return self.read(safe=safe, out=out)

    # -- description and configuration -----------------------------------------------------------
    def describe(self) -> str:
        """A human-readable summary of the stream (one ``field: value`` per line)."""
        self._ensure_open("describe")
        rows = [
            ("name", self.name),
            ("shape", self.shape),
            ("dtype", self.dtype),
            ("size", f"{self.size} bytes"),
            ("gpu_enabled", self.gpu_enabled),
            ("gpu_device", self.gpu_device),
            ("cpu_mirror", self.cpu_mirror),
            ("count", self.count),
            ("write_time", self.write_time),
            ("write_seq", self.write_sequence),
            ("owner", self.owner),
            ("readonly", self.readonly),
            ("creator_pid", self.creator_pid),
            ("producer", "alive" if self.producer_alive() else "dead"),
            ("age", f"{self.age:.3f} s"),
            ("notify", self.notify),
        ]
        return "\n".join(f"{key + ':':<14}{value}" for key, value in rows)

    def to_config(self) -> Dict[str, Any]:
        """The stream's configuration as a plain dict (for :meth:`create_from_config`)."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": str(self.dtype),
            "gpu_device": self.gpu_device,
            "cpu_mirror": self.cpu_mirror,
            "notify": self.notify,
        }

    @classmethod
    def create_from_config(cls, config: Dict[str, Any]) -> "SharedMemory":
        """Creates a stream from a dict as :meth:`to_config` returns (``dtype`` defaults to float32)."""
        return SharedMemory._create(
            config["name"],
            shape=config["shape"],
            dtype=config.get("dtype", "float32"),
            gpu_device=config.get("gpu_device"),
            cpu_mirror=config.get("cpu_mirror"),
            notify=config.get("notify", False),
        )

    # -- DLPack ------------------------------------------------------------------------------
    def __dlpack_device__(self) -> Tuple[int, int]:
        self._ensure_open("read the DLPack device of")
        return (1, 0)

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule of a snapshot (a copy, as :meth:`read`), not a live view."""
        self._ensure_open("export DLPack from")
        snapshot = self.read()
        try:
            return snapshot.__dlpack__(**kwargs)
        except TypeError:
            return snapshot.__dlpack__()
