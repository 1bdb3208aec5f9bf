"""pyshmem's module-level functions on top of framebus's: create, open, stat, list_streams,
unlink, purge and the ``stream`` context manager."""

from __future__ import annotations

import glob
import math
import os
import sys
from contextlib import contextmanager
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Sequence

import numpy as np

from .. import _native
from .. import _stream as _fb
from ..errors import DeviceUnavailableError, InvalidArgumentError, StreamExistsError, StreamNotFoundError
from . import errors as _err
from . import gpu as _gpu
from .gpu_handle import GpuSharedMemory
from . import values as _values
from .handle import SharedMemory

__all__ = ["create", "open", "stat", "list_streams", "unlink", "unlink_quiet", "purge", "stream", "gpu_available", "gpu_supported_dtypes"]

#: The dtypes pyshmem streams may hold.
DTYPES: FrozenSet[np.dtype] = frozenset(
    np.dtype(t)
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.float16, np.float32, np.float64, np.bool_, np.complex64, np.complex128)
)


def gpu_available() -> bool:
    """Whether GPU streams can be created and attached here: framebus's CUDA door has a device
    (``framebus.gpu_available()``) and, where torch is already imported, torch sees CUDA too
    (pyshmem's test; GPU frames are handed out as torch tensors then)."""
    import framebus

    if not framebus.gpu_available():
        return False
    torch = sys.modules.get("torch")
    if torch is not None and _gpu.door() == "cuda":
        try:
            return bool(torch.cuda.is_available())
        except Exception:  # noqa: BLE001 - a torch without a usable CUDA runtime
            return False
    return True


def gpu_supported_dtypes() -> FrozenSet[np.dtype]:
    """The dtypes a GPU stream may hold: those framebus device streams hold (and torch has,
    where frames are handed out as torch tensors); empty while GPU streams are unavailable
    (as pyshmem's without CUDA-capable torch)."""
    return _gpu.supported_dtypes(DTYPES) if gpu_available() else frozenset()


def _parse_device(gpu_device: Any) -> str:
    """pyshmem's device spelling (``"cuda"``, ``"cuda:N"``, ``N``, ``torch.device``) as
    ``"cuda:N"``; ValueError when it is not a CUDA device."""
    if isinstance(gpu_device, bool):
        raise ValueError("only CUDA devices are currently supported")
    if isinstance(gpu_device, int):
        if gpu_device < 0:
            raise ValueError(f"CUDA device ordinals are not negative, got {gpu_device}")
        return f"cuda:{gpu_device}"
    text = str(gpu_device)
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError("only CUDA devices are currently supported")
    return f"cuda:{int(index or 0)}"


def _gpu_device(gpu_device: Any) -> Optional[str]:
    """:func:`_parse_device`, and pyshmem's RuntimeError when no GPU stream can be made here."""
    if gpu_device is None:
        return None
    device = _parse_device(gpu_device)
    if not gpu_available():
        raise RuntimeError(
            "CUDA is not available for GPU shared memory (framebus.gpu_available() is False, or torch sees no CUDA); "
            "`framebus doctor` says why"
        )
    return device


#: The most dimensions pyshmem's header stores (framebus's own limit is lower: 8).
_PYSHMEM_MAX_NDIM = 19


