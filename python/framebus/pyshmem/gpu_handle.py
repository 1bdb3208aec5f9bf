"""``SharedMemory`` of a GPU stream: pyshmem's GPU handle on one native framebus device-stream
handle. The CPU handle's ring, lock and read accounting are reused as they are; this class
changes only what a frame is (a torch tensor, or a framebus device object without torch), on
which CUDA stream copies run (torch's current one) and pyshmem's GPU-only rules (no ``out=``,
``pinned_buffer()``, DLPack on the device)."""

from __future__ import annotations

from typing import Any, Optional, Tuple, cast

import numpy as np

from .._device_stream import DeviceStream
from ..errors import StreamClosedError, StreamEmptyError
from . import errors as _err
from . import gpu as _gpu
from . import values as _values
from .handle import SharedMemory
from .locking import WriteView
from .publication import Publication

__all__ = ["GpuSharedMemory"]

_NO_OUT = "out is supported only for safe CPU reads; pass a NumPy destination buffer to a CPU-backed handle"
_NO_OUT_PUBLICATION = "out is supported only for safe CPU publication reads; pass a NumPy destination buffer to a CPU-backed handle"


class GpuWriteView(WriteView):
    """``write_view()`` of a GPU handle: the loan's device memory (a torch tensor where torch
    is there), loaned with torch's current CUDA stream, so the commit at the block's end
    orders readers after the work queued on it."""

    __slots__ = ()

    def _loan_kwargs(self) -> dict:
        return {"stream": _gpu.current_stream(str(self._handle.gpu_device))}

    def _array_of(self, loan: Any) -> Any:
        return _gpu.user_array(loan)  # a DeviceLoan is the slot's device memory


