"""How framebus copies frames on this machine, and how to change it.

The native core decides once per process, from the CPU (architecture, features detected at run
time, cores) and the kernel (transparent huge pages for shared memory), how ``write()`` and the
copying reads (``read``, ``read_new(out=)``, ``read_into``) move bytes: cached stores (memcpy)
or non-temporal streaming stores, how many threads share a copy of many megabytes, and whether
the pages of a large ring are prefaulted and huge. Environment variables, read once at the first
copy, override it:

- ``FRAMEBUS_COPY=auto|cached|stream``
- ``FRAMEBUS_COPY_THREADS=auto|N``
- ``FRAMEBUS_HUGEPAGES=auto|off``
- ``FRAMEBUS_PREFAULT=auto|off``

A value that is not understood is ignored and listed in the plan's ``notes``.

>>> import framebus.tuning
>>> framebus.tuning.copy_plan()["read"] in ("cached", "stream")
True
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _native

#: The environment variables the plan reads (once per process).
ENVIRONMENT = ("FRAMEBUS_COPY", "FRAMEBUS_COPY_THREADS", "FRAMEBUS_HUGEPAGES", "FRAMEBUS_PREFAULT")


def copy_plan(nbytes: Optional[int] = None) -> Dict[str, Any]:
    """This process's copy decisions as a dict (see :func:`framebus._native.copy_plan`); with
    ``nbytes``, ``plan["frame"]`` says what a frame of that many bytes gets right now. Copies
    nothing. ValueError for a negative size, TypeError for a size that is not an int."""
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int)):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    return _native.copy_plan(nbytes)


def explain(nbytes: Optional[int] = None) -> str:
    """The plan in words, one decision a line (what ``framebus bench --explain`` prints); with
    ``nbytes``, a last line for a frame of that size."""
    plan = copy_plan(nbytes)
    text: str = plan["explain"]
    if plan["threads"] == "auto":
        text += "\nhelper threads, measured by this process so far:\n" + plan["helpers_learned"]
    frame = plan.get("frame")
    if frame:
        text += (
            f"\nframe of {frame['nbytes']:,} bytes now: write {frame['write']} "
            f"({frame['write_reader_waiting']} when a reader is waiting for it), read {frame['read']}, {frame['threads']} thread(s)"
        )
    return text


__all__ = ["ENVIRONMENT", "copy_plan", "explain"]
