"""``framebus record`` and ``framebus play`` with the real FFmpeg (imageio-ffmpeg)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import framebus
from framebus.cli import COMMANDS
from framebus.ffmpeg import VideoReader, VideoWriter

pytest.importorskip("imageio_ffmpeg")

SHAPE = (48, 64, 3)


def cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "framebus", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.fixture
def name():
    n = f"test-rp-{uuid.uuid4().hex[:12]}"
    yield n
    for suffix in ("",):
        try:
            framebus.unlink(n + suffix)
        except FileNotFoundError:
            pass


def frame(i: int) -> np.ndarray:
    return np.full(SHAPE, (i * 9) % 256, np.uint8)


def wait_attached(stream, count: int, proc: subprocess.Popen) -> None:
    while stream.attached < count:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)


def test_commands_are_registered():
    assert "record" in COMMANDS and "play" in COMMANDS
    out = subprocess.run([sys.executable, "-m", "framebus", "--help"], capture_output=True, text=True)
    assert "record" in out.stdout and "play" in out.stdout


def test_record_encodes_every_frame_of_a_live_stream(name, tmp_path):
    out = tmp_path / "rec.mp4"
    stream = framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=4)
    try:
        proc = cli("record", name, str(out), "--frames", "25", "--fps", "25", "--preset", "ultrafast", "--quiet")
        wait_attached(stream, 2, proc)
        for i in range(25):
            stream.write(frame(i), timeout=30)  # lossless reader: the writer waits for it
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert "recorded 25 frames" in stderr
    finally:
        stream.unlink()
    with VideoReader(str(out)) as r:
        got = list(r)
    assert len(got) == 25
    assert abs(int(got[10].mean()) - int(frame(10).mean())) <= 3


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_record_stops_cleanly_on_ctrl_c(name, tmp_path, signum):
    out = tmp_path / "int.mp4"
    stream = framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=4)
    try:
        proc = cli("record", name, str(out), "--preset", "ultrafast")
        wait_attached(stream, 2, proc)
        for i in range(10):
            stream.write(frame(i), timeout=30)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signum, stderr  # 130 / 143, as framebus --help says
        assert "stopped by Ctrl-C" in stderr
    finally:
        stream.unlink()
    import re

    recorded = int(re.search(r"recorded (\d+) frames", stderr).group(1))
    assert recorded >= 1
    with VideoReader(str(out)) as r:
        n = sum(1 for _ in r)
    assert n == recorded, "the file is finalised and holds every frame recorded before Ctrl-C"


def test_record_of_a_missing_stream_fails_clearly(tmp_path):
    missing = f"test-rp-missing-{uuid.uuid4().hex[:8]}"
    res = subprocess.run([sys.executable, "-m", "framebus", "record", missing, str(tmp_path / "x.mp4")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1  # a runtime error (2 is for usage errors)
    assert "does not exist" in res.stderr and "Traceback" not in res.stderr


def make_clip(path, n: int = 15, fps: int = 30) -> None:
    with VideoWriter(str(path), (SHAPE[1], SHAPE[0]), fps=fps, preset="ultrafast", crf=0) as w:
        for i in range(n):
            w.write(frame(i))


def test_record_finishes_the_file_when_play_ends_the_stream(name, tmp_path):
    """`framebus play` ends the stream after its last frame; `framebus record` takes that as
    the normal end: every frame is in the finished file, "recorded N frames", exit 0."""
    clip = tmp_path / "clip.mp4"
    make_clip(clip, 20)
    out = tmp_path / "out.mp4"
    play = cli("play", str(clip), name, "--fast", "--quiet", "--wait-readers", "1")
    rec = None
    try:
        while name not in [s.name for s in framebus.list_streams()]:  # play creates it, then waits for a reader
            assert play.poll() is None, play.communicate()
            time.sleep(0.02)
        rec = cli("record", name, str(out), "--preset", "ultrafast", "--quiet")
        _, rec_err = rec.communicate(timeout=120)
        _, play_err = play.communicate(timeout=120)
    finally:
        for p in (play, rec):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert play.returncode == 0 and "played 20 frames" in play_err, play_err
    assert rec.returncode == 0, rec_err
    assert "recorded 20 frames" in rec_err and "the stream ended" in rec_err, rec_err
    with VideoReader(str(out)) as r:
        got = list(r)
    assert len(got) == 20
    assert abs(int(got[12].mean()) - int(frame(12).mean())) <= 3


def test_play_decodes_a_video_into_a_stream(name, tmp_path):
    clip = tmp_path / "clip.mp4"
    make_clip(clip, 15)
    stream = framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=4)
    reader = framebus.open(name, mode="lossless")
    try:
        proc = cli("play", str(clip), name, "--fast", "--quiet")
        got = []
        while len(got) < 15:
            got.append(reader.read_new(timeout=30))
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert "played 15 frames" in stderr
        assert abs(int(got[7].mean()) - int(frame(7).mean())) <= 3
    finally:
        reader.close()
        stream.unlink()


def test_play_stopped_by_a_signal_reports_exactly_the_frames_written(name, tmp_path):
    """Ctrl-C in the middle of a looping, real-time play: it stops after the frame being written
    and reports the stream's own count of frames."""
    clip = tmp_path / "clip.mp4"
    make_clip(clip, 15, fps=60)
    proc = cli("play", str(clip), name, "--loop", "--keep", "--quiet")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "play wrote no frame within 60 s"
            try:
                with framebus.open(name) as s:
                    if s.write_sequence >= 20:  # into the second pass of the loop
                        break
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr  # Ctrl-C, as framebus --help says
    with framebus.open(name) as s:
        written = s.write_sequence
    assert f"played {written} frames" in stderr, (written, stderr)


def test_play_creates_the_stream_and_removes_it_after(name, tmp_path):
    clip = tmp_path / "clip.mp4"
    make_clip(clip, 5)
    res = subprocess.run([sys.executable, "-m", "framebus", "play", str(clip), name, "--fast", "--quiet"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    with pytest.raises(FileNotFoundError):
        framebus.open(name)


def test_play_refuses_a_stream_of_another_shape(name, tmp_path):
    clip = tmp_path / "clip.mp4"
    make_clip(clip, 3)
    stream = framebus.create(name, shape=(10, 10), dtype=np.uint8)
    try:
        res = subprocess.run([sys.executable, "-m", "framebus", "play", str(clip), name, "--quiet"], capture_output=True, text=True, timeout=60)
        assert res.returncode != 0
        assert "decodes to" in res.stderr
    finally:
        stream.unlink()


def test_play_of_a_missing_file_fails_clearly(name, tmp_path):
    res = subprocess.run([sys.executable, "-m", "framebus", "play", str(tmp_path / "nope.mp4"), name], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1  # a runtime error (2 is for usage errors)
    assert "no such video file" in res.stderr and "Traceback" not in res.stderr
    assert res.stderr.count("nope.mp4") == 1, res.stderr