def _name(name: Any) -> str:
    """pyshmem's first check of a name (framebus's name rules follow in the native call)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("name must be a non-empty string")
    return name


def _shape(shape: Sequence[int]) -> tuple:
    if not shape:
        raise ValueError("shape must contain at least one dimension")
    dims = tuple(int(axis) for axis in shape)
    if any(axis <= 0 for axis in dims):
        raise ValueError("shape dimensions must be positive")
    if len(dims) > _PYSHMEM_MAX_NDIM:
        raise ValueError("shape has too many dimensions for metadata storage")
    return dims


def _exists(name: str) -> bool:
    try:
        _native.stream_info(name)
    except (StreamNotFoundError, ValueError):
        return False
    return True


def _wrap(stream: _fb.Stream, *, owner: bool, readonly: bool) -> SharedMemory:
    try:
        pid, instance = _values.generation(stream.name)
    except OSError:  # unlinked between open and now: the handle still works
        pid, instance = (os.getpid() if owner else 0), None
    # A GPU stream reached through its GPU gets the GPU handle; one read from its CPU mirror a
    # CPU handle that says so (pyshmem: gpu_enabled, no gpu_device).
    cls = GpuSharedMemory if stream.device is not None else SharedMemory
    shm = cls(stream, owner=owner, readonly=readonly, creator_pid=pid, instance_id=instance)
    if stream.device is None and stream.device_stream is not None:
        shm.gpu_enabled, shm.cpu_mirror = True, True
    return shm


def create(
    name: str,
    *,
    shape: Sequence[int],
    dtype: Any = np.float32,
    size: Optional[int] = None,
    gpu_device: Any = None,
    cpu_mirror: Optional[bool] = None,
    auto_unlink: bool = False,
    notify: bool = False,
    slots: int = 4,
) -> SharedMemory:
    """Creates the stream ``name`` (a framebus stream: ``framebus ls`` lists it) and returns a
    handle that writes and reads. ``notify`` is accepted and always in effect (readers park
    on a futex). ``auto_unlink=True`` makes leaving a ``with`` block unlink the stream.
    ``slots`` (a framebus addition) is the ring's frame count: each ``write_view`` array kept
    alive after its block holds one, so give several writers that keep theirs more slots
    than writers plus one.

    Raises FileExistsError (StreamExistsError) when the name is taken, ValueError for a bad
    name, shape, dtype or size, RuntimeError for ``gpu_device`` while GPU streams are
    unavailable."""
    _name(name)
    dims = _shape(shape)
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        raise ValueError(f"unsupported dtype: {dt}")
    nbytes = math.prod(dims) * dt.itemsize
    if size is not None and int(size) != nbytes:
        raise ValueError(f"size does not match shape and dtype: expected {nbytes}, got {size}")
    device = _gpu_device(gpu_device)
    options: Dict[str, Any] = {}
    if device is not None:
        supported = gpu_supported_dtypes()
        if dt not in supported:
            names = ", ".join(sorted(d.name for d in supported))
            raise ValueError(f"dtype {dt} is not supported for GPU shared memory; supported: {names}")
        # pyshmem: a GPU stream has no CPU mirror unless asked for (a CPU stream is its own).
        options = {"device": device, "cpu_mirror": bool(cpu_mirror) if cpu_mirror is not None else False}
    try:
        s = _fb.create(name, shape=dims, dtype=dt, slots=slots, **options)
    except StreamExistsError:
        raise _err.exists(name) from None
    shm = _wrap(s, owner=True, readonly=False)
    shm._auto_unlink = bool(auto_unlink)
    return shm


SharedMemory._create = staticmethod(create)


def _cuda_unavailable(name: str, device: Optional[str], why: str = "") -> RuntimeError:
    on = f" on {device}" if device else ""
    return RuntimeError(
        f"{name!r} is a GPU stream{on} but CUDA is not available in this process{f' ({why})' if why else ''}; "
        "run it where framebus.gpu_available() is True (`framebus doctor` says why not), or recreate the stream "
        "with cpu_mirror=True for CPU access"
    )


def open(name: str, *, gpu_device: Any = None, readonly: bool = False) -> SharedMemory:  # noqa: A001
    """Attaches a handle to the existing stream ``name`` (any framebus stream). ``readonly``
    refuses writes, clears, the write lock, unsafe views and unlink. For a GPU stream,
    ``gpu_device`` as pyshmem: None attaches to its device (or, where CUDA is not available,
    reads its CPU mirror if it has one), ``"cuda:N"`` must name its device, ``False`` reads the
    CPU mirror; a CPU stream ignores ``gpu_device``.

    Raises ValueError when ``name`` is not a non-empty string, for a ``gpu_device`` other than
    the stream's device, or ``False`` on a GPU stream without a CPU mirror; FileNotFoundError
    (StreamNotFoundError) with pyshmem's message when it does not exist; RuntimeError when a
    GPU stream cannot be attached here and has no CPU mirror (or a device was asked for)."""
    _name(name)
    usable = gpu_available()
    host_only = gpu_device is False or (gpu_device is None and not usable)
    try:
        s = _fb.open(name, readonly=readonly, device="cpu" if host_only else None)
    except StreamNotFoundError:
        raise _err.missing(name) from None
    except DeviceUnavailableError as exc:  # a GPU stream without a mirror this process cannot reach
        raise _cuda_unavailable(name, None, str(exc)) from None
    except InvalidArgumentError as exc:  # host access to a GPU stream without a CPU mirror
        if gpu_device is False:
            raise ValueError(f"{name!r} is a GPU stream without a CPU mirror; cannot open it CPU-only (recreate it with cpu_mirror=True)") from None
        raise _cuda_unavailable(name, None, str(exc)) from None
    stored = s.device_stream
    if stored is not None and gpu_device is not None and gpu_device is not False:
        try:
            requested = _gpu_device(gpu_device)
            if requested != stored:
                raise ValueError(f"requested GPU device {requested} does not match stored device {stored}")
            if s.device is None:
                raise _cuda_unavailable(name, stored, "its device is not reachable from this process")
        except BaseException:
            s.close()
            raise
    return _wrap(s, owner=False, readonly=readonly)


@contextmanager
def stream(
    name: str,
    *,
    shape: Sequence[int],
    dtype: Any = np.float32,
    size: Optional[int] = None,
    gpu_device: Any = None,
    cpu_mirror: Optional[bool] = None,
) -> Iterator[SharedMemory]:
    """Creates a stream for a ``with`` block and unlinks it when the block ends (also on an
    exception)."""
    shm = create(name, shape=shape, dtype=dtype, size=size, gpu_device=gpu_device, cpu_mirror=cpu_mirror, auto_unlink=True)
    try:
        yield shm
    finally:
        shm.unlink()


def _write_time(name: str) -> float:
    try:
        s = _fb.open(name, readonly=True)
    except Exception:
        return 0.0
    try:
        return s.write_time
    finally:
        s.close()


def stat(name: str) -> Dict[str, Any]:
    """The stream's metadata as a dict, without mapping frames for reading (``write_time``
    briefly attaches a handle). FileNotFoundError with pyshmem's message if it does not exist."""
    _name(name)
    try:
        info = _native.stream_info(name)
        _, instance = _values.generation(name)
    except (StreamNotFoundError, FileNotFoundError):
        raise _err.missing(name) from None
    count = int(info["sequence"])
    device = info.get("device")
    return {
        "name": name,
        "shape": list(info["shape"] or []),
        "dtype": np.dtype(info["dtype"]).name if info["dtype"] else None,
        "size": info["frame_bytes"],
        "gpu_enabled": device is not None,
        "gpu_device": device,
        "cpu_mirror": bool(info.get("cpu_mirror")) if device is not None else True,
        "notify": True,
        "instance_id": instance,
        "creator_pid": int(info["creator_pid"]),
        "creator_alive": bool(info["creator_alive"]),
        "count": count,
        "write_sequence": 2 * count,
        "write_time": _write_time(name) if count else 0.0,
    }


