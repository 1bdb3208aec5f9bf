"""How the Zenoh engine turns frames into Zenoh payloads and back, and how its sessions are
set up for frames of megabytes. Kept apart from the engine's socket classes so that the copy
count of each direction is stated (and tested) in one place.

zenoh-python 1.x builds a ``ZBytes`` only from ``bytes``, ``bytearray`` or ``str`` and copies
them, and has no buffer protocol on a received ``ZBytes``; its shared-memory buffers
(``zenoh.shm``) are writable in place but are files in /dev/shm that a killed process leaves
behind, and a peer without Zenoh's shared-memory transport gets them copied once more. So, per
frame that is not compressed:

- publisher: one copy out of the slot into ``bytes``, one by zenoh-python into its own
  buffer (then Zenoh's transport copies it into its 64 KiB batches);
- subscriber: Zenoh reassembles a large frame from its batches as a list of fragments;
  ``bytes(payload)`` reads them straight into one ``bytes`` (one copy), where ``to_bytes()``
  would first join them into one buffer and then copy that (two); the subscriber then copies
  the frame once into its slot.
"""

from __future__ import annotations

from typing import Any

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


def frame_payload(arr: Any) -> "zenoh.ZBytes":
    """A frame (an array viewing its slot, or any bytes-like object) as a Zenoh payload. Copies
    twice: out of the slot into ``bytes``, and from there into zenoh-python's own buffer. The
    result no longer refers to the slot, so the slot can be released at once; it can be put to
    any number of subscribers and kept for a resend without further copies."""
    return zenoh.ZBytes(arr.tobytes() if hasattr(arr, "tobytes") else bytes(arr))


def frame_bytes(payload: "zenoh.ZBytes") -> bytes:
    """A received payload as one ``bytes``, in one copy whether or not Zenoh delivered it in
    fragments (``ZBytes.to_bytes()`` joins fragments first: two copies)."""
    return bytes(payload)


__all__ = ["TX_QUEUE_BATCHES", "frame_bytes", "frame_payload", "tune"]
