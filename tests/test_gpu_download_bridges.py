"""Encoded bridges and ROS 2 publishers of a device stream without a CPU mirror, against the
strict fake door (FRAMEBUS_CUDA=fake): both read it through ``open_for_host``, whose download
copies each frame to the host; a dead owner ends the bridge with DeviceUnavailableError naming
its pid. Each scenario runs in a fresh interpreter (``run`` of test_gpu_download.py)."""

from __future__ import annotations

import os
import textwrap
import uuid

import pytest

from bridge_helpers import free_port
from test_gpu_download import run

TESTS = os.path.dirname(os.path.abspath(__file__))

#: An owner process: creates device stream argv[1] (shape argv[2]), writes one frame, says
#: "ready" and sleeps until killed.
OWNER = """
import ast, subprocess, signal
owner_code = "; ".join([
    "import ast, sys, time, numpy as np, framebus",
    "s = framebus.create(sys.argv[1], shape=ast.literal_eval(sys.argv[2]), dtype=np.uint8, device=0)",
    "s.write(np.full(ast.literal_eval(sys.argv[2]), 9, np.uint8))",
    "print('ready', flush=True)",
    "time.sleep(600)",
])


def ended_by_dead_owner(end, owner):
    # What `end` (a bridge or ROS 2 publisher reading the owner's device stream) says once the
    # owner was killed: what join() raised (DeviceUnavailableError's text, or None), its
    # stats.error, whether it still runs, and the owner's pid; then it is stopped.
    from framebus.errors import DeviceUnavailableError

    owner.send_signal(signal.SIGKILL); owner.wait(); owner.stdout.close()
    try:
        end.join(60)
        raised = None
    except DeviceUnavailableError as e:
        raised = str(e)
    said = {"raised": raised, "stats": end.stats.error, "running": end.running, "pid": owner.pid}
    try:
        end.stop()
    except DeviceUnavailableError:
        pass
    return said
"""


@pytest.fixture
def name():
    n = f"t-gpudlb-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for suffix in ("", "-dst", ".h264"):
        try:
            os.unlink(f"/dev/shm/framebus.{n}{suffix}")
        except FileNotFoundError:
            pass


def test_an_encoded_bridge_sends_a_device_stream_without_a_mirror(name):
    """H.264 over loopback: the decoded pictures are close to their sources (the video tests'
    tolerance: H.264 is lossy), and ``framebus ls --json`` shows the encoder's download."""
    pytest.importorskip("zmq")
    pytest.importorskip("av")
    r = run(
        """
        sys.path.insert(0, sys.argv[2])
        from video_helpers import CLOSE, H, W, Writer, error, read_pictures
        from framebus import net
        name = sys.argv[1]; dst_name = name + "-dst"
        src = framebus.create(name, shape=(H, W, 3), dtype=np.uint8, device=0)
        pub = net.publish(name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M", gop=8)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=30)
        writer = Writer(src, fps=60)
        try:
            got = read_pictures(dst_name, 20)
            ls = [x for x in json.loads(cli("ls", "--json")) if x["name"] == name][0]
            roles = [[x["role"], x["download"]] for x in _native.stream_stats(name)["readers"]]
        finally:
            writer.stop(); sub.stop(); pub.stop()
        after = list(_native.fake_cuda_host_counts())
        src.unlink()
        print(json.dumps({"close": [error(a, fid) < CLOSE for fid, a in got], "ids": [fid for fid, _ in got],
                          "downloads": ls["downloads"], "roles": roles, "after": after, "video": pub.stats.state}))
        """,
        name,
        TESTS,
    )
    assert len(r["close"]) == 20 and all(r["close"]), r
    assert r["ids"] == sorted(r["ids"]) and r["ids"][0] >= 1
    assert r["downloads"] == 1 and ["bridge out", True] in r["roles"], r
    assert r["after"][0] == 0 and r["after"][2] == 0  # the page-locked buffer and CUDA stream were given back


