"""``framebus record NAME OUT.mp4``: a lossless subscriber of a live stream that encodes every
frame with FFmpeg until the writer ends the stream (``Stream.end()``, as ``framebus play`` does
at the end of its file, or the writer closing its handle), the stream stops (no frame for --idle
seconds), --frames or --seconds are reached, or Ctrl-C / SIGTERM, which stops cleanly between two
frames. Each way the file is finalised, playable and holds exactly the frames reported. The exit
status is 0, or 130 after Ctrl-C (143 after SIGTERM) with the file complete all the same (a
second signal stops at once, still finishing the file). When no frame was recorded (the stream
had already ended, or nothing came) no file is written, the message says so and the exit status
is 1 (130/143 when a signal stopped it). When the stream is replaced by a new stream of the
same name (its producer, or the bridge writing it, restarted and created it anew) while the
recording waits for a frame, the recording stops with the frames it has (the file finished),
says so and exits 1: run record again to record the new stream.

FFmpeg runs in its own session (see ``framebus.ffmpeg``): the terminal's Ctrl-C reaches only
this command, which then finishes the file itself.

The frame rate written into the file: --fps if given, else the rate the stream's writer carries
in each frame's metadata (a JSON object with a positive number "fps", as ``framebus play``
writes it: the rate of its video file, also over a bridge), else 30 with a note saying so.
Frames of odd width or height are padded by one black column/row to even dimensions for
libx264/libx265's yuv420p, with a note."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from typing import Any, Optional

from ._frame_rate import DEFAULT_FPS, fps_in_meta
from ._signals import stop_on_signals, stopped_by_signal, stopped_status

HELP = "encode every frame of a live stream into a video file with FFmpeg (Ctrl-C stops cleanly)"

#: The frame rate of a file when neither --fps nor the stream's frames give one.
def add_arguments(p: argparse.ArgumentParser) -> None:
    from ._args import non_negative_float, non_negative_int, positive_float, stream_name
    from ._wait import add_wait_argument

    p.add_argument("name", type=stream_name, help="stream to record (its frames must be HxWx3 or HxWx4 uint8, or HxW uint8; or, on a variable-shape stream, encoded packets written with codec=, remuxed as they are)")
    p.add_argument("out", help="output video file, e.g. out.mp4")
    p.add_argument("--fps", type=positive_float, default=None, help="frame rate written into the file (default: the rate the stream's frames carry, as framebus play writes it, else 30)")
    p.add_argument("--codec", default="libx264", help="FFmpeg video codec (default libx264)")
    p.add_argument("--preset", default=None, help="codec preset, e.g. ultrafast")
    p.add_argument("--crf", type=float, default=None, help="constant rate factor (quality) of x264/x265")
    p.add_argument("--pix-fmt", default=None, help="raw pixel format of the frames (default: rgb24, rgba or gray from the shape)")
    p.add_argument("--frames", type=non_negative_int, default=0, help="stop after this many frames (default: no limit)")
    p.add_argument("--seconds", type=non_negative_float, default=0.0, help="stop after this long (default: no limit)")
    p.add_argument("--idle", type=non_negative_float, default=0.0, help="stop when no frame arrives for this long (default: wait forever)")
    add_wait_argument(p)
    p.add_argument("--ffmpeg", default=None, help="FFmpeg executable (default: FRAMEBUS_FFMPEG, imageio-ffmpeg, PATH)")
    p.add_argument("--quiet", action="store_true", help="no progress display")


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


def fps_meta(fps: Optional[float]) -> Optional[bytes]:
    """The metadata ``framebus play`` writes with each frame: the video's frame rate."""
    return json.dumps({"fps": fps}).encode() if fps and 0 < fps < math.inf else None


def nothing_recorded(args: argparse.Namespace, why: str) -> int:
    """Says that no frame was recorded and no file written; the exit status (1, or the
    signal's status)."""
    print(f"framebus record: nothing was recorded from {args.name!r} ({why}); no file was written to {args.out}", file=sys.stderr)
    return stopped_status() or 1


def run(args: argparse.Namespace) -> int:
    from framebus.errors import StreamEndedError
    from framebus.ffmpeg import VideoWriter, find_ffmpeg, frame_layout

    from ._segment import REPLACED_ERRORS, open_watched
    from ._wait import wait_for_stream

    wait_for_stream(args.name, args.wait)  # a missing stream: exit 1 (cli.py)
    from framebus._host_read import open_for_host

    stream, segment = open_watched(args.name, opener=open_for_host, mode="lossless")  # a device stream: its CPU mirror, else downloaded
    stream.set_role("record", args.out)
    if stream.variable:
        try:
            return _record_packets(stream, segment, args)
        finally:
            stream.close()
    writer: Any = None
    fps_note = ""
    try:
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
                        writer = VideoWriter(
                            args.out, size, fps=fps, pix_fmt=pix_fmt, codec=args.codec, preset=args.preset, crf=args.crf, ffmpeg=args.ffmpeg
                        )
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
    finally:
        stream.close()
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
    from ._segment import REPLACED

    done = f"recorded {frames} {where}; the file is complete" if frames else f"nothing was recorded and no file was written to {args.out}"
    what = segment.what()
    why, then = (" (its producer restarted)", "run framebus record again to record the new stream") if what == REPLACED else ("", "nothing more will come to it")
    print(f"framebus record: stream {args.name!r} {what}{why}, so no more frames could come to this recording: {done}; {then}", file=sys.stderr)
    return stopped_status() or 1


def _record_packets(stream: Any, segment: Any, args: argparse.Namespace) -> int:
    """Records a variable-shape stream of encoded packets (see record_packets). A frame that is
    not a packet: its message and exit code 1 (a runtime error, as cli.py gives FFmpeg's)."""
    from ._segment import StreamReplaced
    from .record_packets import PacketError, record_packets

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
        ended = record_packets(stream, args, stop, update, segment)
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
        self.progress = None
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
