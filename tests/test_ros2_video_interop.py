"""``framebus ros2 publish --encode h264`` against hiroz (a native Rust ROS 2 over Zenoh that
interoperates with rmw_zenoh_cpp): the test peer's ``sub-video`` mode subscribes to the
foxglove_msgs/msg/CompressedVideo topic with the type defined on its side (its fields, DDS name
and RIHS01 hash), is killed and started again mid-stream, and each start is checked for what
Foxglove and Lichtblick need to play the topic live: Annex B data, one access unit per message,
the first message a keyframe carrying its SPS and PPS before the IDR picture, and every message
from there decoding (PyAV) into the picture that was written.

The peer is built by scripts/build-ros2-peer.sh; without it these tests skip as those of
test_ros2_interop.py do. Timeouts are upper bounds, never measurements.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any, Iterator, List, Tuple

import numpy as np
import pytest

import framebus
from framebus.media import codec

av = pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")
from test_ros2_interop import peer, ros2, start_router  # noqa: E402 - skips this module without the peer
from test_ros2_video_lifecycle import CLOSE, SHAPE, T0, Camera, ffmpeg_errors, picture, wait  # noqa: E402
from bridge_helpers import free_port  # noqa: E402

NAL_IDR, NAL_SPS, NAL_PPS = 5, 7, 8


def decode_start(messages: list, folder) -> None:
    """Decodes the data hiroz received in one start (its --data-dir files), from the first
    message on, with a fresh decoder: each message gives exactly one picture, at once, without
    an FFmpeg error, and it is the picture written with that message's stamp."""
    dec = av.CodecContext.create("h264", "r")
    dec.thread_type = "SLICE"  # frame threads hold pictures back whatever the stream
    with ffmpeg_errors() as errors:
        for m in messages:
            pkt = av.Packet((folder / f"{m['n']}.h264").read_bytes())
            pkt.pts = m["n"]
            frames = dec.decode(pkt)
            assert [f.pts for f in frames] == [m["n"]], f"message {m['n']} gave pictures {[f.pts for f in frames]}"
            k = m["stamp_sec"] * 10**9 + m["stamp_nanosec"] - T0
            err = np.abs(frames[0].to_ndarray(format="rgb24").astype(int) - picture(SHAPE, k)).mean()
            assert err < CLOSE, f"message {m['n']}: picture {k} differs from the one written by {err:.1f} levels"
    assert errors == []


def is_keyframe(m: dict) -> bool:
    return NAL_IDR in m["nal_types"]


def check_start(messages: list, folder) -> None:
    """One start's messages, from its first keyframe on: that keyframe's data begins with the
    SPS and PPS (Annex B start codes) before the IDR picture, as every keyframe's does; each
    message is Annex B in format "h264" with the publisher's frame_id, stamps rise, and the
    messages decode from that keyframe on into the pictures written."""
    assert messages and is_keyframe(messages[0]), messages[:1]
    for m in messages:
        assert m["annex_b"] and m["format"] == "h264" and m["frame_id"] == "cam", m
        if is_keyframe(m):
            assert m["nal_types"][:2] == [NAL_SPS, NAL_PPS], m
    stamps = [m["stamp_sec"] * 10**9 + m["stamp_nanosec"] for m in messages]
    assert stamps == sorted(set(stamps))
    decode_start(messages, folder)


def video_sub(ep: str, folder):
    sub = peer("sub-video", "--connect", ep, "--topic", "/interop/video", "--data-dir", str(folder))
    sub.json(lambda d: d.get("ready"))
    return sub


def publish(name: str, ep: str):
    return ros2.publish(name, "/interop/video", encode="h264", encoder="libx264", gop=100000, frame_id="cam", connect=[ep],
                        scouting=False, status=False)


@contextlib.contextmanager
def h264_topic(name: str) -> Iterator[Tuple[str, Any, List[Any]]]:
    """A router on a port of its own and ``framebus ros2 publish --encode h264`` of stream
    ``name`` through it: yields (the router's endpoint, the publisher, a list for the hiroz
    subscriptions started); on leaving, the publisher has stopped without an error, every
    subscription is closed and the router killed."""
    port = free_port()
    ep = f"tcp/127.0.0.1:{port}"
    router = start_router(port)
    subs: List[Any] = []
    try:
        pub = publish(name, ep)
        try:
            yield ep, pub, subs
            assert pub.error is None
        finally:
            pub.stop()
    finally:
        for s in subs:
            s.close()
        router.stop(signal.SIGKILL)


def test_hiroz_video_subscription_started_again_gets_a_keyframe_first(name, tmp_path):
    """A hiroz CompressedVideo subscription is started, killed (SIGKILL) and started again,
    three times; each start comes while the camera is paused (longer than the shortest time
    between two forced keyframes), which resumes once the publisher saw the subscription: the
    first message of each start is the keyframe forced for it (gop
    100000: no other comes), SPS and PPS first, and everything from it decodes."""
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as src, Camera(src) as camera, h264_topic(name) as (ep, pub, subs):
        for start in range(3):
            folder = tmp_path / f"start{start}"
            folder.mkdir()
            camera.pause()
            time.sleep(codec.KEY_MIN_INTERVAL)  # the last forced keyframe is that long ago: the next is not held back
            joined = pub.joined
            subs.append(video_sub(ep, folder))
            wait(lambda: pub.joined > joined, "the publisher never saw the subscription")
            camera.resume()
            messages = [subs[-1].json(lambda d: "n" in d, what=f"message {i} of start {start}") for i in range(10)]
            subs[-1].stop(signal.SIGKILL)
            check_start(messages, folder)


def test_hiroz_video_subscription_joining_a_running_stream_decodes_from_its_keyframe(name, tmp_path):
    """The same while the camera writes on: a subscription may first get a few delta pictures
    (sent before its liveliness token reached the publisher; a player skips them), then the
    keyframe forced for it, SPS and PPS first, from which every message decodes. Three starts,
    each killed with SIGKILL."""
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as src, Camera(src), h264_topic(name) as (ep, pub, subs):
        for start in range(3):
            folder = tmp_path / f"start{start}"
            folder.mkdir()
            subs.append(video_sub(ep, folder))
            before = []
            while not before or not is_keyframe(before[-1]):
                before.append(subs[-1].json(lambda d: "n" in d, what=f"a keyframe in start {start}"))
            messages = before[-1:] + [subs[-1].json(lambda d: "n" in d) for _ in range(9)]
            subs[-1].stop(signal.SIGKILL)
            assert all(m["annex_b"] and m["nal_types"] and not is_keyframe(m) for m in before[:-1]), before
            check_start(messages, folder)
