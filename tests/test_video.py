"""Encoded bridges on the ZeroMQ engine (framebus.net.publish(encode=...)): dropped packets, a
lossy and late link, other codecs, a producer restarted at a new size, bad input, versions.
What both engines must do (keyframe on join, restart, end of stream, the packet path into
``framebus record``) is tested for each in tests/test_video_engines.py.

Frames are 320x240 moving test patterns whose content is a function of their frame_id, so a
decoded picture is checked against what was written: a picture decoded from missing
references (grey smears, blocks) is far from its source. Waits are generous upper bounds,
never measurements.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

import framebus

pytest.importorskip("zmq")
av = pytest.importorskip("av")
net = pytest.importorskip("framebus.net")
from framebus.media import codec as video  # noqa: E402

from video_helpers import BOUND, CLOSE, H, W, Writer, error, names, picture, read_pictures, source, wait_until  # noqa: E402,F401
from bridge_helpers import free_port  # noqa: E402


def test_dropped_packets_never_yield_a_corrupt_picture(names, source):
    """Loss without netem: one packet in five is lost between the subscriber's socket and its
    packet stream (acknowledged, never stored); the decoder must skip to the next keyframe
    each time, never decode across the hole, and count what it skipped."""
    import random

    from framebus.net.wire import protocol
    VideoSubscriber = net.Subscriber

    rng = random.Random(1234)
    writer = Writer(source, fps=100)
    pub = net.publish(source.name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M", gop=8)
    local = names("dec")
    sub = VideoSubscriber(pub.endpoint, local, net.SubscribeOptions())
    kept = sub._frame
    lost = []

    def lossy(h, payload):
        if rng.random() < 0.2:
            lost.append(h.seq)
            sub._say(protocol.pack_ack(h.source_id, h.seq))
            return
        kept(h, payload)

    sub._frame = lossy
    sub._start()
    try:
        for fid, arr in read_pictures(local, 60):
            assert error(arr, fid) < CLOSE, f"picture {fid} is corrupt"
        assert lost and sub.decoder.skipped > 0
        assert sub.stats.dropped >= sub.decoder.skipped
    finally:
        sub.stop()
        writer.stop()
        pub.stop()


class DelayingRelay:
    """A TCP relay on 127.0.0.1 that holds each chunk from the publisher for a random 0-40 ms
    (in order, as a congested link does); the other direction passes at once."""

    def __init__(self, upstream_port):
        import random
        import socket

        self.rng = random.Random(99)
        self.upstream = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket

        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                down, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            up = socket.create_connection(("127.0.0.1", self.upstream))
            self.socks += [down, up]
            threading.Thread(target=self._pump, args=(up, down, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()

    def _pump(self, src, dst, delay):
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if delay:
                    time.sleep(self.rng.random() * 0.04)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(2)
                except OSError:
                    pass

    def close(self):
        self._stop.set()
        self.listener.close()
        for s in self.socks:
            s.close()


def test_delayed_link_never_yields_a_corrupt_picture(names, source):
    """A link that holds packets back: the subscriber (window 1) keeps running out of credit,
    the publisher skips packets for it and restarts it at a (forced) keyframe; every decoded
    picture is still its source."""
    writer = Writer(source, fps=100)
    pub = net.publish(source.name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M", gop=1000)
    relay = DelayingRelay(int(pub.endpoint.rsplit(":", 1)[1]))
    local = names("dec")
    sub = net.subscribe(f"tcp://127.0.0.1:{relay.port}", local, hwm=1)
    try:
        for fid, arr in read_pictures(local, 20):
            assert error(arr, fid) < CLOSE, f"picture {fid} is corrupt"
        assert pub.payload.gate.held > 0  # the gate did hold packets back
        assert pub.encoder.forced_keyframes > 1  # and asked for keyframes to restart it
    finally:
        sub.stop()
        relay.close()
        writer.stop()
        pub.stop()


def test_lossy_late_link_never_yields_a_corrupt_picture(names, source, tmp_path):
    """A veth pair into a network namespace with netem (delay, jitter, loss, reordering): the
    subscriber runs in the namespace; every decoded picture must be its source."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root and iproute2 (ip, tc) to build a network namespace with netem")
    ns = f"fbv{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    host, peer = f"vh{ns[3:]}"[:15], f"vp{ns[3:]}"[:15]
    net_a = 10 + os.getpid() % 200

    def sh(*cmd, check=True):
        return subprocess.run(cmd, capture_output=True, text=True, check=check)

    try:
        sh("ip", "netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        try:
            sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", peer, "netns", ns)
            sh("ip", "addr", "add", f"10.{net_a}.77.1/24", "dev", host)
            sh("ip", "link", "set", host, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.{net_a}.77.2/24", "dev", peer)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", peer, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            for dev, prefix in ((host, ()), (peer, ("ip", "netns", "exec", ns))):
                sh(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "15ms", "10ms", "loss", "3%", "reorder", "5%")
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot set up veth + netem here: {exc.stderr.strip()}")
        writer = Writer(source, fps=60)
        pub = net.publish(source.name, f"tcp://10.{net_a}.77.1:*", encode="h264", bitrate="2M", gop=30, hwm=2)
        local = names("dec")
        code = textwrap.dedent(f"""
            import framebus.net as net, time
            sub = net.subscribe({pub.endpoint!r}, {local!r}, hwm=2)
            deadline = time.monotonic() + 60
            while (sub.decoder is None or sub.decoder.pictures < 80) and time.monotonic() < deadline:
                time.sleep(0.05)
            print("skipped", sub.decoder.skipped if sub.decoder else -1, "pictures", sub.decoder.pictures if sub.decoder else -1, flush=True)
            sub.stop()
        """)
        try:
            child = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                checked = 0
                wait_until(lambda: os.path.exists(f"/dev/shm/framebus.{local}") or child.poll() is not None, "the decoded stream", 60)
                if child.poll() is None:
                    with framebus.open(local) as r:
                        while child.poll() is None:
                            try:
                                f = r.wait_view(0.5)
                            except (TimeoutError, framebus.StreamEndedError):
                                continue
                            with f:
                                assert error(np.asarray(f), f.frame_id) < CLOSE, f"picture {f.frame_id} is corrupt"
                            checked += 1
                out, err = child.communicate(timeout=90)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            assert child.returncode == 0, err
            assert checked > 10, (out, err)
        finally:
            writer.stop()
            pub.stop()
            if os.path.exists(f"/dev/shm/framebus.{local}"):
                framebus.unlink(local)
    finally:
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", host, check=False)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(encode="vp9"), "encode must be one of"),
        (dict(bitrate="8M"), "give encode="),
        (dict(encode="h264", bitrate="fast"), "is not a rate"),
        (dict(encode="h264", gop=0), "gop must be"),
        (dict(encode="h264", encoder="no_such_encoder"), "does not work here"),
        (dict(encode="h264", compress="zstd"), "compress= does not apply"),
    ],
)
def test_bad_settings_are_refused(names, source, fields, match):
    with pytest.raises(ValueError, match=match):
        net.publish(source.name, "tcp://127.0.0.1:*", **fields)


