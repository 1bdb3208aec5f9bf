"""``framebus record`` of a variable-shape stream whose frames are encoded packets (byte payloads
written with ``codec=``, e.g. H.264 access units or JPEG images): the packets are fed to FFmpeg as
they are and remuxed into the output file without re-encoding (``-c copy``). Frames that are not
byte payloads of one codec are refused with a message that says what the stream holds."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any, Callable, List, Optional

from ..commands import REPLACED, REPLACED_ERRORS, StreamReplaced
from ..errors import FFmpegError, StreamEndedError
from .codec import unpack_header
from .ffmpeg import DETACHED, find_ffmpeg
from .frame_rate import DEFAULT_FPS, fps_in_meta

#: FFmpeg input formats (demuxers) of the codec names writers give to ``write(..., codec=)``.
DEMUXERS = {"h264": "h264", "avc": "h264", "h265": "hevc", "hevc": "hevc", "mjpeg": "mjpeg", "jpeg": "mjpeg", "mpeg4": "m4v", "av1": "obu"}


class PacketError(SystemExit):
    """A frame that cannot be recorded as an encoded packet (the message says why)."""


def check_packet(frame: Any, codec: Optional[str], seq: int) -> str:
    """The codec of frame ``frame`` (a Frame view); PacketError unless it is a byte payload
    with a codec (and the same codec as the frames before it, ``codec``)."""
    if not frame.is_bytes or frame.codec is None:
        what = "a byte payload without codec=" if frame.is_bytes else f"arrays {frame.names or frame.shape}"
        raise PacketError(
            f"framebus record: frame {seq} holds {what}; a variable-shape stream can be recorded only when its frames "
            "are encoded packets (write(packet, codec='h264') or loan(nbytes=, codec=)). Record raw images from a "
            "fixed-shape stream (framebus.create(name, shape=(h, w, 3), dtype=np.uint8)) instead"
        )
    if codec is not None and frame.codec != codec:
        raise PacketError(f"framebus record: frame {seq} is {frame.codec!r} but the recording started with {codec!r} packets")
    return str(frame.codec)


def _starts_file(frame: Any) -> bool:
    """Whether a recording may start with this packet: a keyframe of an encoded bridge (its
    metadata says so), or any packet that does not say (written by other code)."""
    header = unpack_header(frame.meta)
    return header is None or header.key


def remux_packets(stream: Any, args: Any, stop: threading.Event, update: Callable[[int], None], segment: Any = None) -> bool:
    """Feeds every new packet of ``stream`` to FFmpeg until the writer ends the stream,
    ``stop``, --frames, --seconds or --idle, then lets FFmpeg finish the file; ``update`` gets
    the count of packets written after each one. Returns whether the stream ended. Raises
    PacketError for a frame that is not a packet, FFmpegError when FFmpeg fails, and (the file
    finished first) StreamReplaced when the stream was replaced by a new stream of the same
    name (``segment``, from ``commands.open_watched``, checked while no packet comes)."""
    ffmpeg = find_ffmpeg(args.ffmpeg)
    proc: Optional["subprocess.Popen[bytes]"] = None
    codec: Optional[str] = None
    cmd: List[str] = []
    frames = 0
    ended = False
    start = last = time.perf_counter()
    try:
        while not stop.is_set():
            if (args.frames and frames >= args.frames) or (args.seconds and time.perf_counter() - start >= args.seconds):
                break
            try:
                frame = stream.wait_view(0.25)
            except TimeoutError:
                if segment is not None and segment.replaced():
                    raise StreamReplaced(f"stream {stream.name!r} {REPLACED}") from None
                if args.idle and time.perf_counter() - last >= args.idle:
                    break
                continue
            except StreamEndedError:  # every packet was read: a normal end
                ended = True
                break
            except REPLACED_ERRORS:
                raise StreamReplaced(f"stream {stream.name!r} {REPLACED}") from None
            with frame:
                codec = check_packet(frame, codec, frame.seq)
                if proc is None and not _starts_file(frame):
                    continue  # a file starts at a keyframe: earlier packets would not decode
                if proc is None:
                    cmd = [ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", DEMUXERS.get(codec, codec)]
                    fps = args.fps or fps_in_meta(frame.meta) or DEFAULT_FPS
                    cmd += ["-r", f"{fps:g}", "-i", "-", "-c", "copy", args.out]
                    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, **DETACHED)
                assert proc.stdin is not None
                try:
                    proc.stdin.write(memoryview(frame))
                except BrokenPipeError:
                    break
            last = time.perf_counter()
            frames += 1
            update(frames)
    finally:
        if proc is not None:
            assert proc.stdin is not None and proc.stderr is not None
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
            err = proc.stderr.read().decode(errors="replace")
            if proc.wait() != 0:
                raise FFmpegError(f"FFmpeg exited with code {proc.returncode} remuxing {codec} packets into {args.out}: {err.strip()[-2000:]}", returncode=proc.returncode, stderr=err, command=cmd)
    return ended
