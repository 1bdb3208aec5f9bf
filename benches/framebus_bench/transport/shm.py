"""Shared-memory peers and the limit: pyshmem 1.4 (default polling and ``notify=True``),
``multiprocessing.shared_memory`` with a sequence handshake (what one writes by hand), and a
bare futex + one copy each way (the physical limit of a copying transport driven from Python).

The naive and futex channels are a single buffer: a lossless writer waits until every reader
acknowledged the previous frame; latest readers just take whatever is there."""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import time
from typing import Any, Optional

import numpy as np

from . import Reader, Spec, Transport, Writer, as_frame

#: Payload offset in the naive and futex segments (the header words live below it).
PAYLOAD_OFFSET = 4096
MAX_READERS = 64


# -- pyshmem ---------------------------------------------------------------------------------------


def _module(name: str) -> Any:
    """pyshmem itself or framebus.pyshmem (its API on framebus streams)."""
    import importlib

    return importlib.import_module(name)


class _PyshmemWriter(Writer):
    def __init__(self, spec: Spec, module: str = "pyshmem") -> None:
        self.shm = _module(module).open(spec.name)
        self._write = self.shm.write

    def send(self, src: np.ndarray) -> None:
        self._write(src)

    def close(self) -> None:
        self.shm.close()


class _PyshmemReader(Reader):
    def __init__(self, spec: Spec, module: str = "pyshmem") -> None:
        self.shm = _module(module).open(spec.name)
        self.out = np.empty(spec.shape, spec.dtype)
        self.last = int(self.shm.count)
        self._read_after = self.shm.read_after

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        # read_after is pyshmem's level-triggered wait: the right call for lock-step exchanges
        # (its docs warn that read_new can miss a reply published before the call).
        try:
            out = self._read_after(self.last, timeout=timeout, out=self.out)
        except TimeoutError:
            return None
        self.last = self.shm.last_read_count
        return out

    def close(self) -> None:
        self.shm.close()


class Pyshmem(Transport):
    """pyshmem 1.4 with its defaults (waiting readers poll)."""

    key = "pyshmem"
    label = "pyshmem 1.4 (polling)"
    family = "pyshmem"
    lossless_ok = False
    notify = False
    #: The module whose API is driven: pyshmem, or framebus.pyshmem for the compat row.
    module = "pyshmem"

    @classmethod
    def unavailable(cls) -> Optional[str]:
        try:
            _module(cls.module)
        except ImportError:
            return f"{cls.module} is not installed (pip install './benches[peers]')"
        return None

    def create(self) -> None:
        s = self.spec
        self.shm = _module(self.module).create(s.name, shape=s.shape, dtype=s.dtype, notify=self.notify)

    def destroy(self) -> None:
        shm = getattr(self, "shm", None)
        if shm is not None:
            self.shm = None
            shm.unlink()

    def writer(self) -> Writer:
        return _PyshmemWriter(self.spec, self.module)

    def reader(self, index: int = 0) -> Reader:
        return _PyshmemReader(self.spec, self.module)


class PyshmemNotify(Pyshmem):
    """pyshmem 1.4 with ``notify=True``: readers park on a futex."""

    key = "pyshmem-notify"
    label = "pyshmem 1.4 notify=True"
    notify = True


class FramebusPyshmem(Pyshmem):
    """framebus.pyshmem: the same pyshmem calls on framebus streams (the compat layer's cost)."""

    key = "framebus-pyshmem"
    label = "framebus.pyshmem (pyshmem API)"
    family = "framebus"
    role = "framebus"
    module = "framebus.pyshmem"


# -- a segment of header words + one payload ---------------------------------------------------------


