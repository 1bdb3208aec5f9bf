"""framebus.ffmpeg with the real FFmpeg that imageio-ffmpeg ships."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import framebus
from framebus.errors import FFmpegError, FFmpegNotFoundError, InvalidArgumentError
from framebus.ffmpeg import VideoReader, VideoWriter, find_ffmpeg, probe

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def frames(n: int, h: int = 48, w: int = 64, c: int = 3) -> list:
    return [np.random.default_rng(i).integers(0, 256, (h, w, c), dtype=np.uint8) for i in range(n)]


def test_find_ffmpeg_order(monkeypatch, tmp_path):
    monkeypatch.delenv("FRAMEBUS_FFMPEG", raising=False)
    assert os.path.samefile(find_ffmpeg(), FFMPEG)
    monkeypatch.setenv("FRAMEBUS_FFMPEG", FFMPEG)
    assert find_ffmpeg() == FFMPEG
    with pytest.raises(FFmpegNotFoundError):
        find_ffmpeg(str(tmp_path / "no-such-ffmpeg"))


def test_rawvideo_round_trip_is_byte_exact_with_rotating_buffers(tmp_path):
    out = tmp_path / "out.raw"
    bufs = frames(3, 120, 160)
    n = 24
    with VideoWriter(str(out), (160, 120), codec=None, extra_args=["-f", "rawvideo"]) as w:
        for i in range(n):
            if i >= 3:
                # Reusing a buffer: wait until FFmpeg took the frames, then change it.
                w.sync()
                bufs[i % 3][...] = np.random.default_rng(100 + i).integers(0, 256, bufs[0].shape, dtype=np.uint8)
                expect_i = bufs[i % 3].copy()
            else:
                expect_i = bufs[i].copy()
            w.write(bufs[i % 3])
            if i == 0:
                expect = [expect_i]
            else:
                expect.append(expect_i)
    assert w.frames_written == n and w.returncode == 0
    assert out.read_bytes() == b"".join(f.tobytes() for f in expect)


def test_ffmpeg_stdout_rawvideo_through_a_pipe_matches_input():
    bufs = frames(4)
    cmd = [FFMPEG, "-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "64x48", "-i", "-", "-f", "rawvideo", "-"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import threading

    got: list = []
    t = threading.Thread(target=lambda: got.append(p.stdout.read()), daemon=True)
    t.start()
    for i in range(40):
        framebus.pipe(bufs[i % 4], p.stdin)
    framebus.pipes.close(p.stdin)
    p.stdin.close()
    p.wait(60)
    t.join(60)
    p.stdout.close()
    p.stderr.close()
    assert got[0] == b"".join(bufs[i % 4].tobytes() for i in range(40))


def test_encode_and_decode_mp4(tmp_path):
    out = tmp_path / "clip.mp4"
    src = [np.full((48, 64, 3), v, np.uint8) for v in range(0, 250, 25)]
    with VideoWriter(str(out), (64, 48), fps=10, preset="ultrafast", crf=0) as w:
        for f in src:
            w.write(f)
    info = probe(str(out))
    assert info["size"] == (64, 48) and info["fps"] == 10.0
    with VideoReader(str(out)) as r:
        got = list(r)
    assert len(got) == len(src)
    for a, b in zip(got, src):
        assert a.shape == (48, 64, 3) and a.dtype == np.uint8
        assert np.abs(a.astype(int) - b.astype(int)).mean() < 3


def test_frames_are_checked_before_ffmpeg_starts(tmp_path):
    w = VideoWriter(str(tmp_path / "x.mp4"), (64, 48))
    with pytest.raises(InvalidArgumentError, match=r"shape \(48, 64, 3\)"):
        w.write(np.zeros((48, 64), np.uint8))
    with pytest.raises(InvalidArgumentError, match="dtype"):
        w.write(np.zeros((48, 64, 3), np.float32))
    with pytest.raises(InvalidArgumentError, match="bytes"):
        w.write(b"short")
    with pytest.raises(TypeError):
        w.write(object())
    assert w._proc is None, "FFmpeg must not start for a bad frame"
    w.close()
    assert not (tmp_path / "x.mp4").exists()
    with pytest.raises(InvalidArgumentError):
        VideoWriter(str(tmp_path / "y.mp4"), (64, 48), pix_fmt="nope")
    with pytest.raises(InvalidArgumentError):
        VideoWriter(str(tmp_path / "y.mp4"), (0, 48))


def test_non_contiguous_frames_are_staged(tmp_path):
    out = tmp_path / "nc.raw"
    big = np.random.default_rng(0).integers(0, 256, (48, 128, 3), dtype=np.uint8)
    view = big[:, ::2]
    with VideoWriter(str(out), (64, 48), codec=None, extra_args=["-f", "rawvideo"]) as w:
        w.write(view)
    assert out.read_bytes() == np.ascontiguousarray(view).tobytes()


def test_ffmpeg_failure_reports_exit_code_and_stderr(tmp_path):
    w = VideoWriter(str(tmp_path / "bad.mp4"), (64, 48), codec="no-such-codec")
    with pytest.raises(FFmpegError) as info:
        with w:
            for f in frames(50):
                w.write(f)
    e = info.value
    assert e.returncode not in (0, None)
    assert "no-such-codec" in e.stderr
    assert "exited with status" in str(e) and "no-such-codec" in str(e)


def test_ffmpeg_dying_mid_stream_raises_ffmpeg_error_not_a_crash(tmp_path):
    # -frames:v 2 makes FFmpeg stop reading after two frames; the writer then gets EPIPE.
    w = VideoWriter(str(tmp_path / "short.raw"), (320, 240), codec=None, extra_args=["-frames:v", "2", "-f", "rawvideo"])
    big = frames(4, 240, 320)
    with pytest.raises((FFmpegError, BrokenPipeError)):
        for i in range(2000):
            w.write(big[i % 4])
        w.close()
    w.abort()


def test_writer_with_chatty_stderr_never_deadlocks(tmp_path):
    # -loglevel debug floods stderr (far more than a pipe holds); the tail thread drains it.
    w = VideoWriter(str(tmp_path / "chatty.mp4"), (64, 48), extra_args=["-loglevel", "debug"], preset="ultrafast")
    for f in frames(60):
        w.write(f)
    w.close()
    assert w.returncode == 0
    assert len(w._tail.lines) <= 40


def test_decode_into_a_stream(tmp_path):
    out = tmp_path / "s.mp4"
    with VideoWriter(str(out), (64, 48), fps=25, preset="ultrafast") as w:
        for f in frames(12):
            w.write(f)
    name = f"test-ffmpeg-{uuid.uuid4().hex[:12]}"
    stream = framebus.create(name, shape=(48, 64, 3), dtype=np.uint8, slots=4)
    try:
        with VideoReader(str(out)) as r:
            n = r.into_stream(stream)
        assert n == 12 and stream.write_sequence == 12
        bad = framebus.create(name + "-bad", shape=(10, 10), dtype=np.uint8)
        try:
            with VideoReader(str(out)) as r, pytest.raises(InvalidArgumentError, match="shape"):
                r.into_stream(bad)
        finally:
            bad.unlink()
    finally:
        stream.unlink()


def test_video_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        VideoReader(str(tmp_path / "missing.mp4"))
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video" * 100)
    with pytest.raises(FFmpegError):
        VideoReader(str(junk))


def test_unclosed_writer_at_interpreter_exit_does_not_hang(tmp_path):
    out = tmp_path / "exit.mp4"
    code = f"""
        import numpy as np
        from framebus.ffmpeg import VideoWriter
        w = VideoWriter({str(out)!r}, (64, 48), preset="ultrafast")
        for i in range(30):
            w.write(np.full((48, 64, 3), i, np.uint8))
        print("leaving")
    """
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "leaving" in res.stdout
