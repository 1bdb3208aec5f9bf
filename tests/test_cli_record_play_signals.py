"""What a new user meets with ``framebus record`` / ``play`` in a real terminal: Ctrl-C typed in
the terminal (it reaches the whole foreground process group: FFmpeg must not take it), a play
interrupted while it waits for readers, the frame rate travelling from play to record, frames of
odd size, an ended stream, ``--wait`` for a stream that does not exist yet."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import framebus
from framebus.ffmpeg import VideoReader, VideoWriter, probe

pytest.importorskip("imageio_ffmpeg")

SHAPE = (48, 64, 3)
BOUND = 60.0  # generous upper bound for a child to react (never a performance threshold)


def cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "framebus", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def frame(i: int, shape=SHAPE) -> np.ndarray:
    return np.full(shape, (i * 9) % 256, np.uint8)


def make_clip(path, n: int, fps: int) -> None:
    with VideoWriter(str(path), (SHAPE[1], SHAPE[0]), fps=fps, preset="ultrafast", crf=0) as w:
        for i in range(n):
            w.write(frame(i))


def wait_attached(stream, count: int, proc) -> None:
    end = time.monotonic() + BOUND
    while stream.attached < count:
        assert (proc.poll() if hasattr(proc, "poll") else None) is None
        assert time.monotonic() < end, "the command did not attach"
        time.sleep(0.02)


def read_pty(fd: int, pid: int) -> "tuple[str, int]":
    """Everything the command prints on its terminal until it exits, and its exit status."""
    out = b""
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal (it exited)
            chunk = b""
        if chunk:
            out += chunk
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return out.decode(errors="replace"), os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the command did not exit:\n{out.decode(errors='replace')}")


def test_ctrl_c_typed_in_a_terminal_stops_record_cleanly_with_a_complete_file(name, tmp_path):
    """Ctrl-C in a terminal is SIGINT to the whole foreground process group; FFmpeg runs in its
    own session, so only record takes it: exit status 130 and a file with every frame
    reported (not "FFmpeg exited with status 255" and exit 1)."""
    out = tmp_path / "tty.mp4"
    stream = framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=4)
    pid, fd = pty.fork()
    if pid == 0:  # child: the session leader of the pseudo-terminal, in its foreground group
        os.execv(sys.executable, [sys.executable, "-m", "framebus", "record", name, str(out), "--preset", "ultrafast", "--quiet"])
    try:
        end = time.monotonic() + BOUND
        while stream.attached < 2:
            assert time.monotonic() < end, "record did not attach"
            time.sleep(0.02)
        for i in range(10):
            stream.write(frame(i), timeout=30)  # lossless reader: FFmpeg has started
        # record read all 10 (each frame read is handed to FFmpeg before the next check)
        while not any(r["role"] == "record" and r["reads"] >= 10 for r in framebus.stat(name).readers):
            assert time.monotonic() < end, "record did not read the frames"
            time.sleep(0.02)
        os.write(fd, b"\x03")  # Ctrl-C typed in the terminal
        text, status = read_pty(fd, pid)
    finally:
        os.close(fd)
        stream.unlink()
    assert status == 130, text
    assert "FFmpeg exited" not in text and "stopped by Ctrl-C" in text, text
    recorded = int(re.search(r"recorded (\d+) frames", text).group(1))
    assert recorded == 10
    with VideoReader(str(out)) as r:
        assert sum(1 for _ in r) == recorded


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_play_interrupted_while_waiting_for_readers_removes_its_stream(name, tmp_path, signum):
    clip = tmp_path / "clip.mp4"
    make_clip(clip, 5, 25)
    proc = cli("play", str(clip), name, "--quiet", "--wait-readers", "1", "--wait-timeout", "120")
    try:
        end = time.monotonic() + BOUND
        while name not in [s.name for s in framebus.list_streams()]:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end
            time.sleep(0.02)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert name not in [s.name for s in framebus.list_streams()], "play left its stream behind"


def test_the_frame_rate_travels_from_play_to_record(name, tmp_path):
    """A 25 fps file played into a stream and recorded from it stays 25 fps (play writes the
    rate into each frame's metadata; record without --fps uses it)."""
    clip = tmp_path / "clip25.mp4"
    make_clip(clip, 10, 25)
    out = tmp_path / "out.mp4"
    play = cli("play", str(clip), name, "--fast", "--quiet", "--wait-readers", "1")
    rec = None
    try:
        end = time.monotonic() + BOUND
        while name not in [s.name for s in framebus.list_streams()]:
            assert play.poll() is None, play.communicate()
            assert time.monotonic() < end
            time.sleep(0.02)
        rec = cli("record", name, str(out), "--preset", "ultrafast", "--quiet")
        _, rec_err = rec.communicate(timeout=BOUND)
        play.communicate(timeout=BOUND)
    finally:
        play.kill()
        if rec is not None:
            rec.kill()
    assert rec.returncode == 0, rec_err
    assert "at 25 fps" in rec_err
    assert probe(str(out))["fps"] == 25


def test_record_without_a_rate_in_the_stream_says_which_it_wrote(name, tmp_path):
    out = tmp_path / "norate.mp4"
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=4) as s:
        proc = cli("record", name, str(out), "--preset", "ultrafast", "--quiet")
        wait_attached(s, 2, proc)
        for i in range(3):
            s.write(frame(i), timeout=30)
        s.end()
        _, err = proc.communicate(timeout=BOUND)
        s.unlink()
    assert proc.returncode == 0, err
    assert "carry no frame rate: written at 30 fps (pass --fps" in err


