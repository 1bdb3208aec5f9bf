"""pyshmem's values in framebus's terms: its uint64 frame-id tokens, its timeouts, its pids and a
stream's generation (which segment a name holds now)."""

from __future__ import annotations

import hashlib
import os
from typing import Optional

from .. import _native

_U64 = 1 << 64
#: The largest uint64 (pyshmem's tokens and sequence numbers are uint64).
U64_MAX = _U64 - 1
_I64_MAX = (1 << 63) - 1


def frame_id_out(value: Optional[int]) -> Optional[int]:
    """pyshmem's uint64 token as the native signed 64-bit frame id (same bits). Like pyshmem,
    any int is taken modulo 2**64 (-1 is 2**64 - 1, 2**64 is 0); what ``int()`` refuses
    raises its ValueError/TypeError before anything is written."""
    if value is None:
        return None
    value = int(value) & U64_MAX
    return value - _U64 if value > _I64_MAX else value

def frame_id_in(value: int) -> int:
    return value + _U64 if value < 0 else value

def at_least_zero(timeout: Optional[float]) -> Optional[float]:
    """pyshmem's deadline for the lock and ``read_new``: a negative timeout is one try (0),
    not an error. NaN is a ValueError (pyshmem would wait forever)."""
    if timeout is None:
        return None
    if timeout != timeout:
        raise ValueError("timeout must be a number of seconds or None, not NaN")
    return 0.0 if timeout < 0 else timeout

def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

def generation(name: str) -> tuple:
    """(creator pid, instance id) of the stream now under ``name``. The instance id is derived
    from the segment file's identity, which a new stream under the same name never shares."""
    info = _native.stream_info(name)
    st = os.stat(info["path"])
    digest = hashlib.blake2b(f"{st.st_dev}:{st.st_ino}:{info['creator_pid']}".encode(), digest_size=16)
    return int(info["creator_pid"]), digest.hexdigest()
