"""Exceptions raised by framebus.

Every class subclasses the builtin exception a caller would naturally catch, so code written for
``FileNotFoundError``, ``TimeoutError`` or ``ValueError`` keeps working, and ``FramebusError``
catches everything framebus raises on purpose.
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "FramebusError",
    "InvalidArgumentError",
    "StreamNotFoundError",
    "StreamExistsError",
    "StreamPermissionError",
    "InsufficientSpaceError",
    "IncompatibleStreamError",
    "CorruptStreamError",
    "StreamNotReadyError",
    "StreamTimeoutError",
    "StreamClosedError",
    "TooManyReadersError",
    "FramebusOSError",
    "LockRecoveredWarning",
]


class FramebusError(Exception):
    """Base class of every exception framebus raises on purpose."""


class InvalidArgumentError(FramebusError, ValueError):
    """A name, shape, dtype, size, timeout or other argument is not acceptable."""


class StreamNotFoundError(FramebusError, FileNotFoundError):
    """No stream of that name exists; create it first."""


class StreamExistsError(FramebusError, FileExistsError):
    """A stream of that name already exists (or exists with another spec)."""


class StreamPermissionError(FramebusError, PermissionError):
    """The operating system refused access to the stream's segment."""


class InsufficientSpaceError(FramebusError, OSError):
    """/dev/shm cannot hold the stream (reported at creation, never as SIGBUS later)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        if self.errno is None:
            self.errno = _errno.ENOSPC


class IncompatibleStreamError(FramebusError, ValueError):
    """The segment was written by a framebus with another layout version."""


class CorruptStreamError(FramebusError, ValueError):
    """The segment is not a framebus stream or its header is damaged."""


class StreamNotReadyError(FramebusError, TimeoutError):
    """The creator has not finished initialising the segment."""


class StreamTimeoutError(FramebusError, TimeoutError):
    """A blocking call ran out of time."""


class StreamClosedError(FramebusError, RuntimeError):
    """The handle was closed; reopen the stream with framebus.open(name)."""


class TooManyReadersError(FramebusError, RuntimeError):
    """The stream's reader table is full."""


class FramebusOSError(FramebusError, OSError):
    """Any other failed system call, with its errno."""


class LockRecoveredWarning(RuntimeWarning):
    """The write lock was held by a process that died; it was taken over."""