class _Segment:
    """A file under /dev/shm mapped in this process: ``words`` (header) and ``payload``."""

    def __init__(self, spec: Spec, word: Any, create: bool) -> None:
        self.path = f"/dev/shm/{spec.name}"
        size = PAYLOAD_OFFSET + spec.nbytes
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.words = np.frombuffer(self.mm, dtype=word, count=PAYLOAD_OFFSET // np.dtype(word).itemsize)
        self.payload = as_frame(memoryview(self.mm)[PAYLOAD_OFFSET:], spec)

    def close(self) -> None:
        self.words = self.payload = None  # type: ignore[assignment]
        try:
            self.mm.close()
        except BufferError:
            pass


# -- multiprocessing.shared_memory + sequence handshake ------------------------------------------


def _spin_until(cond: Any, deadline: float) -> bool:
    """Spins (yielding the CPU each round) until ``cond()`` or the deadline; True if met."""
    while not cond():
        if time.perf_counter() > deadline:
            return False
        os.sched_yield()
    return True


class _NaiveWriter(Writer):
    def __init__(self, spec: Spec) -> None:
        from multiprocessing import shared_memory

        self.spec = spec
        self.shm = shared_memory.SharedMemory(name=spec.name)
        self.words: np.ndarray = np.ndarray((MAX_READERS + 1,), np.uint64, buffer=self.shm.buf)
        self.payload = as_frame(self.shm.buf[PAYLOAD_OFFSET:], spec)  # type: ignore[index]

    def send(self, src: np.ndarray) -> None:
        w = self.words
        seq = int(w[0])
        if self.spec.lossless:
            acks = w[1 : 1 + self.spec.readers]
            if not _spin_until(lambda: bool((acks == seq).all()), time.perf_counter() + 10):
                raise TimeoutError("a naive reader did not acknowledge within 10 s")
        w[0] = seq + 1  # odd: write in progress
        np.copyto(self.payload, src)
        w[0] = seq + 2

    def close(self) -> None:
        self.words = self.payload = None  # type: ignore[assignment]
        self.shm.close()


class _NaiveReader(Reader):
    def __init__(self, spec: Spec, index: int) -> None:
        from multiprocessing import shared_memory

        self.spec = spec
        self.index = index
        self.shm = shared_memory.SharedMemory(name=spec.name)
        self.words: np.ndarray = np.ndarray((MAX_READERS + 1,), np.uint64, buffer=self.shm.buf)
        self.payload = as_frame(self.shm.buf[PAYLOAD_OFFSET:], spec)  # type: ignore[index]
        self.out = np.empty(spec.shape, spec.dtype)
        self.last = int(self.words[0])

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        w = self.words
        deadline = time.perf_counter() + timeout
        while True:
            seq = int(w[0])
            if seq == self.last or seq & 1:
                if time.perf_counter() > deadline:
                    return None
                os.sched_yield()
                continue
            np.copyto(self.out, self.payload)
            if int(w[0]) != seq:
                continue  # overwritten while copying: try again
            self.last = seq
            if self.spec.lossless:
                w[1 + self.index] = seq
            return self.out

    def close(self) -> None:
        self.words = self.payload = None  # type: ignore[assignment]
        self.shm.close()


class NaiveShm(Transport):
    """``multiprocessing.shared_memory``, one buffer, a sequence word: the naive baseline."""

    key = "shm-naive"
    label = "shared_memory + seq handshake"
    family = "shm-naive"

    def create(self) -> None:
        from multiprocessing import shared_memory

        if self.spec.readers > MAX_READERS:
            raise ValueError(f"at most {MAX_READERS} readers")
        self.shm = shared_memory.SharedMemory(name=self.spec.name, create=True, size=PAYLOAD_OFFSET + self.spec.nbytes)

    def destroy(self) -> None:
        shm = getattr(self, "shm", None)
        if shm is not None:
            del self.shm
            shm.close()
            shm.unlink()

    def writer(self) -> Writer:
        return _NaiveWriter(self.spec)

    def reader(self, index: int = 0) -> Reader:
        return _NaiveReader(self.spec, index)


# -- futex + one copy each way: the limit ---------------------------------------------------------

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower(), 0)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Futex:
    """FUTEX_WAIT / FUTEX_WAKE on a 32-bit word in shared memory, through libc's syscall()."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._sys = libc.syscall
        self._sys.restype = ctypes.c_long

    def wait(self, addr: int, expected: int, timeout: float) -> None:
        ts = _Timespec(int(timeout), int((timeout % 1) * 1e9))
        self._sys(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_long(_FUTEX_WAIT), ctypes.c_long(expected), ctypes.byref(ts), None, ctypes.c_long(0))

    def wake(self, addr: int) -> None:
        self._sys(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_long(_FUTEX_WAKE), ctypes.c_long(0x7FFFFFFF), None, None, ctypes.c_long(0))


class _FutexWriter(Writer):
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.seg = _Segment(spec, np.uint32, create=False)
        self.futex = Futex()
        self.base = self.seg.words.ctypes.data

    def send(self, src: np.ndarray) -> None:
        w = self.seg.words
        seq = int(w[0])
        if self.spec.lossless:
            deadline = time.perf_counter() + 10
            for i in range(1, 1 + self.spec.readers):
                while int(w[i]) != seq:
                    if time.perf_counter() > deadline:
                        raise TimeoutError("a reader did not acknowledge within 10 s")
                    self.futex.wait(self.base + 4 * i, int(w[i]), 0.1)
        np.copyto(self.seg.payload, src)
        w[0] = (seq + 1) & 0xFFFFFFFF
        self.futex.wake(self.base)

    def close(self) -> None:
        self.seg.close()


class _FutexReader(Reader):
    def __init__(self, spec: Spec, index: int) -> None:
        self.spec = spec
        self.index = index
        self.seg = _Segment(spec, np.uint32, create=False)
        self.futex = Futex()
        self.base = self.seg.words.ctypes.data
        self.out = np.empty(spec.shape, spec.dtype)
        self.last = int(self.seg.words[0])

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        w = self.seg.words
        deadline = time.perf_counter() + timeout
        while int(w[0]) == self.last:
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            self.futex.wait(self.base, self.last, min(left, 0.1))
        seq = int(w[0])
        np.copyto(self.out, self.seg.payload)
        self.last = seq
        if self.spec.lossless:
            w[1 + self.index] = seq
            self.futex.wake(self.base + 4 * (1 + self.index))
        return self.out

    def close(self) -> None:
        self.seg.close()


class FutexLimit(Transport):
    """The limit: a futex wake/wait between processes plus one copy in and one copy out."""

    key = "limit-futex"
    label = "limit: futex + 1 copy each way (ctypes)"
    family = "limit"
    role = "limit"

    @classmethod
    def unavailable(cls) -> Optional[str]:
        if not _SYS_FUTEX or not os.path.isdir("/dev/shm"):
            return f"no futex syscall number known for {platform.machine()}"
        return None

    def create(self) -> None:
        if self.spec.readers > MAX_READERS:
            raise ValueError(f"at most {MAX_READERS} readers")
        seg = _Segment(self.spec, np.uint32, create=True)
        self.path = seg.path
        seg.close()

    def destroy(self) -> None:
        path = getattr(self, "path", None)
        if path:
            del self.path
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def writer(self) -> Writer:
        return _FutexWriter(self.spec)

    def reader(self, index: int = 0) -> Reader:
        return _FutexReader(self.spec, index)
