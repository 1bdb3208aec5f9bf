"""Zenoh ends that reach nobody say so: ``framebus ros2 publish|subscribe`` and the Zenoh bridge
engine, with nothing listening at ``--connect``, report "waiting for a Zenoh router at ENDPOINT"
(their status line, ``framebus ls``, ``framebus top``) instead of "running", say at the end that
no router or peer was reached, and turn to their usual states once a router listens there.

The router is a Zenoh session in router mode opened by the test on a loopback port. Timeouts
are upper bounds, never measurements.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import framebus

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
ros2 = pytest.importorskip("framebus.ros2")
from framebus import net  # noqa: E402
from framebus.net import PeerTimeoutError  # noqa: E402
from bridge_helpers import BOUND, bridges, free_port, names, wait_until  # noqa: E402,F401

EXE = [sys.executable, "-m", "framebus"]


def router(endpoint):
    """A Zenoh router listening on ``endpoint`` (a session in router mode, no scouting)."""
    cfg = zenoh.Config()
    cfg.insert_json5("mode", '"router"')
    cfg.insert_json5("listen/endpoints", json.dumps([endpoint]))
    cfg.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(cfg)


class Lines:
    """The lines a child prints, read on a thread so that each wait is bounded."""

    def __init__(self, proc):
        self.q: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=lambda: [self.q.put(line.rstrip("\n")) for line in proc.stdout], daemon=True)
        self.thread.start()

    def next(self):
        return self.q.get(timeout=BOUND)

    def until(self, pred, what):
        seen = []
        while True:
            try:
                line = self.q.get(timeout=BOUND)
            except queue.Empty:
                raise AssertionError(f"no line {what} within {BOUND} s; got {seen}") from None
            seen.append(line)
            if pred(line):
                return line


def ls_bridges(name):
    out = subprocess.run([*EXE, "ls", "--json"], capture_output=True, text=True, timeout=BOUND, check=True).stdout
    return next(r["bridges"] for r in json.loads(out) if r["name"] == name)


def top_labels(name, role):
    out = subprocess.run([*EXE, "top", "--json", "--interval", "0.1", name], capture_output=True, text=True, timeout=BOUND, check=True).stdout
    (stream,) = json.loads(out)["streams"]
    return [r["label"] for r in stream["readers"] if r["role"] == role]


def publish_cli(name, endpoint, topic):
    return subprocess.Popen([*EXE, "ros2", "publish", name, "--topic", topic, "--connect", endpoint, "--no-scouting", "--quiet"],
                            stdout=subprocess.PIPE, text=True)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=BOUND)
    return out


def test_ros2_publish_waits_for_the_router_then_runs(names):
    name = names("src")
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    waiting = f"waiting for a Zenoh router at {endpoint}"
    with framebus.create(name, shape=(4, 6, 3), dtype=np.uint8, auto_unlink=True) as src:
        proc = publish_cli(name, endpoint, "/reach/image")
        try:
            lines = Lines(proc)
            assert "framebus ros2 publish" in lines.next()
            assert lines.next() == f"state: {waiting}"
            src.write(np.ones((4, 6, 3), np.uint8))
            wait_until(lambda: any(f"({waiting}," in b for b in ls_bridges(name)), "framebus ls to show the bridge waiting")
            # The core keeps 48 bytes of a label: the endpoint stays whole in a shorter wording.
            assert top_labels(name, "bridge out") == [waiting if len(waiting) <= 48 else f"waiting for router {endpoint}"]
            r = router(endpoint)
            try:
                assert lines.until(lambda line: line.startswith("state:"), "with the next state") == "state: running"
                wait_until(lambda: any(b.startswith("-> ros2:/reach/image (running,") for b in ls_bridges(name)), "framebus ls to show it running")
                wait_until(lambda: top_labels(name, "bridge out") == ["-> ros2 /reach/image"], "framebus top to show the topic again")
                proc.send_signal(signal.SIGTERM)
                last = lines.until(lambda line: line.startswith("stopped:"), "saying it stopped")
                assert "no Zenoh router" not in last, last
                assert proc.wait(BOUND) == 143
            finally:
                r.close()
        finally:
            proc.kill()
            proc.wait(BOUND)
            proc.stdout.close()


def test_ros2_publish_to_nobody_says_so_when_it_stops(names):
    name = names("src")
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    with framebus.create(name, shape=(4, 6), dtype=np.uint8, auto_unlink=True) as src:
        proc = publish_cli(name, endpoint, "/reach/nobody")
        try:
            assert proc.stdout.readline().startswith("framebus ros2 publish")
            assert proc.stdout.readline().strip() == f"state: waiting for a Zenoh router at {endpoint}"
            for i in range(5):
                src.write(np.full((4, 6), i, np.uint8))
            wait_until(lambda: any("waiting for a Zenoh router" in b for b in ls_bridges(name)), "the status record")
            out = stop(proc)
            assert proc.returncode == 143
            # Nothing left the process: no frame is counted as sent, and the line says why.
            assert f"stopped: 0 frames, 0.0 MB, 0 dropped; no Zenoh router or peer was reached at {endpoint}, so nothing was exchanged" in out, out
        finally:
            proc.kill()
            proc.wait(BOUND)
            proc.stdout.close()


def test_the_label_top_shows_never_cuts_an_endpoint():
    from framebus.net.zenoh import Reach, ZenohLink

    def label(**kw):
        return Reach(ZenohLink(**kw).config()).label

    assert label(connect=["tcp/localhost:7447"]) == "waiting for a Zenoh router at tcp/localhost:7447"
    assert label(connect=["tcp/127.0.0.1:41677"]) == "waiting for router tcp/127.0.0.1:41677"
    assert label(connect=["tcp/a-rather-long-router-name.example.org:7447"]) == "waiting for a Zenoh router"
    assert label(listen=["tcp/0.0.0.0:7448"]) == "waiting for a peer on tcp/0.0.0.0:7448"
    assert label() == "waiting for a Zenoh router or peer"


def test_ros2_subscribe_waits_for_the_router(names):
    dst = names("dst")
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    sub = ros2.subscribe("/reach/in", dst, connect=[endpoint], scouting=False)
    try:
        assert sub.stats.state == f"waiting for a Zenoh router at {endpoint}"
        assert sub.reach_note() == f"; no Zenoh router or peer was reached at {endpoint}, so nothing was exchanged"
        r = router(endpoint)
        try:
            wait_until(lambda: sub.stats.state == "waiting for the topic's first image", "the subscriber to reach the router")
            assert sub.reach_note() == ""
        finally:
            r.close()
    finally:
        sub.stop()


def test_zenoh_bridge_ends_say_no_router_was_reached(names, bridges):
    src_name = names("src")
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    zlink = dict(engine="zenoh", connect=[endpoint], scouting=False)
    with framebus.create(src_name, shape=(4, 4), dtype=np.uint8, auto_unlink=True):
        pub = net.publish(src_name, "fbtest/reach", **zlink)
        bridges(pub)
        assert pub.stats.state == f"waiting for a Zenoh router at {endpoint}"
        with pytest.raises(PeerTimeoutError, match=f"no Zenoh router or peer was reached at {endpoint}"):
            net.subscribe("fbtest/reach", names("dst"), timeout=0.5, **zlink)
        r = router(endpoint)
        try:
            wait_until(lambda: pub.stats.state == "waiting for subscribers", "the publisher to reach the router")
            assert pub.reach_note() == ""
            pub.stop()
        finally:
            r.close()
