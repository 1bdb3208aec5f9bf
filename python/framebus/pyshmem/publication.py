"""pyshmem's ``Publication``: a frame and the metadata published with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Publication"]


@dataclass(frozen=True)
class Publication:
    """A payload and its ``count``, ``frame_id`` and ``write_time``, read as one snapshot.

    ``payload`` is an independent copy from the safe reads (a read-only zero-copy view from
    ``safe=False``). ``missed_publications`` is the writes this handle skipped since its
    previous read, as ``SharedMemory.missed_writes``."""

    payload: Any
    count: int
    frame_id: int
    write_time: float
    missed_publications: int
