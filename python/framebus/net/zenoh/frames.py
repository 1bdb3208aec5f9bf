"""How the Zenoh engine turns frames into Zenoh payloads and back, and how its sessions are
set up for frames of megabytes. Kept apart from the engine's socket classes so that the copy
count of each direction is stated (and tested) in one place.

What zenoh-python 1.10 offers (read in its source): ``ZBytes(obj)`` takes only ``bytes``,
``bytearray`` or ``str`` (or its shared-memory buffers) and copies them into a buffer of its
own, with the GIL held; a memoryview or an ndarray is refused. A ``ZBytes`` has
no buffer protocol, no way to iterate its fragments and no way to read into a caller's buffer:
``to_bytes()`` and ``bytes(payload)`` are the same call, which makes a new ``bytes`` (zeroed
first by PyO3) and reads the fragments straight into it, one copy, with the GIL held.
``Publisher.put`` releases the GIL while Zenoh serializes the payload into its batches. Its
shared-memory buffers (``zenoh.shm``) are writable in place but are files in /dev/shm that a
killed process leaves behind, so the engine keeps Zenoh's shared-memory transport off. So, per
frame that is not compressed:

- publisher: one copy out of the slot into the publisher's ``Staging`` buffer (NumPy, GIL
  released), one by zenoh-python into its own buffer, then Zenoh's transport copies it into
  its batches of at most 64 KiB (a frame of 1080p RGB is about 95 batches, each one TCP
  write: Zenoh's batch size is a 16-bit number);
- subscriber: Zenoh reads each batch into a buffer of its own and keeps a large frame as the
  list of its fragments; ``frame_bytes`` copies them once into one ``bytes`` (on
  zenoh-python's callback thread), and the bridge's thread then copies the frame once into
  its slot (GIL released), overlapping the next frame's read.

Measured on a 2-core VM (benches/w5_bridge.py, 1080p RGB, lossless, loopback TCP, interleaved
with the ZeroMQ bridge): the Zenoh engine delivers about 0.56x the ZeroMQ bridge's frames/s.
Profiles put the difference in Zenoh's transport (its sending thread's ~95 writes per frame,
the receiving threads' reads) and in the two extra copies on each side, not in a setting:
a 16 MiB receive buffer pool (``transport/link/rx/buffer_size``), 4 MiB TCP socket buffers,
two transmission threads, preallocated queues and QoS off each moved the rate by less than
the run-to-run spread. Staging the first copy (instead of ``arr.tobytes()``) and reading
samples on the callback thread each gained a few percent (docs/zenoh.md has the figures).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import zenoh

#: Batches a Zenoh link may queue per priority before a BLOCK put waits (Zenoh's default is 2,
#: its maximum 16). A 1080p RGB frame is about 95 batches: with 2, the putting thread and the
#: link's sending thread take turns every 128 KiB; with 16 they overlap.
TX_QUEUE_BATCHES = 16


def tune(cfg: "zenoh.Config") -> None:
    """Settings of a session opened without a user configuration file: no shared-memory
    transport (its file in /dev/shm outlives a killed process) and a deeper transmission queue
    for the data priority frames go on. Raises zenoh.ZError if Zenoh refuses a value."""
    cfg.insert_json5("transport/shared_memory/enabled", "false")
    cfg.insert_json5("transport/link/tx/queue/size/data", str(TX_QUEUE_BATCHES))


class Staging:
    """A reusable buffer a publisher stages its frames in before zenoh-python copies them.

    ``zenoh.ZBytes`` takes only ``bytes``/``bytearray``/``str`` (it refuses a memoryview or an
    ndarray), so a frame must first be copied out of its slot. Copying into one ``bytearray``
    kept from frame to frame copies the same bytes as ``arr.tobytes()``, but NumPy's copy runs
    with the GIL released (``tobytes()`` holds it) into memory that stays mapped and warm,
    instead of a new ``bytes`` per frame. Not thread-safe: one per publishing thread."""

    __slots__ = ("_buf", "_arr")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._arr = np.frombuffer(self._buf, np.uint8)

    def stage(self, src: Any) -> Optional[bytearray]:
        """``src``'s bytes copied into the staging buffer (grown or shrunk to fit), or None
        when ``src`` is not one C-contiguous buffer (the caller then copies it another way)."""
        try:
            flat = np.frombuffer(src, np.uint8)
        except (TypeError, ValueError, BufferError):
            return None
        if len(self._buf) != flat.nbytes:
            self._buf = bytearray(flat.nbytes)
            self._arr = np.frombuffer(self._buf, np.uint8)
        np.copyto(self._arr, flat)  # GIL released by NumPy
        return self._buf


def frame_payload(arr: Any, staging: Optional[Staging] = None) -> "zenoh.ZBytes":
    """A frame (an array viewing its slot, or any bytes-like object) as a Zenoh payload. Copies
    twice: out of the slot (into ``staging`` when given and the frame is contiguous, else into a
    new ``bytes``), and from there into zenoh-python's own buffer (with the GIL held). The
    result no longer refers to the slot or to ``staging``, so both can be reused at once; it can
    be put to any number of subscribers and kept for a resend without further copies."""
    staged = staging.stage(arr) if staging is not None else None
    if staged is not None:
        return zenoh.ZBytes(staged)
    return zenoh.ZBytes(arr.tobytes() if hasattr(arr, "tobytes") else bytes(arr))


def frame_bytes(payload: "zenoh.ZBytes") -> bytes:
    """A received payload as one ``bytes``: one copy whether or not Zenoh delivered it in
    fragments (``bytes(payload)`` is ``payload.to_bytes()``, which reads the fragments straight
    into the new ``bytes``). Holds the GIL while it copies."""
    return bytes(payload)


__all__ = ["TX_QUEUE_BATCHES", "Staging", "frame_bytes", "frame_payload", "tune"]
