"""The Zenoh router that docs/ros2.md and docs/zenoh.md offer (`framebus ros2 router`, from
eclipse-zenoh: no hiroz or ROS needed) works: run as the docs say, with an endpoint on loopback,
it routes a ROS 2 image topic between two framebus peers that connect only to it, and Ctrl-C
stops it cleanly. Timeouts are upper bounds, never measurements."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import framebus

pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
ros2 = pytest.importorskip("framebus.ros2")
from bridge_helpers import BOUND, free_port, names, wait_until  # noqa: E402,F401

DOCS = Path(__file__).resolve().parent.parent / "docs"
COMMAND = "framebus ros2 router --listen "


def test_the_documents_offer_one_and_the_same_router():
    for doc in ("ros2.md", "zenoh.md"):
        text = (DOCS / doc).read_text()
        assert COMMAND in text, f"{doc} does not show `{COMMAND}ENDPOINT`"
        assert '"mode", \'"router"\'' not in text, f"{doc} still offers a hand-written router"


def test_the_documented_router_routes_between_two_framebus_peers(names, tmp_path):
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    src_name, dst_name = names("src"), names("dst")
    shape = (6, 8, 3)
    router = subprocess.Popen([sys.executable, "-m", "framebus", *COMMAND.split()[1:], endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert endpoint in router.stdout.readline()
        with framebus.create(src_name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
            # Both peers only connect (no listen endpoint of their own is named): the router joins them.
            pub = ros2.publish(src_name, "/docs/router", connect=[endpoint], scouting=False)
            sub = ros2.subscribe("/docs/router", dst_name, connect=[endpoint], scouting=False)
            try:
                wait_until(lambda: pub.stats.state == "running", "the publisher to reach the router")
                wait_until(lambda: pub.matched, "the subscription to reach the publisher through the router")
                deadline = time.monotonic() + BOUND
                while not os.path.exists(f"/dev/shm/framebus.{dst_name}"):  # repeated until the first image lands
                    assert time.monotonic() < deadline, "no image arrived through the router"
                    src.write(np.full(shape, 1, np.uint8))
                    time.sleep(0.05)
                with framebus.open(dst_name, mode="lossless") as out:
                    src.write(np.full(shape, 42, np.uint8))
                    got = out.read_new(timeout=BOUND)
                    while int(got[0, 0, 0]) != 42:
                        got = out.read_new(timeout=BOUND)
                    assert np.array_equal(got, np.full(shape, 42, np.uint8))
            finally:
                sub.stop()
                pub.stop()
        router.send_signal(signal.SIGINT)
        _, err = router.communicate(timeout=BOUND)
        assert router.returncode == 0, err
    finally:
        router.kill()
        router.wait(BOUND)
        router.stdout.close()
        router.stderr.close()