def test_a_dead_owner_ends_an_encoded_bridge_with_device_unavailable_naming_the_pid(name):
    """In process: the bridge stops, ``error``/``stats.error`` are DeviceUnavailableError naming
    the owner's pid and ``join()`` raises it; from the command line: exit status 1 and the
    message on stderr."""
    pytest.importorskip("zmq")
    pytest.importorskip("av")
    r = run(
        OWNER
        + textwrap.dedent(
            """
        from framebus import net
        name, port = sys.argv[1], sys.argv[2]
        shape = "(48, 64, 3)"
        results = {}
        for how in ("api", "cli"):
            owner = subprocess.Popen([sys.executable, "-c", owner_code, name, shape], stdout=subprocess.PIPE, text=True)
            assert owner.stdout.readline().strip() == "ready"
            if how == "api":
                pub = net.publish(name, "tcp://127.0.0.1:*", encode="h264")  # its encoder opened the stream
            else:
                bridge = subprocess.Popen([sys.executable, "-m", "framebus", "bridge", "publish", name, "tcp://127.0.0.1:" + port,
                                           "--encode", "h264", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                deadline = time.monotonic() + 60
                while not any(x["download"] for x in _native.stream_stats(name)["readers"]):
                    assert bridge.poll() is None and time.monotonic() < deadline, bridge.communicate()
                    time.sleep(0.02)
            if how == "api":
                results["api"] = ended_by_dead_owner(pub, owner)
            else:
                owner.send_signal(signal.SIGKILL); owner.wait(); owner.stdout.close()
                out, err = bridge.communicate(timeout=60)
                results["cli"] = {"rc": bridge.returncode, "err": err, "pid": owner.pid}
            os.unlink("/dev/shm/framebus." + name)
        print(json.dumps(results))
        """
        ),
        name,
        str(free_port()),
    )
    api, cli = r["api"], r["cli"]
    assert api["raised"] and f"pid {api['pid']}" in api["raised"] and not api["running"], api
    assert api["stats"] == f"DeviceUnavailableError: {api['raised']}"
    assert cli["rc"] == 1 and f"pid {cli['pid']}" in cli["err"] and "bridge publish failed" in cli["err"], cli


def test_ros2_publish_of_a_device_stream_without_a_mirror_reaches_ros2_subscribe_exactly(name):
    """`framebus ros2 publish` (downloading, as ``framebus ls`` shows) -> Zenoh peer to peer on
    loopback -> `framebus ros2 subscribe`: the pixels arrive exact."""
    pytest.importorskip("zenoh")
    pytest.importorskip("rosbags")
    r = run(
        """
        import signal
        name, port = sys.argv[1], sys.argv[2]
        dst = name + "-dst"
        exe = [sys.executable, "-m", "framebus", "ros2"]
        src = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0)
        pub = subprocess.Popen([*exe, "publish", name, "--topic", "/gpu/image", "--listen", "tcp/127.0.0.1:" + port, "--no-scouting",
                                "--quiet"], stdout=subprocess.PIPE, text=True)
        sub = subprocess.Popen([*exe, "subscribe", "/gpu/image", "--stream", dst, "--connect", "tcp/127.0.0.1:" + port, "--no-scouting",
                                "--quiet"], stdout=subprocess.PIPE, text=True)
        try:
            assert "framebus ros2 publish" in pub.stdout.readline()
            assert "framebus ros2 subscribe" in sub.stdout.readline()
            deadline = time.monotonic() + 60
            i = 0
            while not os.path.exists("/dev/shm/framebus." + dst):  # repeated until the subscription is known
                assert time.monotonic() < deadline, "no image arrived"
                src.write(frame_of(i)); i += 1
                time.sleep(0.05)
            downloads = [x["role"] for x in _native.stream_stats(name)["readers"] if x["download"]]
            with framebus.open(dst, mode="lossless") as out:
                exact = []
                for k in (100, 101, 102):
                    src.write(frame_of(k))
                    p = out.read_new_publication(timeout=60)
                    while not np.array_equal(p.payload, frame_of(k)):  # an earlier frame still on its way
                        assert p.payload.shape == (6, 8, 3)
                        p = out.read_new_publication(timeout=60)
                    exact.append(True)
            codes = []
            for p in (sub, pub):
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=60)
                codes.append(p.returncode)
        finally:
            for p in (sub, pub):
                p.kill(); p.wait(60); p.stdout.close()
            src.unlink()
        print(json.dumps({"exact": exact, "downloads": downloads, "codes": codes}))
        """,
        name,
        str(free_port()),
    )
    assert r == {"exact": [True] * 3, "downloads": ["bridge out"], "codes": [143, 143]}


