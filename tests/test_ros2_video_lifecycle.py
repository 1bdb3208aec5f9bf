"""The seams of an H.264 ROS 2 topic's life (``framebus ros2 publish --encode h264``, a
foxglove_msgs/msg/CompressedVideo topic, and ``framebus ros2 subscribe`` decoding it): a
publishing process that forks, either side killed (SIGKILL) and started again mid-stream, a new
publisher taking over a topic, the router restarted under both, and the stream's order (no
B-frames: decode order is presentation order, one picture per message).

Every picture is checked against what was written: the camera writes picture k (a smooth
pattern that H.264 keeps within a few levels) with timestamp T0 + k, so each picture read back
names the one it must look like. Keyframes come only when forced (gop 100000): a side that
resumes with pictures got a keyframe made for it. Timeouts are upper bounds, never measurements.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

import framebus

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
av = pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")
ros2 = pytest.importorskip("framebus.ros2")
from framebus.media import codec  # noqa: E402
from framebus.ros2 import rmw, video  # noqa: E402
from bridge_helpers import free_port  # noqa: E402
from conftest import Child  # noqa: E402
from ros2_helpers import FB, Proc, fb_router  # noqa: E402
from test_ros2_video import VIDEO, VIDEO_HASH, picture  # noqa: E402

BOUND = 30.0
SHAPE = (48, 64, 3)
T0 = 1_000_000_000
#: The largest mean difference (levels) between a decoded picture and the one written.
CLOSE = 6.0
ENCODE = ["--encode", "h264", "--encoder", "libx264", "--gop", "100000"]


def wait(cond, what):
    deadline = time.monotonic() + BOUND
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@contextlib.contextmanager
def ffmpeg_errors():
    """Gives a list that collects FFmpeg's error messages (ERROR and worse) meanwhile."""
    previous = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)  # PyAV passes none on by default
    try:
        with av.logging.Capture() as logs:
            yield logs
    finally:
        av.logging.set_level(previous)


def check(p) -> int:
    """The picture index of a publication read from a subscriber's stream, after checking that
    it looks like the picture written with that timestamp (a picture decoded from the wrong
    references, or a half-decoded one, does not)."""
    k = p.timestamp_ns - T0
    assert 0 <= k < 10**6, f"a picture with a timestamp nobody wrote: {p.timestamp_ns}"
    err = np.abs(np.asarray(p.payload).astype(int) - picture(SHAPE, k)).mean()
    assert err < CLOSE, f"picture {k} differs from the one written (mean difference {err:.1f} levels)"
    return k


def read_pictures(out, n: int) -> list:
    """The next ``n`` pictures of ``out`` (each checked), as their indices."""
    return [check(out.read_new_publication(timeout=BOUND)) for _ in range(n)]


class Camera:
    """Writes picture k with timestamp T0 + k into ``src`` at least 30 ms apart, on a thread,
    until it is paused (``pause()`` returns once no write is under way) or stopped."""

    def __init__(self, src) -> None:
        self.src, self.k = src, 0
        self._stop, self._hold, self._held = threading.Event(), threading.Event(), threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._hold.is_set():
                self._held.set()
                self._stop.wait(0.01)
                continue
            self.src.write(picture(SHAPE, self.k), timestamp_ns=T0 + self.k)
            self.k += 1
            self._stop.wait(0.03)

    def pause(self) -> None:
        self._hold.set()
        assert self._held.wait(BOUND), "the camera never paused"

    def resume(self) -> None:
        self._held.clear()
        self._hold.clear()

    def __enter__(self) -> "Camera":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(BOUND)


def open_when_there(name: str):
    wait(lambda: os.path.exists(f"/dev/shm/framebus.{name}"), f"stream {name} never appeared")
    return framebus.open(name)


def fb_publish(name: str, topic: str, *zenoh_args: str) -> Proc:
    p = Proc([*FB, "publish", name, "--topic", topic, *ENCODE, "--no-scouting", "--quiet", *zenoh_args])
    p.expect(lambda s: s.startswith("framebus ros2 publish:"), what="the publisher's start line")
    return p


