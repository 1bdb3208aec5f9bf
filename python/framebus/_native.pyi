"""Type stubs of framebus._native, the compiled core (checked against the module with
``python -m mypy.stubtest framebus._native``)."""

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union

from typing_extensions import disjoint_base, final

import numpy as np

__all__ = ["COUNT_LIMITS", "DOOR_CODES", "DeviceArray", "DeviceDownload", "DeviceFrame", "DeviceLoan", "DeviceStream", "ERROR_KINDS", "FRAME_TABLE_BYTES", "Frame", "LAYOUT_VERSION", "MAX_ARRAY_NAME", "MAX_FRAME_ARRAYS", "MAX_FRAME_BYTES", "Loan", "PROBLEM_KINDS", "Stream", "__version__", "_ArrayHeader", "_FrameHeader", "_Opened", "_SlotHeader", "_open", "_pipe_flush_at_exit", "check_capacity", "check_dtype", "check_shape", "close", "configure", "copy_plan", "fake_cuda_counts", "fake_cuda_host_counts", "fake_cuda_read", "fork_child", "fork_parent", "fork_prepare", "gc", "gpu_info", "list_info", "pipe", "pipe_stats", "segment_bytes", "stream_info", "stream_names", "stream_stats", "sync", "unlink"]

__version__: str
LAYOUT_VERSION: int
#: The range of each count of a stream spec, (lowest, highest): slots, meta_capacity, max_readers,
#: and the file permission bits (permissions).
COUNT_LIMITS: Dict[str, Tuple[int, int]]
#: The name in framebus.errors of every exception class the native module raises.
ERROR_KINDS: List[str]
#: Bytes of the table at the start of every frame of a variable-shape stream.
FRAME_TABLE_BYTES: int
#: Most arrays one frame of a variable-shape stream may hold.
MAX_FRAME_ARRAYS: int
#: Most bytes (UTF-8) of an array name in such a frame.
MAX_ARRAY_NAME: int
#: framebus's own GPU door error codes (negative; the driver's ``CUresult`` codes are positive)
#: by name: FRAMEBUS_NO_CUDA_DRIVER, FRAMEBUS_BAD_SETTING, FRAMEBUS_GPU_NOT_BUILT. They are the
#: ``code``/``code_name`` of a DeviceError and ``error_code``/``error_name`` of ``gpu_info()``.
DOOR_CODES: Dict[str, int]
#: Most bytes a frame may have (a variable-shape stream's frame: its table and capacity).
MAX_FRAME_BYTES: int
#: The codes of ``stream_info()["problem_kind"]``: why a segment could not be read.
PROBLEM_KINDS: List[str]

