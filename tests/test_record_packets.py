"""``framebus record`` of a variable-shape stream: encoded packets (byte payloads written with
``codec=``) are remuxed as they are (``-c copy``); anything else is refused with a clear message.
Uses the real FFmpeg (imageio-ffmpeg)."""

from __future__ import annotations

import subprocess
import uuid

import numpy as np
import pytest

import framebus
from framebus.ffmpeg import VideoReader, find_ffmpeg

pytest.importorskip("imageio_ffmpeg")
from test_record_play import cli, wait_attached  # noqa: E402 - the same command runner and wait


def jpeg_packets(n: int) -> list:
    """``n`` JPEG images (one packet each) encoded by FFmpeg from a test pattern."""
    cmd = [find_ffmpeg(), "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-frames:v", str(n), "-f", "mjpeg", "-"]
    data = subprocess.run(cmd, capture_output=True, check=True, timeout=60).stdout
    packets, start = [], 0
    while True:
        end = data.find(b"\xff\xd9", start)
        if end < 0:
            break
        packets.append(data[start:end + 2])
        start = end + 2
    assert len(packets) == n
    return packets


@pytest.fixture
def name():
    n = f"test-rpk-{uuid.uuid4().hex[:12]}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def test_record_remuxes_encoded_packets(name, tmp_path):
    out = tmp_path / "packets.mkv"
    packets = jpeg_packets(8)
    stream = framebus.create(name, capacity="1MiB")
    try:
        proc = cli("record", name, str(out), "--frames", "8", "--fps", "10", "--quiet")
        wait_attached(stream, 2, proc)
        for p in packets:
            stream.write(p, codec="mjpeg", timeout=30)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert "recorded 8 packets" in stderr
    finally:
        stream.unlink()
    with VideoReader(str(out)) as r:
        got = list(r)
    assert len(got) == 8 and got[0].shape == (48, 64, 3)


def test_record_of_packets_finishes_the_file_when_the_stream_ends(name, tmp_path):
    out = tmp_path / "ended.mkv"
    packets = jpeg_packets(5)
    stream = framebus.create(name, capacity="1MiB")
    try:
        proc = cli("record", name, str(out), "--fps", "10", "--quiet")
        wait_attached(stream, 2, proc)
        for p in packets:
            stream.write(p, codec="mjpeg", timeout=30)
        stream.end()
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert "recorded 5 packets" in stderr and "the stream ended" in stderr
    finally:
        stream.unlink()
    with VideoReader(str(out)) as r:
        assert sum(1 for _ in r) == 5


@pytest.mark.parametrize("value", [np.zeros((4, 4), np.uint8), b"no codec given"], ids=["array", "bytes-without-codec"])
def test_record_refuses_frames_that_are_not_packets(name, tmp_path, value):
    stream = framebus.create(name, capacity="64KiB")
    try:
        proc = cli("record", name, str(tmp_path / "x.mkv"), "--quiet")
        wait_attached(stream, 2, proc)
        stream.write(value, timeout=30)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert "encoded packets" in stderr and "codec=" in stderr
    finally:
        stream.unlink()
