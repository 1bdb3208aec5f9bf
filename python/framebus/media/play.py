"""What ``framebus play FILE NAME`` does: decode a video with FFmpeg
(:class:`~framebus.media.ffmpeg.VideoReader`) into the stream NAME (created with the video's
frame shape, or reused when it exists with that shape), paced at the video's frame rate or as
fast as possible with --fast (lossless readers still hold the writer back). Ctrl-C / SIGTERM
stops after the frame being written, and the report counts exactly the frames written. At the
end the stream is ended (``Stream.end()``): readers get every frame still unread and then
StreamEndedError. ``--wait-readers N`` holds the first frame until N readers are attached. Each
frame carries the video's frame rate in its metadata (``media/frame_rate.py``), which
``framebus record`` writes its file at. A stream created here is removed at the end unless
--keep, whichever stage a signal interrupts.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any, Optional

from ..commands import stop_on_signals, stopped_status
from .frame_rate import fps_meta


def play(args: argparse.Namespace) -> int:
    """Plays ``args.file`` into stream ``args.name`` (the options of ``framebus play``); the
    exit status. Raises what FFmpeg or opening the stream raises (cli.py reports it)."""
    import framebus

    from .ffmpeg import VideoReader

    # From here on a signal only asks to stop: each stage checks it, and the stream created
    # here is removed whichever stage it interrupts.
    stop = threading.Event()
    stop_on_signals(stop)
    reader = VideoReader(args.file, pix_fmt=args.pix_fmt, ffmpeg=args.ffmpeg)  # errors: exit 1 (cli.py)
    created = False
    stream = None
    show = None
    total = 0  # frames of the passes already finished
    current = 0  # frames written by the pass under way
    start = time.perf_counter()
    try:
        if stop.is_set():
            return stopped_status()
        try:
            stream = framebus.open(args.name)
        except FileNotFoundError:
            stream = framebus.create(args.name, shape=reader.frame_shape, dtype=reader.frame_dtype, slots=args.slots)
            created = True
        # A variable-shape stream takes frames of any shape.
        if not created and not stream.variable and (stream.shape != reader.frame_shape or stream.dtype != reader.frame_dtype):
            raise SystemExit(
                f"framebus play: stream {args.name!r} holds {stream.shape} {stream.dtype} frames, the video decodes to "
                f"{reader.frame_shape} {reader.frame_dtype}; use another name or unlink it"
            )
        stream.set_role("play", args.file)  # before waiting: our own handle is not a reader
        if args.wait_readers > 0 and not wait_for_readers(stream, args.wait_readers, args.wait_timeout, stop):
            if stop.is_set():
                return stopped_status()
            readers = _readers(args.name)
            print(f"framebus play: {readers} of {args.wait_readers} readers attached to {args.name!r} within {args.wait_timeout:g} s; nothing was played", file=sys.stderr)
            return 1
        # The video's frame rate travels with every frame (framebus record writes the file at it).
        meta = fps_meta(reader.fps)
        if meta is not None and len(meta) > getattr(stream, "meta_capacity", 0):
            meta = None
        start = time.perf_counter()
        show = _Show(args, reader)

        def on_frame(n: int) -> None:
            nonlocal current
            current = n
            show.update(total + n)
            if stop.is_set():
                raise _Stopped  # after the frame was written and counted

        try:
            while not stop.is_set():
                current = 0
                with reader:
                    total += reader.into_stream(stream, realtime=not args.fast, on_frame=on_frame, meta=meta)
                current = 0
                if not args.loop or stop.is_set():
                    break
                reader = VideoReader(args.file, pix_fmt=args.pix_fmt, ffmpeg=args.ffmpeg)
        except (_Stopped, KeyboardInterrupt):  # KeyboardInterrupt: a second signal
            total += current
    finally:
        reader.close()
        if show is not None:
            show.close(total)
            assert stream is not None
            stream.end()  # readers get every frame still unread, then StreamEndedError (frames() just ends)
        if stream is not None:
            if created and not args.keep:
                stream.unlink()
            else:
                stream.close()
    elapsed = time.perf_counter() - start
    print(f"played {total} frames in {elapsed:.1f} s ({total / max(elapsed, 1e-9):.1f} frames/s) into {args.name!r}", file=sys.stderr)
    return stopped_status()


def _readers(name: str) -> int:
    """Readers attached to stream ``name``: handles that do not write (not ours, not another
    writer's), as ``framebus ls`` counts them."""
    from ..monitor import readers

    return readers(name)[0]


def wait_for_readers(stream: Any, n: int, timeout: float, stop: Optional[threading.Event] = None) -> bool:
    """Waits until ``n`` readers are attached to ``stream``; False on timeout or once ``stop``
    is set (a signal)."""
    name = str(stream.name)
    deadline = time.monotonic() + timeout
    while _readers(name) < n:
        if time.monotonic() >= deadline:
            return False
        if stop is not None:
            if stop.wait(0.01):
                return False
        else:
            time.sleep(0.01)
    return True


class _Stopped(Exception):
    """Ends a pass of VideoReader.into_stream from its on_frame callback."""


class _Show:
    def __init__(self, args: argparse.Namespace, reader: object) -> None:
        self.progress = None
        self.last = 0.0
        if args.quiet:
            return
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        fps = getattr(reader, "fps", None)
        duration = getattr(reader, "duration", None)
        total = int(round(fps * duration)) if fps and duration and not args.loop else None
        self.progress = Progress(TextColumn(f"playing {args.file} -> {args.name!r}"), BarColumn(), TextColumn("{task.completed} frames"), TimeElapsedColumn())
        self.task = self.progress.add_task("play", total=total)
        self.progress.start()

    def update(self, frames: int) -> None:
        now = time.perf_counter()
        if self.progress is not None and now - self.last >= 0.1:
            self.last = now
            self.progress.update(self.task, completed=frames)

    def close(self, frames: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=frames)
            self.progress.stop()
