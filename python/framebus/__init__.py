"""framebus: move frames between processes, into encoders and across machines at memory speed.

>>> import numpy as np, framebus
>>> with framebus.create("doc-demo", shape=(4, 4), dtype=np.float32) as w:
...     r = framebus.open("doc-demo")
...     w.write(np.ones((4, 4), np.float32))
...     float(r.read_new(timeout=1).sum())
...     r.close(); w.unlink()
16.0
"""

import os as _os
from typing import List

from . import errors
from ._native import LAYOUT_VERSION, Frame, Loan, __version__
from .errors import (
    CorruptStreamError,
    FramebusError,
    IncompatibleStreamError,
    InsufficientSpaceError,
    InvalidArgumentError,
    InvalidFrameError,
    LoanOpenError,
    LockNotHeldError,
    LockRecoveredWarning,
    SequenceExhaustedError,
    StreamClosedError,
    StreamEndedError,
    StreamEmptyError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotReadyError,
    StreamPermissionError,
    StreamReplacedError,
    StreamTimeoutError,
    TooManyReadersError,
)
from .info import StreamInfo, gc, list_streams, stat
from .pipes import configure, pipe, pipe_stats, sync
from ._stream import Publication, Stream, create, open, stream, unlink


from ._device import gpu_available, gpu_info
from ._device_stream import DeviceStream
from ._native import DeviceArray, DeviceFrame, DeviceLoan
from . import _native

# A forked child's copy of a lossless handle gets a reader entry reserved before fork(), so the
# writer keeps every later frame for it (for FRAMEBUS_FORK_GRACE seconds, default 5, if the child
# does not use the handle): docs/design.md, "Handles across fork, spawn and pickling".
_os.register_at_fork(before=_native.fork_prepare, after_in_parent=_native.fork_parent, after_in_child=_native.fork_child)


__all__ = [
    "LAYOUT_VERSION",
    "CorruptStreamError",
    "Frame",
    "FramebusError",
    "IncompatibleStreamError",
    "InsufficientSpaceError",
    "InvalidArgumentError",
    "InvalidFrameError",
    "Loan",
    "LoanOpenError",
    "LockNotHeldError",
    "LockRecoveredWarning",
    "Publication",
    "SequenceExhaustedError",
    "Stream",
    "StreamClosedError",
    "StreamEndedError",
    "StreamEmptyError",
    "StreamExistsError",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamNotReadyError",
    "StreamPermissionError",
    "StreamReplacedError",
    "StreamTimeoutError",
    "TooManyReadersError",
    "__version__",
    "configure",
    "create",
    "errors",
    "gc",
    "gpu_available",
    "gpu_info",
    "DeviceArray",
    "DeviceFrame",
    "DeviceLoan",
    "DeviceStream",
    "list_streams",
    "open",
    "pipe",
    "pipe_stats",
    "stat",
    "stream",
    "sync",
    "unlink",
]


def __dir__() -> List[str]:
    """``dir(framebus)``: the public API (``__all__``), not the helper modules and names the
    package imports for itself."""
    return sorted(__all__)
