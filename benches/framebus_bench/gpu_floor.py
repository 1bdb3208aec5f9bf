"""W10's floor: the barest cross-process GPU hand-off Python can do, to measure framebus's hop
against. Both sides use torch and share three things only:

- one CUDA tensor of the frame's shape, made by the writer and sent once to the reader through
  torch's CUDA IPC (``torch.multiprocessing``'s pickling: a CUDA IPC memory handle);
- one inter-process CUDA event (``torch.cuda.Event(interprocess=True)``), sent the same way;
- a ``multiprocessing`` pipe between the two processes.

Per frame the writer renders into the tensor (the same GPU work as W10's other rows), records
the event on its CUDA stream and sends the 8-byte sequence number; the reader makes its CUDA
stream wait for the event, checks the frame (W10's GPU reduction, four numbers back to the host)
and answers one byte, after which the writer may render the next frame. One buffer, no ring, no
pins, no metadata, no owner checks: a ping-pong, so its frames/s is that of a serialized hop and
its latency (the writer's stamp to the reader's check done) is the floor of a hop.

The pipe is one end of ``multiprocessing.Pipe()`` per worker, given to both at start. ``ops`` is
W10's TorchOps (the frame's GPU work, the CUDA stream); ``ipc`` makes the event (TorchIpc; the
tests give a stand-in that needs no GPU).
"""

from __future__ import annotations

import struct
import time
from typing import Any, Dict, List, Tuple

_SEQ = struct.Struct("<q")
#: The writer's last message: no more frames.
_STOP = 0
#: How long one side waits for the other at the start and the end of a measurement.
_HANDSHAKE_S = 60.0


class TorchIpc:
    """Inter-process CUDA events with torch. Importing ``torch.multiprocessing`` registers
    torch's pickling of CUDA tensors and events (CUDA IPC handles) with multiprocessing's
    pickler, which ``Connection.send`` uses."""

    def __init__(self) -> None:
        import torch  # type: ignore[import-not-found]
        import torch.multiprocessing  # type: ignore[import-not-found]  # noqa: F401  (the import registers the picklers)

        self.torch = torch

    def event(self) -> Any:
        return self.torch.cuda.Event(interprocess=True)

    def collect(self) -> None:
        """Frees the memory this process shared once the other process let go of it."""
        self.torch.cuda.ipc_collect()


def _expect(conn: Any, what: str) -> bytes:
    if not conn.poll(_HANDSHAKE_S):
        raise TimeoutError(f"the other process did not {what} within {_HANDSHAKE_S:.0f} s")
    return conn.recv_bytes()


def writer(ops: Any, conn: Any, shape: Tuple[int, ...], seconds: float, ipc: Any = None) -> Dict[str, Any]:
    """The writer's side for ``seconds``: frames rendered, sent and answered back to back."""
    ipc = TorchIpc() if ipc is None else ipc
    buf = ops.empty(shape)
    ready = ipc.event()
    conn.send((buf, ready))
    _expect(conn, "open the shared tensor and event")
    pack, send, recv = _SEQ.pack, conn.send_bytes, conn.recv_bytes
    stream = ops.cuda_stream
    clock = time.perf_counter_ns
    n = 0
    t0 = clock()
    t_end = t0 + int(seconds * 1e9)
    while clock() < t_end:
        n += 1
        ops.stamp(buf, n, clock())
        ready.record(stream)
        send(pack(n))
        recv()  # the reader has checked the frame: its GPU work on the buffer is done
    secs = (clock() - t0) / 1e9
    send(pack(_STOP))
    _expect(conn, "let go of the shared tensor")
    del buf, ready
    ipc.collect()
    return {"sent": n, "seconds": secs}


def reader(ops: Any, conn: Any, ipc: Any = None) -> Dict[str, Any]:
    """The reader's side: every frame the writer sends is waited for (on the GPU), checked and
    answered, until the writer says stop."""
    if ipc is None:
        TorchIpc()  # torch's picklers, before the tensor and the event arrive
    if not conn.poll(_HANDSHAKE_S):
        raise TimeoutError(f"the writer did not share its tensor within {_HANDSHAKE_S:.0f} s")
    buf, ready = conn.recv()
    conn.send_bytes(b"o")
    unpack, send, recv = _SEQ.unpack, conn.send_bytes, conn.recv_bytes
    stream = ops.cuda_stream
    clock = time.perf_counter_ns
    got = torn = disorder = 0
    last = 0
    lat: List[float] = []
    while True:
        (n,) = unpack(recv())
        if n == _STOP:
            break
        stream.wait_event(ready)
        seq, ts, ok = ops.check(buf)
        t_done = clock()
        send(b"k")
        got += 1
        torn += not ok
        disorder += seq <= last or seq != n
        last = seq
        lat.append((t_done - ts) / 1e3)
    del buf, ready
    conn.send_bytes(b"c")
    return {"got": got, "starved": 0, "torn": torn, "gaps": 0, "disorder": disorder, "lat_us": lat}


__all__ = ["TorchIpc", "writer", "reader"]