def test_odd_sized_frames_are_padded_to_yuv420p(name, tmp_path):
    shape = (47, 63, 3)
    out = tmp_path / "odd.mp4"
    with framebus.create(name, shape=shape, dtype=np.uint8, slots=4) as s:
        proc = cli("record", name, str(out), "--preset", "ultrafast", "--quiet", "--fps", "10")
        wait_attached(s, 2, proc)
        for i in range(4):
            s.write(frame(i, shape), timeout=30)
        s.end()
        _, err = proc.communicate(timeout=BOUND)
        s.unlink()
    assert proc.returncode == 0, err
    assert "63x47 frames padded to 64x48" in err
    from framebus.ffmpeg import find_ffmpeg

    info = subprocess.run([find_ffmpeg(), "-hide_banner", "-i", str(out)], capture_output=True, text=True).stderr
    assert "yuv420p" in info and "yuv444p" not in info and "64x48" in info, info


def test_video_writer_pads_odd_sizes():
    w = VideoWriter("/nonexistent/never-started.mp4", (63, 47))
    assert w.padded and w.output_size == (64, 48) and "yuv420p" in w.command
    even = VideoWriter("/nonexistent/never-started.mp4", (64, 48))
    assert not even.padded and even.output_size == (64, 48)


def test_record_of_an_ended_stream_says_nothing_was_recorded(name, tmp_path):
    out = tmp_path / "none.mp4"
    with framebus.create(name, shape=SHAPE, dtype=np.uint8) as s:
        s.write(frame(0))
        s.end()
        res = subprocess.run([sys.executable, "-m", "framebus", "record", name, str(out), "--quiet"], capture_output=True, text=True, timeout=BOUND)
        s.unlink()
    assert res.returncode == 1, res.stderr
    assert "nothing was recorded" in res.stderr and "no file was written" in res.stderr
    assert "recorded 0 frames" not in res.stderr
    assert not out.exists()


def test_record_wait_waits_for_the_stream_to_appear(name, tmp_path):
    out = tmp_path / "waited.mp4"
    proc = cli("record", name, str(out), "--wait", "120", "--preset", "ultrafast", "--quiet", "--fps", "10")
    try:
        time.sleep(0.5)  # record is started first (any delay works)
        assert proc.poll() is None, proc.communicate()
        with framebus.create(name, shape=SHAPE, dtype=np.uint8, slots=4) as s:
            wait_attached(s, 2, proc)
            for i in range(3):
                s.write(frame(i), timeout=30)
            s.end()
            _, err = proc.communicate(timeout=BOUND)
            s.unlink()
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "recorded 3 frames" in err


@pytest.mark.parametrize("command", [["record", "{}", "/nonexistent/x.mp4"], ["echo", "{}"], ["hz", "{}"], ["bridge", "publish", "{}", "tcp://127.0.0.1:1"]], ids=lambda c: c[0] if c[0] != "bridge" else "bridge-publish")
def test_wait_gives_up_with_a_clear_message(command, name):
    if command[0] == "bridge":
        pytest.importorskip("zmq")
    res = subprocess.run([sys.executable, "-m", "framebus", *[a.format(name) for a in command], "--wait", "0.2"], capture_output=True, text=True, timeout=BOUND)
    assert res.returncode == 1, res.stderr
    assert "does not exist (waited 0.2 s)" in res.stderr and "Traceback" not in res.stderr


def test_play_into_a_variable_shape_stream(name, tmp_path):
    """A variable-shape stream takes the video's frames (no traceback on its missing shape)."""
    clip = tmp_path / "var.mp4"
    make_clip(clip, 3, 25)
    with framebus.create(name, capacity=SHAPE[0] * SHAPE[1] * 3) as s:
        res = subprocess.run([sys.executable, "-m", "framebus", "play", str(clip), name, "--fast", "--quiet"], capture_output=True, text=True, timeout=BOUND)
        assert res.returncode == 0, res.stderr
        assert "played 3 frames" in res.stderr and s.write_sequence == 3
        s.unlink()
