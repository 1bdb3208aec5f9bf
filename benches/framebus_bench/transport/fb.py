"""framebus itself: copying reads (``write`` + ``read_new(out=)``), zero-copy views (``write`` +
``wait_view``) and loans (``loan`` + ``wait_view``). The view and loan variants switch on by
themselves once the installed framebus has ``Stream.wait_view`` / ``Stream.loan``."""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from ..harness import HEADER_WORDS
from . import Reader, Spec, Transport, Writer, byte_view

#: Generous bound on how long a lossless writer waits for its slowest reader.
WRITE_TIMEOUT = 10.0


def has(attr: str) -> bool:
    """Whether the installed framebus Stream has ``attr`` (views, loans)."""
    import framebus

    return hasattr(framebus.Stream, attr)


class _Writer(Writer):
    def __init__(self, spec: Spec) -> None:
        import framebus

        self.stream = framebus.open(spec.name)
        self.stream.set_role("writer")  # before binding write: the native method itself
        self._write = self.stream.write

    def send(self, src: np.ndarray) -> None:
        self._write(src, timeout=WRITE_TIMEOUT)

    def close(self) -> None:
        self.stream.close()


class _LoanWriter(_Writer):
    def send(self, src: np.ndarray) -> None:
        with self.stream.loan(timeout=WRITE_TIMEOUT) as arr:
            np.copyto(arr, src)

    def send_inplace(self, src: np.ndarray) -> None:
        with self.stream.loan(timeout=WRITE_TIMEOUT) as arr:
            byte_view(arr)[: HEADER_WORDS * 8] = byte_view(src)[: HEADER_WORDS * 8]

    def loan(self) -> Any:
        return self.stream.loan(timeout=WRITE_TIMEOUT)


class _CopyReader(Reader):
    def __init__(self, spec: Spec) -> None:
        import framebus

        self.stream = framebus.open(spec.name, mode="lossless" if spec.lossless else "latest")
        self.out = np.empty(spec.shape, spec.dtype)
        self._read_new = self.stream.read_new

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        try:
            return self._read_new(timeout=timeout, out=self.out)
        except (TimeoutError, EOFError):  # EOFError: StreamEndedError, the writer closed
            return None

    def close(self) -> None:
        self.stream.close()


class _ViewReader(_CopyReader):
    def __init__(self, spec: Spec) -> None:
        super().__init__(spec)
        self.frame: Any = None
        self._wait_view = self.stream.wait_view

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        try:
            self.frame = self._wait_view(timeout)
        except (TimeoutError, EOFError):  # EOFError: StreamEndedError, the writer closed
            return None
        return self.frame.array

    def done(self) -> None:
        if self.frame is not None:
            self.frame.release()
            self.frame = None


class FramebusCopy(Transport):
    """framebus ``write`` + ``read_new(out=)``: one copy in, one copy out."""

    key = "framebus"
    label = "framebus write + read_new(out=)"
    family = "framebus"
    role = "framebus"

    def create(self) -> None:
        import framebus

        s = self.spec
        self.stream = framebus.create(s.name, shape=s.shape, dtype=s.dtype, slots=s.slots)

    def destroy(self) -> None:
        stream = getattr(self, "stream", None)
        if stream is not None and not stream.closed:
            stream.unlink()

    def writer(self) -> Writer:
        return _Writer(self.spec)

    def reader(self, index: int = 0) -> Reader:
        return _CopyReader(self.spec)


class FramebusCopyOneThread(FramebusCopy):
    """``FramebusCopy`` with every copy on the calling thread (``FRAMEBUS_COPY_THREADS=1`` in
    each process that writes or reads): beside the default row it shows, in the same run, what
    the copy plan's helper threads gain or cost. The plan is decided at a process's first copy,
    so the endpoints must be opened in processes that have not copied a frame yet (the pipeline
    suite spawns fresh ones); anywhere else the row is skipped with the reason."""

    key = "framebus-1t"
    label = "framebus write + read_new(out=), 1 copy thread"

    @staticmethod
    def _one_thread() -> None:
        os.environ["FRAMEBUS_COPY_THREADS"] = "1"
        import framebus.tuning

        if framebus.tuning.copy_plan()["threads"] != 1:
            raise RuntimeError("this process decided its copy plan before the one-thread row could set it")

    def writer(self) -> Writer:
        self._one_thread()
        return super().writer()

    def reader(self, index: int = 0) -> Reader:
        self._one_thread()
        return super().reader(index)


class FramebusView(FramebusCopy):
    """framebus ``write`` + ``wait_view()``: one copy in, zero-copy read."""

    key = "framebus-view"
    label = "framebus write + wait_view()"
    views = True

    @classmethod
    def unavailable(cls) -> Optional[str]:
        return None if has("wait_view") else "this framebus has no Stream.wait_view yet"

    def reader(self, index: int = 0) -> Reader:
        return _ViewReader(self.spec)


class FramebusZeroCopy(FramebusView):
    """framebus ``loan()`` + ``wait_view()``: the writer fills the slot, the reader views it."""

    key = "framebus-zc"
    label = "framebus loan() + wait_view()"
    loans = True

    @classmethod
    def unavailable(cls) -> Optional[str]:
        return None if has("wait_view") and has("loan") else "this framebus has no Stream.loan/wait_view yet"

    def writer(self) -> Writer:
        return _LoanWriter(self.spec)
