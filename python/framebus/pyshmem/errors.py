"""pyshmem's exception types and the messages its callers match on.

Every class also subclasses the framebus exception a native caller would catch, so one
``except`` clause works for both APIs: a closed handle raises ``StreamClosedError`` (a
``RuntimeError``, as pyshmem raises), a missing stream ``StreamNotFoundError`` (a
``FileNotFoundError``), and so on. Only the messages are pyshmem's.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    FramebusError,
    StreamClosedError,
    StreamEmptyError,
    StreamExistsError,
    StreamNotFoundError,
    StreamPermissionError,
    StreamTimeoutError,
)

__all__ = ["InconsistentStreamError", "StaleStreamError"]


class InconsistentStreamError(FramebusError, RuntimeError):
    """A writer failed before publishing a complete payload (pyshmem's type).

    framebus never publishes a partial frame: an aborted or crashed write is discarded. Readers
    keep the last complete frame, except when that write was rewriting the newest frame's slot
    (every reader had taken that frame): then, as under pyshmem, reads raise this until the
    next write (see docs/pyshmem.md)."""


def as_pyshmem_read(read: Any, name: str, empty: Any) -> Any:
    """``read`` (a native read call) as pyshmem reads where framebus raises StreamEmptyError:
    before the first write it returns ``empty(**kwargs)`` (zeros, as pyshmem's untouched
    buffer); where the newest frame went with a write its writer gave up, it raises
    InconsistentStreamError, as pyshmem does when its writer dies mid-write."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return read(*args, **kwargs)
        except StreamEmptyError as e:
            if getattr(e, "reason", None) == "empty":
                return empty(**kwargs)
            raise InconsistentStreamError(f"writer process for stream {name!r} exited during a write; a successful write is required before it can be read ({e})") from None

    return call


class StaleStreamError(FramebusError, RuntimeError):
    """A handle targets an older generation of a stream name: the name was unlinked and a new
    stream created under it, which this handle does not own."""


def closed(name: str, operation: str) -> StreamClosedError:
    return StreamClosedError(f"cannot {operation} closed shared memory {name!r}; reopen it with pyshmem.open({name!r})")


def closed_while_waiting(name: str) -> StreamClosedError:
    return StreamClosedError(f"shared memory {name!r} was closed while a read was waiting on it")


def read_only(name: str, operation: str) -> StreamPermissionError:
    return StreamPermissionError(f"cannot {operation} read-only shared memory {name!r}")


def missing(name: str) -> StreamNotFoundError:
    return StreamNotFoundError(f"shared memory {name!r} does not exist; create it with pyshmem.create({name!r}, ...) first")


def exists(name: str) -> StreamExistsError:
    return StreamExistsError(f"shared memory {name!r} already exists; use pyshmem.open({name!r}) to attach to it")


def no_new_write(name: str) -> StreamTimeoutError:
    return StreamTimeoutError(f"timed out waiting for a new write on {name!r}")


def count_not_passed(name: str, after: int) -> StreamTimeoutError:
    return StreamTimeoutError(f"timed out waiting for stream {name!r} to pass count {after}")


def lock_timeout() -> StreamTimeoutError:
    return StreamTimeoutError("timed out waiting for shared memory lock")

