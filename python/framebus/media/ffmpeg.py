"""FFmpeg as a subprocess, fed and read through ``framebus.pipe``: :class:`VideoWriter` encodes
NumPy frames (written to FFmpeg's stdin by the native background writer, without copies) and
:class:`VideoReader` decodes a video into NumPy frames or into a framebus stream; ``probe``
reads a file's size and rate, ``find_ffmpeg`` finds the executable. The public door is
``framebus.ffmpeg`` (see its docstring); ``framebus record`` / ``play`` build on this module.

FFmpeg is found in this order: the ``ffmpeg=`` argument, the ``FRAMEBUS_FFMPEG`` environment
variable, the binary that the ``imageio-ffmpeg`` package ships (``framebus[ffmpeg]``),
``ffmpeg`` on PATH.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import threading
import time
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import _native
from ..errors import FFmpegError, FFmpegNotFoundError, InvalidArgumentError, PipeError

__all__ = ["VideoWriter", "VideoReader", "find_ffmpeg", "probe", "frame_layout", "PIX_FMTS"]

#: Raw pixel formats a frame can be checked against: name -> (channels or None for planar
#: layouts, dtype). Planar 4:2:0 formats take frames of shape (height * 3 // 2, width).
PIX_FMTS: Dict[str, Tuple[Optional[int], Any]] = {
    "rgb24": (3, np.uint8),
    "bgr24": (3, np.uint8),
    "rgba": (4, np.uint8),
    "bgra": (4, np.uint8),
    "argb": (4, np.uint8),
    "abgr": (4, np.uint8),
    "rgb0": (4, np.uint8),
    "bgr0": (4, np.uint8),
    "gray": (1, np.uint8),
    "gray16le": (1, np.dtype("<u2")),
    "rgb48le": (3, np.dtype("<u2")),
    "rgba64le": (4, np.dtype("<u2")),
    "grayf32le": (1, np.dtype("<f4")),
    "yuv420p": (None, np.uint8),
    "nv12": (None, np.uint8),
}

#: Lines of FFmpeg's stderr kept for error messages.
STDERR_LINES = 40

#: How FFmpeg is started: in its own session (process group), so the Ctrl-C typed in the
#: terminal reaches only this process, which then ends FFmpeg itself: a VideoWriter closes its
#: input (FFmpeg finishes the file), a VideoReader stops it. Without this FFmpeg would take the
#: terminal's SIGINT too, stop on its own and exit with status 255.
DETACHED: Dict[str, Any] = {"start_new_session": True}


def find_ffmpeg(ffmpeg: Optional[str] = None) -> str:
    """The FFmpeg executable to run: ``ffmpeg`` if given, else ``$FRAMEBUS_FFMPEG``, else
    imageio-ffmpeg's bundled binary, else ``ffmpeg`` on PATH. Raises FFmpegNotFoundError."""
    tried = []
    for label, candidate in (("ffmpeg argument", ffmpeg), ("FRAMEBUS_FFMPEG", os.environ.get("FRAMEBUS_FFMPEG"))):
        if candidate:
            path = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
            if path:
                return path
            tried.append(f"{label}={candidate!r} (not an executable)")
            if label == "ffmpeg argument":
                raise FFmpegNotFoundError(2, f"FFmpeg not found: {tried[-1]}")
    try:
        import imageio_ffmpeg

        path = imageio_ffmpeg.get_ffmpeg_exe()
        if path and os.access(path, os.X_OK):
            return path
    except Exception as exc:  # noqa: BLE001 - any failure just moves on to PATH
        tried.append(f"imageio-ffmpeg ({exc})")
    path = shutil.which("ffmpeg")
    if path:
        return path
    tried.append("ffmpeg on PATH")
    raise FFmpegNotFoundError(
        2,
        "FFmpeg not found (tried " + ", ".join(tried) + "); install it with `pip install imageio-ffmpeg` "
        "(or `pip install 'framebus[ffmpeg]'`), put ffmpeg on PATH or set FRAMEBUS_FFMPEG",
    )


