"""What ``framebus record NAME OUT.mp4`` does: a lossless subscriber of a live stream that
encodes every frame with FFmpeg (:class:`~framebus.media.ffmpeg.VideoWriter`), or, for a
variable-shape stream of encoded packets, remuxes them as they are (``media/remux.py``), until
the writer ends the stream, the stream stops (no frame for --idle seconds), --frames or
--seconds are reached, or Ctrl-C / SIGTERM, which stops cleanly between two frames. Each way
the file is finalised, playable and holds exactly the frames reported. The exit status is 0,
or 130 after Ctrl-C (143 after SIGTERM) with the file complete all the same (a second signal
stops at once, still finishing the file). When no frame was recorded no file is written, the
message says so and the exit status is 1 (130/143 when a signal stopped it). When the stream
is replaced by a new stream of the same name while the recording waits for a frame, the
recording stops with the frames it has (the file finished), says so and exits 1.

The frame rate written into the file: --fps if given, else the rate the stream's writer carries
in each frame's metadata (``media/frame_rate.py``), else 30 with a note saying so. Frames of
odd width or height are padded by one black column/row to even dimensions for libx264/libx265's
yuv420p, with a note. The source stream is opened in one place, :func:`open_source`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any, Optional, Tuple

from ..commands import REPLACED, REPLACED_ERRORS, StreamReplaced, open_watched, stop_on_signals, stopped_by_signal, stopped_status, wait_for_stream
from .frame_rate import DEFAULT_FPS, fps_in_meta
from .remux import PacketError, remux_packets


def open_source(name: str) -> Tuple[Any, Any]:
    """The handle ``framebus record`` reads, opened lossless (a device stream: its CPU mirror,
    else each frame downloaded into reused page-locked memory), and the segment watcher
    (``commands.open_watched``) that tells when the name is given to a new stream."""
    from .._host_read import open_for_host

    return open_watched(name, opener=open_for_host, mode="lossless")


def record(args: argparse.Namespace) -> int:
    """Records stream ``args.name`` into ``args.out`` (the options of ``framebus record``);
    the exit status. Raises what opening the stream or FFmpeg raises (cli.py reports it)."""
    wait_for_stream(args.name, args.wait)  # a missing stream: exit 1 (cli.py)
    stream, segment = open_source(args.name)
    try:
        stream.set_role("record", args.out)
        if stream.variable:
            return _record_packets(stream, segment, args)
        return _record_frames(stream, segment, args)
    finally:
        stream.close()


def pix_fmt_for(shape: tuple, dtype: Any) -> str:
    """The rawvideo pixel format of frames of ``shape``/``dtype``."""
    import numpy as np

    if np.dtype(dtype) != np.uint8:
        raise SystemExit(f"framebus record: the stream holds {np.dtype(dtype)} frames; only uint8 frames can be encoded (pass --pix-fmt for others)")
    if len(shape) == 2 or (len(shape) == 3 and shape[2] == 1):
        return "gray"
    if len(shape) == 3 and shape[2] in (3, 4):
        return "rgb24" if shape[2] == 3 else "rgba"
    raise SystemExit(f"framebus record: frames of shape {shape} are not images (HxW, HxWx3 or HxWx4)")


def nothing_recorded(args: argparse.Namespace, why: str) -> int:
    """Says that no frame was recorded and no file written; the exit status (1, or the
    signal's status)."""
    print(f"framebus record: nothing was recorded from {args.name!r} ({why}); no file was written to {args.out}", file=sys.stderr)
    return stopped_status() or 1


def _record_frames(stream: Any, segment: Any, args: argparse.Namespace) -> int:
    """Encodes every new frame of a fixed-shape stream with FFmpeg."""
    from ..errors import StreamEndedError
    from .ffmpeg import VideoWriter, find_ffmpeg, frame_layout

    writer: Any = None
    fps_note = ""
    assert stream.shape is not None
    shape = tuple(stream.shape)
    pix_fmt = args.pix_fmt or pix_fmt_for(shape, stream.dtype)
    size = (shape[1], shape[0])
    # The writer is made at the first frame (which may carry the rate): what would fail
    # there (no FFmpeg, an unknown --pix-fmt) fails now, before a frame is taken.
    frame_layout(size, pix_fmt)
    args.ffmpeg = find_ffmpeg(args.ffmpeg)
    display = _Display(args, f"recording {args.name!r} -> {args.out}")
    frames = 0
    start = time.perf_counter()
    # Ctrl-C is checked between frames, so a frame is either handed to FFmpeg and counted
    # or not taken at all (a KeyboardInterrupt could fall between the two).
    stop = threading.Event()
    stop_on_signals(stop)
    ended = replaced = False
    try:
        try:
            last_frame = time.perf_counter()
            while not stop.is_set():
                if args.frames and frames >= args.frames:
                    break
                if args.seconds and time.perf_counter() - start >= args.seconds:
                    break
                try:
                    # A new array per frame: the writer holds it until FFmpeg has read it.
                    pub = stream.read_new_publication(timeout=0.25)
                except TimeoutError:
                    if segment.replaced():  # no frame will come to this handle
                        replaced = True
                        break
                    if args.idle and time.perf_counter() - last_frame >= args.idle:
                        break
                    display.update(frames, stream.total_missed)
                    continue
                except StreamEndedError:  # every frame was read: a normal end
                    ended = True
                    break
                except REPLACED_ERRORS:
                    replaced = True
                    break
                last_frame = time.perf_counter()
                if writer is None:  # the first frame: it may carry the rate
                    fps = args.fps or fps_in_meta(pub.meta)
                    if fps is None:
                        fps, fps_note = DEFAULT_FPS, f"; the stream's frames carry no frame rate: written at {DEFAULT_FPS:g} fps (pass --fps to choose)"
                    writer = VideoWriter(args.out, size, fps=fps, pix_fmt=pix_fmt, codec=args.codec, preset=args.preset, crf=args.crf, ffmpeg=args.ffmpeg)
                    if writer.padded:
                        fps_note += f"; {size[0]}x{size[1]} frames padded to {writer.output_size[0]}x{writer.output_size[1]} (yuv420p needs even dimensions)"
                writer.write(pub.payload)
                frames += 1
                display.update(frames, stream.total_missed)
        except KeyboardInterrupt:  # a second Ctrl-C: stop at once, still finish the file
            pass
        display.message("finishing the file..." if frames else "no frames recorded")
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        display.close(frames, stream.total_missed)
    elapsed = time.perf_counter() - start
    interrupted = stopped_by_signal()
    if replaced:
        return _replaced(args, segment, frames, f"frames in {elapsed:.1f} s into {args.out} at {writer.fps:g} fps{fps_note}" if frames else "")
    if not frames:
        why = "stopped by a signal" if interrupted else "the stream had ended: its writer ended it before any new frame" if ended else "no frame arrived"
        if writer is None and os.path.exists(args.out):
            why += f"; the existing {args.out} was left as it was"
        return nothing_recorded(args, why)
    why = " (stopped by Ctrl-C)" if interrupted else " (the stream ended)" if ended else ""
    print(f"recorded {frames} frames in {elapsed:.1f} s into {args.out} at {writer.fps:g} fps{why}{fps_note}", file=sys.stderr)
    return stopped_status()


def _replaced(args: argparse.Namespace, segment: Any, frames: int, where: str) -> int:
    """Says that the stream was replaced (or removed, with nobody writing it) while recording,
    with what was recorded; exit status 1 (or the signal's, when one came too)."""
    done = f"recorded {frames} {where}; the file is complete" if frames else f"nothing was recorded and no file was written to {args.out}"
    what = segment.what()
    why, then = (" (its producer restarted)", "run framebus record again to record the new stream") if what == REPLACED else ("", "nothing more will come to it")
    print(f"framebus record: stream {args.name!r} {what}{why}, so no more frames could come to this recording: {done}; {then}", file=sys.stderr)
    return stopped_status() or 1


def _record_packets(stream: Any, segment: Any, args: argparse.Namespace) -> int:
    """Records a variable-shape stream of encoded packets (``media/remux.py``). A frame that is
    not a packet: its message and exit code 1 (a runtime error, as cli.py gives FFmpeg's)."""
    display = _Display(args, f"recording {args.name!r} -> {args.out} (packets, -c copy)")
    stop = threading.Event()
    stop_on_signals(stop)
    start = time.perf_counter()
    frames = 0

    def update(n: int) -> None:
        nonlocal frames
        frames = n
        display.update(n, stream.total_missed)

    replaced = False
    try:
        ended = remux_packets(stream, args, stop, update, segment)
    except PacketError as exc:
        print(exc.code, file=sys.stderr)
        return 1
    except StreamReplaced:
        replaced = True
    finally:
        display.close(frames, stream.total_missed)
    if replaced:
        return _replaced(args, segment, frames, f"packets in {time.perf_counter() - start:.1f} s into {args.out}")
    if not frames:
        return nothing_recorded(args, "stopped by a signal" if stopped_by_signal() else "the stream had ended" if ended else "no packet arrived")
    why = " (stopped by Ctrl-C)" if stopped_by_signal() else " (the stream ended)" if ended else ""
    print(f"recorded {frames} packets in {time.perf_counter() - start:.1f} s into {args.out}{why}", file=sys.stderr)
    return stopped_status()


class _Display:
    """A rich status line (frames, frames/s, skipped) or nothing with --quiet / without rich."""

    def __init__(self, args: argparse.Namespace, title: str) -> None:
        self.start = time.perf_counter()
        self.last = 0.0
        self.progress: Optional[Any] = None
        if args.quiet:
            return
        try:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        total = args.frames or None
        self.progress = Progress(SpinnerColumn(), TextColumn(title), BarColumn(), TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), transient=False)
        self.task = self.progress.add_task("record", total=total, stats="waiting for frames")
        self.progress.start()

    def update(self, frames: int, missed: int, force: bool = False) -> None:
        now = time.perf_counter()
        if self.progress is None or (not force and now - self.last < 0.1):
            return
        self.last = now
        rate = frames / max(now - self.start, 1e-9)
        self.progress.update(self.task, completed=frames, stats=f"{frames} frames, {rate:.1f} frames/s, {missed} skipped")

    def message(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, stats=text)

    def close(self, frames: int, missed: int) -> None:
        if self.progress is not None:
            self.update(frames, missed, force=True)
            self.progress.stop()
