"""framebus ros2 against hiroz, a native Rust ROS 2 over Zenoh that interoperates with
rmw_zenoh_cpp: the test peer in tests/ros2_peer (its router, Image subscriber and publisher,
graph reader) on one side, ``framebus ros2`` on the other, over loopback through a router the
test starts (the peer's, or ``framebus ros2 router``) on its own free port.

The peer is built by scripts/build-ros2-peer.sh (scripts/test.sh runs it); the tests find it
through FRAMEBUS_ROS2_PEER or in that script's target folder, and skip, with the build log's
last lines, when it is not there. Timeouts are upper bounds, never measurements.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import framebus

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
ros2 = pytest.importorskip("framebus.ros2")
from framebus.ros2.router import ROUTER_SETTINGS  # noqa: E402
from bridge_helpers import free_port  # noqa: E402
from ros2_helpers import FB, Proc  # noqa: E402

BOUND = 30.0
REPO = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("FRAMEBUS_PEER_TARGET") or Path.home() / ".cache" / "framebus" / "ros2-peer")
PEER = Path(os.environ.get("FRAMEBUS_ROS2_PEER") or TARGET / "debug" / "ros2-peer")


def _why_no_peer() -> str:
    log = TARGET / "build.log"
    tail = log.read_text(errors="replace").strip().splitlines()[-8:] if log.exists() else ["(no build log: run scripts/build-ros2-peer.sh)"]
    return f"the hiroz test peer {PEER} is not built (scripts/build-ros2-peer.sh); its build log ends:\n" + "\n".join(tail)


if not PEER.is_file():
    pytest.skip(_why_no_peer(), allow_module_level=True)


def peer(*args: str) -> Proc:
    return Proc([str(PEER), *args])


def start_router(port: int) -> Proc:
    r = peer("router", "--listen", f"tcp/127.0.0.1:{port}")
    r.json(lambda d: "router" in d, what="the router's start line")
    return r


@pytest.fixture
def router():
    port = free_port()
    r = start_router(port)
    yield f"tcp/127.0.0.1:{port}"
    r.stop(signal.SIGKILL)


def pattern(k: int, n: int) -> bytes:
    """The peer publisher's image k: byte i is (i * 7 + k * 13) % 251."""
    return ((np.arange(n, dtype=np.int64) * 7 + (k * 13) % 251) % 251).astype(np.uint8).tobytes()


