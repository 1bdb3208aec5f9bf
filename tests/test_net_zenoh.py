"""framebus.net with engine="zenoh": the bridge's protocol over Eclipse Zenoh, on loopback.

Every test uses its own Zenoh key and TCP port, peer mode with multicast scouting off and
explicit listen/connect endpoints, so tests do not see each other. Stream names are unique,
every bridge is stopped and every stream removed. Timeouts are upper bounds, never measurements.
"""

from __future__ import annotations

import os
import signal
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
pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
net = pytest.importorskip("framebus.net")
from bridge_helpers import LoopbackLink as Link  # noqa: E402
from bridge_helpers import BOUND, bench_streams_left, bridges, names, wait_until  # noqa: E402,F401

FAST = dict(heartbeat_ivl=0.2, peer_timeout=1.5)





def frame(shape, i, dtype=np.uint8):
    rng = np.random.default_rng(i)
    return rng.integers(0, 255, size=shape).astype(dtype)


def check(pub, i, shape, dtype=np.uint8):
    assert pub.frame_id == i
    assert pub.meta == b"meta-%d" % i
    assert pub.timestamp_ns == 1_000_000_000 + i
    assert pub.payload.dtype == dtype and pub.payload.shape == tuple(shape)
    assert pub.payload.tobytes() == frame(shape, i, dtype).tobytes()


def write(src, i, shape, dtype=np.uint8, timeout=BOUND):
    src.write(frame(shape, i, dtype), frame_id=i, meta=b"meta-%d" % i, timestamp_ns=1_000_000_000 + i, timeout=timeout)


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["lossless", "latest"])
@pytest.mark.parametrize("shape", [(16, 24, 3), (256, 256, 3)], ids=["small", "large"])
def test_frames_and_metadata_are_byte_exact(mode, shape, names, bridges):
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8, meta_capacity=64) as src:
        pub = net.publish(src_name, link.key, mode=mode, **link.pub)
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        assert sub.mode == mode and pub.engine == sub.engine == "zenoh"
        with framebus.open(dst_name, mode="lossless") as dst:
            assert dst.shape == shape and dst.dtype == np.uint8 and dst.meta_capacity == 64
            if mode == "lossless":
                t = threading.Thread(target=lambda: [write(src, i, shape) for i in range(12)])
                t.start()
                for i in range(12):
                    check(dst.read_new_publication(timeout=BOUND), i, shape)
                t.join(BOUND)
            else:
                for i in range(12):
                    write(src, i, shape)
                    check(dst.read_new_publication(timeout=BOUND), i, shape)
        assert sub.stats.dropped == 0 and pub.stats.dropped == 0
        assert sub.stats.last_seq == pub.stats.last_seq == 12
        sub.stop()
        pub.stop()
        src.unlink()


def test_variable_shape_frames(names, bridges):
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, capacity=1 << 16, slots=4) as src:
        pub = net.publish(src_name, link.key, mode="lossless", **link.pub)
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        arrays = [np.arange(n * 3, dtype=np.uint16).reshape(n, 3) for n in (5, 50, 500)]
        with framebus.open(dst_name, mode="lossless") as dst:
            for i, a in enumerate(arrays):
                src.write(a, frame_id=i)
            for i, a in enumerate(arrays):
                got = dst.read_new(timeout=BOUND)
                assert np.array_equal(np.asarray(got), a)
        sub.stop()
        pub.stop()
        src.unlink()


def _until_end(dst, last):
    got = []
    deadline = time.monotonic() + BOUND
    while not got or got[-1] != last:
        try:
            got.append(dst.read_new_publication(timeout=BOUND).frame_id)
        except framebus.StreamEndedError:
            assert time.monotonic() < deadline, f"the stream stayed ended after frames {got}"
            time.sleep(0.01)
    with pytest.raises(framebus.StreamEndedError):
        dst.read_new(timeout=BOUND)
    return got


@pytest.mark.parametrize("mode", ["lossless", "latest"])
def test_the_end_of_the_source_reaches_the_subscribers_readers(mode, names, bridges):
    shape = (8, 8, 3)
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4, auto_unlink=True):
        pub = net.publish(src_name, link.key, mode=mode, **link.pub)
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            for run in range(2):
                ids = list(range(10 * run, 10 * run + 10))
                with framebus.open(src_name) as producer:
                    for i in ids:
                        write(producer, i, shape)
                    producer.end()
                got = _until_end(dst, ids[-1])
                if mode == "lossless":
                    assert got == ids
                else:
                    assert got and got[-1] == ids[-1] and got == sorted(set(got))
                assert dst.ended and sub.source_ended
                wait_until(lambda: pub.source_ended, "the publisher to see the end")
        sub.stop()
        pub.stop()