def fb_subscribe(topic: str, name: str, *zenoh_args: str) -> Proc:
    p = Proc([*FB, "subscribe", topic, "--stream", name, "--no-scouting", "--quiet", *zenoh_args])
    p.expect(lambda s: s.startswith("framebus ros2 subscribe:"), what="the subscriber's start line")
    return p


def stop_line(p: Proc, sig: int = signal.SIGINT) -> tuple:
    """Stops a framebus ros2 command; (frames, dropped) of its stop line."""
    assert p.stop(sig) == 128 + sig
    line = p.expect(lambda s: s.startswith("stopped:"), what="the stop line")
    m = re.match(r"stopped: (\d+) frames, .* MB, (\d+) dropped", line)
    assert m, line
    return int(m.group(1)), int(m.group(2))


# -- fork ----------------------------------------------------------------------------------------
FORKING = """
import gc, json
from framebus import ros2
from framebus.errors import StreamExistsError
NAME, EP, OTHER = {name!r}, {ep!r}, {other!r}

def picture(i):
    h, w = 48, 64
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 2 + y + i * 9) % 200 + 20
    return np.stack([base, (base + 60) % 256, 255 - base], axis=-1).astype(np.uint8)

src = framebus.create(NAME, shape=(48, 64, 3), dtype=np.uint8)
pub = ros2.publish(NAME, "/life/fork", encode="h264", encoder="libx264", gop=100000, listen=[EP], scouting=False, status=False)
say("ready")
while True:
    cmd = hear().split()
    if cmd[0] == "write":
        k = int(cmd[1])
        src.write(picture(k), timestamp_ns={t0} + k)
    elif cmd[0] == "fork":
        pid = os.fork()
        if pid == 0:  # the child: does what the test asks with its copy of the publisher
            report = {{"running": pub.running}}
            if cmd[1] == "stop":
                pub.stop(timeout=5)
                report["stopped"] = True
            elif cmd[1] == "drop":
                del pub
                gc.collect()
            elif cmd[1] == "publish":
                try:
                    ros2.publish(NAME, "/life/fork2", encode="h264", encoder="libx264", listen=[OTHER], scouting=False, status=False)
                except StreamExistsError as exc:
                    report["refused"] = str(exc)
            say("child", json.dumps(report))
            if cmd[1] == "exit":
                sys.exit(0)  # through the interpreter's finalisation, with the copy alive
            os._exit(0)
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                say("child hung")
                break
            time.sleep(0.02)
        else:
            say("child gone")
    elif cmd[0] == "stats":
        s = pub.stats
        say(json.dumps({{"frames": s.frames, "dropped": s.dropped, "error": None if pub.error is None else repr(pub.error),
                         "packets": os.path.exists("/dev/shm/framebus." + NAME + ".h264"), "joined": pub.joined}}))
    elif cmd[0] == "stop":
        pub.stop()
        src.unlink()
        say("stopped")
        break
"""


@pytest.mark.parametrize("then", ["nothing", "stop", "drop", "publish", "exit"])
def test_a_publishing_process_that_forks_keeps_its_topic(name, then):
    """A process publishing an H.264 topic forks; the child does ``then`` with its copy of the
    publisher (nothing and os._exit, stop(), drop it, start a second publisher of the stream,
    or leave through the interpreter's exit). The child's copy is inert: no thread runs it there
    (``running`` is False), its stop() returns at once and touches nothing of the parent's, a
    second encoder of the stream is refused (StreamExistsError), and nothing the child does
    reaches the topic. The parent keeps publishing: every picture arrives once, in order,
    decodable and right, none dropped or skipped."""
    port, other = free_port(), free_port()
    ep = f"tcp/127.0.0.1:{port}"
    child = Child(FORKING.format(name=name, ep=ep, other=f"tcp/127.0.0.1:{other}", t0=T0))
    sub = None
    try:
        child.expect("ready")
        sub = ros2.subscribe("/life/fork", name + "-dst", connect=[ep], scouting=False, status=False)

        def send(k: int) -> None:
            child.send(f"write {k}")
            wait(lambda: sub.stats.frames == k + 1, f"picture {k} did not arrive: {sub.stats}")

        send(0)
        with framebus.open(name + "-dst") as out:
            assert check(out.read_publication()) == 0
            for k in range(1, 5):
                send(k)
                assert check(out.read_publication()) == k
            child.send(f"fork {then}")
            report = json.loads(child.line().split(" ", 1)[1])
            assert report["running"] is False
            if then == "publish":
                assert "already encoded" in report["refused"]
            assert child.line() == "child gone"
            for k in range(5, 15):
                send(k)
                assert check(out.read_publication()) == k
        child.send("stats")
        stats = json.loads(child.line())
        assert (stats["frames"], stats["dropped"], stats["error"], stats["packets"]) == (15, 0, None, True)
        assert sub.stats.frames == 15 and sub.stats.dropped == 0 and sub.video.skipped == 0 and sub.error is None
        child.send("stop")
        child.expect("stopped")
        child.finish()
    finally:
        if sub is not None:
            sub.stop()
        child.close()


