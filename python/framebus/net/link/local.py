"""The one rule for a bridge's local stream: create it, or open the one there is, and say
whether this bridge owns it. Used by every end that writes frames it received into a local
stream (the bridge's subscriber, its video decoder, the ROS 2 image subscriber)."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from ... import _stream
from ...errors import StreamExistsError
from ...info import stat as _stat
from ..wire import BridgeError, SpecMismatchError


def local_stream(name: str, shape: Tuple[int, ...], dt: np.dtype, slots: int, meta_capacity: int = 256, variable: bool = False) -> Tuple[Any, bool]:
    """Creates a bridge's local stream ``name`` or opens the one there is, and whether this
    bridge owns it (writes into it as its creator would, and removes it on stop). For a
    ``variable`` stream ``shape`` is ``(capacity,)`` and ``dt`` is ignored; ``meta_capacity``
    defaults to the streams' own default. A stream of the
    same spec whose creator is alive is written into (not owned); one left by an end that
    died (creator dead, not stale: readers still attached) is taken over as it is (the same
    segment, so its readers and recordings go on); a stale one, or a dead creator's stream of
    another spec, is replaced. Raises SpecMismatchError (ValueError) for a live process's
    stream of another spec, BridgeError when another process keeps re-creating it."""
    for _ in range(3):
        try:
            if variable:
                return _stream.create(name, capacity=shape[0], slots=slots, meta_capacity=meta_capacity), True
            return _stream.create(name, shape=shape, dtype=dt, slots=slots, meta_capacity=meta_capacity), True
        except StreamExistsError:
            pass
        try:
            info = _stat(name)
        except FileNotFoundError:
            continue
        same = (
            (info.capacity == shape[0] if variable else info.dtype == dt.str and tuple(info.shape or ()) == tuple(shape))
            and (getattr(info, "meta_capacity", 0) or 0) >= meta_capacity
        )
        if info.creator_alive and not info.stale:
            if not same:
                have = f"capacity {info.capacity} bytes per frame (variable shape)" if info.variable else f"shape {info.shape} and dtype {np.dtype(info.dtype) if info.dtype else None}"
                sends = f"variable-shape frames of capacity {shape[0]}" if variable else f"shape {tuple(shape)} dtype {dt}"
                raise SpecMismatchError(
                    f"local stream {name!r} exists with {have}, and another process owns it; "
                    f"the publisher sends {sends}: remove it or subscribe into another name"
                )
            return _stream.open(name), False
        if same and not info.stale:
            # Left by an end that died, readers still attached: carry on in it.
            return _stream.open(name), True
        try:
            _stream.unlink(name)  # stale, or of another spec and nobody's: replace it
        except FileNotFoundError:
            pass
    raise BridgeError(f"cannot create local stream {name!r}: it keeps being re-created by another process")