def frame_layout(size: Tuple[int, int], pix_fmt: str) -> Tuple[Tuple[int, ...], np.dtype]:
    """(shape, dtype) of one raw frame of ``size`` = (width, height) in ``pix_fmt``."""
    width, height = _size(size)
    if pix_fmt not in PIX_FMTS:
        raise InvalidArgumentError(f"unsupported pix_fmt {pix_fmt!r}; use one of {', '.join(sorted(PIX_FMTS))}")
    channels, dtype = PIX_FMTS[pix_fmt]
    dt = np.dtype(dtype)
    if channels is None:
        if width % 2 or height % 2:
            raise InvalidArgumentError(f"pix_fmt {pix_fmt!r} needs an even width and height, got {width}x{height}")
        return (height * 3 // 2, width), dt
    if channels == 1:
        return (height, width), dt
    return (height, width, channels), dt


def _size(size: Any) -> Tuple[int, int]:
    try:
        width, height = (int(v) for v in size)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"size must be (width, height), got {size!r}") from None
    if width <= 0 or height <= 0:
        raise InvalidArgumentError(f"size must be positive, got {width}x{height}")
    return width, height


class _StderrTail:
    """Reads a pipe on its own thread until EOF, keeping the last lines (so FFmpeg never blocks
    on a full stderr pipe)."""

    def __init__(self, stream: Any, lines: int = STDERR_LINES) -> None:
        self.lines: Deque[str] = collections.deque(maxlen=lines)
        self._stream = stream
        self._thread = threading.Thread(target=self._drain, name="framebus-ffmpeg-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        partial = b""
        try:
            while True:
                chunk = self._stream.read1(65536) if hasattr(self._stream, "read1") else self._stream.read(65536)
                if not chunk:
                    break
                parts = (partial + chunk).replace(b"\r", b"\n").split(b"\n")
                partial = parts.pop()[-4096:]
                self.lines.extend(p.decode("utf-8", "replace").rstrip() for p in parts if p.strip())
        except (OSError, ValueError):
            pass
        if partial.strip():
            self.lines.append(partial.decode("utf-8", "replace").rstrip())
        try:
            self._stream.close()
        except OSError:
            pass

    def join(self, timeout: Optional[float] = None) -> None:
        self._thread.join(timeout)

    def text(self) -> str:
        return "\n".join(self.lines)


def _failure(what: str, proc: "subprocess.Popen[bytes]", tail: _StderrTail, cmd: Sequence[str]) -> FFmpegError:
    tail.join(2.0)
    text = tail.text()
    code = proc.returncode
    msg = f"{what}: FFmpeg exited with status {code}"
    msg += f"; its last stderr lines:\n{text}" if text else " and printed nothing on stderr"
    msg += "\ncommand: " + " ".join(cmd)
    return FFmpegError(msg, returncode=code, stderr=text, command=list(cmd))


class VideoWriter:
    """Encodes frames with FFmpeg: ``write(frame)`` checks the frame's shape and dtype against
    ``size`` (width, height) and ``pix_fmt`` and queues it for FFmpeg's stdin through
    ``framebus.pipe`` (no copy: do not modify a frame before it was written, i.e. reuse a buffer
    only after ``sync()``, or pass ``copy=True``). FFmpeg starts at the first frame, after its
    check. ``close()`` (or leaving the ``with`` block) flushes, ends FFmpeg's input, waits for it
    and raises FFmpegError with its exit status and last stderr lines if it failed.

    ``codec`` None leaves the choice to FFmpeg; for libx264/libx265 the output pixel format is
    yuv420p (what players expect) unless ``extra_args`` sets ``-pix_fmt``. ``extra_args`` go
    after the input and codec options, before the output path. ``progress=True`` shows frames
    and frames/s on the terminal (rich if installed).

    A frame of odd width or height cannot be yuv420p: for libx264/libx265 (without ``-pix_fmt``
    or ``-vf`` in ``extra_args``) the picture is padded by one black column/row to even
    dimensions (``output_size``, ``padded``) and encoded as yuv420p, never silently as yuv444p.

    FFmpeg runs in its own session: the terminal's Ctrl-C reaches only this process. Leaving
    the ``with`` block by KeyboardInterrupt finishes the file with the frames written so far.
    """

    def __init__(
        self,
        path: str,
        size: Tuple[int, int],
        fps: float = 30,
        pix_fmt: str = "rgb24",
        codec: Optional[str] = "libx264",
        preset: Optional[str] = None,
        crf: Optional[float] = None,
        extra_args: Sequence[str] = (),
        ffmpeg: Optional[str] = None,
        progress: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.size = _size(size)
        self.frame_shape, self.frame_dtype = frame_layout(self.size, pix_fmt)
        self.frame_bytes = int(np.prod(self.frame_shape)) * self.frame_dtype.itemsize
        if not (isinstance(fps, (int, float)) and fps > 0):
            raise InvalidArgumentError(f"fps must be a positive number, got {fps!r}")
        self.fps = fps
        self.pix_fmt = pix_fmt
        self.ffmpeg = find_ffmpeg(ffmpeg)
        extra = [str(a) for a in extra_args]
        w, h = self.size
        cmd = [self.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]
        cmd += ["-f", "rawvideo", "-pix_fmt", pix_fmt, "-s", f"{w}x{h}", "-r", f"{fps:g}", "-i", "-"]
        #: (width, height) of the encoded picture: ``size``, or padded to even dimensions.
        self.output_size: Tuple[int, int] = (w, h)
        if codec:
            cmd += ["-c:v", codec]
            if codec in ("libx264", "libx265") and "-pix_fmt" not in extra:
                if (w % 2 or h % 2) and not ({"-vf", "-filter:v", "-filter_complex"} & set(extra)):
                    # 4:2:0 needs even dimensions: one black column/row is added rather than
                    # falling back to 4:4:4, which most players cannot play.
                    self.output_size = (w + w % 2, h + h % 2)
                    cmd += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
                if self.output_size[0] % 2 == 0 and self.output_size[1] % 2 == 0:
                    cmd += ["-pix_fmt", "yuv420p"]
        if preset is not None:
            cmd += ["-preset", str(preset)]
        if crf is not None:
            cmd += ["-crf", f"{crf:g}"]
        cmd += extra + [self.path]
        self.command: List[str] = cmd
        #: Whether the picture is padded to even dimensions (odd ``size`` with libx264/libx265).
        self.padded = self.output_size != (w, h)
        self.frames_written = 0
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._tail: Optional[_StderrTail] = None
        self._fd = -1
        self._closed = False
        self._progress = _Progress(self.path) if progress else None

    # -- lifecycle --------------------------------------------------------------------------
    def _start(self) -> None:
        self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, **DETACHED)
        self._tail = _StderrTail(self._proc.stderr)
        assert self._proc.stdin is not None
        self._fd = self._proc.stdin.fileno()

    @property
    def returncode(self) -> Optional[int]:
        """FFmpeg's exit status (None before it exited or started)."""
        return self._proc.returncode if self._proc else None

    def write(self, frame: Any, *, copy: bool = False) -> None:
        """Checks ``frame`` (shape ``frame_shape``, dtype ``frame_dtype``, or exactly
        ``frame_bytes`` bytes of a bytes-like object) and queues it for FFmpeg. Non-contiguous
        arrays are copied; with ``copy=True`` every frame is (then it may be reused at once).
        Raises InvalidArgumentError (ValueError) for a wrong frame (nothing is sent),
        FFmpegError when FFmpeg has failed, RuntimeError after close()."""
        if self._closed:
            raise RuntimeError(f"VideoWriter({self.path!r}) is closed; create a new one")
        data = self._check(frame)
        if copy:
            data = np.array(data, copy=True)
        if self._proc is None:
            self._start()
        try:
            _native.pipe(data, self._fd)
        except PipeError as exc:
            raise self._ffmpeg_failed("FFmpeg stopped reading frames") from exc
        self.frames_written += 1
        if self._progress:
            self._progress.update(self.frames_written)

    def _check(self, frame: Any) -> Any:
        if isinstance(frame, np.ndarray):
            if frame.shape != self.frame_shape and not (
                len(self.frame_shape) == 2 and frame.shape == self.frame_shape + (1,)
            ):
                raise InvalidArgumentError(
                    f"VideoWriter({self.path!r}) takes {self.pix_fmt} frames of shape {self.frame_shape} "
                    f"(size {self.size[0]}x{self.size[1]}), got shape {frame.shape}; nothing was sent"
                )
            if frame.dtype != self.frame_dtype:
                raise InvalidArgumentError(
                    f"VideoWriter({self.path!r}) takes {self.pix_fmt} frames of dtype {self.frame_dtype}, got "
                    f"{frame.dtype}; convert with .astype({str(self.frame_dtype)!r}); nothing was sent"
                )
            return frame if frame.flags.c_contiguous else np.ascontiguousarray(frame)
        try:
            n = memoryview(frame).nbytes
        except TypeError:
            raise TypeError(
                f"VideoWriter.write takes a NumPy array or a bytes-like object, got {type(frame).__name__}"
            ) from None
        if n != self.frame_bytes:
            raise InvalidArgumentError(
                f"VideoWriter({self.path!r}) takes {self.frame_bytes} bytes per {self.pix_fmt} frame, got {n}; nothing was sent"
            )
        return frame

    def sync(self, timeout: Optional[float] = None) -> None:
        """Waits until every frame written so far was taken by FFmpeg (frames may be reused)."""
        if self._proc is None or self._closed:
            return
        try:
            _native.sync(self._fd, timeout)
        except PipeError as exc:
            raise self._ffmpeg_failed("FFmpeg stopped reading frames") from exc

    def _ffmpeg_failed(self, what: str) -> FFmpegError:
        assert self._proc is not None and self._tail is not None
        if self._proc.stdin:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._closed = True
        return _failure(what, self._proc, self._tail, self.command)

    def _abandon_pipe(self) -> None:
        # Called once FFmpeg is gone (or killed): the writer fails with EPIPE at once, which
        # stops it and releases the frames it held, before the descriptor number is reused.
        try:
            _native.close(self._fd, 5.0)
        except Exception:  # noqa: BLE001 - the writer's error was already reported
            pass

    def close(self) -> None:
        """Flushes the queued frames, ends FFmpeg's input and waits for it to finish. Raises
        FFmpegError (with exit status and stderr) if FFmpeg failed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._progress:
            self._progress.close(self.frames_written)
        if self._proc is None:
            return
        proc, tail = self._proc, self._tail
        assert tail is not None and proc.stdin is not None
        failed: Optional[BaseException] = None
        try:
            _native.close(self._fd)
        except PipeError as exc:
            failed = exc
        except BaseException:
            # Ctrl-C while flushing: stop FFmpeg rather than leave it waiting for input.
            proc.kill()
            proc.wait()
            self._abandon_pipe()
            raise
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.wait()
        tail.join(5.0)
        if proc.returncode != 0 or failed is not None:
            raise _failure(f"encoding {self.path!r} failed", proc, tail, self.command) from failed

    def abort(self) -> None:
        """Stops FFmpeg at once, dropping queued frames (the output is probably unusable)."""
        if self._closed and (self._proc is None or self._proc.poll() is not None):
            return
        self._closed = True
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._abandon_pipe()
            if self._proc.stdin:
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass
            if self._tail:
                self._tail.join(2.0)
        if self._progress:
            self._progress.close(self.frames_written)

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        elif issubclass(exc_type, KeyboardInterrupt):
            # Ctrl-C reaches only this process (FFmpeg runs in its own session): finish the
            # file with the frames written so far; a second Ctrl-C while it finishes kills FFmpeg.
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the KeyboardInterrupt is the one to see
                pass
        else:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the body's exception is the one to see
                pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._proc else "not started")
        return f"<framebus.ffmpeg.VideoWriter {self.path!r} {self.size[0]}x{self.size[1]} {self.pix_fmt} {state}, {self.frames_written} frames>"


class _Progress:
    """Frames and frames/s on the terminal while a VideoWriter runs."""

    def __init__(self, label: str) -> None:
        self.start = time.perf_counter()
        self.last = 0.0
        self.label = label
        try:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar: Any = Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[stats]}"), TimeElapsedColumn())
            self.task = self.bar.add_task(f"encoding {label}", stats="")
            self.bar.start()
        except ImportError:
            self.bar = None

    def update(self, frames: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        rate = frames / max(now - self.start, 1e-9)
        stats = f"{frames} frames, {rate:.1f} frames/s"
        if self.bar is not None:
            self.bar.update(self.task, stats=stats)
        elif force or int(now - self.start) != int(self.last - self.start - 0.1):
            print(f"{self.label}: {stats}", flush=True)

    def close(self, frames: int) -> None:
        self.update(frames, force=True)
        if self.bar is not None:
            self.bar.stop()


_VIDEO_RE = re.compile(r"Stream #\S+.*?Video: .*?(?<![0-9a-fx])(\d{1,5})x(\d{1,5})(?![0-9a-fx])")
_FPS_RE = re.compile(r"(\d+(?:\.\d+)?) (?:fps|tbr)")
_DURATION_RE = re.compile(r"Duration: (\d+):(\d+):(\d+(?:\.\d+)?)")


def probe(path: str, ffmpeg: Optional[str] = None) -> dict:
    """Size (width, height), fps and duration (s, None if unknown) of the first video stream of
    ``path``, read from FFmpeg's description of its input. Raises FileNotFoundError, FFmpegError."""
    exe = find_ffmpeg(ffmpeg)
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"no such video file: {path!r}", path)
    out = subprocess.run([exe, "-hide_banner", "-nostdin", "-i", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **DETACHED)
    text = out.stderr.decode("utf-8", "replace")
    video = next((line for line in text.splitlines() if "Video:" in line), None)
    m = _VIDEO_RE.search(video or "")
    if not m or video is None:
        raise FFmpegError(f"{path!r} has no video stream FFmpeg can read:\n{text[-2000:]}", returncode=out.returncode, stderr=text)
    fps_m = _FPS_RE.search(video)
    dur_m = _DURATION_RE.search(text)
    duration = None
    if dur_m:
        h, mi, s = dur_m.groups()
        duration = int(h) * 3600 + int(mi) * 60 + float(s)
    return {"size": (int(m.group(1)), int(m.group(2))), "fps": float(fps_m.group(1)) if fps_m else None, "duration": duration}


class VideoReader:
    """Decodes ``path`` with FFmpeg into raw ``pix_fmt`` frames: iterate for NumPy arrays (a new
    array per frame), ``read(out=None)`` for one frame (None at the end), or
    ``into_stream(stream)`` to decode straight into a framebus stream. ``size`` and ``fps`` are
    probed from the file. Context manager; ``close()`` stops FFmpeg."""

    def __init__(self, path: str, *, pix_fmt: str = "rgb24", ffmpeg: Optional[str] = None, extra_args: Sequence[str] = ()) -> None:
        self.path = os.fspath(path)
        self.ffmpeg = find_ffmpeg(ffmpeg)
        info = probe(self.path, self.ffmpeg)
        self.size: Tuple[int, int] = info["size"]
        self.fps: Optional[float] = info["fps"]
        self.duration: Optional[float] = info["duration"]
        self.pix_fmt = pix_fmt
        self.frame_shape, self.frame_dtype = frame_layout(self.size, pix_fmt)
        self.frame_bytes = int(np.prod(self.frame_shape)) * self.frame_dtype.itemsize
        self.command = [self.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-i", self.path]
        self.command += [str(a) for a in extra_args] + ["-f", "rawvideo", "-pix_fmt", pix_fmt, "-"]
        self.frames_read = 0
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._tail: Optional[_StderrTail] = None

    def _started(self) -> "subprocess.Popen[bytes]":
        if self._proc is None:
            self._proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, **DETACHED)
            self._tail = _StderrTail(self._proc.stderr)
        return self._proc

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        """The next frame (into ``out`` if given: C-contiguous, ``frame_shape``/``frame_dtype``),
        or None at the end. Raises FFmpegError if FFmpeg failed."""
        proc = self._started()
        if out is None:
            out = np.empty(self.frame_shape, self.frame_dtype)
        elif out.shape != self.frame_shape or out.dtype != self.frame_dtype or not out.flags.c_contiguous:
            raise InvalidArgumentError(
                f"out must be a C-contiguous array of shape {self.frame_shape} and dtype {self.frame_dtype}, got {out.shape} {out.dtype}"
            )
        view = memoryview(out).cast("B")  # type: ignore[arg-type]  # ndarray is a buffer
        got = 0
        assert proc.stdout is not None
        while got < self.frame_bytes:
            n = proc.stdout.readinto(view[got:])  # type: ignore[attr-defined]  # a BufferedReader
            if not n:
                break
            got += n
        if got == self.frame_bytes:
            self.frames_read += 1
            return out
        proc.wait()
        assert self._tail is not None
        if proc.returncode != 0:
            raise _failure(f"decoding {self.path!r} failed", proc, self._tail, self.command)
        return None

    def __iter__(self) -> Iterator[np.ndarray]:
        while True:
            frame = self.read()
            if frame is None:
                return
            yield frame

    def into_stream(self, stream: Any, *, realtime: bool = False, timeout: Optional[float] = None, on_frame: Any = None, meta: Any = None) -> int:
        """Decodes every frame straight into ``stream`` (a framebus Stream of shape
        ``frame_shape`` and dtype ``frame_dtype``, or a variable-shape stream whose capacity
        holds a frame) with ``stream.write``; with ``realtime=True``
        paced at the video's frame rate. Returns the number of frames. ``on_frame(n)`` is called
        after each frame (for progress); ``meta`` (bytes) is written with every frame."""
        # A variable-shape stream (created with capacity=) takes frames of any shape that fit.
        if not getattr(stream, "variable", False) and (tuple(stream.shape) != tuple(self.frame_shape) or np.dtype(stream.dtype) != self.frame_dtype):
            raise InvalidArgumentError(
                f"stream {stream.name!r} holds {tuple(stream.shape)} {np.dtype(stream.dtype)} frames; this video decodes "
                f"to {self.frame_shape} {self.frame_dtype} (create the stream with shape={self.frame_shape}, dtype='{self.frame_dtype}')"
            )
        buf = np.empty(self.frame_shape, self.frame_dtype)
        period = 1.0 / self.fps if realtime and self.fps else 0.0
        start = time.perf_counter()
        n = 0
        while self.read(buf) is not None:
            if period:
                delay = start + n * period - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            stream.write(buf, frame_id=n, timeout=timeout, meta=meta)
            n += 1
            if on_frame is not None:
                on_frame(n)
        return n

    def close(self) -> None:
        """Stops FFmpeg (if still decoding) and releases its pipes. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if self._tail:
            self._tail.join(2.0)

    def __enter__(self) -> "VideoReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<framebus.ffmpeg.VideoReader {self.path!r} {self.size[0]}x{self.size[1]} {self.fps} fps {self.pix_fmt}>"
