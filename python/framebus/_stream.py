"""The ``Stream`` class: the native handle plus the parts that read better in Python (context
managers, pickling, iteration, repr). Hot calls (write, read, read_new, read_into) go straight to
the native methods without a Python layer in between."""

from __future__ import annotations

import errno as _errno
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import _native
from ._convert import ShapeLike, parse_capacity, timeout_seconds
from ._device import parse_device
from .errors import (
    InvalidArgumentError,
    StreamClosedError,
    StreamNotFoundError,
    StreamNotReadyError,
    StreamPermissionError,
)
from .monitor import WRITING_ROLES

__all__ = ["Stream", "Publication", "create", "open", "stream", "unlink"]

#: The device-stream handle classes (plain, read-only) that create() and open() make when a stream
#: in GPU memory is asked for or found. ``_device_stream`` subclasses Stream, so it imports this
#: module and sets them here (the package imports both); this module never imports it back.
DEVICE_CLASSES: Dict[str, type] = {}


@dataclass(frozen=True)
class Publication(NDArrayOperatorsMixin):
    """A frame and what was published with it, read together (never mixed across frames).

    It behaves as its array (``pub.mean()``, ``pub * 2``, ``pub[0]``, ``np.asarray(pub)``,
    ``len(pub)``): attributes it does not have itself, indexing and NumPy's functions and
    operators go to ``payload`` (``==`` compares Publications; use ``pub.payload == x``).

    ``payload`` is an independent copy. ``seq`` is the frame's sequence number (1 for the
    first frame), ``frame_id`` the id its writer gave it, ``timestamp`` its wall-clock time in
    seconds, ``timestamp_ns`` the same in nanoseconds, ``meta`` the writer's metadata bytes (the
    names of a :class:`Frame`), ``missed`` the frames this handle skipped before it (latest
    mode; as ``Stream.missed``).

    On a variable-shape stream ``payload`` is what the frame holds: an array, a dict of named
    arrays, or ``bytes`` for a byte payload."""

    payload: Any
    seq: int
    frame_id: int
    timestamp: float
    timestamp_ns: int
    meta: bytes
    missed: int = 0

    @property
    def shape(self) -> Optional[tuple]:
        """Shape of the frame's array (a byte payload: ``(len,)``); None for a dict frame."""
        if isinstance(self.payload, np.ndarray):
            return self.payload.shape
        if isinstance(self.payload, bytes):
            return (len(self.payload),)
        return None

    @property
    def dtype(self) -> Optional[np.dtype]:
        """dtype of the frame's array (a byte payload: uint8); None for a dict frame."""
        if isinstance(self.payload, np.ndarray):
            return self.payload.dtype
        if isinstance(self.payload, bytes):
            return np.dtype(np.uint8)
        return None

    @property
    def names(self) -> Optional[tuple]:
        """Names of the arrays of a frame written as a dict; None otherwise."""
        return tuple(self.payload) if isinstance(self.payload, dict) else None

    # -- array behaviour: the payload's ------------------------------------------------------
    def _array(self) -> np.ndarray:
        if isinstance(self.payload, dict):
            raise InvalidArgumentError(
                f"this frame holds several arrays {tuple(self.payload)}; use pub.payload[name] (or pub[name])"
            )
        if self.payload is None:
            raise InvalidArgumentError("this publication has no frame (nothing was written yet)")
        if isinstance(self.payload, bytes):
            return np.frombuffer(self.payload, np.uint8)
        return self.payload

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        arr = self._array()
        if copy:
            return np.array(arr, dtype=dtype, copy=True)
        return np.asarray(arr, dtype=dtype)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        inputs = tuple(x._array() if isinstance(x, Publication) else x for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(x._array() if isinstance(x, Publication) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(self.payload, dict) and isinstance(key, str):
            return self.payload[key]
        return self._array()[key]

    def __len__(self) -> int:
        return len(self._array())

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Iterator[Any]:
        return iter(self._array())

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes a Publication does not have: the array's (ndim, mean, ...).
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _MOVED:
            raise AttributeError(
                f"a framebus Publication has no {name!r}: it is {_MOVED[name]!r} (the names of a Frame); "
                "pyshmem's names are on framebus.pyshmem's Publication"
            )
        return getattr(self._array(), name)


#: pyshmem's names of a Publication's fields (framebus 0.1 used them) -> framebus's.
_MOVED = {"count": "seq", "write_time": "timestamp", "missed_publications": "missed"}


class Stream(_native.Stream):
    """A handle on a named shared-memory stream of frames. See ``framebus.create`` and
    ``framebus.open``; the native methods are documented in ``framebus/_native.pyi``.

    A handle belongs to one process. In a child forked with it, the first call that reaches the
    stream (not ``close()``) makes the child's own reader in the same mode, a lossless one
    continuing from the last frame it had consumed: its entry was reserved at fork, so the writer
    keeps every later frame for it (for up to ``FRAMEBUS_FORK_GRACE`` seconds, default 5, while
    the child has not used it; frames reclaimed after that count in ``total_missed``); closing it
    there never touches the parent's. Pickling (``multiprocessing``
    spawn) opens a new handle in the receiving process that continues from this one's position.
    Either way this handle stays a reader until it is closed."""

    _readonly = False
    _auto_unlink = False

    def _end_if_last_writer(self) -> None:
        """Ends the stream when this handle writes to it (it created the stream, took the write
        lock, or was tagged with a writing role) and no other live handle does (several
        writers: the stream ends when the last one closes)."""
        # A handle inherited through fork() and not used in this process has not written here:
        # the parent's stream is the parent's to end.
        if self.closed or self._inherited or self.role not in WRITING_ROLES or self._other_writers():
            return
        try:
            self.end()
        except StreamClosedError:  # closed by another thread meanwhile
            pass

    # -- locking ---------------------------------------------------------------------------
    @contextmanager
    def locked(self, timeout: Optional[float] = None) -> Iterator["Stream"]:
        """Holds the cross-process write lock for the ``with`` block and yields this handle.
        Raises TimeoutError (StreamTimeoutError) if it cannot be taken within ``timeout``."""
        self.acquire(timeout)
        try:
            yield self
        finally:
            self.release()

    # -- reads with their publication info --------------------------------------------------
    def read_publication(self, *, out: Optional[np.ndarray] = None) -> Publication:
        """The newest frame (copied, into ``out`` if given) with its sequence, time, id and
        metadata, read as one snapshot."""
        arr, seq, ts, fid, meta = self._read_info(out=out)
        return Publication(arr, seq, fid, ts / 1e9, ts, meta, 0)

    def read_new_publication(self, *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> Publication:
        """Like ``read_new`` but returns a :class:`Publication`."""
        arr, seq, ts, fid, meta = self._read_new_info(timeout=timeout, out=out)
        return Publication(arr, seq, fid, ts / 1e9, ts, meta, self.missed)

    def frames(self, timeout: Optional[float] = None, *, copy: bool = False, out: Optional[np.ndarray] = None) -> Iterator[Any]:
        """Yields every new frame this handle has not seen, until the end of the stream (the
        writer called ``end()`` or closed its handle: a lossless handle first gets every frame
        it has not read), until the handle is closed, or until no frame arrives within
        ``timeout``; then the iterator just ends (no StreamEndedError, no TimeoutError). A
        stream that can get no frame any more is not an end: the loop raises
        StreamReplacedError (its name was removed or now belongs to a new stream: open it
        again) or DeviceUnavailableError (a device stream whose owner died), within about a
        second of waiting.

        ``copy=False`` (default) yields zero-copy :class:`Frame` views; each is released when
        the loop asks for the next one (keep ``frame.array``, or any array made from it, to
        keep it pinned longer). ``copy=True`` yields :class:`Publication` copies (into ``out``
        if given). Both behave as the frame's array (``frame.mean()``, ``frame * 2``,
        ``frame[0]``, ``np.asarray(frame)``; results are new NumPy arrays) and carry the
        frame's ``seq``, ``frame_id``, ``timestamp_ns`` and ``meta``."""
        from .errors import StreamClosedError

        frame: Any = None
        try:
            while True:
                try:
                    nxt = self.read_new_publication(timeout=timeout, out=out) if copy else self.wait_view(timeout)
                except (TimeoutError, StreamClosedError):
                    return
                if frame is not None:
                    frame.release()
                frame = None if copy else nxt
                yield nxt
        finally:
            if frame is not None:
                frame.release()

    # -- asyncio ------------------------------------------------------------------------------
    async def read_new_async(self, *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Awaits the next frame this handle has not seen and returns a copy (into ``out``).
        No thread per call; cancellation-safe (a cancelled wait consumes nothing).
        Raises StreamTimeoutError (TimeoutError) after ``timeout`` seconds."""
        from .aio import read_new_async

        return await read_new_async(self, timeout=timeout, out=out)

    async def wait_view_async(self, timeout: Optional[float] = None) -> Any:
        """Awaits the next frame this handle has not seen and returns a zero-copy Frame."""
        from .aio import wait_view_async

        return await wait_view_async(self, timeout=timeout)

    def __aiter__(self) -> Any:
        from .aio import iterate

        return iterate(self)

    @property
    def readonly(self) -> bool:
        """Whether this handle refuses writes (``open(..., readonly=True)``)."""
        return self._readonly

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Detaches this handle (idempotent; never waits). The stream stays until unlinked;
        waits blocked on this handle in other threads stop with StreamClosedError.

        Closing the writer ends the stream: when this handle created the stream
        (``framebus.create``) or wrote to it (write, loan, clear), close() first calls
        ``end()``, so readers blocked in read_new/wait_view/wait in any process wake at once,
        get every frame they have not read (lossless) and then StreamEndedError. Leaving a
        ``with`` block closes, so it ends the stream too. Closing a handle that only read never
        ends it, and neither does closing one writer while another live handle still writes
        (several writers: the last one to close ends the stream). A later write by any handle
        clears the end (a restarted producer).

        In a process that got this handle through fork() and never used it, close() only
        forgets it: the parent's reader, write-lock holds and stream are left as they are."""
        self._end_if_last_writer()
        super().close()

    def unlink(self) -> None:  # type: ignore[override]
        """Removes the stream's name and closes this handle. Other handles keep working until
        they close. A newer stream created under the same name is left alone. A writer (see
        ``close``) ends the stream first, so its readers see the end before the name is gone.
        Raises StreamClosedError on a closed handle (``framebus.unlink(name)`` removes a stream
        by name)."""
        if self._readonly:
            raise StreamPermissionError(1, f"stream {self.name!r} was opened read-only; it cannot unlink it")
        if self.closed:
            raise StreamClosedError(f"this handle on stream {self.name!r} is closed, so it cannot unlink it; remove the stream by name with framebus.unlink({self.name!r})")
        self._end_if_last_writer()
        super().unlink()
        self.close()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._auto_unlink and not self.closed:
            self.unlink()
        self.close()

    def __reduce__(self) -> Any:
        # Pickles by name and position: the receiving process opens a handle of its own in the
        # same mode that continues from this handle's position (docs/design.md, "Handles across
        # fork, spawn and pickling"). This handle is unaffected and stays a reader until closed.
        return (_reopen, (self.name, self.mode, self._readonly, self._position))

    def __repr__(self) -> str:
        if self.closed:
            return f"<framebus.Stream {self.name!r} closed>"
        return (
            f"<framebus.Stream {self.name!r} "
            + (f"capacity={self.capacity} " if self.variable else f"shape={self.shape} dtype={self.dtype} ")
            + f"slots={self.slots} "
            f"mode={self.mode} seq={self.write_sequence} attached={self.attached}>"
        )


class _ReadOnlyStream(Stream):
    """A handle that refuses everything that writes or changes the stream (pyshmem's
    readonly): write, loan, clear, end, the write lock and unlink raise StreamPermissionError
    (a PermissionError) before anything is claimed or changed."""

    _readonly = True

    def _refuse(self, what: str) -> Any:
        raise StreamPermissionError(
            1, f"stream {self.name!r} was opened read-only; it cannot {what} (open it without readonly=True to write)"
        )

    def write(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._refuse("write")

    def _write_raw(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._refuse("write")

    def loan(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._refuse("loan a slot to write")

    def clear(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._refuse("clear")

    def end(self) -> None:
        self._refuse("end the stream")

    def acquire(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._refuse("take the write lock")


def _reopen(name: str, mode: str, readonly: bool, position: Optional[int] = None) -> Stream:
    s = open(name, mode=mode, readonly=readonly)
    if position is not None:
        s._resume(position)
    return s


def create(
    name: str,
    *,
    shape: Optional[ShapeLike] = None,
    dtype: Any = np.float32,
    capacity: Any = None,
    size: Optional[int] = None,
    slots: int = 4,
    meta_capacity: int = 256,
    max_readers: int = 64,
    permissions: int = 0o600,
    exist_ok: bool = False,
    auto_unlink: bool = False,
    device: Any = None,
    cpu_mirror: bool = False,
    mode: None = None,
) -> Stream:
    """Creates the stream ``name``: a ring of ``slots`` frames of ``shape`` and ``dtype`` in
    /dev/shm/framebus.<name>, fully allocated now, with the file permission bits
    ``permissions`` (0o600 by default, whatever the umask; 0o660 shares it with the file's
    group). Returns a handle that can write and read. ``mode`` is not taken here (TypeError
    naming ``permissions=``): it is ``open()``'s reader mode.

    ``size`` (bytes per frame) is an optional cross-check, as in pyshmem. ``meta_capacity`` is
    the metadata bytes each frame can carry; ``max_readers`` the handles that may be attached at
    once. With ``exist_ok=True`` an existing stream of the same spec is opened, and a stale one
    (creator dead, nobody attached) is replaced. ``auto_unlink=True`` makes leaving a ``with``
    block unlink the stream instead of only closing the handle (as in pyshmem): the idiom for
    scripts, so that a stream never outlives the block (a script killed outright leaves it
    behind; ``exist_ok=True`` or ``framebus gc`` deal with that).

    The returned handle is the stream's writer: its ``close()`` (or leaving its ``with`` block,
    with or without ``auto_unlink``) ends the stream, so readers get every frame still unread
    and then StreamEndedError instead of waiting for a timeout (see ``Stream.close``).

    ``capacity`` instead of ``shape`` creates a variable-shape stream: each slot holds up to
    ``capacity`` bytes of arrays (an int, or a string such as ``"32MiB"``), and every frame
    carries its own shape and dtype: ``write`` takes any number array that fits, a dict of named
    arrays (written and read as one frame) or a byte payload (bytes, bytearray, memoryview);
    ``read`` returns the same (an array, a dict, or bytes); ``loan`` takes ``shape=``/``dtype=``,
    ``nbytes=`` or ``arrays={name: (shape, dtype)}``. ``dtype`` and ``size`` do not apply then.

    ``device="cuda:0"`` (also ``0``, ``"cuda"``, a ``torch.device``) creates a device stream
    and returns a :class:`DeviceStream` (a Stream whose frame methods take a CUDA ``stream=``):
    the slots live in that GPU's memory, allocated now by this process, which owns it (it is
    freed when the stream is unlinked, or when this process exits). ``write`` then takes any
    array speaking DLPack or ``__cuda_array_interface__`` on that device (torch, CuPy, JAX,
    Numba) and copies device-to-device on the caller's CUDA stream (``stream=``), or uploads a
    NumPy array; ``loan()`` hands out the slot's device memory; ``view()``/``wait_view()`` return
    a ``DeviceFrame`` that torch and CuPy take without a copy; ``read_new()`` copies into
    ``out=`` or a new ``DeviceArray``. Ordering between processes uses CUDA events, never a host
    wait. ``cpu_mirror=True`` also copies every frame into host memory, so readers without a GPU
    open it as a host stream (each write then waits for that copy). See docs/gpu.md.

    Raises StreamExistsError (FileExistsError), ValueError for a bad name/shape/dtype/size,
    TypeError for arguments of the wrong type, InsufficientSpaceError (OSError, ENOSPC) when
    /dev/shm is too small, PermissionError; for ``device=``: DeviceUnavailableError
    (RuntimeError) without a CUDA driver or device, InvalidArgumentError for a device that does
    not exist, a dtype CUDA cannot hold or a variable-shape stream, DeviceError when a CUDA call
    fails.
    """
    if mode is not None:
        raise TypeError(
            f"create() takes permissions={oct(mode) if type(mode) is int else '0o600'} for the file permission bits "
            "(default 0o600), not mode=: mode= is open()'s reader mode ('latest' or 'lossless')"
        )
    if capacity is not None:
        capacity = parse_capacity(capacity)  # "32MiB" -> bytes
    ordinal = parse_device(device)
    # The native constructors check shape, dtype, capacity and size (the core's limits).
    stream: Stream
    if ordinal is None:
        if cpu_mirror:
            raise InvalidArgumentError('cpu_mirror=True needs a device stream (device="cuda:0"): a host stream is already in host memory')
        stream = Stream(
            name, create=True, shape=shape, dtype=dtype, capacity=capacity, size=size, slots=slots, meta_capacity=meta_capacity,
            max_readers=max_readers, permissions=permissions, exist_ok=exist_ok,
        )
    else:
        stream = DEVICE_CLASSES["plain"](
            name, create=True, shape=shape, dtype=dtype, capacity=capacity, size=size, slots=slots, meta_capacity=meta_capacity,
            max_readers=max_readers, permissions=permissions, exist_ok=exist_ok, device=ordinal, cpu_mirror=bool(cpu_mirror),
        )
    stream._auto_unlink = bool(auto_unlink)
    stream.set_role("writer")  # monitors show it as the writer; close() ends the stream
    return stream


def open(name: str, *, mode: str = "latest", readonly: bool = False, timeout: Optional[float] = 0.0, device: Any = None) -> Stream:  # noqa: A001
    """Opens the existing stream ``name`` and attaches a handle in reader ``mode``:
    ``"latest"`` (reads return the newest frame; skipped frames are counted in ``missed``) or
    ``"lossless"`` (the writer never overwrites a frame this handle has not read; it waits, and
    its ``write(timeout=)`` raises TimeoutError instead). ``readonly=True`` gives a handle that
    refuses write, loan, clear, end, acquire and unlink with StreamPermissionError.

    ``timeout`` is how long to wait for a stream that does not exist yet (a consumer started
    before its producer): 0 (default) does not wait, a number waits up to that many seconds,
    None waits until it appears. The wait sleeps between checks (1 ms, growing to 50 ms; the
    GIL is released while it sleeps), so a stream is opened at most about 50 ms after its
    creator finished creating it.

    A device stream is reached through its GPU, as a :class:`DeviceStream`; ``device``
    chooses: None (default) uses the GPU when this process has it and otherwise the stream's
    CPU mirror if it has one (then the handle is a host Stream); ``"cpu"`` reads the CPU mirror
    only (NumPy frames, as a host stream); ``"cuda"``/``"cuda:N"``/``N`` requires the GPU (the
    stream's own device: the ordinal is checked against it).

    Raises StreamNotFoundError (FileNotFoundError) when there is no such stream (with a
    ``timeout``: none appeared within it; the message names the timeout),
    DeviceUnavailableError for a device stream this process cannot reach (no driver, the GPU
    not visible, its owner exited) and that has no CPU mirror,
    IncompatibleStreamError / CorruptStreamError (ValueError) for a segment it cannot read,
    PermissionError, TooManyReadersError when the stream's reader table is full, TypeError /
    InvalidArgumentError for a bad ``timeout``.
    """
    limit = timeout_seconds(timeout)
    wait = math.inf if limit is None else limit
    access = "auto" if device is None else "host" if parse_device(device) is None else "device"
    if wait == 0:
        return _checked_device(_open_once(name, mode, readonly, access), device)
    deadline = time.monotonic() + wait
    pause = 0.001
    while True:
        try:
            return _checked_device(_open_once(name, mode, readonly, access), device)
        except (StreamNotFoundError, StreamNotReadyError):
            left = deadline - time.monotonic()
            if left <= 0:
                raise StreamNotFoundError(
                    _errno.ENOENT,
                    f"stream {name!r} (/dev/shm/framebus.{name}) did not appear within timeout={timeout!r} seconds; "
                    "start its producer (framebus.create), check the name (`framebus ls` lists the streams there are), "
                    "or wait longer",
                ) from None
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)


def _open_once(name: str, mode: str, readonly: bool, access: str) -> Stream:
    """Opens ``name`` once and wraps the handle in the class of what it reaches: a
    DeviceStream for a device stream's GPU, a Stream otherwise (read-only ones if asked)."""
    opened = _native._open(name, mode=mode, access=access)
    if opened.device:
        cls: type = DEVICE_CLASSES["readonly" if readonly else "plain"]
    else:
        cls = _ReadOnlyStream if readonly else Stream
    handle: Stream = cls(name, _opened=opened)
    return handle


def _checked_device(handle: Stream, device: Any) -> Stream:
    """The handle, unless ``device`` named a GPU other than the one it reaches."""
    wanted = parse_device(device)
    if wanted is not None and handle.device != f"cuda:{wanted}":
        reached = handle.device
        handle.close()
        raise InvalidArgumentError(
            f"stream {handle.name!r} keeps its frames on {reached}, not cuda:{wanted}; open it with device=None or device={reached!r}"
        )
    return handle


def stream(name: str, **options: Any) -> Stream:
    """Creates the stream ``name`` for a ``with`` block, as pyshmem's ``stream()`` does:
    ``with framebus.stream("cam", shape=(480, 640, 3), dtype=np.uint8) as cam: ...``; the stream
    is unlinked when the block ends, also on an exception. The same as ``create(name,
    auto_unlink=True, **options)``: the same keywords and errors; returns the writing handle."""
    return create(name, auto_unlink=True, **options)


def unlink(name: str) -> None:
    """Removes the stream ``name``. Handles that have it open keep working until closed.
    Raises StreamNotFoundError (FileNotFoundError) if it does not exist."""
    try:
        _native.unlink(name)
    except StreamNotFoundError:
        raise StreamNotFoundError(
            _errno.ENOENT,
            f"stream {name!r} does not exist (/dev/shm/framebus.{name}): there is nothing to unlink; "
            "`framebus ls` lists the streams there are",
        ) from None