@disjoint_base
class Stream:
    """One handle on a host stream, and the ring operations every handle shares (DeviceStream
    inherits them). Use framebus.create()/framebus.open() rather than this class."""

    def __new__(
        cls,
        name: str,
        *,
        mode: str = "latest",
        create: bool = False,
        shape: Any = None,
        dtype: Any = None,
        capacity: Optional[int] = None,
        size: Optional[int] = None,
        slots: Optional[int] = None,
        meta_capacity: Optional[int] = None,
        max_readers: Optional[int] = None,
        permissions: Optional[int] = None,
        exist_ok: bool = False,
        _opened: Optional["_Opened"] = None,
    ) -> "Stream":
        """Opens the host stream ``name`` as a ``mode`` reader (a device stream only through its
        CPU mirror; InvalidArgumentError for one this process reaches through the GPU: open it
        as a DeviceStream), or with ``create=True`` creates it from ``shape`` (an int or a
        sequence of ints) and ``dtype`` (anything ``numpy.dtype()`` takes), or from ``capacity``
        (an int of bytes: a variable-shape stream), with ``size`` a cross-check of a fixed
        shape's frame bytes. The core checks every value (InvalidArgumentError saying what is
        wrong, TypeError for a value of the wrong type); ``framebus.create`` is the documented
        way. ``_opened`` adopts a handle ``_open`` opened."""
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        """Frame shape; None for a variable-shape stream (each frame has its own)."""
    @property
    def dtype(self) -> Optional[np.dtype]:
        """Frame dtype; None for a variable-shape stream (each frame has its own)."""
    @property
    def size(self) -> int:
        """Bytes per frame (a variable-shape stream: its capacity)."""
    @property
    def capacity(self) -> Optional[int]:
        """Bytes of arrays a frame of a variable-shape stream may hold; None for a fixed shape."""
    @property
    def variable(self) -> bool:
        """Whether each frame carries its own shape and dtype (created with ``capacity=``)."""
    @property
    def device(self) -> Optional[str]:
        """"cuda:N" for a device stream reached through its GPU (this process's ordinal); None
        for a host stream or a device stream opened for its CPU mirror."""
    @property
    def device_stream(self) -> Optional[str]:
        """The device a device stream's frames live on, as its creator numbered it; None for a
        host stream."""
    @property
    def cpu_mirror(self) -> bool:
        """Whether every frame of this device stream is also copied into host memory."""
    @property
    def slots(self) -> int: ...
    @property
    def meta_capacity(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def attached(self) -> int:
        """Live handles attached to the stream, in all processes (this one included)."""
    @property
    def write_sequence(self) -> int: ...
    @property
    def write_time(self) -> float: ...
    @property
    def frame_id(self) -> int: ...
    @property
    def last_seq(self) -> int: ...
    @property
    def missed(self) -> int: ...
    @property
    def total_missed(self) -> int: ...
    @property
    def lock_recoveries(self) -> int: ...
    @property
    def lock_owner(self) -> Optional[int]: ...
    def write(self, value: Any, *, frame_id: Optional[int] = None, meta: Optional[Any] = None, timeout: Optional[float] = None, timestamp_ns: Optional[int] = None, seq: Optional[int] = None, codec: Optional[str] = None) -> None:
        """Copies ``value`` into the next free slot and publishes it (one copy). ``value`` is
        checked first (shape, dtype, metadata size, ``seq``): on error nothing is written.

        A fixed-shape stream takes an array of its shape (another dtype is converted only when no
        value changes: integers of any signedness that fit, floats that only round; float to int
        is refused) or raw bytes (bytes, bytearray, memoryview) of exactly one frame's size, taken
        as the frame's bytes; bytes of another length raise ValueError (byte payloads of any
        length need a variable-shape stream, ``create(name, capacity=...)``).

        ``frame_id`` (an int from -2**63 to 2**63-1) is stored with the frame; left out (None),
        the frame keeps the id of the frame before it (0 for a stream's first frame), as in
        pyshmem: pass it on every write to number frames. ``timestamp_ns`` and ``seq`` are ints
        from 0 to 2**64-1, ``timeout`` None or seconds >= 0: an out-of-range value raises
        ValueError naming the argument and its range. Waits
        (GIL released) while every slot is pinned or unread by a lossless reader; TimeoutError
        after ``timeout``. ``timestamp_ns`` replaces the commit time; ``seq`` gives the frame
        this sequence number instead of the next one (it must be above the newest frame's, else
        ValueError; readers count the numbers skipped as missed), as a bridge does to keep its
        source's numbers. LoanOpenError while this thread has an open loan on the stream;
        SequenceExhaustedError (a ValueError) once the newest frame has the largest number
        (2**56 - 1): numbers never wrap.

        On a variable-shape stream ``value`` is any bool/int/float/complex array (of any shape
        that fits the capacity), a dict of such arrays by name (one frame, published as a unit),
        or a byte payload (bytes, bytearray, memoryview); ``codec`` marks a byte payload as an
        encoded packet (for example ``"h264"``; ``framebus record`` feeds such frames to FFmpeg
        as they are). Raises ValueError naming the limit for a frame larger than the capacity,
        more than 31 arrays, a name longer than 32 bytes, a shape whose size overflows, and
        TypeError for object, text or record dtypes; nothing is written then. One copy."""
    def _write_raw(self, data: Any, *, frame_id: Optional[int] = None, meta: Optional[Any] = None, timeout: Optional[float] = None, timestamp_ns: Optional[int] = None, seq: Optional[int] = None) -> None:
        """Writes a variable-shape frame given whole, table first (as ``Frame._raw`` shows it;
        a bridge's receiving end). The table is validated against this stream's capacity first
        (InvalidArgumentError naming the problem; nothing written). One copy."""
    def clear(self, *, timeout: Optional[float] = None) -> None:
        """Publishes a frame of zeros (a variable-shape stream: an empty byte payload)."""
    def read(self, *, out: Optional[Any] = None) -> Any:
        """A copy of the newest frame (into ``out`` if given). Never torn. Waits only while the
        writer rewrites the newest frame's slot, which it does once every reader has taken that
        frame (one frame's copy; ``read_new`` and ``wait_view`` wait for a new frame). Raises
        StreamEmptyError (a RuntimeError) when the stream has no frame: before the first write
        (``reason`` "empty"), or when that rewrite was given up (its writer died mid-write) and
        no newer frame exists yet (``reason`` "lost"); ``out`` is left as it was. Copies.
        (``framebus.pyshmem`` reads zeros before the first write, as pyshmem does.)

        On a variable-shape stream: the frame's array, a dict of its named arrays, or ``bytes``
        for a byte payload; ``out`` is an array (a dict of arrays
        for a dict frame) of exactly the frame's shape and dtype, else InvalidArgumentError
        naming both and nothing is copied."""
    def read_into(self, out: Any) -> Any:
        """Copies the newest frame into ``out`` and returns ``out`` (no allocation); raises as
        ``read``."""
    def read_new(self, *, timeout: Optional[float] = None, out: Optional[Any] = None) -> Any:
        """Waits (futex, GIL released, Ctrl-C checked every 100 ms) for a frame newer than the
        last one this handle saw and returns a copy (as read() does). TimeoutError after ``timeout``;
        StreamEndedError once the writer ended the stream. Whatever the timeout, a wait that can
        get no frame any more says so within about a second: StreamReplacedError when the
        stream's name was removed or now belongs to a new stream, DeviceUnavailableError (naming
        the pid) when the process owning a device stream's GPU memory died."""
    def _read_info(self, *, out: Optional[Any] = None) -> Tuple[Any, int, int, int, bytes]: ...
    def _read_new_info(self, *, timeout: Optional[float] = None, out: Optional[Any] = None) -> Tuple[Any, int, int, int, bytes]: ...
    def wait(self, *, timeout: Optional[float] = None) -> int:
        """Waits for a frame newer than the last one this handle saw; returns its sequence.
        Raises as read_new()."""
    def wait_after(self, after: int, *, timeout: Optional[float] = None) -> int:
        """Waits for a frame newer than sequence ``after``; returns the newest sequence. Raises
        as read_new()."""
    def view(self, timeout: Optional[float] = None) -> Any:
        """Zero-copy read-only view of the newest frame, pinned until released (a ``Frame``)."""
    def wait_view(self, timeout: Optional[float] = None) -> Any:
        """Zero-copy view of the next frame this handle has not seen (read_new semantics and
        errors)."""
    def view_seq(self, seq: int) -> Optional[Any]:
        """Zero-copy, pinned view of frame ``seq`` if the ring still holds it, else None (a later
        write reused its slot, or it is not written yet). Does not wait and does not copy. For a
        consumer told which frame to take by another channel (a message naming the sequence
        number). Counts as reading ``seq``: a lossless handle releases every frame up to ``seq``
        to the writer. Raises TypeError/ValueError for a seq that is not an int from 0 to 2**64-1
        and StreamClosedError on a closed handle."""
    def loan(
        self,
        timeout: Optional[float] = None,
        *,
        frame_id: Optional[int] = None,
        meta: Optional[Any] = None,
        timestamp_ns: Optional[int] = None,
        seq: Optional[int] = None,
        shape: Optional[Any] = None,
        dtype: Optional[Any] = None,
        nbytes: Optional[int] = None,
        arrays: Optional[Dict[str, Tuple[Any, Any]]] = None,
        codec: Optional[str] = None,
    ) -> Any:
        """A writable array in the next free slot: fill it, then commit (or leave the with block).
        No copy. ``frame_id``, ``meta``, ``timestamp_ns`` and ``seq`` (as in write(): without
        ``frame_id`` the frame keeps the previous frame's id) are checked now and attached at
        commit. LoanOpenError if this thread already has an open loan on
        the stream; SequenceExhaustedError when the sequence numbers are used up; TimeoutError
        (StreamTimeoutError) when no slot frees up within ``timeout``.

        A variable-shape stream lays the frame out now from exactly one of ``shape=`` with
        ``dtype=`` (one array), ``nbytes=`` (a byte payload, a writable uint8 array; ``codec=``
        marks it as an encoded packet) or ``arrays={name: (shape, dtype)}`` (several arrays in
        one slot: ``loan.arrays`` / the ``with`` target is a dict of writable arrays). Limits as
        in write(): ValueError/TypeError, nothing claimed. A fixed-shape stream accepts only its
        own ``shape``/``dtype`` there."""
    def set_role(self, role: str, label: str = "") -> None:
        """Tags this handle for monitors (``framebus top``, ``framebus.stat``): ``role`` is one
        of "handle", "bridge out", "bridge in", "record", "play", "monitor", "writer"; ``label`` a
        short text such as an endpoint or a file (cut at 48 bytes). InvalidArgumentError for
        another role."""
    @property
    def role(self) -> str:
        """This handle's role as monitors show it: what ``set_role`` tagged it, or "writer" once
        it took the write lock (its first write, loan or clear). ``framebus.Stream.close`` ends
        the stream for a handle of a writing role ("writer", "bridge in", "play") when no other
        live handle writes. StreamClosedError on a closed handle."""
    def _other_writers(self) -> int: ...
    @property
    def _inherited(self) -> bool:
        """Whether this handle came through fork() and has not been used in this process yet
        (its reader entry, pins and lock holds are still the parent's); False once closed."""
    @property
    def _position(self) -> Optional[int]:
        """The last frame this handle consumed (lossless) or saw (latest) in this process; None
        once closed. A pickled copy resumes from here."""
    def _resume(self, seq: int) -> None:
        """Moves this freshly opened handle back to ``seq`` (never forward): it continues where
        the handle it was pickled from was."""
    def end(self) -> None:
        """Ends the stream (end of file): readers blocked in read_new/wait_view/wait wake at
        once; a lossless reader first gets every frame it has not read, then each raises
        StreamEndedError (a StreamClosedError and EOFError; ``frames()`` and ``async for`` just
        stop). A later write clears the end (a restarted producer)."""
    @property
    def ended(self) -> bool:
        """Whether the writer ended the stream (and has not written since)."""
    def acquire(self, timeout: Optional[float] = None) -> None:
        """Takes the cross-process write lock (re-entrant per thread)."""
    def release(self) -> None:
        """Releases one level of the calling thread's write lock."""
    def lock_held(self) -> bool: ...
    def unlink(self) -> bool: ...
    def close(self) -> None: ...

@disjoint_base
class DeviceStream(Stream):
    """One handle on a device stream: its frames live in one CUDA device's memory. The ring
    operations (waits, the write lock, end, counters, close) are Stream's; the frame methods
    here take ``stream``, a CUDA stream (an int handle, ``torch.cuda.Stream``,
    ``cupy.cuda.Stream``; None: the stream an array's interface names, else the legacy default
    stream), and order work between processes with CUDA events, never a host wait. Use
    framebus.create(..., device=...)/framebus.open() rather than this class."""

    def __new__(
        cls,
        name: str,
        *,
        mode: str = "latest",
        create: bool = False,
        shape: Any = None,
        dtype: Any = None,
        capacity: Optional[int] = None,
        size: Optional[int] = None,
        slots: Optional[int] = None,
        meta_capacity: Optional[int] = None,
        max_readers: Optional[int] = None,
        permissions: Optional[int] = None,
        exist_ok: bool = False,
        device: int = 0,
        cpu_mirror: bool = False,
        _opened: Optional["_Opened"] = None,
    ) -> "DeviceStream":
        """Opens the device stream ``name`` through its GPU as a ``mode`` reader, or with
        ``create=True`` creates it on CUDA device ``device`` (``cpu_mirror`` also keeps every
        frame in host memory). DeviceUnavailableError without a GPU door (no driver, the GPU not
        visible, a framebus built without GPU streams), InvalidArgumentError for a host stream."""
    @property
    def device(self) -> str:
        """"cuda:N": this process's ordinal of the stream's device."""
    def write(self, value: Any, *, frame_id: Optional[int] = None, meta: Optional[Any] = None, timeout: Optional[float] = None, timestamp_ns: Optional[int] = None, seq: Optional[int] = None, stream: Optional[Any] = None) -> None:  # type: ignore[override]
        """Copies ``value`` into the next free slot and publishes it; ``frame_id``, ``meta``,
        ``timeout``, ``timestamp_ns`` and ``seq`` as in Stream.write. ``value`` is an array on the
        stream's device that speaks ``__cuda_array_interface__`` or DLPack (torch, CuPy, JAX,
        Numba, DeviceArray) of exactly the stream's shape and dtype, C-contiguous (device arrays
        are not converted), copied device-to-device on ``stream`` after every reader's work on
        the slot; nothing waits on the host. A NumPy array is uploaded (the call waits for that
        copy). InvalidArgumentError for another shape, dtype or device, or memory the driver does
        not know; DeviceError (with the driver's ``code``) when a CUDA call fails."""
    def clear(self, *, timeout: Optional[float] = None) -> None:
        """Publishes a frame of zeros (uploaded)."""
    def read(self, *, out: Optional[Any] = None, stream: Optional[Any] = None) -> Any:  # type: ignore[override]
        """A copy of the newest frame queued on ``stream`` (after the frame's ready event) into
        ``out`` (a device array of the stream's device, shape and dtype; or a NumPy array, then
        the call waits for the download) or into a new ``DeviceArray``."""
    def read_into(self, out: Any, *, stream: Optional[Any] = None) -> Any:  # type: ignore[override]
        """Copies the newest frame into ``out`` on ``stream`` and returns ``out``."""
    def read_new(self, *, timeout: Optional[float] = None, out: Optional[Any] = None, stream: Optional[Any] = None) -> Any:  # type: ignore[override]
        """Waits for a frame newer than the last one this handle saw (as Stream.read_new) and
        returns a copy (as read())."""
    def _read_info(self, *, out: Optional[Any] = None, stream: Optional[Any] = None) -> Tuple[Any, int, int, int, bytes]: ...  # type: ignore[override]
    def _read_new_info(self, *, timeout: Optional[float] = None, out: Optional[Any] = None, stream: Optional[Any] = None) -> Tuple[Any, int, int, int, bytes]: ...  # type: ignore[override]
    def view(self, timeout: Optional[float] = None, *, stream: Optional[Any] = None) -> "DeviceFrame":  # type: ignore[override]
        """Zero-copy ``DeviceFrame`` of the newest frame, pinned until released; its
        ``__cuda_array_interface__`` is ordered on ``stream``."""
    def wait_view(self, timeout: Optional[float] = None, *, stream: Optional[Any] = None) -> "DeviceFrame":  # type: ignore[override]
        """Zero-copy ``DeviceFrame`` of the next frame this handle has not seen (Stream.read_new's
        waits and errors)."""
    def view_seq(self, seq: int, *, stream: Optional[Any] = None) -> Optional["DeviceFrame"]:  # type: ignore[override]
        """Zero-copy ``DeviceFrame`` of frame ``seq`` if the ring still holds it, else None (as
        Stream.view_seq)."""
    def loan(  # type: ignore[override]
        self,
        timeout: Optional[float] = None,
        *,
        frame_id: Optional[int] = None,
        meta: Optional[Any] = None,
        timestamp_ns: Optional[int] = None,
        seq: Optional[int] = None,
        stream: Optional[Any] = None,
    ) -> "DeviceLoan":
        """A ``DeviceLoan`` of the next free slot (its device memory, DLPack and
        ``__cuda_array_interface__``) whose CUDA ``stream`` already waits for the readers' work on
        the slot; commit records the frame's ready event on it. Waits and raises as
        Stream.loan."""

@final
class DeviceDownload:
    """Reads a device stream's frames on the host: each read pins the frame, makes a CUDA stream
    of its own wait for the frame's ready event, copies the frame into page-locked host memory
    allocated once (at construction) and reused, waits for the copy, records the handle's
    release event and unpins; then copies the bytes out of the page-locked buffer into ``out``
    or a new NumPy array (so the array returned stays valid after later reads). Marks the
    handle's reader entry as a download (``framebus ls``/``top``). Use
    ``framebus._host_read.open_for_host`` rather than this class."""

    def __new__(cls, stream: DeviceStream) -> "DeviceDownload":
        """Allocates the page-locked buffer and the CUDA stream for ``stream`` (a handle through
        the GPU). DeviceError when the driver refuses them; StreamClosedError for a closed handle."""
    def read_latest(self, *, out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, int, int, int, bytes]:
        """(array, seq, timestamp_ns, frame_id, meta) of the newest frame, never waiting.
        NoFrameError before the first frame, DeviceUnavailableError (naming the pid) once the
        stream's owner has exited, InvalidArgumentError for an ``out`` of another shape or dtype
        or while another thread reads, StreamClosedError after close()."""
    def read_next(self, *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, int, int, int, bytes]:
        """(array, seq, timestamp_ns, frame_id, meta) of the next frame this handle has not seen,
        waiting up to ``timeout`` (as Stream.read_new: StreamTimeoutError, StreamEndedError,
        DeviceUnavailableError once the owner has exited)."""
    def close(self) -> None:
        """Gives back the page-locked buffer and CUDA stream (idempotent, never waits). The
        stream handle stays open."""
    @property
    def closed(self) -> bool:
        """Whether close() was called."""

@final
class _Opened:
    """A handle ``_open`` opened, until ``Stream`` or ``DeviceStream`` adopts it."""

    @property
    def device(self) -> bool:
        """Whether it reaches a device stream's frames through the GPU (DeviceStream takes it)."""

def _open(name: str, *, mode: str = "latest", access: str = "auto") -> _Opened:
    """Opens the existing stream ``name`` in reader ``mode``; ``access`` ("auto", "device",
    "host") says how a device stream is reached. Raises as framebus.open."""

@disjoint_base
class _ArrayHeader:
    """What an array, a loan or a frame says about its array, written once for all of them
    (taken when the object is made)."""

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        """Shape of the array; None for a frame (or loan) of several named arrays."""
    @property
    def dtype(self) -> Optional[np.dtype]:
        """dtype of the array; None for a frame (or loan) of several named arrays."""
    @property
    def nbytes(self) -> int:
        """Bytes of the array (of all the arrays of a frame of several)."""
    @property
    def device(self) -> str:
        """"cuda:N" for device memory (this process's ordinal), "cpu" for host memory."""

@disjoint_base
class _SlotHeader(_ArrayHeader):
    """An array header with the frame's sequence number (loans and frames)."""

    @property
    def seq(self) -> int:
        """Sequence number of the frame (1 for a stream's first frame); for a loan, the number
        the frame gets when committed (the explicit ``seq=`` given to loan(), or the next one)."""

@disjoint_base
class _FrameHeader(_SlotHeader):
    """A committed frame's record: write time, frame id and metadata."""

    @property
    def timestamp_ns(self) -> int:
        """Write time in ns since the Unix epoch."""
    @property
    def timestamp(self) -> float:
        """Write time in seconds since the Unix epoch."""
    @property
    def frame_id(self) -> int:
        """User frame id given to write()/loan()."""
    @property
    def meta(self) -> bytes:
        """Metadata bytes of the frame (a copy)."""

@final
class Frame(_FrameHeader):
    """A committed frame pinned in its slot (zero-copy, read-only).

    It behaves as its read-only array: ``frame.mean()``, ``frame.ndim``, ``frame * 2``,
    ``frame[0, :10]``, ``len(frame)``, ``iter(frame)``, ``np.asarray(frame)`` (no copy) and
    every NumPy function work as on ``frame.array`` (results are new NumPy arrays; indexing gives
    read-only views that keep the frame pinned). On a frame of several named arrays,
    ``frame[name]`` is that array and the array behaviour raises InvalidArgumentError (use
    ``arrays``). ``==``/``!=`` compare the Frame objects (frames stay hashable): compare values
    with ``frame.array == x``. A Frame is always true. On a released frame all of these raise
    StreamClosedError."""

    @property
    def array(self) -> np.ndarray:
        """Read-only NumPy view of the frame (zero-copy; keeps the frame pinned while alive). A
        byte payload is a read-only uint8 array (``bytes(frame.array)`` copies it). A frame of
        several named arrays raises InvalidArgumentError: use ``arrays``."""
    @property
    def arrays(self) -> Dict[str, np.ndarray]:
        """Read-only zero-copy arrays of the frame by name (``{"": array}`` for a frame written
        as one array)."""
    @property
    def names(self) -> Optional[Tuple[str, ...]]:
        """Names of the arrays of a frame written as a dict; None otherwise."""
    @property
    def _raw(self) -> np.ndarray:
        """The frame's bytes as stored (a variable-shape frame: its table, then its arrays), a
        read-only uint8 array over the pinned slot (zero-copy); for bridges."""
    @property
    def byte_names(self) -> Tuple[str, ...]:
        """Names of the arrays of a dict frame that were written as bytes (their views are uint8
        arrays; a copying read returns them as bytes); an empty tuple otherwise."""
    @property
    def is_bytes(self) -> bool:
        """Whether the frame is a byte payload."""
    @property
    def codec(self) -> Optional[str]:
        """Codec of an encoded packet (``write(..., codec=)``); None for none."""
    @property
    def meta(self) -> bytes:
        """Metadata bytes of the frame (a copy), read from the pinned slot when asked for;
        StreamClosedError once released."""
    @property
    def released(self) -> bool: ...
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...
    def release(self) -> None: ...
    def __enter__(self) -> "Frame": ...
    def __exit__(self, _exc_type: Any = None, _exc: Any = None, _tb: Any = None) -> None: ...
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray: ...
    def __getitem__(self, key: Any, /) -> Any: ...
    def __hash__(self) -> int: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> Any: ...
    def __getattr__(self, name: str, /) -> Any:
        """The array's attributes (``ndim``, ``size``, ``mean()``, ``astype()``, ``copy()``, ...)."""
    def __add__(self, other: Any, /) -> Any: ...
    def __radd__(self, other: Any, /) -> Any: ...
    def __sub__(self, other: Any, /) -> Any: ...
    def __rsub__(self, other: Any, /) -> Any: ...
    def __mul__(self, other: Any, /) -> Any: ...
    def __rmul__(self, other: Any, /) -> Any: ...
    def __matmul__(self, other: Any, /) -> Any: ...
    def __rmatmul__(self, other: Any, /) -> Any: ...
    def __truediv__(self, other: Any, /) -> Any: ...
    def __rtruediv__(self, other: Any, /) -> Any: ...
    def __floordiv__(self, other: Any, /) -> Any: ...
    def __rfloordiv__(self, other: Any, /) -> Any: ...
    def __mod__(self, other: Any, /) -> Any: ...
    def __rmod__(self, other: Any, /) -> Any: ...
    def __lshift__(self, other: Any, /) -> Any: ...
    def __rlshift__(self, other: Any, /) -> Any: ...
    def __rshift__(self, other: Any, /) -> Any: ...
    def __rrshift__(self, other: Any, /) -> Any: ...
    def __and__(self, other: Any, /) -> Any: ...
    def __rand__(self, other: Any, /) -> Any: ...
    def __xor__(self, other: Any, /) -> Any: ...
    def __rxor__(self, other: Any, /) -> Any: ...
    def __or__(self, other: Any, /) -> Any: ...
    def __ror__(self, other: Any, /) -> Any: ...
    def __pow__(self, other: Any, modulo: Any = None, /) -> Any: ...
    def __rpow__(self, other: Any, modulo: Any = None, /) -> Any: ...
    def __lt__(self, other: Any, /) -> Any: ...  # type: ignore[override]
    def __le__(self, other: Any, /) -> Any: ...  # type: ignore[override]
    def __gt__(self, other: Any, /) -> Any: ...  # type: ignore[override]
    def __ge__(self, other: Any, /) -> Any: ...  # type: ignore[override]
    def __neg__(self) -> Any: ...
    def __pos__(self) -> Any: ...
    def __abs__(self) -> Any: ...
    def __invert__(self) -> Any: ...
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

@final
class Loan(_SlotHeader):
    """A claimed slot: a writable array published on commit() or clean with-exit.

    One loan at a time per stream and thread: a second loan() or a write() while this one is
    open raises LoanOpenError (another thread waits for it). If the array (or a view, a
    memoryview or a buffer of it, such as one handed to ``framebus.pipe``) is still referenced
    when the loan ends, it becomes a read-only view of the published (or discarded) frame that
    keeps its slot pinned until the last reference is gone; the ring never reuses the slot
    under it."""

    @property
    def array(self) -> np.ndarray:
        """The writable array over the claimed slot (no copy; the same array on every call).
        StreamClosedError once the loan has ended. A loan of several named arrays raises
        InvalidArgumentError: use ``arrays``."""
    @property
    def arrays(self) -> Dict[str, np.ndarray]:
        """The writable arrays by name (``{"": array}`` for a loan of one array)."""
    def commit(self) -> None:
        """Publishes the frame (no copy). StreamClosedError if already committed or aborted;
        SequenceExhaustedError / InvalidArgumentError if its number cannot be given (the frame
        is then discarded)."""
    def abort(self) -> None:
        """Discards the frame (readers never see it). Idempotent."""
    def __enter__(self) -> Any:
        """The array to fill (a dict of arrays for ``loan(arrays=)``)."""
    def __exit__(self, exc_type: Any = None, _exc: Any = None, _tb: Any = None) -> bool: ...

@final
class _LoanSlot: ...

@final
class _Pin: ...

@final
class DeviceArray(_ArrayHeader):
    """Device memory framebus allocated for this process, one C-contiguous array (DLPack and
    ``__cuda_array_interface__``); freed when the last reference goes."""

    @staticmethod
    def empty(shape: Sequence[int], dtype: Any, device: int = 0) -> "DeviceArray":
        """A new, uninitialised array; DeviceUnavailableError without a GPU."""
    @staticmethod
    def from_numpy(array: np.ndarray, device: int = 0) -> "DeviceArray":
        """A device copy of ``array`` (waits for the copy)."""
    def copy_from_numpy(self, array: np.ndarray, stream: Optional[Any] = None) -> None:
        """Copies ``array`` (this shape and dtype) in; waits for the copy."""
    def to_numpy(self, stream: Optional[Any] = None) -> np.ndarray:
        """A NumPy copy (waits for the copy)."""
    @property
    def ptr(self) -> int: ...
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __dlpack__(self, *, stream: Optional[Any] = None, max_version: Optional[Any] = None, dl_device: Optional[Any] = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

@final
class DeviceFrame(_FrameHeader):
    """A frame of a device stream pinned in its slot (zero-copy): ``torch.from_dlpack(frame)``,
    ``cupy.asarray(frame)``. Releasing it records this handle's release event on every CUDA
    stream it went to, then unpins."""

    @property
    def ptr(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def to_numpy(self, stream: Optional[Any] = None) -> np.ndarray:
        """A NumPy copy (downloads after the frame's ready event; waits for the copy)."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __dlpack__(self, *, stream: Optional[Any] = None, max_version: Optional[Any] = None, dl_device: Optional[Any] = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def release(self, stream: Optional[Any] = None) -> None: ...
    def __enter__(self) -> "DeviceFrame": ...
    def __exit__(self, *_exc: Any) -> None: ...

@final
class DeviceLoan(_SlotHeader):
    """The next free slot of a device stream, writable device memory until committed."""

    def commit(self, stream: Optional[Any] = None) -> int: ...
    def abort(self) -> None: ...
    @property
    def ptr(self) -> int: ...
    @property
    def open(self) -> bool: ...
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __dlpack__(self, *, stream: Optional[Any] = None, max_version: Optional[Any] = None, dl_device: Optional[Any] = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __enter__(self) -> "DeviceLoan": ...
    def __exit__(self, exc_type: Any = None, _exc: Any = None, _tb: Any = None) -> bool: ...

def gpu_info() -> Dict[str, Any]:
    """What this process can reach of GPUs, never raising: ``door`` ("cuda", "fake" or None),
    ``built`` (the doors this build has), ``driver_version``, ``devices``, and why there is no
    door: ``error`` (the message), ``error_code``, ``error_name``, ``error_call`` (the door's
    error as values; None when there is a door)."""
def fake_cuda_read(ptr: int, nbytes: int) -> bytes:
    """The fake door's device bytes (FRAMEBUS_CUDA=fake; tests)."""
def fake_cuda_counts() -> Tuple[int, int, int]:
    """The fake door's live (allocations, opened memory handles, events) in this process."""
def fake_cuda_host_counts() -> Tuple[int, int, int]:
    """The fake door's (live page-locked host allocations, page-locked allocations made so far,
    live created CUDA streams) in this process."""
def fork_prepare() -> None: ...
def fork_parent() -> None: ...
def fork_child() -> None: ...
def unlink(name: str) -> None: ...
def stream_names() -> List[str]: ...
def stream_stats(name: str) -> Dict[str, Any]:
    """The ring's counters of stream ``name`` now, read without attaching: ``taken_ns``,
    ``writer`` (pid, alive, frames_written, bytes_written, aborted_writes, write_waits,
    write_wait_ns, latest_seq, latest_ns, ended, lock_holder) and ``readers`` (one dict per
    attached handle: entry, pid, alive, mode, role, label, reads, missed, consumed,
    pinned_slots, pinned_since_ns, writer_waits). StreamNotFoundError if it does not exist."""
def stream_info(name: str) -> Dict[str, Any]: ...
def list_info() -> List[Dict[str, Any]]: ...
def segment_bytes(frame_bytes: int, slots: int, *, meta_capacity: int = 256, max_readers: int = 64) -> int:
    """Bytes of /dev/shm a stream of ``frame_bytes`` per frame (a variable-shape stream: its
    capacity plus FRAME_TABLE_BYTES) and ``slots`` slots takes, as create() lays it out.
    ValueError when the sizes overflow."""
def gc(*, dry_run: bool = False) -> List[str]: ...
def check_shape(shape: Any) -> Tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as the tuple a fixed-shape stream would have,
    checked as ``create()`` checks it (InvalidArgumentError saying what is wrong, TypeError for
    what is no int); nothing is created."""
def check_dtype(dtype: Any) -> str:
    """``dtype`` (anything ``numpy.dtype()`` takes) as the ``dtype.str`` a fixed-shape stream
    would hold, checked as ``create()`` checks it: InvalidArgumentError for a dtype no stream
    holds (objects, strings, records), TypeError for what is no dtype."""
def check_capacity(capacity: Any) -> int:
    """``capacity`` (an int of bytes) as a variable-shape stream would take it, checked as
    ``create(capacity=)`` checks it."""
def copy_plan(nbytes: Optional[int] = None) -> Dict[str, Any]:
    """How this process copies frames (decided once from the machine and the FRAMEBUS_COPY,
    FRAMEBUS_COPY_THREADS, FRAMEBUS_HUGEPAGES, FRAMEBUS_PREFAULT environment variables): keys
    arch, features, cpus, write_large, stream_min, read, threads, thread_min, shmem_thp,
    huge_pages, prefault, pages_min, notes, explain, helpers_learned (what this process's own
    copies measured with and without helper threads so far); with ``nbytes``, "frame" says what
    a frame of that size gets now. Copies nothing; ValueError for a negative size."""

# -- pipes (pipe.rs) --------------------------------------------------------------------------

class _HasFileno(Protocol):
    def fileno(self) -> int: ...

_Fd = Union[int, _HasFileno]

def pipe(data: Any, fd: _Fd) -> None:
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

def configure(*, queue: Optional[int] = None, vmsplice: Optional[bool] = None, pipe_size: Optional[int] = ...) -> Dict[str, Any]:
    """Options for writers started from now on; returns the options in force. ``queue``:
    unfinished writes per descriptor (1 to 2**20, default 16); ``vmsplice``: hand pages to pipes
    instead of copying (default on unless FRAMEBUS_PIPE_VMSPLICE=0); ``pipe_size``: bytes to ask
    for (None: /proc/sys/fs/pipe-max-size, 0: leave pipes alone; omitted: unchanged).
    Raises InvalidArgumentError (ValueError)."""

def pipe_stats(fd: _Fd) -> Optional[Dict[str, Any]]:
    """Counters of the writer of ``fd`` or None: bytes, spliced, jobs, pending, pending_bytes,
    pipe_size, vmsplice, fifo."""

def _pipe_flush_at_exit(stall: float) -> List[Tuple[int, int, int]]:
    """Exit hook: waits for queued writes while they progress; returns (fd, jobs, bytes) given up."""
