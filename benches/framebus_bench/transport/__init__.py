"""Transports the cross-process suites drive the same way: framebus (copying reads, zero-copy
views, loans), each peer, and the physical limit. A :class:`Spec` (picklable) names one channel;
``get(spec)`` turns it into a :class:`Transport` in any process, which opens writer and reader
endpoints. The parent calls ``create()`` before any endpoint opens and ``destroy()`` at the end.

Every transport hands the reader a NumPy array of the frame in the cheapest way its API
offers: a copy into a preallocated array for copying APIs, a view for zero-copy ones."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ContextManager, Dict, List, Optional, Tuple, Type

import numpy as np


@dataclass(frozen=True)
class Spec:
    """One channel: transport ``kind``, unique ``name``, frame ``shape``/``dtype``, how many
    reader processes, lossless (the writer waits for every reader) or latest (readers skip)."""

    kind: str
    name: str
    shape: Tuple[int, ...]
    dtype: str
    readers: int = 1
    lossless: bool = False
    slots: int = 4

    @property
    def nbytes(self) -> int:
        """Bytes per frame."""
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


class Writer:
    """Publishes frames. ``send`` publishes a frame equal to ``src`` (the transport copies it
    in, or hands it over); ``send_inplace`` (loan transports only) publishes a frame rendered
    directly in shared memory: only ``src``'s header words are written into the loaned slot."""

    def send(self, src: np.ndarray) -> None:
        """Publishes a frame equal to ``src`` (blocking while a lossless reader is behind)."""
        raise NotImplementedError

    def send_inplace(self, src: np.ndarray) -> None:
        """Publishes a loaned frame of which only ``src``'s header words were written."""
        raise NotImplementedError(f"{type(self).__name__} has no loans")

    def loan(self) -> ContextManager[np.ndarray]:
        """(loan transports only) A writable frame in shared memory, published on exit."""
        raise NotImplementedError(f"{type(self).__name__} has no loans")

    def connect(self, timeout: float = 10.0) -> None:
        """Waits until the spec's readers are attached, for transports that wire up lazily
        (called once every reader process said it is ready, before the first frame)."""

    def close(self) -> None:
        """Releases the endpoint."""


class Reader:
    """Receives frames: ``recv(timeout)`` returns the next frame as an array (None after
    ``timeout`` seconds) that stays valid until ``done()``."""

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        """The next frame (lossless: the next in order; latest: the newest), or None."""
        raise NotImplementedError

    def done(self) -> None:
        """Lets go of the frame returned by the last ``recv`` (releases a view)."""

    def close(self) -> None:
        """Releases the endpoint."""


class Transport:
    """Base of every transport. Subclasses set the class attributes and the four methods."""

    key = ""
    label = ""
    family = ""
    role = "peer"
    loans = False
    views = False
    #: Whether a writer can wait for several readers without dropping frames.
    lossless_ok = True
    #: Whether readers may skip to the newest frame (latest mode).
    latest_ok = True

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    @classmethod
    def unavailable(cls) -> Optional[str]:
        """None when usable here, else a one-line reason (a peer not installed)."""
        return None

    def create(self) -> None:
        """Creates the channel's shared state (in the parent, before endpoints open)."""

    def destroy(self) -> None:
        """Removes everything ``create`` made (idempotent)."""

    def writer(self) -> Writer:
        """Opens the writing endpoint (in the calling process)."""
        raise NotImplementedError

    def reader(self, index: int = 0) -> Reader:
        """Opens reader ``index`` (0 .. spec.readers - 1) in the calling process."""
        raise NotImplementedError


#: key -> "module:Class" (modules import their peer lazily).
_REGISTRY: Dict[str, str] = {
    "framebus": "fb:FramebusCopy",
    "framebus-1t": "fb:FramebusCopyOneThread",
    "framebus-view": "fb:FramebusView",
    "framebus-zc": "fb:FramebusZeroCopy",
    "framebus-pyshmem": "shm:FramebusPyshmem",
    "pyshmem": "shm:Pyshmem",
    "pyshmem-notify": "shm:PyshmemNotify",
    "shm-naive": "shm:NaiveShm",
    "pyzmq": "zmqt:Zmq",
    "iceoryx2": "iox:Iceoryx2",
    "limit-futex": "shm:FutexLimit",
}

#: The order rows appear in: framebus first, then peers, then the limit.
ORDER: List[str] = list(_REGISTRY)


def cls_of(kind: str) -> Type[Transport]:
    """The Transport class registered under ``kind`` (KeyError if none)."""
    module, name = _REGISTRY[kind].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def label(kind: str, inplace: bool = False) -> str:
    """The row name of ``kind``; loan transports name whether the frame is copied in or
    rendered in place (only its header words written into the loaned slot)."""
    if kind == "framebus-zc":
        return "framebus loan() in place + wait_view()" if inplace else "framebus loan() + copy-in + wait_view()"
    if kind == "iceoryx2":
        return "iceoryx2 loan in place + view" if inplace else "iceoryx2 loan + copy-in + view"
    return cls_of(kind).label


def get(spec: Spec) -> Transport:
    """The transport for ``spec`` (in whichever process calls it)."""
    return cls_of(spec.kind)(spec)


def available(kinds: List[str], note: Any = None) -> List[str]:
    """The ``kinds`` usable here; for each one that is not, ``note(line)`` is called once."""
    ok = []
    for k in kinds:
        why = cls_of(k).unavailable()
        if why is None:
            ok.append(k)
        elif note is not None:
            note(f"{cls_of(k).label}: skipped ({why})")
    return ok


def byte_view(arr: np.ndarray) -> np.ndarray:
    """``arr``'s bytes as a flat uint8 array (no copy)."""
    return arr.reshape(-1).view(np.uint8)


def as_frame(buf: Any, spec: Spec) -> np.ndarray:
    """A memory buffer (bytes-like, writable or not) as a frame of ``spec`` (no copy)."""
    return np.frombuffer(buf, dtype=np.uint8, count=spec.nbytes).view(spec.dtype).reshape(spec.shape)