def list_streams() -> List[str]:
    """The names of every stream in /dev/shm (framebus streams, whoever made them), sorted."""
    return sorted(str(n) for n in _native.stream_names())


def unlink(name: str) -> None:
    """Removes the stream ``name``; silent when there is none (as pyshmem). Open handles keep
    working until closed. ValueError for a name that is not a non-empty string."""
    _name(name)
    try:
        _native.unlink(name)
    except StreamNotFoundError:
        pass


def unlink_quiet(name: str) -> None:
    """:func:`unlink` (which is already silent for a missing name)."""
    unlink(name)


def _remove_orphaned_cuda_files() -> List[str]:
    """Removes /dev/shm/cuda.shm.<id>.<pid hex>.<seq> files (torch CUDA IPC reference
    counts) whose producer process is gone; returns their names."""
    removed = []
    for path in glob.glob("/dev/shm/cuda.shm.*"):
        base = os.path.basename(path)
        parts = base.split(".")
        try:
            pid = int(parts[-2], 16) if len(parts) >= 4 else 0
        except ValueError:
            continue
        if pid <= 0 or _values.pid_alive(pid):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(base)
    return sorted(removed)


def purge(*, include_cuda_orphans: bool = False, include_live: bool = False) -> List[str]:
    """Removes streams and returns their names, sorted: every stale stream (creator dead,
    nobody attached) and every stream this process created. ``include_live=True`` removes
    every stream, also those other running processes created and use (pyshmem's purge does
    that by default). ``include_cuda_orphans=True`` also removes torch's CUDA IPC files of
    dead producers."""
    me = os.getpid()
    removed = []
    for info in _native.list_info():
        if include_live or info.get("stale") or info.get("creator_pid") == me:
            try:
                _native.unlink(info["name"])
            except StreamNotFoundError:
                continue
            removed.append(str(info["name"]))
    if include_cuda_orphans:
        _remove_orphaned_cuda_files()
    return sorted(removed)
