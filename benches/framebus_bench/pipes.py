"""W6: feeding FFmpeg raw RGB24 frames through its stdin pipe. Each method pushes the same frames
(4 rotating buffers of random content) into ``ffmpeg -f rawvideo ... -i - -f null -`` (and into
libx264 ultrafast at 1080p); a run is timed from starting FFmpeg until it exits, minus FFmpeg's
own start-up and shut-down (measured with no frames; never more than half a run). Methods: ``proc.stdin.write``, a Python
writer thread fed by a queue, turbopipe, ``framebus.pipe`` (once this framebus has it), and the
ceiling: FFmpeg reading the same bytes from a file in /dev/shm."""

from __future__ import annotations

import functools
import os
import queue
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .harness import Context, make_frame, summarize
from .ffmpeg_tool import find_ffmpeg
from .records import Column, Metric, Row, SuiteResult, compute_ratios

#: (width, height, encoder args or None for the null muxer's default).
CONFIGS: List[Tuple[int, int, Optional[List[str]]]] = [
    (1280, 720, None),
    (1920, 1080, None),
    (3840, 2160, None),
    (1920, 1080, ["-c:v", "libx264", "-preset", "ultrafast"]),
]

COLUMNS = [
    Column("fps", "frames/s", "{:,.0f}"),
    Column("gbps", "GB/s", "{:.2f}"),
    Column("fps", "spread (frames/s)", "{:,.0f}", "spread"),
    Column("frames", "frames", "{:.0f}", "extra"),
]


def command(ff: str, w: int, h: int, encoder: Optional[List[str]], source: str, loops: int = 0) -> List[str]:
    """The FFmpeg command line reading raw RGB24 ``w``x``h`` frames from ``source``."""
    cmd = [ff, "-hide_banner", "-nostdin", "-loglevel", "error"]
    if loops:
        cmd += ["-stream_loop", str(loops)]
    cmd += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", "30", "-i", source]
    return cmd + (encoder or []) + ["-f", "null", "-"]


def _finish(p: "subprocess.Popen[bytes]") -> None:
    if p.stdin is not None and not p.stdin.closed:
        p.stdin.close()
    err = p.stderr.read() if p.stderr is not None else b""
    p.wait(timeout=300)
    if p.returncode != 0:
        tail = (err or b"").decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"FFmpeg exited with {p.returncode}: {' | '.join(tail)}")


def _popen(cmd: List[str]) -> "subprocess.Popen[bytes]":
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0)


def feed_nothing(cmd: List[str]) -> None:
    """Starts FFmpeg and closes its input at once (its start-up and shut-down cost)."""
    _finish(_popen(cmd))


def read_file(cmd: List[str]) -> None:
    """Runs FFmpeg on a file (the ceiling: no pipe at all)."""
    _finish(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))


