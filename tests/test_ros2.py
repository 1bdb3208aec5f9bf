"""framebus.ros2: streams as ROS 2 sensor_msgs/msg/Image topics the way rmw_zenoh carries them,
checked without ROS: names and bytes against rmw_zenoh's design document, messages against
rosbags' CDR, and a plain Zenoh peer in another process on the other side.

Each test uses its own TCP port, peer mode on loopback without scouting and explicit
listen/connect endpoints. Timeouts are upper bounds, never measurements.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

import framebus

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
ros2 = pytest.importorskip("framebus.ros2")
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from framebus.net import SpecMismatchError  # noqa: E402
from framebus.ros2 import image as I  # noqa: E402
from framebus.ros2 import rmw  # noqa: E402
from bridge_helpers import free_port  # noqa: E402

BOUND = 30.0
TS = get_typestore(Stores.ROS2_JAZZY)
STRING_HASH = "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18"
ADD_TWO_INTS_HASH = "RIHS01_e118de6bf5eeb66a2491b5bda11202e7b68f198d6f67922cf30364858239c81a"




@pytest.fixture
def name():
    n = f"t-ros2-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for s in (n, n + "-dst"):
        if os.path.exists(f"/dev/shm/framebus.{s}"):
            framebus.unlink(s)
            pytest.fail(f"stream left behind: {s}")


def frame(shape, i, dtype=np.uint8):
    return np.random.default_rng(i).integers(0, 255, size=shape).astype(dtype)


def ros_image(arr, encoding, stamp_ns=1_700_000_000_000_000_123, frame_id="camera"):
    Img, Hdr, T = TS.types["sensor_msgs/msg/Image"], TS.types["std_msgs/msg/Header"], TS.types["builtin_interfaces/msg/Time"]
    return Img(
        header=Hdr(stamp=T(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9), frame_id=frame_id), height=arr.shape[0], width=arr.shape[1],
        encoding=encoding, is_bigendian=0, step=arr.strides[0], data=np.ascontiguousarray(arr).reshape(-1).view(np.uint8),
    )


# -- names and bytes, against the design document's examples ---------------------------------
def test_key_expressions_match_the_design_document():
    assert rmw.type_hash("std_msgs/msg/String") == STRING_HASH
    assert rmw.topic_key(0, "chatter", "std_msgs/msg/String", STRING_HASH) == f"0/chatter/std_msgs::msg::dds_::String_/{STRING_HASH}"
    assert rmw.topic_key(0, "/robot1/chatter", "std_msgs/msg/String", STRING_HASH) == f"0/robot1/chatter/std_msgs::msg::dds_::String_/{STRING_HASH}"
    assert rmw.topic_key(2, "/add_two_ints", "example_interfaces/srv/AddTwoInts", ADD_TWO_INTS_HASH) == (
        f"2/add_two_ints/example_interfaces::srv::dds_::AddTwoInts_/{ADD_TWO_INTS_HASH}"
    )
    assert rmw.topic_key(0, "/camera/image_raw", "sensor_msgs/msg/Image", rmw.type_hash("sensor_msgs/msg/Image")).startswith(
        "0/camera/image_raw/sensor_msgs::msg::dds_::Image_/RIHS01_"
    )
    with pytest.raises(ValueError, match="not a valid ROS 2 topic name"):
        rmw.topic_key(0, "/camera//raw", "sensor_msgs/msg/Image", "x")
    with pytest.raises(ValueError, match="domain id"):
        rmw.check_domain(300)


def test_liveliness_tokens_match_the_design_document():
    assert rmw.node_token(2, "aac3178e146ba6f1fc6e6a4085e77f21", 0, "", "listener") == "@ros2_lv/2/aac3178e146ba6f1fc6e6a4085e77f21/0/0/NN/%/%/listener"
    sub = rmw.entity_token("MS", 2, "aac3178e146ba6f1fc6e6a4085e77f21", 0, 10, "", "listener", "/chatter", "std_msgs/msg/String", STRING_HASH, rmw.qos_string(depth=10))
    assert sub == f"@ros2_lv/2/aac3178e146ba6f1fc6e6a4085e77f21/0/10/MS/%/%/listener/%chatter/std_msgs::msg::dds_::String_/{STRING_HASH}/::,10:,:,:,,"
    pub = rmw.entity_token("MP", 2, "8b20917502ee955ac4476e0266340d5c", 0, 10, "", "talker", "/chatter", "std_msgs/msg/String", STRING_HASH, rmw.qos_string(depth=7))
    assert pub == f"@ros2_lv/2/8b20917502ee955ac4476e0266340d5c/0/10/MP/%/%/talker/%chatter/std_msgs::msg::dds_::String_/{STRING_HASH}/::,7:,:,:,,"
    t = rmw.parse_token(pub)
    assert (t.domain, t.zid, t.node_id, t.entity_id, t.kind, t.namespace, t.node, t.topic) == (2, "8b20917502ee955ac4476e0266340d5c", 0, 10, "MP", "", "talker", "/chatter")
    assert rmw.parse_qos(t.qos) == (1, 2, 1, 7) and rmw.parse_qos(rmw.qos_string(rmw.BEST_EFFORT, 5)) == (2, 2, 1, 5)
    assert rmw.parse_token("@ros2_lv/2/aac3178e146ba6f1fc6e6a4085e77f21/0/0/NN/%/%/listener").kind == "NN"
    with pytest.raises(ValueError):
        rmw.parse_token("0/chatter/std_msgs::msg::dds_::String_/x")


def test_attachment_layout():
    """8 bytes sequence number (int64 LE), 8 bytes source timestamp (int64 LE), one byte GID
    length (16), the 16-byte GID."""
    gid = bytes(range(16))
    att = rmw.pack_attachment(7, 1_700_000_000_000_000_001, gid)
    assert att == b"\x07" + b"\x00" * 7 + (1_700_000_000_000_000_001).to_bytes(8, "little") + b"\x10" + gid
    assert len(att) == 33 and rmw.unpack_attachment(att) == (7, 1_700_000_000_000_000_001, gid)
    with pytest.raises(ValueError):
        rmw.unpack_attachment(att[:-1])


@pytest.mark.parametrize("shape,dtype,bgr,encoding", [
    ((4, 6, 3), np.uint8, False, "rgb8"), ((4, 6, 3), np.uint8, True, "bgr8"), ((4, 6, 4), np.uint8, False, "rgba8"),
    ((4, 6), np.uint8, False, "mono8"), ((4, 6), np.uint16, False, "mono16"), ((4, 6), np.float32, False, "32FC1"),
    ((4, 6, 1), np.uint8, False, "mono8"), ((4, 6, 2), np.uint8, False, "8UC2"), ((4, 6, 3), np.uint16, False, "rgb16"),
    ((4, 6), np.int16, False, "16SC1"), ((4, 6, 3), np.float64, False, "64FC3"),
])
def test_image_cdr_is_rosbags_cdr(shape, dtype, bgr, encoding):
    arr = frame(shape, 3, dtype)
    assert I.encoding_of(shape, np.dtype(dtype), bgr=bgr) == encoding
    for frame_id in ("", "cam", "camera_link"):
        ours = I.pack_image(arr, 1_700_000_000_000_000_123, frame_id, encoding)
        theirs = bytes(TS.serialize_cdr(ros_image(arr, encoding, frame_id=frame_id), "sensor_msgs/msg/Image"))
        assert ours == theirs
        back = I.unpack_image(theirs)
        assert back.encoding == encoding and back.frame_id == frame_id and back.stamp_ns == 1_700_000_000_000_000_123
        assert back.data.dtype == np.dtype(dtype) and np.array_equal(back.data.reshape(arr.shape), arr)
    with pytest.raises(ValueError, match="ROS image"):
        I.encoding_of((2, 3, 5), np.dtype(np.uint8))


def test_padded_rows_and_bad_messages():
    arr = frame((3, 5, 3), 1)
    padded = np.zeros((3, 20), np.uint8)
    padded[:, :15] = arr.reshape(3, 15)
    msg = ros_image(arr, "rgb8")
    msg.step, msg.data = 20, padded.reshape(-1)
    back = I.unpack_image(bytes(TS.serialize_cdr(msg, "sensor_msgs/msg/Image")))
    assert np.array_equal(back.data, arr)
    good = bytes(TS.serialize_cdr(ros_image(arr, "rgb8"), "sensor_msgs/msg/Image"))
    with pytest.raises(ValueError):
        I.unpack_image(good[:-5])
    with pytest.raises(ValueError, match="encoding"):
        I.unpack_image(bytes(TS.serialize_cdr(ros_image(arr, "weird9"), "sensor_msgs/msg/Image")))


# -- over Zenoh, with a plain Zenoh peer in another process ----------------------------------
PEER = """
import json, sys, zenoh
from rosbags.typesys import Stores, get_typestore
ts = get_typestore(Stores.ROS2_JAZZY)
cfg = zenoh.Config()
cfg.insert_json5("scouting/multicast/enabled", "false")
cfg.insert_json5("connect/endpoints", json.dumps([sys.argv[1]]))
s = zenoh.open(cfg)
"""


def test_a_zenoh_peer_receives_the_published_topic(name):
    port = free_port()
    shape, n = (48, 64, 3), 6
    code = PEER + textwrap.dedent("""
        import hashlib, time
        key = sys.argv[2]
        def on(sample):
            msg = ts.deserialize_cdr(sample.payload.to_bytes(), "sensor_msgs/msg/Image")
            print(json.dumps({"key": str(sample.key_expr), "att": sample.attachment.to_bytes().hex(), "enc": msg.encoding,
                              "fid": msg.header.frame_id, "sec": msg.header.stamp.sec, "nsec": msg.header.stamp.nanosec,
                              "hw": [msg.height, msg.width, msg.step], "sha": hashlib.sha256(msg.data.tobytes()).hexdigest()}), flush=True)
        sub = s.declare_subscriber(key, on)
        deadline = time.monotonic() + 30
        tokens = []
        while time.monotonic() < deadline and len(tokens) < 2:
            tokens = sorted(str(r.ok.key_expr) for r in s.liveliness().get("@ros2_lv/**", timeout=2) if r.ok is not None)
        print(json.dumps({"tokens": tokens}), flush=True)
        sys.stdin.readline()
        sub.undeclare(); s.close()
    """)
    with framebus.create(name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/camera/image_raw", frame_id="camera", listen=[f"tcp/127.0.0.1:{port}"], scouting=False)
        try:
            proc = subprocess.Popen([sys.executable, "-c", code, f"tcp/127.0.0.1:{port}", pub.key], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                tokens = json.loads(proc.stdout.readline())["tokens"]
                parsed = sorted((rmw.parse_token(t) for t in tokens), key=lambda t: t.kind)
                assert [t.kind for t in parsed] == ["MP", "NN"]
                mp = parsed[0]
                assert mp.topic == "/camera/image_raw" and mp.dds_type == "sensor_msgs::msg::dds_::Image_"
                assert mp.type_hash == rmw.type_hash("sensor_msgs/msg/Image") and mp.zid == parsed[1].zid
                assert rmw.parse_qos(mp.qos) == (1, 2, 1, 10)
                deadline = time.monotonic() + BOUND
                while not pub.matched:  # until then a message would go nowhere
                    assert time.monotonic() < deadline, "the peer's subscription never reached the publisher"
                    time.sleep(0.01)
                for i in range(n):
                    src.write(frame(shape, i), timestamp_ns=1_700_000_000_000_000_000 + i)
                    got = json.loads(proc.stdout.readline())
                    assert got["key"] == pub.key == f"0/camera/image_raw/sensor_msgs::msg::dds_::Image_/{rmw.type_hash('sensor_msgs/msg/Image')}"
                    seq, ts_ns, gid = rmw.unpack_attachment(bytes.fromhex(got["att"]))
                    assert seq == i + 1 and gid == pub.gid and ts_ns > 0
                    assert (got["enc"], got["fid"], got["sec"], got["nsec"]) == ("rgb8", "camera", 1_700_000_000, i)
                    assert got["hw"] == [48, 64, 64 * 3]
                    import hashlib
                    assert got["sha"] == hashlib.sha256(frame(shape, i).tobytes()).hexdigest()
                from framebus.net.link import status

                deadline = time.monotonic() + BOUND  # the record is refreshed about twice a second
                while not status.by_stream()[name][0].startswith("-> ros2:/camera/image_raw (running, 1 sub"):
                    assert time.monotonic() < deadline, status.by_stream()[name]
                    time.sleep(0.05)
                proc.stdin.write("\n")
                proc.stdin.flush()
                assert proc.wait(BOUND) == 0
            finally:
                proc.kill()
                proc.wait(BOUND)
                proc.stdin.close()
                proc.stdout.close()
        finally:
            pub.stop()
    assert pub.stats.frames == n


def test_a_rosbags_message_put_by_a_zenoh_peer_lands_in_a_stream(name):
    port = free_port()
    dst = name + "-dst"
    shape = (30, 40)
    key = rmw.topic_key(0, "/depth/image", "sensor_msgs/msg/Image", rmw.type_hash("sensor_msgs/msg/Image"))
    code = PEER + textwrap.dedent("""
        import numpy as np
        sys.path.insert(0, sys.argv[3])
        from test_ros2 import frame, ros_image
        from framebus.ros2 import rmw
        pub = s.declare_publisher(sys.argv[2])
        gid = bytes(range(16))
        for line in sys.stdin:
            i = int(line)
            if i < 0:
                break
            arr = frame((30, 40), i, np.uint16)
            data = bytes(ts.serialize_cdr(ros_image(arr, "mono16", stamp_ns=1_600_000_000_000_000_000 + i, frame_id="depth"), "sensor_msgs/msg/Image"))
            pub.put(data, attachment=rmw.pack_attachment(i + 1, 0, gid))
            print("put", flush=True)
        pub.undeclare(); s.close()
    """)
    sub = ros2.subscribe("/depth/image", dst, listen=[f"tcp/127.0.0.1:{port}"], scouting=False)
    proc = subprocess.Popen([sys.executable, "-c", code, f"tcp/127.0.0.1:{port}", key, os.path.dirname(__file__)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        # Until the peer's publisher sees the subscription, its puts go nowhere: repeat frame 0.
        deadline = time.monotonic() + BOUND
        while not os.path.exists(f"/dev/shm/framebus.{dst}"):
            assert time.monotonic() < deadline, "no image arrived"
            proc.stdin.write("0\n")
            proc.stdin.flush()
            proc.stdout.readline()
            time.sleep(0.1)
        with framebus.open(dst, mode="lossless") as out:
            assert out.shape == shape and out.dtype == np.uint16
            for i in range(1, 5):
                proc.stdin.write(f"{i}\n")
                proc.stdin.flush()
                proc.stdout.readline()
                p = out.read_new_publication(timeout=BOUND)
                while p.frame_id != i + 1:  # a repeated frame 0 may still be ahead
                    p = out.read_new_publication(timeout=BOUND)
                assert np.array_equal(p.payload, frame(shape, i, np.uint16))
                assert p.timestamp_ns == 1_600_000_000_000_000_000 + i
                assert json.loads(p.meta) == {"frame_id": "depth", "encoding": "mono16"}
        proc.stdin.write("-1\n")
        proc.stdin.flush()
        assert proc.wait(BOUND) == 0
    finally:
        proc.kill()
        proc.wait(BOUND)
        proc.stdin.close()
        proc.stdout.close()
        sub.stop()
    assert not os.path.exists(f"/dev/shm/framebus.{dst}")


def test_a_size_change_is_refused_or_follows_a_variable_stream(name):
    port = free_port()
    key = rmw.topic_key(0, "/cam", "sensor_msgs/msg/Image", rmw.type_hash("sensor_msgs/msg/Image"))
    dst = name + "-dst"
    for capacity in (None, 1 << 16):
        sub = ros2.subscribe("/cam", dst, listen=[f"tcp/127.0.0.1:{port}"], scouting=False, capacity=capacity)
        cfg = zenoh.Config()
        cfg.insert_json5("scouting/multicast/enabled", "false")
        cfg.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
        s = zenoh.open(cfg)
        try:
            pub = s.declare_publisher(key)
            deadline = time.monotonic() + BOUND
            while not pub.matching_status.matching:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            small, big = frame((4, 5, 3), 1), frame((8, 10, 3), 2)
            pub.put(I.pack_image(small, 1, "c", "rgb8"))
            deadline = time.monotonic() + BOUND
            while sub.stats.frames < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            pub.put(I.pack_image(big, 2, "c", "rgb8"))
            if capacity is None:
                with pytest.raises(SpecMismatchError, match="changed from shape .* capacity"):
                    sub.join(BOUND)
            else:
                with framebus.open(dst, mode="lossless") as out:
                    deadline = time.monotonic() + BOUND
                    while sub.stats.frames < 2:
                        assert time.monotonic() < deadline
                        time.sleep(0.01)
                    assert np.array_equal(np.asarray(out.read_publication().payload), big)
            pub.undeclare()
        finally:
            s.close()
            try:
                sub.stop()
            except SpecMismatchError:
                pass
        assert not os.path.exists(f"/dev/shm/framebus.{dst}")


def test_cli_ros2_publish_and_subscribe(name):
    """`framebus ros2 publish` -> Zenoh -> `framebus ros2 subscribe`, then SIGTERM: exit 143."""
    import signal

    port = free_port()
    dst = name + "-dst"
    shape = (6, 8, 3)
    exe = [sys.executable, "-m", "framebus", "ros2"]
    with framebus.create(name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = subprocess.Popen([*exe, "publish", name, "--topic", "/cli/image", "--frame-id", "cam", "--listen", f"tcp/127.0.0.1:{port}",
                                "--no-scouting", "--quiet"], stdout=subprocess.PIPE, text=True)
        sub = subprocess.Popen([*exe, "subscribe", "/cli/image", "--stream", dst, "--connect", f"tcp/127.0.0.1:{port}", "--no-scouting",
                                "--quiet"], stdout=subprocess.PIPE, text=True)
        try:
            assert "framebus ros2 publish" in pub.stdout.readline()
            assert "framebus ros2 subscribe" in sub.stdout.readline()
            deadline = time.monotonic() + BOUND
            i = 0
            while not os.path.exists(f"/dev/shm/framebus.{dst}"):  # repeated until the subscription is known
                assert time.monotonic() < deadline, "no image arrived"
                src.write(frame(shape, i))
                time.sleep(0.05)
            with framebus.open(dst, mode="lossless") as out:
                src.write(frame(shape, 99))
                p = out.read_new_publication(timeout=BOUND)
                while not np.array_equal(p.payload, frame(shape, 99)):
                    p = out.read_new_publication(timeout=BOUND)
                assert json.loads(p.meta) == {"frame_id": "cam", "encoding": "rgb8"}
            for p in (sub, pub):
                p.send_signal(signal.SIGTERM)
                out_text, _ = p.communicate(timeout=BOUND)
                assert p.returncode == 143 and "stopped:" in out_text, (p.args, out_text)
        finally:
            for p in (sub, pub):
                p.kill()
                p.wait(BOUND)
                p.stdout.close()
    assert not os.path.exists(f"/dev/shm/framebus.{dst}")


def _png(arr):
    """A PNG of ``arr`` (H, W, 3) uint8 RGB or (H, W) uint8, encoded by FFmpeg."""
    from framebus.ffmpeg import find_ffmpeg

    pix = "rgb24" if arr.ndim == 3 else "gray"
    cmd = [find_ffmpeg(), "-v", "error", "-f", "rawvideo", "-pix_fmt", pix, "-s", f"{arr.shape[1]}x{arr.shape[0]}", "-i", "pipe:0",
           "-frames:v", "1", "-f", "image2pipe", "-vcodec", "png", "pipe:1"]
    return subprocess.run(cmd, input=arr.tobytes(), stdout=subprocess.PIPE, check=True).stdout


@pytest.mark.parametrize("shape,fmt", [((24, 32, 3), "rgb8; png compressed rgb8"), ((24, 32), "mono8; png compressed mono8")])
def test_a_compressed_image_is_decoded_into_a_stream(name, shape, fmt):
    pytest.importorskip("imageio_ffmpeg")  # encodes the PNG here
    pytest.importorskip("av", reason="CompressedImage decoding needs PyAV (pip install 'framebus[video]')")
    port = free_port()
    dst = name + "-dst"
    arr = frame(shape, 5)
    C, Hdr, T = TS.types["sensor_msgs/msg/CompressedImage"], TS.types["std_msgs/msg/Header"], TS.types["builtin_interfaces/msg/Time"]
    msg = C(header=Hdr(stamp=T(sec=12, nanosec=34), frame_id="cam"), format=fmt, data=np.frombuffer(_png(arr), np.uint8))
    data = bytes(TS.serialize_cdr(msg, "sensor_msgs/msg/CompressedImage"))
    key = rmw.topic_key(0, "/cam/compressed", "sensor_msgs/msg/CompressedImage", rmw.type_hash("sensor_msgs/msg/CompressedImage"))
    sub = ros2.subscribe("/cam/compressed", dst, listen=[f"tcp/127.0.0.1:{port}"], scouting=False)
    cfg = zenoh.Config()
    cfg.insert_json5("scouting/multicast/enabled", "false")
    cfg.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
    s = zenoh.open(cfg)
    try:
        pub = s.declare_publisher(key)
        deadline = time.monotonic() + BOUND
        while not pub.matching_status.matching:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        pub.put(data, attachment=rmw.pack_attachment(1, 0, bytes(16)))
        while sub.stats.frames < 1:
            assert time.monotonic() < deadline and sub.error is None, sub.error
            time.sleep(0.01)
        with framebus.open(dst) as out:
            p = out.read_publication()
            assert np.array_equal(p.payload, arr) and p.timestamp_ns == 12_000_000_034
            assert json.loads(p.meta) == {"frame_id": "cam", "encoding": "rgb8" if len(shape) == 3 else "mono8"}
        pub.undeclare()
    finally:
        s.close()
        sub.stop()
    assert not os.path.exists(f"/dev/shm/framebus.{dst}")


def test_the_publisher_waits_out_an_ended_stream(name):
    """An ended source is waited on (state "source ended"), and a frame written after it is published."""
    import queue

    port = free_port()
    shape = (4, 6)
    with framebus.create(name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/ended", listen=[f"tcp/127.0.0.1:{port}"], scouting=False)
        cfg = zenoh.Config()
        cfg.insert_json5("scouting/multicast/enabled", "false")
        cfg.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
        s = zenoh.open(cfg)
        got = queue.Queue()
        try:
            zsub = s.declare_subscriber(pub.key, lambda sample: got.put(sample.payload.to_bytes()))
            deadline = time.monotonic() + BOUND
            while not pub.matched:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            src.write(frame(shape, 1))
            assert np.array_equal(I.unpack_image(got.get(timeout=BOUND)).data, frame(shape, 1))
            src.end()
            while pub.stats.state != "source ended":
                assert time.monotonic() < deadline and pub.running
                time.sleep(0.01)
            src.write(frame(shape, 2))
            assert np.array_equal(I.unpack_image(got.get(timeout=BOUND)).data, frame(shape, 2))
            assert pub.stats.state == "running" and pub.stats.frames == 2
            zsub.undeclare()
        finally:
            s.close()
            pub.stop()


def test_a_variable_shape_stream_is_published_frame_by_frame(name):
    """Each frame of a variable-shape stream becomes an Image of its own size and encoding."""
    import queue

    port = free_port()
    with framebus.create(name, capacity=1 << 16, slots=4, auto_unlink=True) as src:
        pub = ros2.publish(name, "/var", listen=[f"tcp/127.0.0.1:{port}"], scouting=False)
        cfg = zenoh.Config()
        cfg.insert_json5("scouting/multicast/enabled", "false")
        cfg.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
        s = zenoh.open(cfg)
        got = queue.Queue()
        try:
            zsub = s.declare_subscriber(pub.key, lambda sample: got.put(sample.payload.to_bytes()))
            deadline = time.monotonic() + BOUND
            while not pub.matched:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            for arr, enc in [(frame((4, 6, 3), 1), "rgb8"), (frame((10, 3), 2, np.uint16), "mono16")]:
                src.write(arr)
                img = I.unpack_image(got.get(timeout=BOUND))
                assert img.encoding == enc and np.array_equal(img.data, arr)
            zsub.undeclare()
        finally:
            s.close()
            pub.stop()


def test_an_entity_token_with_chunks_after_its_qos_is_read():
    """hiroz's subscription tokens carry one more chunk after the QoS (its buffer backends); the
    token is still read, QoS included (it was refused as not a token, hiding the subscription)."""
    key = ("@ros2_lv/0/e3ebf6f0ef7d1f3db881cbfb10d541db/0/1/MS/%/%/strict_sub/%qq/sensor_msgs::msg::dds_::Image_/"
           f"{rmw.type_hash('sensor_msgs/msg/Image')}/::,10:,:,:,,/backends:cpu:")
    tok = rmw.parse_token(key)
    assert (tok.kind, tok.node, tok.topic, tok.qos) == ("MS", "strict_sub", "/qq", "::,10:,:,:,,")


def test_qos_incompatibility_rules():
    from framebus.ros2.qos import Qos, incompatibility

    assert incompatibility(Qos("best_effort"), Qos("reliable")).startswith("reliability")
    assert incompatibility(Qos(durability="volatile"), Qos(durability="transient_local")).startswith("durability")
    assert incompatibility(Qos("reliable", "transient_local"), Qos("best_effort", "volatile")) is None
    assert Qos.from_token(Qos("best_effort", "transient_local", 3).token()) == Qos("best_effort", "transient_local", 3)
    with pytest.raises(ValueError, match="durability"):
        Qos(durability="persistent")


def test_a_subscriber_counts_the_publishers_the_topic_has_now(name):
    """A publisher that stopped and one started in its place (another GID) count as one: the
    subscriber's peers are the topic's publishers now (their liveliness tokens), not every
    publisher it ever heard from."""
    port = free_port()
    shape = (6, 8, 3)
    dst = name + "-dst"

    def until(cond, what):
        deadline = time.monotonic() + BOUND
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    with framebus.create(name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        sub = ros2.subscribe("/peers", dst, listen=[f"tcp/127.0.0.1:{port}"], scouting=False)
        try:
            gids = []
            for run in range(2):
                pub = ros2.publish(name, "/peers", connect=[f"tcp/127.0.0.1:{port}"], scouting=False)
                try:
                    gids.append(pub.gid)
                    i = 0

                    def heard() -> bool:
                        nonlocal i
                        src.write(frame(shape, i))
                        i += 1
                        return pub.gid in sub.publishers

                    until(heard, f"run {run}: no image from the publisher arrived")
                    until(lambda: sub.stats.peers == 1, f"run {run}: peers {sub.stats.peers}, publishers heard {len(sub.publishers)}")
                finally:
                    pub.stop()
                until(lambda: sub.stats.peers == 0, f"run {run}: the stopped publisher still counted ({sub.stats.peers})")
            assert len(set(gids)) == 2 and len(sub.publishers) == 2  # both were heard from
        finally:
            sub.stop()
