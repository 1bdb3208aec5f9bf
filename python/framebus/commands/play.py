"""``framebus play FILE NAME``: the command line of playing a video into a stream (argparse).
What it does (decode with FFmpeg into the stream at the video's rate or --fast, end the stream,
stop cleanly on Ctrl-C) is in ``framebus.media.play``."""

from __future__ import annotations

import argparse

from ._args import int_range, non_negative_int, positive_float, stream_name

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
    from ..media.play import play

    return play(args)
