"""Encoded bridges on the Zenoh engine (framebus.net.publish(..., engine="zenoh", encode=...)):
the same guarantees as on ZeroMQ (tests/test_video.py): a late joiner starts at a keyframe, a
killed subscriber resumes, the end of the stream comes after every picture, the packet path
records a playable file, and a slow subscriber in latest mode never decodes a corrupt picture.
And the Zenoh engine runs without pyzmq.

Every test uses its own Zenoh key and TCP port, peer mode with multicast scouting off and
explicit listen/connect endpoints on loopback (as tests/test_net_zenoh.py does). Waits are
generous upper bounds, never measurements.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import framebus

pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
av = pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")
net = pytest.importorskip("framebus.net")
from framebus._bridge import video  # noqa: E402

from video_helpers import BOUND, CLOSE, Writer, error, names, read_pictures, source, wait_until  # noqa: E402,F401
from bridge_helpers import LoopbackLink, free_port  # noqa: E402

FAST = dict(heartbeat_ivl=0.2, peer_timeout=1.5)




def test_late_joiner_starts_at_a_keyframe_and_decodes(names, source):
    # gop 1000: no natural keyframe comes in this test, so the joiner's first is forced for it
    link = LoopbackLink("fbvideo")
    writer = Writer(source)
    pub = net.publish(source.name, link.key, encode="h264", bitrate="2M", gop=1000, **link.pub)
    try:
        assert pub.engine == "zenoh"
        wait_until(lambda: pub.encoder.pictures > 20, "pictures encoded before anyone joins")
        keyframes_before = pub.encoder.keyframes
        # the packets go into a stream made here, so that a reader sees the very first one
        out = pub.encoder._out
        mine = framebus.create(names("pk"), capacity=out.size, slots=out.slots, meta_capacity=out.meta_capacity)
        r = framebus.open(mine.name, mode="lossless")
        packets = net.subscribe(link.key, mine.name, packets=True, timeout=BOUND, **link.sub)
        decoded = net.subscribe(link.key, names("dec"), timeout=BOUND, **link.sub)
        try:
            assert packets.packet_codec == "h264" and packets.decoder is None
            with r:
                frame = r.wait_view(BOUND)
                with frame:
                    assert frame.codec == "h264"
                    header = video.unpack_header(frame.meta)
                    assert header is not None and header.key
                    data, fid = bytes(memoryview(frame)), frame.frame_id
            ctx = av.CodecContext.create("h264", "r")
            pictures = ctx.decode(av.Packet(data)) + ctx.decode(None)
            assert pictures, "the first packet alone did not decode"
            assert error(pictures[0].to_ndarray(format="rgb24"), fid) < CLOSE
            got = read_pictures(decoded.raw_stream, 10)
            for fid, arr in got:
                assert arr.shape == (240, 320, 3) and arr.dtype == np.uint8
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


def test_end_of_stream_reaches_the_subscriber_after_every_picture(names, source):
    link = LoopbackLink("fbvideo")
    pub = net.publish(source.name, link.key, encode="h264", bitrate="2M", mode="lossless", **link.pub)
    sub = net.subscribe(link.key, names("dec"), timeout=BOUND, **link.sub)
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


def test_subscriber_killed_and_restarted_resumes(names, source, spawn):
    link = LoopbackLink("fbvideo")
    writer = Writer(source)
    pub = net.publish(source.name, link.key, encode="h264", bitrate="2M", gop=1000, **FAST, **link.pub)
    local = names("dec")
    try:
        child = spawn(textwrap.dedent(f"""
            import framebus.net as net, sys, time
            sub = net.subscribe({link.key!r}, {local!r}, **{link.sub!r})
            while sub.decoder is None or sub.decoder.pictures < 5:
                time.sleep(0.01)
            print("decoding", flush=True)
            time.sleep(60)
        """))
        child.expect("decoding")
        child.kill()  # SIGKILL: no BYE, its streams left behind
        child.close()
        sub = net.subscribe(link.key, local, **FAST, **link.sub)
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


def test_packet_path_records_a_playable_file(names, source, tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (its ffmpeg checks the file)")
    link = LoopbackLink("fbvideo")
    writer = Writer(source)
    pub = net.publish(source.name, link.key, encode="h264", bitrate="2M", gop=15, **link.pub)
    sub = net.subscribe(link.key, names("pk"), packets=True, timeout=BOUND, **link.sub)
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
    frames = np.frombuffer(probe.stdout, np.uint8).reshape(-1, 240, 320, 3)
    assert len(frames) == 30, f"{len(frames)} pictures in the file"


def test_slow_subscriber_in_latest_mode_skips_to_keyframes_and_keeps_every_packet(names, source):
    """A subscriber that stores a packet every 50 ms while 100 are encoded per second: the publisher
    skips it to the next (forced) keyframe each time it runs out of credit, and counts that;
    every packet that does arrive is stored (a batch is not cut down to its newest packet, as
    raw frames are in latest mode), so the decoder never meets a hole and every picture it
    decodes is its source."""
    import time

    from framebus._bridge import protocol
    from framebus._bridge.zenoh_engine import ZenohLink, ZenohSubscriber

    link = LoopbackLink("fbvideo")
    writer = Writer(source, fps=100)
    pub = net.publish(source.name, link.key, encode="h264", bitrate="2M", gop=1000, mode="latest", **link.pub)
    local = names("dec")
    zlink = ZenohLink(connect=(f"tcp/127.0.0.1:{link.port}",), scouting=False)
    sub = ZenohSubscriber(link.key, local, net.SubscribeOptions(timeout=BOUND), zlink)
    accept = sub._accept
    flags = []

    def slow(h, payload):
        flags.append(h.flags)
        time.sleep(0.05)
        accept(h, payload)

    sub._accept = slow
    sub._start()
    try:
        assert sub.mode == "latest" and not sub.coalesce
        for fid, arr in read_pictures(local, 20):
            assert error(arr, fid) < CLOSE, f"picture {fid} is corrupt"
        wait_until(lambda: sub.stats.dropped > 0, "the subscriber to count what it missed")
        assert pub.gate.held > 0  # the gate held packets back from it
        assert pub.encoder.forced_keyframes > 1  # and asked for keyframes to restart it
        assert pub.stats.dropped > 0
        assert sub.decoder.skipped == 0  # every packet it got was stored: no hole to skip
        # each packet travelled alone, without its frame table
        assert flags and all(f & protocol.F_PACKET for f in flags)
    finally:
        sub.stop()
        writer.stop()
        pub.stop()


def test_zenoh_engine_runs_without_pyzmq(names):
    """With pyzmq unimportable: a lossless Zenoh bridge moves frames end to end, `framebus ros2
    --help` works and framebus.ros2 imports, `framebus bridge subscribe --engine zenoh` runs (and
    says that no publisher answered), the ZeroMQ engine says what to install, and zmq was never
    imported."""
    link = LoopbackLink("fbvideo")
    src_name, dst_name = names("src"), names("dst")
    code = textwrap.dedent(f"""
        import sys

        class NoZmq:
            def find_spec(self, name, path=None, target=None):
                if name == "zmq" or name.startswith("zmq."):
                    raise ImportError("pyzmq is blocked for this test")
                return None

        sys.meta_path.insert(0, NoZmq())
        import numpy as np
        import framebus, framebus.net as net
        from framebus import cli

        try:
            status = cli.main(["ros2", "--help"])
        except SystemExit as exc:
            status = exc.code
        assert status in (0, None), status
        import framebus.ros2  # noqa: F401
        import contextlib, io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = cli.main(["bridge", "subscribe", {link.key + "-none"!r}, {names("none")!r}, "--engine", "zenoh",
                               "--connect", "tcp/127.0.0.1:{free_port()}", "--no-scouting", "--timeout", "0.5", "--quiet"])
        assert status == 1 and "no framebus publisher answered" in err.getvalue(), (status, err.getvalue())
        try:
            net.publish("x", "tcp://127.0.0.1:*")
        except ImportError as exc:
            assert "pyzmq" in str(exc), exc
        else:
            raise AssertionError("the ZeroMQ engine started without pyzmq")
        link_pub = dict(engine="zenoh", listen=["tcp/127.0.0.1:{link.port}"], scouting=False)
        link_sub = dict(engine="zenoh", connect=["tcp/127.0.0.1:{link.port}"], scouting=False)
        with framebus.create({src_name!r}, shape=(8, 8), dtype=np.uint8) as src:
            pub = net.publish({src_name!r}, {link.key!r}, mode="lossless", **link_pub)
            sub = net.subscribe({link.key!r}, {dst_name!r}, timeout=30, **link_sub)
            with framebus.open({dst_name!r}, mode="lossless") as dst:
                for i in range(5):
                    src.write(np.full((8, 8), i, np.uint8), frame_id=i, timeout=30)
                for i in range(5):
                    got = dst.read_new_publication(timeout=30)
                    assert got.frame_id == i and int(got.payload[0, 0]) == i
            sub.stop()
            pub.stop()
            src.unlink()
        assert "zmq" not in sys.modules, sorted(m for m in sys.modules if m.startswith("zmq"))
        print("ok without pyzmq")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok without pyzmq" in run.stdout
