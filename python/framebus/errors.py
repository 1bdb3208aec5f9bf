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
    "InvalidFrameError",
    "StreamNotFoundError",
    "StreamExistsError",
    "StreamPermissionError",
    "InsufficientSpaceError",
    "IncompatibleStreamError",
    "CorruptStreamError",
    "StreamNotReadyError",
    "StreamTimeoutError",
    "StreamClosedError",
    "StreamEndedError",
    "StreamReplacedError",
    "StreamEmptyError",
    "TooManyReadersError",
    "LoanOpenError",
    "LockNotHeldError",
    "SequenceExhaustedError",
    "FramebusOSError",
    "LockRecoveredWarning",
    "PipeError",
    "PipeBrokenError",
    "PipeTimeoutError",
    "DeviceError",
    "DeviceUnavailableError",
    "FFmpegError",
    "FFmpegNotFoundError",
]


class FramebusError(Exception):
    """Base class of every exception framebus raises on purpose."""


class InvalidArgumentError(FramebusError, ValueError):
    """A name, shape, dtype, size, timeout or other argument is not acceptable."""


class InvalidFrameError(InvalidArgumentError):
    """A frame given whole (its table of arrays first, as a bridge receives it) does not
    describe a valid frame of the stream; nothing was written."""


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


class StreamEndedError(StreamClosedError, EOFError):
    """The writer ended the stream (``Stream.end()``) and this handle has read every frame it
    will get (a lossless handle gets every unread frame first). ``frames()`` and ``async for``
    simply stop; a new write by a restarted producer clears the end."""


class StreamReplacedError(FramebusError, RuntimeError):
    """While a read waited, the stream's name was removed and a new stream now has it (a
    producer or bridge that restarted and created the stream anew), or it was removed with
    nothing new under it and no live handle writes it any more: no frame will come to this
    handle, so open the stream again. Not a StreamClosedError: ``frames()`` and ``async for``
    raise it rather than stop. Noticed within about a second of waiting, whatever the timeout."""


class StreamEmptyError(FramebusError, RuntimeError):
    """A copying read (``read``, ``read_into``, ``read_publication``) found no frame: wait with
    read_new() or wait_view(). ``reason`` says why: ``"empty"``, nothing was written yet;
    ``"lost"``, the newest frame went with a write its writer gave up mid-write (a crash) and no
    newer frame exists yet. ``stream`` names the stream. A RuntimeError, as it was before it had
    a class of its own."""


class LockNotHeldError(FramebusError, RuntimeError):
    """release() was called by a thread that does not hold the write lock (call acquire()
    first, or use ``with stream.locked():``)."""


class LoanOpenError(FramebusError, RuntimeError):
    """This thread already has an open loan on the stream; commit or abort it before the next
    write() or loan() (a second claim would give two frames one sequence number)."""


class SequenceExhaustedError(FramebusError, ValueError):
    """The stream reached the largest sequence number (2**56 - 1); numbers never wrap, so
    nothing was written: create a new stream."""


class TooManyReadersError(FramebusError, RuntimeError):
    """The stream's reader table is full."""


class FramebusOSError(FramebusError, OSError):
    """Any other failed system call, with its errno."""


class DeviceError(FramebusError, RuntimeError):
    """A CUDA call on a device stream failed (the driver's error name and code are in the
    message)."""


class DeviceUnavailableError(DeviceError):
    """A device stream cannot be used in this process: no CUDA driver or device, the stream's
    GPU is not visible here, or the process that owned its GPU memory has exited (a read
    waiting on such a stream learns it within about a second, whatever its timeout)."""


class LockRecoveredWarning(RuntimeWarning):
    """The write lock was held by a process that died; it was taken over."""


class PipeError(FramebusError, OSError):
    """A background write to a file descriptor failed (``framebus.pipe``), with its errno; the
    writes queued behind it were dropped. Raised by the next pipe()/sync()/close() on that
    descriptor."""


class PipeBrokenError(PipeError, BrokenPipeError):
    """The reading end of the pipe was closed (EPIPE): the reader, e.g. FFmpeg, exited."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        if self.errno is None:
            self.errno = _errno.EPIPE


class PipeTimeoutError(FramebusError, TimeoutError):
    """sync()/close() ran out of time; the writes stay queued."""


class FFmpegError(FramebusError, RuntimeError):
    """FFmpeg failed: ``returncode`` is its exit status (None while it runs), ``stderr`` the last
    lines it printed, ``command`` the command line."""

    def __init__(self, message: str, *, returncode: "int | None" = None, stderr: str = "", command: "list | None" = None) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr
        self.command = list(command or [])


class FFmpegNotFoundError(FramebusError, FileNotFoundError):
    """No FFmpeg executable was found (argument, FRAMEBUS_FFMPEG, imageio-ffmpeg, PATH)."""
