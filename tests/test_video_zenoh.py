"""Encoded bridges on the Zenoh engine only (framebus.net.publish(..., engine="zenoh",
encode=...)): a slow subscriber in latest mode never decodes a corrupt picture and keeps every
packet, and the Zenoh engine runs without pyzmq. What both engines must do (a late joiner starts
at a keyframe, a killed subscriber resumes, the end of the stream comes after every picture, the
packet path records a playable file) is tested for each in tests/test_video_engines.py.

Every test uses its own Zenoh key and TCP port, peer mode with multicast scouting off and
explicit listen/connect endpoints on loopback (as tests/test_net_zenoh.py does). Waits are
generous upper bounds, never measurements.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
av = pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")
net = pytest.importorskip("framebus.net")

from video_helpers import BOUND, CLOSE, Writer, error, names, read_pictures, source, wait_until  # noqa: E402,F401
from bridge_helpers import LoopbackLink, free_port  # noqa: E402



def test_slow_subscriber_in_latest_mode_skips_to_keyframes_and_keeps_every_packet(names, source):
    """A subscriber that stores a packet every 50 ms while 100 are encoded per second: the publisher
    skips it to the next (forced) keyframe each time it runs out of credit, and counts that;
    every packet that does arrive is stored (a batch is not cut down to its newest packet, as
    raw frames are in latest mode), so the decoder never meets a hole and every picture it
    decodes is its source."""
    import time

    from framebus.net.wire import protocol
    from framebus.net.zenoh import ZenohLink

    link = LoopbackLink("fbvideo")
    writer = Writer(source, fps=100)
    pub = net.publish(source.name, link.key, encode="h264", bitrate="2M", gop=1000, mode="latest", **link.pub)
    local = names("dec")
    zlink = ZenohLink(connect=(f"tcp/127.0.0.1:{link.port}",), scouting=False)
    sub = net.Subscriber(link.key, local, net.SubscribeOptions(timeout=BOUND, engine_options=zlink))
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
        assert pub.payload.gate.held > 0  # the gate held packets back from it
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
