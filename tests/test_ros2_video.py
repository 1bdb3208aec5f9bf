"""H.264 as a ROS 2 topic: ``framebus ros2 publish --encode h264`` (foxglove_msgs/msg/CompressedVideo,
what Foxglove and Lichtblick play) and ``framebus ros2 subscribe`` of such a topic (decoded into
rgb8 frames). The message against rosbags' CDR of its definition, the type name and hash in the
key and the tokens, publisher -> subscriber peer to peer on loopback, a late subscriber's first
message, and bad input refused before anything is published.

Timeouts are upper bounds, never measurements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import framebus

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")
ros2 = pytest.importorskip("framebus.ros2")
from rosbags.typesys import Stores, get_types_from_msg, get_typestore  # noqa: E402

from framebus.media import codec  # noqa: E402
from framebus.ros2 import rmw, video  # noqa: E402
from bridge_helpers import free_port  # noqa: E402

BOUND = 30.0
VIDEO = "foxglove_msgs/msg/CompressedVideo"
#: RIHS01 of foxglove_msgs/msg/CompressedVideo (timestamp, frame_id, data, format), as rosbags
#: computes it from the definition (no published value was found to compare with).
VIDEO_HASH = "RIHS01_32039eafc3770e589c86c4dabff9c392ce9955ebffd43f5f60763011d43d8d1d"


def store():
    ts = get_typestore(Stores.ROS2_JAZZY)
    ts.register(get_types_from_msg("builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n", VIDEO))
    return ts


@pytest.fixture
def name():
    n = f"t-ros2v-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for s in (n, n + "-dst", n + "-late", n + ".h264"):
        if os.path.exists(f"/dev/shm/framebus.{s}"):
            framebus.unlink(s)
            pytest.fail(f"stream left behind: {s}")


def picture(shape, i):
    """A smooth picture (H.264 keeps it within a few levels) that differs per ``i``."""
    h, w = shape[:2]
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 2 + y + i * 9) % 200 + 20
    return np.stack([base, (base + 60) % 256, 255 - base], axis=-1).astype(np.uint8)[..., : shape[2]]


def wait(cond, what):
    deadline = time.monotonic() + BOUND
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


# -- the message -------------------------------------------------------------------------------
@pytest.mark.parametrize("frame_id", ["", "c", "ca", "cam", "camera_optical_frame", "kamera_ü"])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 37])
def test_compressed_video_cdr_is_rosbags_cdr_both_ways(frame_id, n):
    ts = store()
    payload = np.arange(n, dtype=np.uint8) + 1
    stamp = 1_700_000_000_123_456_789
    ours = video.pack_video(payload.tobytes(), stamp, frame_id, "h264")
    T = ts.types["builtin_interfaces/msg/Time"]
    theirs = bytes(ts.serialize_cdr(ts.types[VIDEO](timestamp=T(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id=frame_id, data=payload, format="h264"), VIDEO))
    assert ours == theirs
    back = ts.deserialize_cdr(ours, VIDEO)
    assert (back.timestamp.sec, back.timestamp.nanosec, back.frame_id, back.format) == (stamp // 10**9, stamp % 10**9, frame_id, "h264")
    assert bytes(back.data) == payload.tobytes()
    got = video.unpack_video(theirs)
    assert (got.stamp_ns, got.frame_id, got.format) == (stamp, frame_id, "h264") and got.data.tobytes() == payload.tobytes()
    with pytest.raises(ValueError, match="truncated|bytes follow"):
        video.unpack_video(theirs[:-1])


def test_the_type_name_and_hash_are_rmw_zenohs():
    assert video.DEFINITION == "builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n"
    assert rmw.type_hash(VIDEO) == str(store().hash_rihs01(VIDEO)) == VIDEO_HASH
    assert rmw.type_hash("sensor_msgs/msg/Image") != VIDEO_HASH  # registering it leaves the other types alone
    assert rmw.topic_key(0, "/camera/h264", VIDEO, VIDEO_HASH) == f"0/camera/h264/foxglove_msgs::msg::dds_::CompressedVideo_/{VIDEO_HASH}"


def encoded(n, shape=(48, 64, 3), force=()):
    """(access unit, keyframe) for ``n`` pictures from libx264 (keyframes: the first and ``force``)."""
    s = codec.VideoSettings.of("h264", gop=1000, encoder="libx264")
    enc = codec.PictureEncoder("libx264", s, shape[1], shape[0], shape[2])
    out = []
    for i in range(n):
        out += enc.encode(picture(shape, i), i * 33_000_000, i in force)
    return out


def test_keyframes_carry_their_parameter_sets_and_others_get_them_put_back():
    units = encoded(4, force={2})
    assert [k for _, k in units] == [True, False, True, False]
    for data, key in units:
        assert data.startswith(b"\x00\x00\x00\x01")  # Annex B
        assert video.is_keyframe(data) == key
    sets = video.ParameterSets()
    first = sets.complete(units[0][0], True)
    assert first == units[0][0]
    bare = b"".join(b"\x00\x00\x00\x01" + u for u in video.nal_units(units[2][0]) if u[0] & 0x1F not in (7, 8))
    assert not video.is_keyframe(bare)
    fixed = sets.complete(bare, True)
    assert video.is_keyframe(fixed) and video.nal_types(fixed)[:2] == [7, 8]
    assert sets.complete(units[1][0], False) == units[1][0]


def test_the_decoder_starts_at_a_keyframe_and_skips_after_a_gap():
    units = encoded(6, force={3})
    msgs = [video.pack_video(d, i, "cam") for i, (d, _) in enumerate(units)]
    dec = video.VideoDecoder()
    assert dec.decode(msgs[1]) is None and dec.decode(msgs[2]) is None  # no keyframe yet
    assert dec.skipped == 2
    got = dec.decode(msgs[3])
    assert got is not None and dec.first_from_keyframe is True and got.data.shape == (48, 64, 3) and got.encoding == "rgb8"
    assert np.abs(got.data.astype(int) - picture((48, 64, 3), 3)).mean() < 6
    assert dec.decode(msgs[4]) is not None
    assert dec.decode(msgs[5], gap=True) is None and dec.skipped == 3  # a message was missed: wait for a keyframe
    assert dec.decode(msgs[0]) is not None and dec.pictures == 3
    with pytest.raises(ValueError, match="h264"):
        dec.decode(video.pack_video(b"x", 0, "", "vp9"))


# -- over Zenoh, peer to peer on loopback --------------------------------------------------------
def tokens(port):
    cfg = zenoh.Config()
    cfg.insert_json5("scouting/multicast/enabled", "false")
    cfg.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
    with zenoh.open(cfg) as s:
        time.sleep(0.2)
        return [rmw.parse_token(str(r.ok.key_expr)) for r in s.liveliness().get("@ros2_lv/**", timeout=5) if r.ok is not None]


def test_h264_publish_to_subscribe(name):
    port = free_port()
    shape, n = (48, 64, 3), 12
    with framebus.create(name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/cam/h264", encode="h264", encoder="libx264", frame_id="cam", listen=[f"tcp/127.0.0.1:{port}"],
                           scouting=False, status=False)
        try:
            assert isinstance(pub, ros2.VideoPublisher)
            assert pub.key == f"0/cam/h264/foxglove_msgs::msg::dds_::CompressedVideo_/{VIDEO_HASH}"
            sub = ros2.subscribe("/cam/h264", name + "-dst", connect=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
            try:
                wait(lambda: pub.matched, "the subscription never reached the publisher")
                src.write(picture(shape, 0), timestamp_ns=1_000)
                wait(lambda: sub.stats.frames == 1, "no picture arrived")
                with framebus.open(name + "-dst", mode="lossless") as out:
                    assert out.shape == shape and out.dtype == np.uint8
                    for i in range(1, n):
                        src.write(picture(shape, i), timestamp_ns=1_000 + i)
                        p = out.read_new_publication(timeout=BOUND)
                        assert p.timestamp_ns == 1_000 + i  # in order, none skipped
                        assert np.abs(np.asarray(p.payload).astype(int) - picture(shape, i)).mean() < 6
                        assert json.loads(p.meta) == {"frame_id": "cam", "encoding": "rgb8"}
                found = {t.kind: t for t in tokens(port) if t.topic == "/cam/h264"}
                assert (found["MP"].dds_type, found["MP"].type_hash) == ("foxglove_msgs::msg::dds_::CompressedVideo_", VIDEO_HASH)
                # the subscriber announces the topic's type once it knows it
                assert (found["MS"].dds_type, found["MS"].type_hash) == ("foxglove_msgs::msg::dds_::CompressedVideo_", VIDEO_HASH)
                assert sub.stats.frames == pub.stats.frames == n and sub.stats.dropped == 0
                assert sub.video.skipped == 0 and sub.video.first_from_keyframe is True
            finally:
                sub.stop()
        finally:
            pub.stop()


def test_a_late_subscriber_starts_at_a_keyframe(name):
    """With a keyframe only every 100000 pictures, a subscriber that joins gets one at once: its
    first message is a keyframe and decodes."""
    port = free_port()
    shape = (48, 64, 3)
    with framebus.create(name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/cam/late", encode="h264", encoder="libx264", gop=100000, listen=[f"tcp/127.0.0.1:{port}"],
                           scouting=False, status=False)
        first = ros2.subscribe("/cam/late", name + "-dst", connect=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        late = None
        try:
            wait(lambda: pub.matched, "the subscription never reached the publisher")
            for i in range(5):
                src.write(picture(shape, i), timestamp_ns=1_000 + i)
                wait(lambda: first.stats.frames == i + 1, "a picture did not arrive")
            time.sleep(codec.KEY_MIN_INTERVAL)  # the keyframe forced for the first subscriber is that long ago
            joined = pub.joined
            late = ros2.subscribe("/cam/late", name + "-late", connect=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
            wait(lambda: pub.joined > joined, "the publisher never saw the late subscription")
            for i in range(5, 10):
                src.write(picture(shape, i), timestamp_ns=1_000 + i)
                wait(lambda: first.stats.frames == i + 1, "a picture did not arrive")
            wait(lambda: late.stats.frames >= 1, "the late subscriber never got a picture")
            assert late.video.skipped == 0 and late.video.first_from_keyframe is True
            assert first.video.skipped == 0 and first.stats.frames == 10
        finally:
            if late is not None:
                late.stop()
            first.stop()
            pub.stop()


@pytest.mark.parametrize("shape,dtype,why", [((48, 64, 3), np.float32, "uint8"), ((47, 64, 3), np.uint8, "even"), ((48, 64, 2), np.uint8, "channels")])
def test_a_stream_h264_cannot_carry_is_refused_before_anything_is_published(name, shape, dtype, why):
    port = free_port()
    with framebus.create(name, shape=shape, dtype=dtype, auto_unlink=True):
        with pytest.raises(ValueError, match=why):
            ros2.publish(name, "/cam/bad", encode="h264", listen=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        assert not os.path.exists(f"/dev/shm/framebus.{name}.h264")
        with pytest.raises(ValueError, match="encode"):
            ros2.publish(name, "/cam/bad", gop=10, listen=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        with pytest.raises(ValueError, match="bgr"):
            ros2.publish(name, "/cam/bad", encode="h264", bgr=True, listen=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        with pytest.raises(ValueError, match="encode must be one of"):
            ros2.publish(name, "/cam/bad", encode="h265x", listen=[f"tcp/127.0.0.1:{port}"], scouting=False, status=False)
        if why == "uint8":
            r = subprocess.run([sys.executable, "-m", "framebus", "ros2", "publish", name, "--topic", "/cam/bad", "--encode", "h264",
                                "--listen", f"tcp/127.0.0.1:{port}", "--no-scouting"], capture_output=True, text=True, timeout=BOUND)
            assert r.returncode == 1 and "framebus ros2 publish:" in r.stderr and "uint8" in r.stderr, r.stderr