def feed_stdin(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    """``proc.stdin.write(frame)`` in the loop."""
    p = _popen(cmd)
    assert p.stdin is not None
    for i in range(n):
        p.stdin.write(frames[i & 3])  # type: ignore[call-overload]
    _finish(p)


def feed_thread(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    """A Python thread writes what the loop queues (up to 4 frames ahead)."""
    p = _popen(cmd)
    q: "queue.Queue[Any]" = queue.Queue(maxsize=4)
    stdin = p.stdin
    assert stdin is not None

    def drain() -> None:
        while True:
            item = q.get()
            if item is None:
                return
            stdin.write(item)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    for i in range(n):
        q.put(frames[i & 3])
    q.put(None)
    t.join()
    _finish(p)


def feed_turbopipe(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    """``turbopipe.pipe(frame, fd)``, then ``turbopipe.sync`` on every buffer."""
    import turbopipe

    p = _popen(cmd)
    assert p.stdin is not None
    fd = p.stdin.fileno()
    for i in range(n):
        turbopipe.pipe(frames[i & 3], fd)
    for f in frames:
        turbopipe.sync(f)
    _finish(p)


def feed_framebus(cmd: List[str], frames: List[np.ndarray], n: int) -> None:
    """``framebus.pipe(frame, fd)``, then ``framebus.sync(fd)`` (and its close, if any)."""
    import framebus

    p = _popen(cmd)
    assert p.stdin is not None
    fd = p.stdin.fileno()
    pipe = framebus.pipe  # type: ignore[attr-defined]
    for i in range(n):
        pipe(frames[i & 3], fd)
    framebus.sync(fd)  # type: ignore[attr-defined]
    close = getattr(framebus, "close", None)  # stop the descriptor's writer before the descriptor is closed
    if callable(close):
        close(fd)
    _finish(p)


def _methods(ctx: Context, sid: str) -> List[Tuple[str, str, str, Optional[Callable[..., None]]]]:
    out: List[Tuple[str, str, str, Optional[Callable[..., None]]]] = []
    import framebus

    if hasattr(framebus, "pipe") and hasattr(framebus, "sync"):
        out.append(("framebus.pipe(frame, fd)", "framebus", "framebus", feed_framebus))
    else:
        ctx.note(sid, "framebus.pipe: skipped (this framebus has no pipe()/sync() yet)")
    out.append(("proc.stdin.write(frame)", "stdin", "peer", feed_stdin))
    out.append(("Python writer thread", "thread", "peer", feed_thread))
    try:
        import turbopipe  # noqa: F401

        out.append(("turbopipe 2.1 pipe()", "turbopipe", "peer", feed_turbopipe))
    except ImportError:
        ctx.note(sid, "turbopipe: skipped (not installed; pip install './benches[peers]')")
    out.append(("limit: FFmpeg reads a /dev/shm file", "limit", "limit", None))
    return out


def _time(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(ctx: Context) -> SuiteResult:
    """W6 for every configuration and method, interleaved over repetitions."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W6"
    suite = SuiteResult(
        sid,
        "W6 feeding FFmpeg through a pipe (RGB24 rawvideo)",
        "Frames pushed into FFmpeg's stdin; time from FFmpeg's start to its exit minus its start-up with no frames.",
        columns=COLUMNS,
    )
    ff = find_ffmpeg()
    if not ff:
        ctx.note(sid, "no FFmpeg found (pip install imageio-ffmpeg, or put ffmpeg on PATH): W6 skipped")
        suite.notes = ctx.notes.get(sid, [])
        return suite
    methods = _methods(ctx, sid)
    budget = cfg.pick(1.2e9, 3e8, 0)
    reps = cfg.pick(2, 1, 1)
    configs = cfg.cases(CONFIGS)
    ctx.reporter.start(sid, len(configs) * len(methods) * reps)
    for width, height, encoder in configs:
        if cfg.smoke:
            width, height = 64, 36
        shape = (height, width, 3)
        nbytes = width * height * 3
        n = max(int(budget // nbytes), 3) if budget else 3
        if encoder:
            n = cfg.pick(90, 30, 3)
        case = f"{width}x{height} -> {'libx264 ultrafast' if encoder else 'null'}"
        frames = [make_frame(shape, np.uint8, seed=k) for k in range(4)]
        # The ceiling's file: up to 8 frames, looped by FFmpeg to n frames.
        k = min(n, 8)
        loops = -(-n // k) - 1
        n_file = k * (loops + 1)
        path = f"/dev/shm/{ctx.name('w6')}.rgb"
        with open(path, "wb") as f:
            for i in range(k):
                f.write(frames[i & 3].tobytes())
        ctx.on_cleanup(functools.partial(_unlink, path))
        try:
            idle = [_time(functools.partial(feed_nothing, command(ff, width, height, encoder, "-"))) for _ in range(2)]
            startup = min(idle)
            times: Dict[str, List[float]] = {}
            for _rep in range(reps):
                for label, _fam, _role, feed in methods:
                    try:
                        if feed is None:
                            t = _time(functools.partial(read_file, command(ff, width, height, encoder, path, loops)))
                        else:
                            t = _time(functools.partial(feed, command(ff, width, height, encoder, "-"), frames, n))
                        times.setdefault(label, []).append(t)
                    except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                        ctx.note(sid, f"{label}: failed at {case} ({exc})")
                    ctx.reporter.step(f"{sid} {case} {label}")
        finally:
            _unlink(path)
        for label, fam, role, feed in methods:
            if label not in times:
                continue
            count = n_file if feed is None else n
            fps = [count / max(t - startup, 0.5 * t) for t in times[label]]
            st = summarize(fps)
            suite.rows.append(
                Row(
                    case=case,
                    variant=label,
                    family=fam,
                    role=role,
                    primary="fps",
                    metrics={
                        "fps": Metric(st["median"], "frames/s", True, lo=st["min"], hi=st["max"]),
                        "gbps": Metric(st["median"] * nbytes / 1e9, "GB/s", True, lo=st["min"] * nbytes / 1e9, hi=st["max"] * nbytes / 1e9),
                    },
                    extra={"frames": count, "startup_s": startup, "bytes": nbytes},
                    samples={"seconds": times[label]},
                )
            )
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
