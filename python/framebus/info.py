"""Listing streams and removing stale ones."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import _native

__all__ = ["StreamInfo", "list_streams", "stat", "gc"]


class StreamInfo(str):
    """A stream's name (it *is* the name, so code written for pyshmem's ``list_streams()``
    returning strings keeps working) with what ``framebus ls`` shows as attributes."""

    path: str
    dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    #: A variable-shape stream (then dtype and shape are None and capacity is set).
    variable: bool
    #: Bytes of arrays a frame of a variable-shape stream may hold; None for a fixed shape.
    capacity: Optional[int]
    slots: Optional[int]
    frame_bytes: Optional[int]
    total_bytes: int
    creator_pid: int
    creator_alive: bool
    attached: int
    lossless: int
    sequence: int
    frames_written: int
    bytes_written: int
    lock_holder: Optional[int]
    problem: Optional[str]
    stale: bool
    #: Only from :func:`stat`: the writer's counters (``pid``, ``alive``, ``frames_written``,
    #: ``bytes_written``, ``write_waits``, ``write_wait_ns``, ``latest_seq``, ``latest_ns``,
    #: ``ended``, ``lock_holder``) and one dict per attached handle (``pid``, ``alive``,
    #: ``mode`` latest/lossless/closed, ``role``, ``label``, ``reads``, ``missed``,
    #: ``consumed``, ``pinned_slots``, ``pinned_since_ns``, ``writer_waits``).
    writer: Optional[Dict[str, Any]] = None
    readers: List[Dict[str, Any]] = []

    def __new__(cls, info: Dict[str, Any]) -> "StreamInfo":
        self = super().__new__(cls, info["name"])
        for key, value in info.items():
            if key == "name":
                continue
            if key == "shape" and value is not None:
                value = tuple(value)
            object.__setattr__(self, key, value)
        return self

    @property
    def name(self) -> str:
        return str(self)

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a plain dict (for JSON)."""
        return {k: v for k, v in vars(self).items()}


def list_streams() -> List[StreamInfo]:
    """Every framebus stream in /dev/shm that this user can read, sorted by name."""
    return [StreamInfo(d) for d in _native.list_info()]


def stat(name: str) -> StreamInfo:
    """What ``framebus ls`` knows about one stream, plus its writer's and every attached
    handle's counters (``writer``, ``readers``; see :class:`StreamInfo`), read without
    attaching to it. Rates need two looks: see ``framebus.monitor``. Raises
    StreamNotFoundError (FileNotFoundError) if it does not exist."""
    info = StreamInfo(_native.stream_info(name))
    if not info.problem:
        try:
            stats = _native.stream_stats(name)
        except (OSError, ValueError):
            return info
        object.__setattr__(info, "writer", stats["writer"])
        object.__setattr__(info, "readers", list(stats["readers"]))
    return info


def gc(*, dry_run: bool = False) -> List[str]:
    """Removes stale streams (creator dead and no live process attached, or never initialised
    by a creator that died) and returns their names. Live streams are never removed."""
    return list(_native.gc(dry_run=dry_run))