def test_a_stream_that_is_not_an_image_is_refused(names):
    s = framebus.create(names("f32"), shape=(8, 8), dtype=np.float32)
    try:
        with pytest.raises(ValueError, match="uint8 images"):
            net.publish(s.name, "tcp://127.0.0.1:*", encode="h264")
    finally:
        s.unlink()


@pytest.mark.parametrize("codec", ["hevc", "av1", "mjpeg"])
def test_other_codecs_round_trip(names, source, codec):
    if not video.encoder_works(video.CODECS[codec]["software"][0]):
        pytest.skip(f"this PyAV has no {video.CODECS[codec]['software'][0]}")
    writer = Writer(source)
    pub = net.publish(source.name, "tcp://127.0.0.1:*", encode=codec, bitrate="4M", encoder=video.CODECS[codec]["software"][0])
    local = names("dec")
    sub = net.subscribe(pub.endpoint, local)
    try:
        for fid, arr in read_pictures(local, 5):
            assert error(arr, fid) < CLOSE
        from framebus.net.link import by_stream

        # framebus ls shows the encoded link: the codec, its rate, what was skipped
        wait_until(lambda: any(f"{codec} " in line and "decoded" in line for line in by_stream().get(local, [])), "the subscriber's status line")
    finally:
        sub.stop()
        writer.stop()
        pub.stop()


