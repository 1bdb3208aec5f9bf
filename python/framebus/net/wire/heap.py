"""Keeps ZeroMQ's receive buffers for large frames in glibc's heap instead of fresh mappings.

libzmq allocates every large incoming message with ``malloc``. glibc's dynamic thresholds
follow the largest block freed so far: after the first frame the mmap threshold is about one
frame and the trim threshold twice that. With several frames in flight the heap grows past
the trim threshold, so freeing the buffers gives their pages back to the kernel, and the next
frames fault them in again: a page fault (and the kernel zeroing a page) for each 4 KiB of many
received frames. The pyzmq receiver in benches/w5_bridge.py takes about 460 faults per 1080p
frame (of 1519 pages), which costs about 40 % of the receiving side's CPU on the test VM
(docs/bridges.md).

``reserve(nbytes, count)`` raises glibc's mmap threshold just above ``nbytes``, and its trim
threshold above ``count`` such buffers. A freed receive buffer then goes back to the heap,
and the next frame reuses its pages. The setting is process-wide and only ever raised, never
lowered; it is left alone when the user tuned malloc through the environment. It is a no-op
on other C libraries and for frames too large for the heap (above 32 MiB on 64-bit).
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from typing import Any, Optional, Tuple

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: glibc refuses mmap thresholds above HEAP_MAX_SIZE / 2 (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD_MAX = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)
#: Room above the payload for libzmq's message header and malloc's chunk overhead.
SLACK = 64 * 1024
#: Environment variables through which a user tunes glibc's malloc; any of them wins over us.
USER_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_lock = threading.Lock()
_applied: Tuple[int, int] = (0, 0)  # (mmap threshold, trim threshold) this module has set
_mallopt: Any = None


def _find_mallopt() -> Optional[Any]:
    global _mallopt
    if _mallopt is None:
        fn: Any = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            fn = getattr(ctypes.CDLL(None), "mallopt", False)
            if fn:
                fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        _mallopt = fn
    return _mallopt or None


def reserve(nbytes: int, count: int) -> bool:
    """Lets up to ``count`` received messages of ``nbytes`` bytes each be reused from the
    heap. Returns whether glibc's settings now cover them (False where this cannot apply)."""
    global _applied
    if nbytes <= 0 or count <= 0 or any(k in os.environ for k in USER_SETTINGS):
        return False
    mmap_threshold = nbytes + SLACK
    if mmap_threshold > MMAP_THRESHOLD_MAX:
        return False
    trim_threshold = min(mmap_threshold * (count + 1), 2**31 - 1)
    mallopt = _find_mallopt()
    if mallopt is None:
        return False
    with _lock:
        want_mmap, want_trim = max(_applied[0], mmap_threshold), max(_applied[1], trim_threshold)
        if (want_mmap, want_trim) == _applied:
            return True
        # Trim first: raising the mmap threshold alone would let freed buffers be trimmed.
        if not mallopt(M_TRIM_THRESHOLD, want_trim) or not mallopt(M_MMAP_THRESHOLD, want_mmap):
            return False
        _applied = (want_mmap, want_trim)
    return True


def applied() -> Tuple[int, int]:
    """The (mmap threshold, trim threshold) this process's bridges have set; (0, 0) if none."""
    return _applied
