"""The GPU half of ``framebus.pyshmem``: pyshmem 1.4's GPU streams (``gpu_device=``,
``cpu_mirror=``) on framebus device streams.

pyshmem hands out torch tensors for GPU streams; framebus hands out ``framebus.DeviceArray`` /
``framebus.DeviceFrame`` objects, which speak DLPack and ``__cuda_array_interface__``. This
module only translates: a frame framebus returns becomes ``torch.from_dlpack(frame)`` when
torch with CUDA is importable (zero-copy: the tensor shares the frame's device memory), and
every copy is queued on torch's current CUDA stream, as pyshmem's ``copy_``/``clone`` are.
Without torch (or behind the fake CUDA door used by the tests) the framebus objects are
returned as they are. Importing this module does not import torch.
"""

from __future__ import annotations

import threading
from typing import Any, FrozenSet, Optional

import numpy as np

__all__ = ["torch_module", "returns_torch", "user_array", "current_stream", "torch_dtype", "supported_dtypes", "door"]

_UNSET = object()
_torch: Any = _UNSET
_lock = threading.Lock()


def torch_module() -> Any:
    """torch, imported on first use, or None when it is not installed (or fails to import)."""
    global _torch
    if _torch is _UNSET:
        with _lock:
            if _torch is _UNSET:
                try:
                    import torch as module  # type: ignore[import-not-found]
                except Exception:  # noqa: BLE001 - a broken torch counts as no torch
                    module = None
                _torch = module
    return _torch


def door() -> Optional[str]:
    """Which CUDA door framebus uses here: "cuda", "fake" or None (framebus.gpu_info())."""
    import framebus

    info = framebus.gpu_info() if hasattr(framebus, "gpu_info") else {}
    return info.get("door") if info.get("devices") else None


_returns_torch: Optional[bool] = None


def returns_torch() -> bool:
    """Whether GPU frames are handed out as torch tensors: torch with CUDA is importable and
    framebus uses the real CUDA driver (the fake door's "device" memory is host memory that
    torch must not be told is on a GPU). Decided once per process."""
    global _returns_torch
    if _returns_torch is None:
        torch = torch_module()
        ok = False
        if torch is not None and door() == "cuda":
            try:
                ok = bool(torch.cuda.is_available())
            except Exception:  # noqa: BLE001 - a torch without a usable CUDA runtime
                ok = False
        _returns_torch = ok
    return _returns_torch


def user_array(frame: Any) -> Any:
    """What pyshmem returns for a GPU frame: a torch tensor sharing ``frame``'s memory
    (``torch.from_dlpack``, no copy), or ``frame`` itself without torch."""
    if returns_torch():
        return torch_module().from_dlpack(frame)
    return frame


def device_index(device: str) -> int:
    """The ordinal of ``"cuda:N"``."""
    return int(device.partition(":")[2] or 0)


def current_stream(device: str) -> Optional[int]:
    """The handle of torch's current CUDA stream on ``device`` (the stream pyshmem's copies run
    on), or None (framebus: the legacy default stream) without torch."""
    if not returns_torch():
        return None
    return int(torch_module().cuda.current_stream(device_index(device)).cuda_stream)


def torch_dtype(dtype: np.dtype) -> Any:
    """torch's dtype of the NumPy ``dtype`` (as pyshmem maps them: by name), or None."""
    torch = torch_module()
    return None if torch is None else getattr(torch, np.dtype(dtype).name, None)


def supported_dtypes(candidates: FrozenSet[np.dtype]) -> FrozenSet[np.dtype]:
    """The dtypes of ``candidates`` a GPU stream may hold here: those framebus device streams
    hold and, when frames are handed out as torch tensors, those torch has (pyshmem's rule)."""
    import framebus

    native = getattr(framebus, "DEVICE_DTYPES", None)
    out = {np.dtype(d) for d in candidates}
    if native is not None:
        out &= {np.dtype(d) for d in native}
    if returns_torch():
        out = {d for d in out if torch_dtype(d) is not None}
    return frozenset(out)


def is_torch_tensor(value: Any) -> bool:
    torch = _torch if _torch is not _UNSET else None
    return torch is not None and isinstance(value, torch.Tensor)


def is_device_object(value: Any) -> bool:
    """Whether ``value`` claims to live in CUDA device memory (``__cuda_array_interface__``,
    or a DLPack device of type 2, kDLCUDA)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    probe = getattr(value, "__dlpack_device__", None)
    if probe is None:
        return False
    try:
        kind, _ = probe()
    except Exception:  # noqa: BLE001 - not a usable DLPack exporter
        return False
    return int(kind) in (2, 13)  # kDLCUDA, kDLCUDAManaged
