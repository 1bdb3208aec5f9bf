"""``framebus record NAME OUT.mp4``: the command line of a recording (argparse). What it does
(encode every frame of a live stream with FFmpeg, or remux a stream of encoded packets, until the
stream ends, stops, a limit or Ctrl-C; exit status 0, 1 or the signal's) is in
``framebus.media.record``."""

from __future__ import annotations

import argparse

HELP = "encode every frame of a live stream into a video file with FFmpeg (Ctrl-C stops cleanly)"


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


def run(args: argparse.Namespace) -> int:
    from ..media.record import record

    return record(args)