class GpuSharedMemory(SharedMemory):
    """pyshmem's handle of a GPU stream (``gpu_device="cuda:N"``), a framebus device stream.

    Reads return a fresh copy of the newest frame in device memory (a CUDA torch tensor, as
    pyshmem's ``clone()``; a ``framebus.DeviceArray`` without torch); ``write`` copies a CUDA
    tensor (or any ``__cuda_array_interface__``/DLPack device object) device to device and
    uploads anything else (NumPy, lists, CPU tensors). Copies are queued on torch's current
    CUDA stream and the host does not wait for them (pyshmem waits: docs/pyshmem.md)."""

    def __init__(self, stream: Any, **kwargs: Any) -> None:
        super().__init__(stream, **kwargs)
        self._device: str = str(stream.device)
        self.gpu_device = self._device
        self.gpu_enabled = True
        self.cpu_mirror = bool(getattr(stream, "cpu_mirror", False))
        self._pinned: Any = None
        # read_after's hot path calls the native read; here it is the device read.
        self._native_read = self._device_read  # type: ignore[assignment]
        self._read_info = self._device_read_info  # type: ignore[assignment]

    @property
    def _ds(self) -> DeviceStream:
        """The handle as the device stream it is (its reads take a CUDA stream)."""
        return cast(DeviceStream, self._s)

    # -- conversions ---------------------------------------------------------------------------
    def _stream(self) -> Optional[int]:
        return _gpu.current_stream(self._device)

    def _shape_error(self, shape: Any) -> ValueError:
        return ValueError(f"expected shape {self.shape}, got {tuple(shape)}")

    def _source(self, value: Any) -> Any:
        """What the native write takes for ``value``: a device object on this stream's device
        in the stream's dtype, or a C-contiguous NumPy array (uploaded). Converts as pyshmem's
        ``torch.as_tensor(value, dtype)``; ValueError for another shape."""
        if _gpu.is_torch_tensor(value):
            t = value.detach()
            if tuple(t.shape) != self.shape:
                raise self._shape_error(t.shape)
            td = _gpu.torch_dtype(self.dtype)
            if t.device.type == "cuda":
                return t.to(device=self._device, dtype=td).contiguous()
            return t.to(dtype=td).contiguous().numpy()
        if _gpu.is_device_object(value):
            shape = getattr(value, "shape", None)
            if shape is not None and tuple(shape) != self.shape:
                raise self._shape_error(shape)
            return value
        array = np.asarray(value, dtype=self.dtype)
        if array.shape != self.shape:
            raise self._shape_error(array.shape)
        return np.ascontiguousarray(array)

    def _converted(self, value: Any) -> Any:
        """A foreign device object the native write refused (another dtype, strides), as
        pyshmem converts it: ``torch.as_tensor(value, dtype, device)``. None without torch."""
        if not _gpu.returns_torch():
            return None
        torch = _gpu.torch_module()
        return torch.as_tensor(value, dtype=_gpu.torch_dtype(self.dtype), device=self._device).contiguous()

    # -- writes --------------------------------------------------------------------------------
    def write(self, value: Any, *, frame_id: Optional[int] = None) -> None:
        """Copies ``value`` in as the next frame (device to device for a CUDA tensor or other
        device object on this device, an upload for host data), on torch's current CUDA
        stream. ``frame_id`` as on a CPU handle. ValueError for another shape, PermissionError
        on a read-only handle, RuntimeError on a closed one."""
        self._ensure_open("write to")
        self._ensure_writable("write to")
        src = self._source(value)
        kwargs: dict = {"stream": self._stream()}
        if frame_id is not None:
            kwargs["frame_id"] = _values.frame_id_out(frame_id)
        try:
            try:
                self._native_write(src, **kwargs)
            except (TypeError, ValueError):
                other = self._converted(src) if _gpu.is_device_object(src) else None
                if other is None:
                    raise
                self._native_write(other, **kwargs)
        except StreamClosedError:
            raise _err.closed(self.name, "write to") from None
        except PermissionError:
            self._ensure_open("write to")
            raise _err.read_only(self.name, "write to") from None

    def write_view(self, *, timeout: Optional[float] = None, frame_id: Optional[int] = None) -> WriteView:
        """Context manager yielding the next free slot's device memory (a CUDA torch tensor
        where torch is there; zero-copy), holding the write lock; published on normal exit
        (ordered after the work queued on torch's current stream), discarded if the block
        raises."""
        return GpuWriteView(self, frame_id, take_lock=True, timeout=timeout)

    def write_view_locked(self, *, frame_id: Optional[int] = None) -> WriteView:
        """:meth:`write_view` for a caller that already holds the lock."""
        return GpuWriteView(self, frame_id, take_lock=False, timeout=None)

    def pinned_buffer(self) -> Any:
        """A page-locked CPU torch tensor of the stream's shape and dtype, made once per handle:
        fill it and pass it to :meth:`write` for a direct upload. RuntimeError without torch."""
        self._ensure_open("allocate a pinned buffer for")
        self._ensure_writable("allocate a pinned write buffer for")
        torch = _gpu.torch_module()
        if torch is None or _gpu.torch_dtype(self.dtype) is None:
            raise RuntimeError("pinned_buffer() needs torch (pip install torch); write NumPy arrays instead")
        if self._pinned is None:
            self._pinned = torch.empty(self.shape, dtype=_gpu.torch_dtype(self.dtype), device="cpu", pin_memory=True)
        return self._pinned

    def close(self, *, timeout: float = 5.0) -> None:
        self._pinned = None
        super().close(timeout=timeout)

    # -- reads ---------------------------------------------------------------------------------
    def _device_read(self, out: Any = None) -> Any:
        """A fresh device copy of the newest frame, in pyshmem's type."""
        if out is not None:
            raise ValueError(_NO_OUT)
        try:
            return _gpu.user_array(self._ds.read(stream=self._stream()))
        except StreamEmptyError:  # before the first write: zeros, as pyshmem's fresh tensor
            return self._zeros()

    def _zeros(self) -> Any:
        from .._native import DeviceArray

        return _gpu.user_array(DeviceArray.from_numpy(np.zeros(self.shape, self.dtype), _gpu.device_index(self._device)))

    def _device_read_info(self, out: Any = None) -> Tuple[Any, int, int, int, Any]:
        """(copy, seq, timestamp_ns, frame_id, meta) of the newest frame, read as one snapshot."""
        if out is not None:
            raise ValueError(_NO_OUT_PUBLICATION)
        try:
            arr, seq, ts, fid, meta = self._ds._read_info(stream=self._stream())
        except StreamEmptyError:
            return self._zeros(), 0, 0, self._s.frame_id, b""
        return _gpu.user_array(arr), seq, ts, fid, meta

    def _copy_out(self, out: Any, info: bool) -> Any:
        raise ValueError(_NO_OUT_PUBLICATION if info else _NO_OUT)

    def _zeros_view(self) -> Any:
        return self._device_read()

    def read(self, *, safe: bool = True, poll_interval: float = 1e-6, out: Any = None, timeout: Optional[float] = None) -> Any:
        """A device copy of the newest frame (zeros before the first write), never torn: a CUDA
        torch tensor (pyshmem's type) or a framebus.DeviceArray without torch. ``out`` is
        refused (ValueError), as by pyshmem's GPU handles. ``safe=False`` (lock held) returns
        the newest slot's device memory itself (zero-copy)."""
        self._ensure_open("read from")
        if not safe:
            self._ensure_writable("take an unsafe shared view from")
        if out is not None:
            raise ValueError(_NO_OUT)
        if safe:
            try:
                return self._device_read()
            except StreamClosedError:
                raise _err.closed(self.name, "read from") from None
        frame = self._unsafe_frame("take an unsafe shared view from")
        return self._zeros_view() if frame is None else _gpu.user_array(frame)

    def read_publication(self, *, safe: bool = True, poll_interval: float = 1e-6, out: Any = None, timeout: Optional[float] = None) -> Publication:
        """The newest frame (a device copy, as :meth:`read`) with its count, frame_id and
        write_time, read as one snapshot. ``out`` is refused (ValueError)."""
        self._ensure_open("read a publication from")
        if not safe:
            self._ensure_writable("take an unsafe publication view from")
        if out is not None:
            raise ValueError(_NO_OUT_PUBLICATION)
        if not safe:
            frame = self._unsafe_frame("take an unsafe publication view from")
            if frame is None:
                return Publication(self._zeros_view(), 0, _values.frame_id_in(self._s.frame_id), 0.0, self._s.missed)
            return Publication(_gpu.user_array(frame), frame.seq, _values.frame_id_in(frame.frame_id), frame.timestamp_ns / 1e9, self._s.missed)
        try:
            arr, seq, ts, fid, _meta = self._device_read_info()
        except StreamClosedError:
            raise _err.closed(self.name, "read a publication from") from None
        return Publication(arr, seq, _values.frame_id_in(fid), ts / 1e9, self._s.missed)

    # -- DLPack ----------------------------------------------------------------------------------
    def __dlpack_device__(self) -> Tuple[int, int]:
        self._ensure_open("read the DLPack device of")
        return (2, _gpu.device_index(self._device))  # kDLCUDA

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule of a snapshot in device memory (a copy, as :meth:`read`)."""
        self._ensure_open("export DLPack from")
        snapshot = self._ds.read(stream=self._stream())
        if stream is not None:
            kwargs["stream"] = stream
        return snapshot.__dlpack__(**kwargs)