def test_host_views_are_zero_copy_for_a_host_stream_and_one_reused_copy_for_a_download(name):
    r = run(
        """
        from framebus._host_read import DownloadedFrame, host_view, host_wait_view
        name = sys.argv[1]
        host = framebus.create(name + "-dst", shape=(6, 8, 3), dtype=np.uint8)
        dev = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0)
        hr, dr = open_for_host(name + "-dst", mode="lossless"), open_for_host(name, mode="lossless")
        host.write(frame_of(1), frame_id=7); dev.write(frame_of(1), frame_id=7, meta=b"x")
        with host_wait_view(hr, 30) as hv:
            host_kind, host_copy = type(hv).__name__, hv.array.flags.owndata
        a = host_wait_view(dr, 30)
        first = [type(a).__name__, a.seq, a.frame_id, a.meta.decode(), a.array.tobytes() == frame_of(1).tobytes()]
        dev.write(frame_of(2))
        b = host_view(dr)
        reused = b.array is a.array and b.array.tobytes() == frame_of(2).tobytes()
        hr.close(); dr.close(); host.unlink(); dev.unlink()
        print(json.dumps({"host": [host_kind, host_copy], "first": first, "reused": reused}))
        """,
        name,
    )
    assert r == {"host": ["Frame", False], "first": ["DownloadedFrame", 1, 7, "x", True], "reused": True}


def test_a_dead_owner_ends_a_ros2_publisher_with_device_unavailable_naming_the_pid(name):
    pytest.importorskip("zenoh")
    pytest.importorskip("rosbags")
    r = run(
        OWNER
        + textwrap.dedent(
            """
            from framebus import ros2
            name, port = sys.argv[1], sys.argv[2]
            owner = subprocess.Popen([sys.executable, "-c", owner_code, name, "(6, 8, 3)"], stdout=subprocess.PIPE, text=True)
            assert owner.stdout.readline().strip() == "ready"
            pub = ros2.publish(name, "/gpu/dead", listen=["tcp/127.0.0.1:" + port], scouting=False)
            said = ended_by_dead_owner(pub, owner)
            os.unlink("/dev/shm/framebus." + name)
            print(json.dumps(said))
            """
        ),
        name,
        str(free_port()),
    )
    assert r["raised"] and f"pid {r['pid']}" in r["raised"] and not r["running"], r
    assert r["stats"] == f"DeviceUnavailableError: {r['raised']}"


def test_ros2_h264_publish_of_a_device_stream_without_a_mirror_decodes_close_to_the_source(name):
    """`ros2 publish --encode h264` shares the encoded bridge's encoder stage, so it downloads too:
    pictures decoded by ``ros2.subscribe`` are close to their sources (H.264 is lossy)."""
    pytest.importorskip("zenoh")
    pytest.importorskip("rosbags")
    pytest.importorskip("av")
    r = run(
        """
        sys.path.insert(0, sys.argv[3])
        from video_helpers import CLOSE, H, W, error, picture
        from framebus import ros2
        name, port = sys.argv[1], sys.argv[2]
        src = framebus.create(name, shape=(H, W, 3), dtype=np.uint8, device=0)
        pub = ros2.publish(name, "/gpu/h264", encode="h264", encoder="libx264", listen=["tcp/127.0.0.1:" + port], scouting=False,
                           status=False)
        sub = ros2.subscribe("/gpu/h264", name + "-dst", connect=["tcp/127.0.0.1:" + port], scouting=False, status=False)
        close = []
        try:
            deadline = time.monotonic() + 60
            while not pub.matched:
                assert time.monotonic() < deadline, "the subscription never reached the publisher"
                time.sleep(0.01)
            src.write(picture(0), timestamp_ns=1)
            while sub.stats.frames < 1:
                assert time.monotonic() < deadline and pub.running, pub.error
                time.sleep(0.01)
            downloads = [x["role"] for x in _native.stream_stats(name)["readers"] if x["download"]]
            with framebus.open(name + "-dst", mode="lossless") as out:
                for i in range(1, 8):
                    src.write(picture(i), timestamp_ns=1 + i)
                    p = out.read_new_publication(timeout=60)
                    close.append([p.timestamp_ns, error(np.asarray(p.payload), i) < CLOSE])
        finally:
            sub.stop(); pub.stop(); src.unlink()
        print(json.dumps({"close": close, "downloads": downloads}))
        """,
        name,
        str(free_port()),
        TESTS,
    )
    assert r == {"close": [[1 + i, True] for i in range(1, 8)], "downloads": ["bridge out"]}
