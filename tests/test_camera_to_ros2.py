"""The chain from a camera to ROS 2 across machines, end to end: examples/camera_to_ros2.py on
loopback, and W12 (``framebus-bench W12 --smoke``: the far side in a network namespace). Both
skip, saying why, without PyAV, eclipse-zenoh and rosbags (and W12 without root for ip netns).
Bounded waits only; no figure is checked, only that images arrive and every lost frame is
counted by framebus."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "camera_to_ros2.py")


def _needs() -> None:
    for module, what in (("av", "PyAV"), ("zenoh", "eclipse-zenoh"), ("rosbags", "rosbags")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the chain needs {what} (framebus[video,zenoh])")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(240)
def test_example_runs_end_to_end_on_loopback(tmp_path):
    _needs()
    video, ros = f"tcp/127.0.0.1:{_port()}", f"tcp/127.0.0.1:{_port()}"
    out = tmp_path / "camera.mp4"
    prefix = f"t{os.getpid()}-"
    proc = subprocess.run(
        [sys.executable, EXAMPLE, "--seconds", "3", "--size", "320x240", "--listen", video, "--connect", video, "--ros-listen", ros,
         "--record", str(out), "--prefix", prefix],
        capture_output=True, text=True, timeout=200, cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ROS node: " in proc.stdout and "no image arrived" not in proc.stdout, proc.stdout + proc.stderr[-2000:]
    # The recording is the H.264 packets as they came, remuxed: a file that decodes.
    import av

    with av.open(str(out)) as c:
        assert c.streams.video[0].codec_context.name == "h264"
        assert sum(1 for _ in c.decode(video=0)) > 0
    assert not [e for e in os.listdir("/dev/shm") if e.startswith(f"framebus.{prefix}")]


def test_hiroz_lines_are_read():
    from framebus_bench.chain import _hiroz_stamp

    assert _hiroz_stamp('{"stamp": {"sec": 2, "nanosec": 5}, "recv_ns": 9}') == (2_000_000_005, 9)
    assert _hiroz_stamp('{"stamp_ns": 7, "received_ns": 8}') == (7, 8)
    # What the hiroz test peer (tests/ros2_peer, `sub` mode) prints for each image.
    assert _hiroz_stamp('{"n":0,"width":4,"stamp_sec":3,"stamp_nanosec":40,"frame_id":"camera","recv_ns":77}') == (3_000_000_040, 77)
    assert _hiroz_stamp("not json") is None
    assert _hiroz_stamp('{"width": 4}') is None


def test_bad_ros_node_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "framebus_bench", "W12", "--smoke", "--ros-node", "rclpy"], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 2 and "--ros-node takes framebus or hiroz:PATH" in proc.stderr


@pytest.mark.timeout(240)
def test_w12_smoke_runs_end_to_end(tmp_path):
    _needs()
    proc = subprocess.run(
        [sys.executable, "-m", "framebus_bench", "W12", "--smoke", "--ros-node", "framebus", "--json", "w12.json"],
        capture_output=True, text=True, timeout=200, cwd=str(tmp_path), env=dict(os.environ, COLUMNS="200"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "w12.json", encoding="utf-8") as f:
        suite = next(s for s in json.load(f)["suites"] if s["id"] == "W12")
    skipped = [n for n in suite["notes"] if "W12 skipped" in n]
    if skipped:
        pytest.skip(skipped[0])
    assert len(suite["rows"]) == 5
    details = suite["rows"][-1]["extra"]["details"]
    assert details["at_ros"] > 0 and details["errors"] == []
    assert details["ros_node"] == "framebus ros2 subscribe"
    assert all(details["shown"].values()), details["shown"]  # every stage in framebus top / ls
    hops = [k for k in details["lost"] if k != "end to end"]
    assert all(details["lost"][k] <= details["counted"][k] for k in hops), (details["lost"], details["counted"], details["counters"])
    assert details["record"]["in_file"] > 0
