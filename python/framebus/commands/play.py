"""``framebus play FILE NAME``: decode a video into the stream NAME (created with the video's
frame shape, or reused when it exists with that shape), paced at the video's frame rate or as
fast as possible with --fast (lossless readers still hold the writer back). Ctrl-C / SIGTERM
stops after the frame being written, and the report counts exactly the frames written. At the
end the stream is ended (``Stream.end()``): readers get every frame still unread and then
StreamEndedError, so they need no timeout to notice the end. ``--wait-readers N`` holds the first
frame until N readers are attached. Each frame carries the video's frame rate in its metadata
(JSON ``{"fps": 25.0}``), which ``framebus record`` writes its file at.

Ctrl-C / SIGTERM at any stage (probing the file, waiting for readers, playing, between two
passes of --loop) stops cleanly: a stream created here is removed (unless --keep), and the exit
status is 130 (143 after SIGTERM)."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from ._args import int_range, non_negative_int, positive_float, stream_name
from typing import Any, Optional

from ._signals import stop_on_signals, stopped_status

HELP = "decode a video file into a stream, at its frame rate or as fast as possible (--fast)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="video file to decode")
    p.add_argument("name", type=stream_name, help="stream to write the frames to (created if missing)")
    p.add_argument("--fast", action="store_true", help="as fast as possible instead of the video's frame rate")
    p.add_argument("--loop", action="store_true", help="start over at the end until Ctrl-C")
    p.add_argument("--pix-fmt", default="rgb24", choices=["rgb24", "bgr24", "rgba", "gray"], help="frame layout (default rgb24)")
    p.add_argument("--slots", type=int_range(2, 64), default=4, help="ring slots of a stream created here, 2 to 64 (default 4)")
    p.add_argument("--keep", action="store_true", help="keep a stream created here after the end (default: unlink it)")
    p.add_argument("--ffmpeg", default=None, help="FFmpeg executable (default: FRAMEBUS_FFMPEG, imageio-ffmpeg, PATH)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument(
        "--wait-readers",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="before the first frame, wait until N readers have the stream open (so a lossless reader gets every frame); "
        "readers are handles that do not write, as framebus ls counts them",
    )
    p.add_argument("--wait-timeout", type=positive_float, default=30.0, metavar="S", help="how long --wait-readers waits (default 30 s; then exit 1)")


def run(args: argparse.Namespace) -> int:
    import framebus
    from framebus.ffmpeg import VideoReader

    from .record import fps_meta

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
    from framebus.monitor import readers

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
