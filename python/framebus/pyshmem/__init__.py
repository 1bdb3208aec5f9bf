"""pyshmem 1.4's public API on framebus streams: ``import framebus.pyshmem as pyshmem``.

Every public name of pyshmem 1.4 is here with pyshmem's defaults, return types, exception
types and messages; the streams are ordinary framebus streams (``framebus ls`` shows them and
native ``framebus.open`` readers can read them). GPU streams (``gpu_device=``, ``cpu_mirror=``)
are framebus device streams; their frames come back as CUDA torch tensors where torch is
installed, as framebus device arrays otherwise. The differences that remain, and why, are in
docs/pyshmem.md.
"""

from __future__ import annotations

from typing import Any

from .api import create, gpu_available, list_streams, open, purge, stat, stream, unlink, unlink_quiet
from .errors import InconsistentStreamError, StaleStreamError
from .handle import SharedMemory
from .locking import locked_many
from .publication import Publication

#: The pyshmem release whose API this module reproduces.
__version__ = "1.4.0"


def __getattr__(name: str) -> Any:
    # pyshmem computes this on first access too (it depends on the GPU runtime).
    if name == "GPU_SUPPORTED_DTYPES":
        from .api import gpu_supported_dtypes

        return gpu_supported_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GPU_SUPPORTED_DTYPES",
    "InconsistentStreamError",
    "Publication",
    "StaleStreamError",
    "SharedMemory",
    "create",
    "gpu_available",
    "list_streams",
    "locked_many",
    "open",
    "purge",
    "stat",
    "stream",
    "unlink",
    "unlink_quiet",
    "__version__",
]