# -- either side killed and started again ------------------------------------------------------------
def test_subscribe_killed_and_started_again_resumes_at_a_keyframe(name):
    """`framebus ros2 subscribe` of an H.264 topic is killed (SIGKILL) mid-stream and started
    again: the new one takes over the stream the test still reads, a keyframe is forced for
    its subscription (the only way it decodes a picture here), and every picture it writes is
    the one written. The publisher counts the pictures nobody received meanwhile as dropped."""
    port = free_port()
    ep = f"tcp/127.0.0.1:{port}"
    dst = name + "-dst"
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as src, Camera(src):
        pub = fb_publish(name, "/life/sub", "--listen", ep)
        sub = fb_subscribe("/life/sub", dst, "--connect", ep)
        sub2 = None
        try:
            with open_when_there(dst) as out:
                before = read_pictures(out, 10)
                sub.stop(signal.SIGKILL)
                sub2 = fb_subscribe("/life/sub", dst, "--connect", ep)
                after = read_pictures(out, 10)
            assert before == sorted(before) and after == sorted(after) and after[0] > before[-1]
            frames, _ = stop_line(sub2)
            assert frames >= 10
            _, dropped = stop_line(pub)
            assert dropped > 0  # the pictures made while no subscriber was reached
        finally:
            for p in (sub, sub2, pub):
                if p is not None:
                    p.close()


def test_publish_killed_and_started_again_the_subscriber_resumes(name):
    """`framebus ros2 publish --encode h264` is killed (SIGKILL) mid-stream and started again
    (a new encoder run: new parameter sets, a new publisher GID, sequence numbers from 1)
    while the subscriber runs on: the subscriber decodes the new run from its first keyframe,
    and every picture it writes is the one written (none decoded against the old run's
    pictures)."""
    port = free_port()
    ep = f"tcp/127.0.0.1:{port}"
    router = fb_router(ep)
    dst = name + "-dst"
    pub = pub2 = None
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as src, Camera(src):
        sub = ros2.subscribe("/life/pub", dst, connect=[ep], scouting=False, status=False)
        try:
            pub = fb_publish(name, "/life/pub", "--connect", ep)
            with open_when_there(dst) as out:
                before = read_pictures(out, 10)
                pub.stop(signal.SIGKILL)
                pub2 = fb_publish(name, "/life/pub", "--connect", ep)
                after = read_pictures(out, 10)
            assert after[0] > before[-1]
            assert len(sub.publishers) == 2 and sub.error is None
            stop_line(pub2)
        finally:
            sub.stop()
            for p in (pub, pub2, router):
                if p is not None:
                    p.close()


class RawPublisher:
    """A Zenoh publisher of a CompressedVideo topic with rmw_zenoh's attachment, as a ROS 2
    publisher of its own GID would send it (for messages the test makes)."""

    def __init__(self, session, topic: str) -> None:
        self.pub = session.declare_publisher(rmw.topic_key(0, topic, VIDEO, VIDEO_HASH))
        self.gid = os.urandom(rmw.GID_SIZE)

    def send(self, seq: int, data: bytes, k: int) -> None:
        self.pub.put(video.pack_video(data, T0 + k, "cam"), attachment=rmw.pack_attachment(seq, time.time_ns(), self.gid))


