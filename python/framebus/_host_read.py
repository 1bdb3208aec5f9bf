"""Opening a stream "for host reading": what a bridge, ``framebus record`` or a pipe into FFmpeg
needs, frames as bytes in host memory, whatever memory the stream keeps them in.

:func:`open_for_host` gives a host stream's handle, or a device stream's CPU mirror (as
``framebus.open(name, device="cpu")``), and for a device stream without a mirror a
:class:`DownloadingStream`: a handle through the GPU whose reads copy each frame to the host
(``_native.DeviceDownload``: one device-to-host copy per frame on a CUDA stream of its own, into
page-locked memory allocated once; ``framebus ls``/``top`` show the reader as a download).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _native
from ._stream import Publication
from ._stream import open as _open
from .info import stat

__all__ = ["open_for_host", "DownloadingStream"]


def open_for_host(name: str, *, mode: str = "latest", **options: Any) -> Any:
    """Opens stream ``name`` in reader ``mode`` for reading frames on the host (``options`` as
    ``framebus.open``'s, ``device`` excepted): a :class:`DownloadingStream` for a device stream
    without a CPU mirror, else ``framebus.open(name, mode=mode, device="cpu")``. Raises as
    ``framebus.open`` (DeviceUnavailableError where this process cannot reach the stream's GPU)."""
    info = stat(name)
    handle = _open(name, mode=mode, device=None if info.device and not info.cpu_mirror else "cpu", **options)
    return DownloadingStream(handle) if isinstance(handle, _native.DeviceStream) else handle


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
    not offered (open the stream with ``framebus.open`` for device frames)."""

    variable = False

    def __init__(self, handle: "_native.DeviceStream") -> None:
        self._handle = handle
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