def test_lossless_slow_subscriber_loses_nothing(names, bridges):
    shape = (64, 64, 3)
    n = 60
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4) as src:
        pub = net.publish(src_name, link.key, mode="lossless", hwm=2, **link.pub)
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        errors = []

        def writer():
            try:
                for i in range(n):
                    write(src, i, shape)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        with framebus.open(dst_name, mode="lossless") as dst:
            t = threading.Thread(target=writer)
            t.start()
            for i in range(n):
                if i % 10 == 0:
                    time.sleep(0.2)
                check(dst.read_new_publication(timeout=BOUND), i, shape)
            t.join(BOUND)
        assert not errors and not t.is_alive()
        assert pub.stats.dropped == 0 and sub.stats.dropped == 0 and sub.stats.frames == n
        sub.stop()
        pub.stop()
        src.unlink()


def test_publisher_killed_and_restarted(names, bridges):
    shape = (32, 32, 3)
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        code = f"""
            import time, framebus.net as net
            pub = net.publish({src_name!r}, {link.key!r}, mode="lossless", heartbeat_ivl=0.2, peer_timeout=1.5, **{link.pub!r})
            print("ready", flush=True)
            time.sleep(600)
        """
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            # The subscriber listens too, so the restarted publisher (same port) finds it again.
            sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub, **FAST)
            bridges(sub)
            with framebus.open(dst_name, mode="lossless") as dst:
                write(src, 0, shape)
                check(dst.read_new_publication(timeout=BOUND), 0, shape)
                proc.send_signal(signal.SIGKILL)
                proc.wait(BOUND)
                pub = net.publish(src_name, link.key, mode="lossless", **link.pub, **FAST)
                bridges(pub)
                for i in range(1, 6):
                    write(src, i, shape)
                    check(dst.read_new_publication(timeout=BOUND), i, shape)
            assert sub.stats.reconnects >= 1 and sub.stats.state == "running"
            sub.stop()
            pub.stop()
        finally:
            proc.kill()
            proc.wait(BOUND)
            proc.stdout.close()
        src.unlink()


def test_subscriber_killed_and_restarted_loses_nothing(names, bridges):
    shape = (32, 32, 3)
    n = 40
    src_name, first_name, second_name = names("src"), names("first"), names("second")
    ident = b"restart-" + uuid.uuid4().hex.encode()
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.publish(src_name, link.key, mode="lossless", hwm=3, **link.pub, **FAST)
        bridges(pub)
        code = f"""
            import time, framebus, framebus.net as net
            sub = net.subscribe({link.key!r}, {first_name!r}, identity={ident!r}, timeout=30, heartbeat_ivl=0.2, peer_timeout=1.5, **{link.sub!r})
            with framebus.open({first_name!r}, mode="lossless") as dst:
                print("ready", flush=True)
                while True:
                    dst.read_new(timeout=30)
                    time.sleep(0.05)
        """
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            t = threading.Thread(target=lambda: [write(src, i, shape) for i in range(n)])
            t.start()
            wait_until(lambda: framebus.stat(first_name).sequence >= 8, "the first subscriber to receive frames")
            proc.send_signal(signal.SIGKILL)
            proc.wait(BOUND)
        finally:
            proc.kill()
            proc.wait(BOUND)
            proc.stdout.close()
        with framebus.open(first_name) as first:
            written = first.write_sequence
            assert first.read_publication().frame_id == written - 1
        with framebus.create(second_name, shape=shape, dtype=np.uint8) as second, framebus.open(second_name, mode="lossless") as dst:
            sub = net.subscribe(link.key, second_name, identity=ident, timeout=BOUND, **link.sub, **FAST)
            bridges(sub)
            got = []
            while not got or got[-1] != n - 1:
                p = dst.read_new_publication(timeout=BOUND)
                check(p, p.frame_id, shape)
                got.append(p.frame_id)
            t.join(BOUND)
            assert written < n and got[0] <= written and got == list(range(got[0], n))
            assert pub.stats.resent > 0
            sub.stop()
            second.unlink()
        framebus.unlink(first_name)
        pub.stop()
        src.unlink()


def test_clear_errors(names, bridges, tmp_path):
    src_name = names("src")
    link = Link()
    with pytest.raises(ValueError, match="engine must be"):
        net.publish(src_name, link.key, engine="dds")
    with pytest.raises(net.EndpointError, match="no wildcards"):
        net.subscribe("fbtest/*", names("dst"), **link.sub)
    with pytest.raises(FileNotFoundError, match="Zenoh configuration file"):
        net.subscribe(link.key, names("dst"), engine="zenoh", zenoh_config=str(tmp_path / "nope.json5"))
    with pytest.raises(net.PeerTimeoutError, match="no framebus publisher answered on Zenoh key"):
        net.subscribe(link.key, names("dst"), timeout=0.5, **link.sub)
    with framebus.create(src_name, shape=(4,), dtype=np.uint8, auto_unlink=True):
        pub = net.publish(src_name, link.key, **link.pub)
        bridges(pub)
        with pytest.raises(net.EndpointInUseError):
            net.publish(src_name, link.key + "/x", **link.pub)
        pub.stop()