def encode_run(ks, force=()) -> list:
    """The access units of one libx264 run over pictures ``ks`` (keyframes: the first and the
    positions in ``force``)."""
    s = codec.VideoSettings.of("h264", gop=1000, encoder="libx264")
    enc = codec.PictureEncoder("libx264", s, SHAPE[1], SHAPE[0], SHAPE[2])
    out = []
    for i, k in enumerate(ks):
        out += [data for data, _ in enc.encode(picture(SHAPE, k), (T0 + k) * 1000, i in force)]
    return out


def test_a_new_publishers_run_is_decoded_from_its_own_keyframe(name):
    """Publisher A's run is being decoded when publisher B (another GID, another encoder run)
    takes the topic over and the subscriber misses B's first keyframe: B's pictures before its
    next keyframe are skipped (counted), never decoded against A's pictures, and B's keyframe
    starts the decoder again."""
    port = free_port()
    cfg = zenoh.Config()
    cfg.insert_json5("scouting/multicast/enabled", "false")
    cfg.insert_json5("listen/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
    run_a = encode_run([0, 1, 2])
    run_b = encode_run([100, 101, 102, 103, 104], force={3})
    written = []
    with zenoh.open(cfg) as session:
        a, b = RawPublisher(session, "/life/takeover"), RawPublisher(session, "/life/takeover")
        sub = ros2.subscribe("/life/takeover", name + "-dst", connect=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        try:
            wait(lambda: a.pub.matching_status.matching and b.pub.matching_status.matching, "the subscription never matched")

            def handled() -> int:  # messages written or counted as skipped (each of these is one)
                return sub.stats.frames + sub.stats.dropped

            def send(pub: RawPublisher, seq: int, data: bytes, k: int) -> None:
                n, frames = handled(), sub.stats.frames
                pub.send(seq, data, k)
                wait(lambda: handled() == n + 1, f"message {seq} of a publisher was not handled: {sub.stats}")
                if sub.stats.frames > frames:
                    with framebus.open(name + "-dst") as out:
                        written.append(check(out.read_publication()))

            for i, data in enumerate(run_a):
                send(a, i + 1, data, i)
            # B's first message (its keyframe) never arrives: its sequence numbers start at 2 here.
            for i in range(1, 5):
                send(b, i + 1, run_b[i], 100 + i)
            assert written == [0, 1, 2, 103, 104]
            assert sub.video.skipped == 2 and sub.stats.dropped == 2 and sub.error is None
        finally:
            sub.stop()


# -- the router restarted ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["peer", "client"])
def test_router_restart_during_h264_both_sides_resume(name, mode):
    """`framebus ros2 router` is killed and started again on its port under an H.264 topic
    (publisher and subscriber connected through it). Peer mode (ROS 2's default): the two ends
    linked directly, so pictures keep coming while it is away. Client mode (everything through
    the router): nothing flows while it is away; afterwards the subscriber decodes again from
    a keyframe (forced: the only kind here), and the publisher counts the pictures it could
    not send as dropped (in its stats and its stop line). Every picture the subscriber writes,
    before, during and after, is the one written."""
    port = free_port()
    ep = f"tcp/127.0.0.1:{port}"
    router = fb_router(ep)
    dst = name + "-dst"
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as src, Camera(src):
        pub = ros2.publish(name, "/life/router", encode="h264", encoder="libx264", gop=100000, connect=[ep], scouting=False,
                           zenoh_mode=mode, status=False)
        sub = ros2.subscribe("/life/router", dst, connect=[ep], scouting=False, zenoh_mode=mode, status=False)
        try:
            with open_when_there(dst) as out:
                before = read_pictures(out, 10)
                router.stop(signal.SIGKILL)
                if mode == "peer":
                    during = read_pictures(out, 10)
                else:
                    forced = pub.encoder.forced_keyframes
                    wait(lambda: "waiting for a Zenoh router" in pub.stats.state, f"the publisher never noticed: {pub.stats}")
                    frames = sub.stats.frames
                    wait(lambda: pub.stats.dropped >= 5, f"no pictures counted while unsent: {pub.stats}")
                    assert sub.stats.frames <= frames + 1  # nothing flows (one may have been on its way)
                    during = []
                router = fb_router(ep)
                after = read_pictures(out, 10)
            seen = before + during + after
            assert seen == sorted(seen)
            assert pub.error is None and sub.error is None
            if mode == "client":
                assert pub.stats.dropped > 0
                assert pub.encoder.forced_keyframes > forced  # what came after the gap started at one
        finally:
            sub.stop()
            pub.stop()
            router.stop(signal.SIGKILL)


def test_an_image_publisher_counts_the_frames_it_could_not_send(name):
    """The same count for a raw Image topic: once its only subscriber (linked directly, no
    router) is gone, each frame the publisher takes and cannot send is counted as dropped."""
    port = free_port()
    with framebus.create(name, shape=(8, 8), dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/life/image", listen=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        sub = ros2.subscribe("/life/image", name + "-dst", connect=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        try:
            wait(lambda: pub.matched, "the subscription never matched")
            for k in range(3):
                src.write(np.full((8, 8), k, np.uint8))
                wait(lambda: sub.stats.frames == k + 1, f"frame {k} did not arrive")
            sub.stop()
            wait(lambda: "waiting for" in pub.stats.state, f"the publisher never noticed: {pub.stats}")
            for k in range(3, 7):
                src.write(np.full((8, 8), k, np.uint8))  # frame k has sequence number k + 1
                wait(lambda: pub.stats.last_seq == k + 1, f"frame {k} was not taken: {pub.stats}")
            assert (pub.stats.frames, pub.stats.dropped) == (3, 4)
        finally:
            sub.stop()
            pub.stop()


# -- what Foxglove and Lichtblick need to play it live ---------------------------------------------
def test_the_stream_decodes_in_order_one_picture_per_message(name):
    """Each message is one access unit in Annex B, the first a keyframe carrying SPS and PPS
    before its IDR picture; a plain H.264 decoder (no low-delay flag) gives exactly one picture
    per message at once, in the order sent, each an I or P picture: no B-frames, decode order
    is presentation order."""
    port = free_port()
    got: list = []
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/life/order", encode="h264", encoder="libx264", gop=10, listen=[f"tcp/127.0.0.1:{port}"],
                           scouting=False, status=False)
        cfg = zenoh.Config()
        cfg.insert_json5("scouting/multicast/enabled", "false")
        cfg.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
        try:
            with zenoh.open(cfg) as session:
                tap = session.declare_subscriber(pub.key, lambda s: got.append(bytes(s.payload.to_bytes())))
                wait(lambda: pub.matched, "the tap never matched")
                for k in range(25):
                    src.write(picture(SHAPE, k), timestamp_ns=T0 + k)
                    wait(lambda: len(got) == k + 1, f"message {k} never came")
                tap.undeclare()
        finally:
            pub.stop()
    msgs = [video.unpack_video(m) for m in got]
    assert [m.stamp_ns - T0 for m in msgs] == list(range(25))
    assert all(m.format == "h264" and bytes(m.data[:4]) == b"\x00\x00\x00\x01" for m in msgs)
    assert video.nal_types(msgs[0].data)[:2] == [7, 8] and 5 in video.nal_types(msgs[0].data)
    dec = av.CodecContext.create("h264", "r")
    dec.thread_type = "SLICE"  # frame threads hold pictures back whatever the stream
    kinds = []
    with ffmpeg_errors() as errors:
        for i, m in enumerate(msgs):
            pkt = av.Packet(bytes(m.data))
            pkt.pts = i
            frames = dec.decode(pkt)
            assert [f.pts for f in frames] == [i], f"message {i} gave pictures {[f.pts for f in frames]}"
            kinds.append(av.video.frame.PictureType(frames[0].pict_type).name)
            err = np.abs(frames[0].to_ndarray(format="rgb24").astype(int) - picture(SHAPE, i)).mean()
            assert err < CLOSE, (i, err)
        assert dec.decode(None) == []  # nothing held back
    assert errors == []
    assert set(kinds) <= {"I", "P"} and kinds[0] == "I" and "P" in kinds, kinds
