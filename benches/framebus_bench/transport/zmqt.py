"""pyzmq over ``ipc://`` with zero-copy sends (``copy=False``): one PUSH/PULL pair per reader
(so fan-out is lossless when the high-water mark blocks). In latest mode the writer never
blocks (a frame a reader's queue has no room for is dropped for that reader) and the reader
drains its queue to the newest frame (``ZMQ_CONFLATE`` would do this, but we saw it leave a
frame undelivered in same-process use, so it is not used). The writer cycles through a few send buffers and waits on ZeroMQ's tracker before it
reuses one, so a frame is never changed while ZeroMQ still sends it."""

from __future__ import annotations

import os
from typing import Any, List, Optional

import numpy as np

from ..harness import HEADER_WORDS
from . import Reader, Spec, Transport, Writer, as_frame, byte_view

#: Messages ZeroMQ may queue per socket (both ends); small so lossless really waits.
HWM = 2
#: Send buffers the writer cycles through.
POOL = 4


def endpoint(spec: Spec, index: int) -> str:
    """The ipc:// address of reader ``index`` of ``spec``."""
    return f"ipc:///tmp/{spec.name}-{index}.ipc"


class _ZmqWriter(Writer):
    def __init__(self, spec: Spec) -> None:
        import zmq

        self.spec = spec
        self.ctx = zmq.Context()
        self.socks: List[Any] = []
        for i in range(spec.readers):
            s = self.ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.SNDHWM, HWM)
            s.setsockopt(zmq.SNDTIMEO, 10_000)
            s.bind(endpoint(spec, i))
            self.socks.append(s)
        self.noblock, self.again = zmq.NOBLOCK, zmq.Again
        self.dropped = 0
        self.pool: List[Optional[np.ndarray]] = [None] * POOL
        self.trackers: List[Any] = [None] * POOL
        self.n = 0

    def send(self, src: np.ndarray) -> None:
        k = self.n % POOL
        self.n += 1
        buf = self.pool[k]
        if buf is None:
            buf = self.pool[k] = src.copy()
        else:
            for t in self.trackers[k] or ():
                t.wait(10)
            # Same content as src; only the header (counter, timestamps) changes per frame.
            byte_view(buf)[: HEADER_WORDS * 8] = byte_view(src)[: HEADER_WORDS * 8]
        if self.spec.lossless:
            self.trackers[k] = [s.send(buf, copy=False, track=True) for s in self.socks]
            return
        trackers = []
        for s in self.socks:
            try:
                trackers.append(s.send(buf, copy=False, track=True, flags=self.noblock))
            except self.again:
                self.dropped += 1
        self.trackers[k] = trackers

    def close(self) -> None:
        # Let queued frames reach their readers (a closing writer must not drop the last ones),
        # but never wait more than a few seconds for a reader that has gone.
        for s in self.socks:
            s.close(linger=5000)
        self.ctx.term()


class _ZmqReader(Reader):
    def __init__(self, spec: Spec, index: int) -> None:
        import zmq

        self.spec = spec
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.RCVHWM, HWM)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint(spec, index))
        self.msg: Any = None

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        if not self.sock.poll(int(timeout * 1000)):
            return None
        self.msg = self.sock.recv(copy=False)
        if not self.spec.lossless:  # latest: skip to the newest queued frame
            while self.sock.poll(0):
                self.msg = self.sock.recv(copy=False)
        return as_frame(self.msg.buffer, self.spec)

    def done(self) -> None:
        self.msg = None

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


class Zmq(Transport):
    """pyzmq PUSH/PULL over ipc:// with copy=False."""

    key = "pyzmq"
    label = "pyzmq ipc:// copy=False"
    family = "pyzmq"

    @classmethod
    def unavailable(cls) -> Optional[str]:
        try:
            import zmq  # noqa: F401
        except ImportError:
            return "pyzmq is not installed (pip install './benches[peers]')"
        return None

    def destroy(self) -> None:
        for i in range(self.spec.readers):
            try:
                os.unlink(endpoint(self.spec, i)[len("ipc://") :])
            except FileNotFoundError:
                pass

    def writer(self) -> Writer:
        return _ZmqWriter(self.spec)

    def reader(self, index: int = 0) -> Reader:
        return _ZmqReader(self.spec, index)
