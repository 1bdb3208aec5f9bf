"""Device arguments: ``device=`` as users spell it, and what this process can reach of GPUs.

A device stream keeps its frames in the memory of one CUDA device. Every CUDA call goes through
the core's one door: the CUDA driver, loaded at run time (the package needs no CUDA toolkit to
build or import), or, with ``FRAMEBUS_CUDA=fake``, a strict fake that keeps "device" memory in
host shared memory, so GPU streams are tested on machines without a GPU.
"""

from __future__ import annotations

import operator
from typing import Any, Dict, Optional

from . import _native
from .errors import InvalidArgumentError


def parse_device(device: Any) -> Optional[int]:
    """The CUDA ordinal of ``device``: ``"cuda"`` (0), ``"cuda:N"``, ``N``, a ``torch.device`` or
    anything whose ``str()`` is one of those; None for None and ``"cpu"`` (a host stream).
    Raises InvalidArgumentError (ValueError) for anything else, TypeError for a bool."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise TypeError("device must be 'cuda:N', an int ordinal, 'cpu' or None, got bool")
    if isinstance(device, int) or hasattr(device, "__index__") and not isinstance(device, str):
        ordinal = operator.index(device)
    else:
        text = str(device).strip().lower()
        if text == "cpu":
            return None
        kind, sep, index = text.partition(":")
        if kind != "cuda" or (sep and not index.isdigit()):
            raise InvalidArgumentError(
                f"device must be 'cuda', 'cuda:N', an int ordinal, 'cpu' or None, got {device!r}; "
                "framebus streams live in host memory or in a CUDA device's memory"
            )
        ordinal = int(index) if sep else 0
    if ordinal < 0:
        raise InvalidArgumentError(f"device ordinal must be >= 0, got {ordinal}")
    return ordinal


def gpu_info() -> Dict[str, Any]:
    """What this process can reach of GPUs, never raising: ``door`` ("cuda", "fake" or None),
    ``built`` (the doors this build has: "cuda", "fake"), ``driver_version`` (for example
    13000), ``devices`` (ordinal, name, uuid, total_memory, compute_capability), and why there is
    no door: ``error`` (the message) with ``error_code`` (the driver's ``CUresult``, or one of
    ``_native.DOOR_CODES``), ``error_name`` and ``error_call``; all four None when there is one.
    Decide from ``error_code``, not from the message."""
    return dict(_native.gpu_info())


def gpu_available() -> bool:
    """Whether device streams can be created here: a CUDA driver (or the fake door) with at
    least one device."""
    info = gpu_info()
    return info["door"] is not None and bool(info["devices"])
