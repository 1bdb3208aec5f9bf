"""Opening a stream "for host reading": what a bridge, ``framebus record`` or a pipe into FFmpeg
needs, frames as bytes in host memory, whatever memory the stream keeps them in.

:func:`open_for_host` gives a host stream's handle, or a device stream's CPU mirror (as
``framebus.open(name, device="cpu")``), and for a device stream without a mirror a
:class:`DownloadingStream`: a handle through the GPU whose reads copy each frame to the host
(``_native.DeviceDownload``: one device-to-host copy per frame on a CUDA stream of its own, into
page-locked memory allocated once; ``framebus ls``/``top`` show the reader as a download).
:func:`host_view` and :func:`host_wait_view` are ``view``/``wait_view`` for any handle it gives:
for code written for zero-copy views (the encoded bridge, the ROS 2 publisher), a host stream's
views stay zero-copy and a download comes as a :class:`DownloadedFrame`.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _native
from ._stream import Publication
from ._stream import open as _open
from .info import stat

__all__ = ["open_for_host", "DownloadingStream", "DownloadedFrame", "host_view", "host_wait_view"]


def open_for_host(name: str, *, mode: str = "latest", **options: Any) -> Any:
    """Opens stream ``name`` in reader ``mode`` for reading frames on the host (``options`` as
    ``framebus.open``'s, ``device`` excepted): a :class:`DownloadingStream` for a device stream
    without a CPU mirror, else ``framebus.open(name, mode=mode, device="cpu")``. Raises as
    ``framebus.open`` (DeviceUnavailableError where this process cannot reach the stream's GPU)."""
    info = stat(name)
    handle = _open(name, mode=mode, device=None if info.device and not info.cpu_mirror else "cpu", **options)
    return DownloadingStream(handle) if isinstance(handle, _native.DeviceStream) else handle


def host_view(src: Any, timeout: Optional[float] = None) -> Any:
    """The newest frame of ``src`` (a handle :func:`open_for_host` gave) as a view: a host
    stream's ``src.view(timeout)`` (zero-copy, pins the slot until released), or for a
    :class:`DownloadingStream` a :class:`DownloadedFrame` (a copy; never waits: NoFrameError
    before the first frame). Raises as ``Stream.view`` (DeviceUnavailableError for a download
    whose stream's owner has exited)."""
    return src._downloaded_view(False, None) if isinstance(src, DownloadingStream) else src.view(timeout=timeout)


def host_wait_view(src: Any, timeout: Optional[float] = None) -> Any:
    """The next frame ``src`` has not seen as a view: a host stream's ``src.wait_view(timeout)``
    (zero-copy), or for a :class:`DownloadingStream` a :class:`DownloadedFrame` (a copy). Waits
    and raises as ``Stream.wait_view`` (StreamTimeoutError, StreamEndedError;
    DeviceUnavailableError naming the pid once a device stream's owner has exited)."""
    return src._downloaded_view(True, timeout) if isinstance(src, DownloadingStream) else src.wait_view(timeout=timeout)


class DownloadedFrame:
    """A frame a :class:`DownloadingStream` read, shaped as a ``Frame`` view for code written for
    views. ``array`` is a copy out of the page-locked buffer into a host array the stream
    reuses: valid until the stream's next ``host_view``/``host_wait_view`` (copy it to keep it).
    ``seq``, ``timestamp_ns``, ``frame_id`` and ``meta`` are the frame's; it pins nothing, so
    ``release()`` and ``with`` do nothing."""

    __slots__ = ("array", "seq", "timestamp_ns", "frame_id", "meta")

    def __init__(self, array: np.ndarray, seq: int, timestamp_ns: int, frame_id: int, meta: bytes) -> None:
        self.array, self.seq, self.timestamp_ns, self.frame_id, self.meta = array, seq, timestamp_ns, frame_id, meta

    def release(self) -> None:
        """Nothing to give back: the frame is a copy."""

    def __enter__(self) -> "DownloadedFrame":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


#: What a DownloadingStream passes on to its device handle: the ring, not the frames.
_RING = frozenset(
    {
        "name", "shape", "dtype", "slots", "size", "nbytes", "capacity", "variable", "meta_capacity", "mode", "device",
        "write_sequence", "last_seq", "seen_seq", "ended", "missed", "total_missed", "closed", "role", "set_role",
        "attached", "wait", "resume_from", "cpu_mirror",
    }
)


class DownloadingStream:
    """A device stream without a CPU mirror, read on the host: ``read``/``read_new`` (and their
    ``_publication`` forms) download the frame and return a new NumPy array (or fill ``out``)
    copied out of the page-locked buffer, so an array handed on (to a pipe, a socket) stays
    valid while later frames are read. The ring's attributes (``write_sequence``, ``ended``,
    ``total_missed``, ``set_role``, ...) are the device handle's; views, loans and writes are
    not offered (open the stream with ``framebus.open`` for device frames): code written for views
    reads it through :func:`host_view`/:func:`host_wait_view`."""

    variable = False

    def __init__(self, handle: "_native.DeviceStream") -> None:
        self._handle = handle
        self._view_buf: Optional[np.ndarray] = None
        try:
            self._download = _native.DeviceDownload(handle)
        except BaseException:
            handle.close()
            raise

    def __getattr__(self, name: str) -> Any:
        if name in _RING:
            return getattr(self._handle, name)
        raise AttributeError(f"{type(self).__name__} reads frames on the host only; it has no {name!r} (framebus.open gives device frames)")

    def __repr__(self) -> str:
        return f"<framebus DownloadingStream {self._handle!r}>"

    def read(self, *, out: Optional[np.ndarray] = None) -> np.ndarray:
        """A copy of the newest frame (never waits; NoFrameError before the first)."""
        return self._download.read_latest(out=out)[0]

    def read_new(self, *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
        """A copy of the next frame this handle has not seen (waits as ``Stream.read_new``)."""
        return self._download.read_next(timeout=timeout, out=out)[0]

    def _read_info(self, *, out: Optional[np.ndarray] = None) -> Tuple[Any, int, int, int, bytes]:
        return self._download.read_latest(out=out)

    def _read_new_info(self, *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> Tuple[Any, int, int, int, bytes]:
        return self._download.read_next(timeout=timeout, out=out)

    def _downloaded_view(self, new: bool, timeout: Optional[float]) -> DownloadedFrame:
        """The next frame (``new``, waiting ``timeout``) or the newest one, copied into the one
        host array views reuse; see :func:`host_wait_view`."""
        if self._view_buf is None:
            self._view_buf = np.empty(tuple(self._handle.shape or ()), np.dtype(self._handle.dtype))
        out = self._view_buf
        info = self._download.read_next(timeout=timeout, out=out) if new else self._download.read_latest(out=out)
        return DownloadedFrame(*info)

    def read_publication(self, *, out: Optional[np.ndarray] = None) -> Publication:
        """The newest frame with its sequence, time, id and metadata (as ``Stream``'s)."""
        arr, seq, ts, fid, meta = self._download.read_latest(out=out)
        return Publication(arr, seq, fid, ts / 1e9, ts, meta, 0)

    def read_new_publication(self, *, timeout: Optional[float] = None, out: Optional[np.ndarray] = None) -> Publication:
        """The next new frame with its sequence, time, id and metadata (as ``Stream``'s)."""
        arr, seq, ts, fid, meta = self._download.read_next(timeout=timeout, out=out)
        return Publication(arr, seq, fid, ts / 1e9, ts, meta, self._handle.missed)

    def close(self) -> None:
        """Gives back the page-locked buffer and CUDA stream, then closes the handle."""
        self._download.close()
        self._handle.close()

    def __enter__(self) -> "DownloadingStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