def image(encoding: str, h: int, w: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(k)
    if encoding == "32FC1":
        return rng.standard_normal((h, w)).astype(np.float32)
    if encoding == "mono16":
        return rng.integers(0, 65535, size=(h, w), dtype=np.uint16)
    channels = 1 if encoding == "mono8" else 3
    return rng.integers(0, 255, size=(h, w) if channels == 1 else (h, w, 3), dtype=np.uint8)


def fb_publish(name: str, topic: str, endpoint: str, *extra: str) -> Proc:
    p = Proc([*FB, "publish", name, "--topic", topic, "--connect", endpoint, "--no-scouting", "--quiet", *extra])
    p.expect(lambda s: s.startswith("framebus ros2 publish:"), what="the publisher's start line")
    return p


def send_until_heard(src, arr: np.ndarray, stamp_ns: int, sub: Proc, what: str) -> dict:
    """Writes ``arr`` into ``src`` until the hiroz subscriber reports an image (the first
    writes may come before the two ends found each other); returns that report."""
    deadline = time.monotonic() + BOUND
    while True:
        src.write(arr, timestamp_ns=stamp_ns)
        try:
            return sub.json(lambda d: "n" in d, timeout=1.0)
        except AssertionError:
            assert time.monotonic() < deadline, f"hiroz never received {what}: {sub.err[-5:]}"


def test_router_settings_are_hiroz_router_settings():
    """framebus ros2 router's settings are those of hiroz's RouterConfigBuilder (rmw_zenoh's
    default router configuration), listen endpoints aside."""
    out = subprocess.run([str(PEER), "router-config"], capture_output=True, text=True, timeout=BOUND, check=True).stdout
    theirs = {d["key"]: d["value"] for d in map(json.loads, out.splitlines())}
    assert theirs.pop("listen/endpoints") == ["tcp/[::]:7447"]
    assert dict(ROUTER_SETTINGS) == theirs


ENCODINGS = ["rgb8", "bgr8", "mono8", "mono16", "32FC1"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_framebus_publish_to_hiroz_exact_pixels(name, encoding, tmp_path):
    """`framebus ros2 publish` -> hiroz subscriber, through hiroz's router (mono8: through
    `framebus ros2 router`): 320x240 and 1920x1080 images arrive byte for byte, with their
    encoding, step, stamp and frame_id."""
    port = free_port()
    endpoint = f"tcp/127.0.0.1:{port}"
    if encoding == "mono8":
        router = Proc([*FB, "router", "--listen", endpoint])
        router.expect(lambda s: "listening on" in s, what="framebus ros2 router's start line")
    else:
        router = start_router(port)
    sub = peer("sub", "--connect", endpoint, "--topic", "/interop/image", "--data-dir", str(tmp_path))
    pub = None
    try:
        sub.json(lambda d: d.get("ready"))
        with framebus.create(name, capacity=1920 * 1080 * 4, slots=3, auto_unlink=True) as src:
            pub = fb_publish(name, "/interop/image", endpoint, "--frame-id", "cam_opt", *(["--bgr"] if encoding == "bgr8" else []))
            for i, (h, w) in enumerate([(240, 320), (1080, 1920)]):
                arr = image(encoding, h, w, i)
                stamp = 1_700_000_000_000_000_000 + i * 1_000_000_123
                got = send_until_heard(src, arr, stamp, sub, f"the {w}x{h} {encoding} image")
                # the newest report is the image just written (earlier duplicates of it are fine)
                assert (got["width"], got["height"], got["encoding"], got["is_bigendian"]) == (w, h, encoding, 0)
                assert got["step"] == w * arr.itemsize * (arr.shape[2] if arr.ndim == 3 else 1)
                assert (got["stamp_sec"], got["stamp_nanosec"], got["frame_id"]) == (stamp // 10**9, stamp % 10**9, "cam_opt")
                assert (tmp_path / f"{got['n']}.bin").read_bytes() == arr.tobytes()
                while True:  # drop duplicates before the next size
                    try:
                        sub.json(lambda d: "n" in d, timeout=0.3)
                    except AssertionError:
                        break
            assert pub.stop() == 143
    finally:
        for p in (pub, sub, router):
            if p is not None:
                p.close()


def test_hiroz_publisher_into_a_stream(name):
    """hiroz publisher -> `framebus ros2 subscribe`: the stream gets exactly the published
    images, in order, with their stamps and frame_id."""
    port = free_port()
    endpoint = f"tcp/127.0.0.1:{port}"
    router = start_router(port)
    h, w, count = 48, 64, 12
    with framebus.create(name, shape=(h, w, 3), dtype=np.uint8, slots=4, auto_unlink=True):
        with framebus.open(name, mode="lossless") as out:
            sub = Proc([*FB, "subscribe", "/interop/hiroz", "--stream", name, "--connect", endpoint, "--no-scouting", "--quiet"])
            pub = peer("pub", "--connect", endpoint, "--topic", "/interop/hiroz", "--encoding", "rgb8", "--width", str(w), "--height", str(h),
                       "--count", str(count), "--rate", "20", "--wait-subs", "1", "--frame-id", "hiroz_cam", "--stamp-sec", "1000")
            try:
                got = []
                for _ in range(count):
                    p = out.read_new_publication(timeout=BOUND)
                    got.append(p.timestamp_ns // 10**9 - 1000)
                    k = got[-1]
                    assert p.timestamp_ns == (1000 + k) * 10**9 + k * 1000
                    assert p.payload.tobytes() == pattern(k, h * w * 3), f"image {k} differs"
                    assert json.loads(p.meta) == {"frame_id": "hiroz_cam", "encoding": "rgb8"}
                assert got == list(range(count))
                pub.json(lambda d: d.get("done"))
                assert sub.stop(signal.SIGINT) == 130
            finally:
                pub.close()
                sub.close()
                router.stop(signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_graph_shows_framebus_until_it_stops(name, router, sig):
    """hiroz's graph (`ros2 node list`, `ros2 topic list -t`) shows framebus's node and its
    topic with its type, and neither once the framebus command stopped on Ctrl-C or SIGTERM."""
    graph = peer("graph", "--connect", router, "--interval", "0.2")
    with framebus.create(name, shape=(4, 4), dtype=np.uint8, auto_unlink=True):
        pub = fb_publish(name, "/interop/graph", router, "--node", "fb_graph_node", "--namespace", "/cams")
        try:
            graph.json(lambda d: "/cams/fb_graph_node" in d["nodes"] and ["/interop/graph", "sensor_msgs/msg/Image"] in d["topics"],
                       what="framebus's node and topic in the graph")
            assert pub.stop(sig) == 128 + sig
            graph.json(lambda d: "/cams/fb_graph_node" not in d["nodes"] and not any(t[0] == "/interop/graph" for t in d["topics"]),
                       what="the graph without framebus's node and topic")
        finally:
            pub.close()
            graph.close()


ACCEPTED = [  # (publisher, subscription): pairs ROS 2 matches
    (("reliable", "volatile"), ("reliable", "volatile")),
    (("reliable", "volatile"), ("best_effort", "volatile")),
    (("best_effort", "volatile"), ("best_effort", "volatile")),
    (("reliable", "transient_local"), ("reliable", "volatile")),
    (("reliable", "transient_local"), ("reliable", "transient_local")),
]


@pytest.mark.parametrize("pub_qos,sub_qos", ACCEPTED, ids=["-".join(a + b) for a, b in ACCEPTED])
def test_qos_pairs_ros2_accepts_connect(name, router, pub_qos, sub_qos):
    """framebus publisher -> hiroz subscription for each QoS pair ROS 2 accepts: the image
    arrives and framebus reports no incompatibility. A transient-local subscription that
    joins after the image was sent still gets it from a transient-local framebus publisher."""
    late = sub_qos[1] == "transient_local"
    arr = image("mono8", 24, 32, 3)
    with framebus.create(name, shape=(24, 32), dtype=np.uint8, auto_unlink=True) as src:
        pub = ros2.publish(name, "/interop/qos", connect=[router], scouting=False, best_effort=pub_qos[0] == "best_effort",
                           durability=pub_qos[1], depth=1, status=False)
        sub = None
        try:
            if late:  # written before any subscription exists: the publisher keeps it
                deadline = time.monotonic() + BOUND
                while pub.stats.frames == 0:
                    assert time.monotonic() < deadline, pub.stats
                    src.write(arr)
                    time.sleep(0.1)
            sub = peer("sub", "--connect", router, "--topic", "/interop/qos", "--reliability", sub_qos[0], "--durability", sub_qos[1])
            sub.json(lambda d: d.get("ready"))
            got = sub.json(lambda d: "n" in d, timeout=5.0) if late else send_until_heard(src, arr, 1, sub, "the image")
            assert got["fnv1a64"] == fnv1a64(arr.tobytes())
            assert "incompatible" not in pub.stats.state
        finally:
            pub.stop()
            if sub is not None:
                sub.close()


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_an_incompatible_qos_pair_is_reported(name, router):
    """A best-effort framebus publisher with a reliable hiroz subscription, and a reliable
    framebus subscription with a best-effort hiroz publisher: pairs ROS 2 refuses to match.
    Each framebus command says so in its state line, naming the other node and the policy."""
    with framebus.create(name, shape=(8, 8), dtype=np.uint8, auto_unlink=True):
        pub = fb_publish(name, "/interop/qos_bad", router, "--qos", "best_effort")
        sub = peer("sub", "--connect", router, "--topic", "/interop/qos_bad", "--reliability", "reliable", "--node", "strict_sub")
        try:
            line = pub.expect(lambda s: "incompatible QoS" in s, what="the incompatibility on the publisher's side")
            assert "/strict_sub" in line and "reliability" in line and "best_effort" in line
        finally:
            pub.close()
            sub.close()
    fb_sub = Proc([*FB, "subscribe", "/interop/qos_bad2", "--stream", name + "-in", "--connect", router, "--no-scouting", "--quiet"])
    hpub = peer("pub", "--connect", router, "--topic", "/interop/qos_bad2", "--reliability", "best_effort", "--count", "1000",
                "--rate", "5", "--node", "loose_pub", "--width", "8", "--height", "8", "--encoding", "mono8")
    try:
        line = fb_sub.expect(lambda s: "incompatible QoS" in s, what="the incompatibility on the subscription's side")
        assert "/loose_pub" in line and "reliability" in line
    finally:
        fb_sub.stop()
        hpub.close()


@pytest.mark.parametrize("mode", ["peer", "client"])
def test_router_restart_both_sides_resume(name, mode):
    """The router is killed and restarted on the same port while a hiroz publisher feeds a
    framebus subscription and a framebus publisher feeds a hiroz subscription: both resume and
    every image received is intact. Peer mode (ROS 2's default): the ends found each other
    through the router and linked directly, so images keep flowing while it is away. Client
    mode (everything through the router): the framebus subscription counts the images it missed."""
    port = free_port()
    endpoint = f"tcp/127.0.0.1:{port}"
    router = start_router(port)
    h, w = 24, 32
    dst = name + "-in"
    stop = threading.Event()
    hpub = hsub = None
    with framebus.create(name, shape=(h, w), dtype=np.uint8, auto_unlink=True) as src:
        fpub = ros2.publish(name, "/interop/out", connect=[endpoint], scouting=False, zenoh_mode=mode, status=False)
        fsub = ros2.subscribe("/interop/in", dst, connect=[endpoint], scouting=False, zenoh_mode=mode, status=False)

        def writer() -> None:
            k = 0
            while not stop.is_set():
                src.write(image("mono8", h, w, k % 50), timestamp_ns=10**9 + k)
                k += 1
                time.sleep(0.05)

        t = threading.Thread(target=writer, daemon=True)
        try:
            hsub = peer("sub", "--connect", endpoint, "--topic", "/interop/out", "--mode", mode)
            hpub = peer("pub", "--connect", endpoint, "--topic", "/interop/in", "--encoding", "mono8", "--width", str(w), "--height", str(h),
                        "--count", "100000", "--rate", "20", "--wait-subs", "1", "--stamp-sec", "0", "--mode", mode)
            t.start()
            sent = {fnv1a64(image("mono8", h, w, k).tobytes()) for k in range(50)}

            def resumed(frames_before: int) -> None:
                deadline = time.monotonic() + BOUND
                while fsub.stats.frames < frames_before + 5:
                    assert time.monotonic() < deadline, f"framebus subscription did not resume: {fsub.stats}"
                    time.sleep(0.05)
                for _ in range(5):
                    assert hsub.json(lambda d: "n" in d)["fnv1a64"] in sent

            resumed(0)
            router.stop(signal.SIGKILL)
            time.sleep(1.5)
            before, dropped_before = fsub.stats.frames, fsub.stats.dropped
            router = start_router(port)
            while not hsub.lines.empty():  # what came before the restart
                hsub.lines.get()
            resumed(before)
            if mode == "client":
                assert fsub.stats.dropped > dropped_before, fsub.stats  # the publisher's sequence numbers jumped
            with framebus.open(dst) as out:
                p = out.read_new_publication(timeout=BOUND)  # the hiroz publisher is still sending
                k = p.timestamp_ns // 10**9
                assert p.payload.tobytes() == pattern(k, h * w)
            assert fpub.error is None and fsub.error is None
        finally:
            stop.set()
            if t.is_alive():
                t.join(BOUND)
            fsub.stop()
            fpub.stop()
            for p in (hpub, hsub):
                if p is not None:
                    p.close()
            router.stop(signal.SIGKILL)


def test_framebus_router_command(name):
    """`framebus ros2 router`: starts, says where it listens, two framebus ros2 ends connect
    through it (an image crosses), and SIGTERM stops it with exit status 0."""
    port = free_port()
    endpoint = f"tcp/127.0.0.1:{port}"
    router = Proc([*FB, "router", "--listen", endpoint])
    dst = name + "-in"
    try:
        assert endpoint in router.expect(lambda s: "listening on" in s)
        with framebus.create(name, shape=(8, 8), dtype=np.uint8, auto_unlink=True) as src:
            pub = ros2.publish(name, "/interop/router", connect=[endpoint], scouting=False, status=False)
            sub = ros2.subscribe("/interop/router", dst, connect=[endpoint], scouting=False, status=False)
            try:
                router.expect(lambda s: s == "sessions connected: 2", what="both ends connected")
                arr = image("mono8", 8, 8, 5)
                deadline = time.monotonic() + BOUND
                while sub.stats.frames == 0:
                    assert time.monotonic() < deadline, (pub.stats, sub.stats)
                    src.write(arr)
                    time.sleep(0.05)
                with framebus.open(dst) as out:
                    assert np.array_equal(out.read(), arr)
            finally:
                sub.stop()
                pub.stop()
        assert router.stop(signal.SIGTERM) == 0
        assert router.expect(lambda s: "stopped" in s) == "framebus ros2 router: stopped"
    finally:
        router.close()


def test_router_command_refuses_a_bad_endpoint():
    out = subprocess.run([*FB, "router", "--listen", "nonsense"], capture_output=True, text=True, timeout=BOUND)
    assert out.returncode == 1 and "framebus ros2 router:" in out.stderr and "nonsense" in out.stderr
