"""Encoded bridges (framebus.net.publish(encode=...)) on both engines, ZeroMQ and Zenoh: a late
joiner starts at a keyframe, the end of the stream comes after every picture, a killed
subscriber resumes, and the packet path records a playable file. Each test runs once per
engine that is installed (the other is skipped with the reason).

The engine's own tests are in tests/test_video.py (ZeroMQ: loss, delay, netem, codecs, bad
input, versions) and tests/test_video_zenoh.py (Zenoh: latest mode, no pyzmq). Zenoh links are
peer mode on loopback with scouting off, a key and port of their own. Frames are 320x240 test
patterns whose content is a function of their frame_id, so each decoded picture is checked
against its source. Waits are generous upper bounds, never measurements.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from typing import Any

import numpy as np
import pytest

import framebus

av = pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")
net = pytest.importorskip("framebus.net")
from framebus.media import codec as video  # noqa: E402

from video_helpers import BOUND, CLOSE, H, W, Writer, error, names, read_pictures, source, wait_until  # noqa: E402,F401
from bridge_helpers import LoopbackLink  # noqa: E402

FAST = dict(heartbeat_ivl=0.2, peer_timeout=1.5)  # quick reconnects in the restart test


class ZmqLink:
    """A publisher bound to a free TCP port; subscribers connect to the endpoint it reports."""

    engine = "zmq"

    def publish(self, stream: str, **kw: Any) -> Any:
        self.pub = net.publish(stream, "tcp://127.0.0.1:*", **kw)
        return self.pub

    def subscribe(self, local: str, **kw: Any) -> Any:
        return net.subscribe(self.pub.endpoint, local, **kw)

    def subscribe_code(self, local: str) -> str:
        """The same subscribe call as source text, for a spawned process."""
        return f"net.subscribe({self.pub.endpoint!r}, {local!r})"


class ZenohLink:
    """A Zenoh key and a loopback port of its own: the publisher listens, subscribers connect."""

    engine = "zenoh"

    def __init__(self) -> None:
        self.link = LoopbackLink("fbvideo")

    def publish(self, stream: str, **kw: Any) -> Any:
        return net.publish(stream, self.link.key, **kw, **self.link.pub)

    def subscribe(self, local: str, **kw: Any) -> Any:
        kw.setdefault("timeout", BOUND)
        return net.subscribe(self.link.key, local, **kw, **self.link.sub)

    def subscribe_code(self, local: str) -> str:
        return f"net.subscribe({self.link.key!r}, {local!r}, **{self.link.sub!r})"


@pytest.fixture(params=["zmq", "zenoh"])
def link(request):
    if request.param == "zmq":
        pytest.importorskip("zmq", reason="pyzmq is not installed (pip install 'framebus[net]')")
        return ZmqLink()
    pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
    return ZenohLink()


def test_late_joiner_starts_at_a_keyframe_and_decodes(names, source, link):
    # gop 1000: no natural keyframe comes in this test, so the joiner's first is forced for it
    writer = Writer(source)
    pub = link.publish(source.name, encode="h264", bitrate="2M", gop=1000)
    try:
        assert pub.engine == link.engine
        wait_until(lambda: pub.encoder.pictures > 20, "pictures encoded before anyone joins")
        keyframes_before = pub.encoder.keyframes
        # the packets go into a stream made here, so that a reader sees the very first one
        out = pub.encoder._out
        mine = framebus.create(names("pk"), capacity=out.size, slots=out.slots, meta_capacity=out.meta_capacity)
        r = framebus.open(mine.name, mode="lossless")
        packets = link.subscribe(mine.name, packets=True)
        decoded = link.subscribe(names("dec"))
        try:
            with r:
                frame = r.wait_view(BOUND)
                with frame:
                    assert frame.codec == "h264"
                    header = video.unpack_header(frame.meta)
                    assert header is not None and header.key
                    data, fid = bytes(memoryview(frame)), frame.frame_id
            assert packets.packet_codec == "h264" and packets.decoder is None
            ctx = av.CodecContext.create("h264", "r")
            pictures = ctx.decode(av.Packet(data)) + ctx.decode(None)
            assert pictures, "the first packet alone did not decode"
            assert error(pictures[0].to_ndarray(format="rgb24"), fid) < CLOSE
            got = read_pictures(decoded.raw_stream, 10)
            for fid, arr in got:
                assert arr.shape == (H, W, 3) and arr.dtype == np.uint8
                assert error(arr, fid) < CLOSE, f"picture {fid} is not its source"
            assert decoded.decoder.first_from_keyframe is True
            assert decoded.decoder.skipped == 0
            assert pub.encoder.keyframes > keyframes_before  # forced for the joiners
        finally:
            packets.stop()
            decoded.stop()
            mine.unlink()
    finally:
        writer.stop()
        pub.stop()


def test_end_of_stream_reaches_the_subscriber_after_every_picture(names, source, link):
    pub = link.publish(source.name, encode="h264", bitrate="2M", mode="lossless")
    sub = link.subscribe(names("dec"))
    try:
        wait_until(lambda: pub.stats.peers == 1, "the subscriber")
        writer = Writer(source, fps=200, count=40)
        wait_until(lambda: os.path.exists(f"/dev/shm/framebus.{sub.raw_stream}"), "the decoded stream")
        with framebus.open(sub.raw_stream, mode="lossless") as r:
            # read while the writer writes: lossless holds it back to this reader

            def end_after_40():
                wait_until(lambda: writer.written == 40, "the writer's 40 frames")
                writer.stop()
                source.end()

            ender = threading.Thread(target=end_after_40, daemon=True)
            ender.start()
            seen = []
            with pytest.raises(framebus.StreamEndedError):
                while True:
                    with r.wait_view(BOUND) as f:
                        assert error(np.asarray(f), f.frame_id) < CLOSE
                        seen.append(f.frame_id)
            ender.join(BOUND)
        assert seen and seen[-1] == 40, seen  # lossless: up to the last one
        assert seen == sorted(seen)
    finally:
        sub.stop()
        pub.stop()


def test_subscriber_killed_and_restarted_resumes(names, source, spawn, link):
    writer = Writer(source)
    pub = link.publish(source.name, encode="h264", bitrate="2M", gop=1000, **FAST)
    local = names("dec")
    try:
        child = spawn(textwrap.dedent(f"""
            import framebus.net as net, sys, time
            sub = {link.subscribe_code(local)}
            while sub.decoder is None or sub.decoder.pictures < 5:
                time.sleep(0.01)
            print("decoding", flush=True)
            time.sleep(60)
        """))
        child.expect("decoding")
        child.kill()  # SIGKILL: no BYE, its streams left behind
        child.close()
        sub = link.subscribe(local, **FAST)
        try:
            # the dead child's stream is replaced at the first picture: read the new one
            wait_until(lambda: sub.decoder is not None and sub.decoder.pictures > 0, "the first picture")
            for fid, arr in read_pictures(local, 10):
                assert error(arr, fid) < CLOSE
            assert sub.decoder.first_from_keyframe is True
        finally:
            sub.stop()
        assert not os.path.exists(f"/dev/shm/framebus.{local}")
    finally:
        writer.stop()
        pub.stop()


def test_packet_path_records_a_playable_file(names, source, tmp_path, link):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (its ffmpeg checks the file)")
    writer = Writer(source)
    pub = link.publish(source.name, encode="h264", bitrate="2M", gop=15)
    sub = link.subscribe(names("pk"), packets=True)
    out = tmp_path / "out.mp4"
    try:
        wait_until(lambda: os.path.exists(f"/dev/shm/framebus.{sub.stream_name}"), "the packet stream")
        rec = subprocess.run(
            [sys.executable, "-m", "framebus", "record", sub.stream_name, str(out), "--frames", "30"],
            capture_output=True, text=True, timeout=120,
        )
        assert rec.returncode == 0, rec.stderr
    finally:
        sub.stop()
        writer.stop()
        pub.stop()
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    probe = subprocess.run([ffmpeg, "-v", "error", "-i", str(out), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert not probe.stderr.strip(), probe.stderr  # no decoding error
    frames = np.frombuffer(probe.stdout, np.uint8).reshape(-1, H, W, 3)
    assert len(frames) == 30, f"{len(frames)} pictures in the file"