def test_zenoh_config_file_passes_through(names, bridges, tmp_path):
    """A Zenoh configuration file is used as it is (here it holds the listen endpoint)."""
    shape = (4, 4)
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    cfg = tmp_path / "zenoh.json5"
    cfg.write_text('{ mode: "peer", listen: { endpoints: ["tcp/127.0.0.1:%d"] }, scouting: { multicast: { enabled: false } } }' % link.port)
    with framebus.create(src_name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = net.publish(src_name, link.key, mode="lossless", engine="zenoh", zenoh_config=str(cfg))
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            write(src, 3, shape)
            check(dst.read_new_publication(timeout=BOUND), 3, shape)
        sub.stop()
        pub.stop()


def test_cli_publish_and_subscribe(names):
    shape = (8, 12)
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    exe = [sys.executable, "-m", "framebus", "bridge"]
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = subprocess.Popen([*exe, "publish", src_name, link.key, "--engine", "zenoh", "--listen", f"tcp/127.0.0.1:{link.port}",
                                "--no-scouting", "--mode", "lossless", "--quiet"], stdout=subprocess.PIPE, text=True)
        sub = subprocess.Popen([*exe, "subscribe", link.key, dst_name, "--engine", "zenoh", "--connect", f"tcp/127.0.0.1:{link.port}",
                                "--no-scouting", "--quiet", "--timeout", "30"], stdout=subprocess.PIPE, text=True)
        try:
            assert "framebus bridge publish" in pub.stdout.readline()
            assert "framebus bridge subscribe" in sub.stdout.readline()
            wait_until(lambda: os.path.exists(f"/dev/shm/framebus.{dst_name}"), "the subscriber's stream")
            with framebus.open(dst_name, mode="lossless") as dst:
                write(src, 7, shape)
                check(dst.read_new_publication(timeout=BOUND), 7, shape)
            for p in (sub, pub):
                p.send_signal(signal.SIGTERM)
                out, _ = p.communicate(timeout=BOUND)
                assert p.returncode == 143 and "stopped: 1 frames" in out, (p.args, out)
        finally:
            for p in (sub, pub):
                p.kill()
                p.wait(BOUND)
        assert not os.path.exists(f"/dev/shm/framebus.{dst_name}")
        src.unlink()


def test_compression(names, bridges):
    pytest.importorskip("zstandard")
    shape = (64, 64, 3)
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = net.publish(src_name, link.key, mode="lossless", compress="zstd", **link.pub)
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            for i in range(3):
                write(src, i, shape)
                check(dst.read_new_publication(timeout=BOUND), i, shape)
        sub.stop()
        pub.stop()


def test_w5_bridge_benchmark_zenoh_rows_run(tmp_path):
    """The engines' benchmark (tiny frames, a fraction of a second): it runs and reports all systems."""
    bench = os.path.join(os.path.dirname(__file__), "..", "benches", "w5_bridge.py")
    out = tmp_path / "w5z.json"
    proc = subprocess.run(
        [sys.executable, bench, "--zenoh", "--shape", "16x16x3", "--seconds", "0.3", "--trials", "1", "--fps", "50", "--json", str(out)],
        capture_output=True, text=True, timeout=BOUND * 4,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    runs = json.loads(out.read_text())["runs"]
    assert {r["system"] for r in runs} == {"framebus lossless", "framebus zenoh lossless", "zenoh-python"}
    assert {r["load"] for r in runs} == {"full speed", "paced 50/s"}
    assert all(r["received"] > 0 for r in runs)
    assert all(r["lost"] == 0 for r in runs if r["system"] != "zenoh-python")

    assert not bench_streams_left()


def test_latest_slow_subscriber_keeps_the_newest(names, bridges):
    shape = (64, 64, 3)
    n = 120
    src_name, dst_name = names("src"), names("dst")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4) as src:
        pub = net.publish(src_name, link.key, mode="latest", hwm=1, **link.pub)
        bridges(pub)
        sub = net.subscribe(link.key, dst_name, timeout=BOUND, **link.sub)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            for i in range(n):
                write(src, i, shape, timeout=BOUND)  # the writer never waits for the remote end
            got = [dst.read_new_publication(timeout=BOUND)]
            while got[-1].frame_id != n - 1 and len(got) < n:
                got.append(dst.read_new_publication(timeout=BOUND))
            check(got[-1], n - 1, shape)
            ids = [p.frame_id for p in got]
            assert ids == sorted(ids) and len(got) < n
        assert pub.stats.dropped > 0
        sub.stop()
        pub.stop()
        src.unlink()


def test_two_subscribers_on_one_publisher(names, bridges):
    shape = (48, 64, 3)
    src_name, a_name, b_name = names("src"), names("a"), names("b")
    link = Link()
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.publish(src_name, link.key, mode="lossless", **link.pub)
        bridges(pub)
        subs = [net.subscribe(link.key, nm, timeout=BOUND, **link.sub) for nm in (a_name, b_name)]
        for s in subs:
            bridges(s)
        wait_until(lambda: pub.stats.peers == 2, "both subscribers")
        readers = [framebus.open(nm, mode="lossless") for nm in (a_name, b_name)]
        t = threading.Thread(target=lambda: [write(src, i, shape) for i in range(10)])
        t.start()
        for i in range(10):
            for r in readers:
                check(r.read_new_publication(timeout=BOUND), i, shape)
        for r in readers:
            r.close()
        t.join(BOUND)
        for s in subs:
            s.stop()
        pub.stop()
        src.unlink()