def test_a_restarted_producer_is_followed_at_its_new_size(names):
    """The producer removes its stream and creates it again at another size: the publisher
    follows it (a new encoder run, keyframe first) and the subscriber's decoded stream is
    created again at the new size."""
    name = names("src")
    first = framebus.create(name, shape=(H, W, 3), dtype=np.uint8, slots=4)
    writer = Writer(first)
    pub = net.publish(name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M", gop=1000)
    local = names("dec")
    sub = net.subscribe(pub.endpoint, local)
    try:
        for fid, arr in read_pictures(local, 3):
            assert error(arr, fid) < CLOSE
        writer.stop()
        first.unlink()
        second = framebus.create(name, shape=(H // 2, W // 2, 3), dtype=np.uint8, slots=4)
        try:
            for i in range(1, 400):
                second.write(picture(i)[::2, ::2].copy(), frame_id=i)
                time.sleep(0.01)
                try:
                    with framebus.open(local) as r:
                        if r.shape == (H // 2, W // 2, 3) and r.write_sequence > 0:
                            with r.view() as f:
                                assert float(np.abs(np.asarray(f).astype(np.int16) - picture(f.frame_id)[::2, ::2]).mean()) < CLOSE
                            break
                except FileNotFoundError:
                    pass
            else:
                raise AssertionError("the subscriber never decoded a picture of the new size")
        finally:
            second.unlink()
    finally:
        sub.stop()
        pub.stop()


def test_a_second_encoder_of_the_same_stream_is_refused(names, source):
    pub = net.publish(source.name, "tcp://127.0.0.1:*", encode="h264")
    try:
        with pytest.raises(framebus.StreamExistsError, match="already encoded as h264 by another publisher"):
            net.publish(source.name, "tcp://127.0.0.1:*", encode="h264")
        assert pub.running  # its packet stream was left alone
        assert os.path.exists(f"/dev/shm/framebus.{source.name}.h264")
    finally:
        pub.stop()


def test_top_shows_encoder_bitrate_and_keyframe_interval(names, source):
    writer = Writer(source)
    pub = net.publish(source.name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M", gop=45)
    try:
        wait_until(lambda: pub.encoder.bits_per_s > 0, "a bitrate figure")
        out = subprocess.run([sys.executable, "-m", "framebus", "top", "--once", source.name], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "libx264" in out.stdout and "Mbit/s" in out.stdout and "gop 45" in out.stdout, out.stdout
    finally:
        writer.stop()
        pub.stop()


def test_a_publisher_killed_and_restarted_takes_over_its_packet_stream(names, source, spawn):
    child = spawn(textwrap.dedent(f"""
        import framebus.net as net, time
        pub = net.publish({source.name!r}, "tcp://127.0.0.1:*", encode="h264")
        print("publishing", flush=True)
        time.sleep(60)
    """))
    child.expect("publishing")
    child.kill()  # SIGKILL: its packet stream stays behind
    child.close()
    assert os.path.exists(f"/dev/shm/framebus.{source.name}.h264")
    writer = Writer(source)
    pub = net.publish(source.name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M")
    local = names("dec")
    sub = net.subscribe(pub.endpoint, local)
    try:
        for fid, arr in read_pictures(local, 3):
            assert error(arr, fid) < CLOSE
    finally:
        sub.stop()
        writer.stop()
        pub.stop()
    assert not os.path.exists(f"/dev/shm/framebus.{source.name}.h264")


@pytest.mark.parametrize("text, bits", [("8M", 8_000_000), ("800k", 800_000), ("2.5M", 2_500_000), ("1G", 1_000_000_000), (2_000_000, 2_000_000), ("6Mbps", 6_000_000)])
def test_bitrates(text, bits):
    assert video.parse_bitrate(text) == bits


@pytest.mark.parametrize("bad", ["fast", "", "1k", "20G", True, None, [8]])
def test_bad_bitrates(bad):
    with pytest.raises((ValueError, TypeError)):
        video.parse_bitrate(bad)


@pytest.mark.parametrize("older", ["subscriber", "publisher"])
def test_a_peer_of_the_version_before_encoded_packets_is_refused_with_a_reason(names, source, older):
    """Version 4 brought encoded packets (F_PACKET, the WELCOME's video): a version 3 peer on
    either end gets a reason naming both versions, not a malformed-frame error."""
    from framebus.net.wire import protocol

    assert protocol.VERSION == 4
    old = "import framebus.net.wire.protocol as P; P.VERSION = 3\n"
    if older == "subscriber":
        pub = net.publish(source.name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M")
        try:
            code = old + textwrap.dedent(f"""
                import framebus.net as net
                try:
                    net.subscribe({pub.endpoint!r}, {names("dec")!r}, timeout=30)
                except net.ProtocolError as exc:
                    print("refused:", exc)
            """)
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        finally:
            pub.stop()
        text = run.stdout + run.stderr
    else:
        port = free_port()
        code = old + textwrap.dedent(f"""
            import sys, framebus.net as net
            pub = net.publish({source.name!r}, "tcp://127.0.0.1:{port}", encode="h264", bitrate="2M")
            print("publishing", flush=True)
            sys.stdin.read()
            pub.stop()
        """)
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "publishing"
            with pytest.raises(net.ProtocolError) as refused:
                net.subscribe(f"tcp://127.0.0.1:{port}", names("dec"), timeout=BOUND)
            text = f"refused: {refused.value}"
        finally:
            child.communicate("", timeout=60)
    assert text.startswith("refused:"), text
    assert re.search(r"protocol [34], the subscriber [34]", text) and "protocol 4, the subscriber 4" not in text, text


