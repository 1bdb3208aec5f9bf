"""framebus.net: bridges over ZeroMQ, on 127.0.0.1 and ipc:// only.

Every stream name is unique to the test, every bridge is stopped and every stream removed
(checked at the end of each test). Timeouts are generous upper bounds, never measurements.
"""

from __future__ import annotations

import json
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

zmq = pytest.importorskip("zmq")
net = pytest.importorskip("framebus.net")
from framebus.net.ends import publisher as _publisher  # noqa: E402
from framebus.net.link import status as _status  # noqa: E402
from framebus.net.ends import subscriber as _subscriber  # noqa: E402
from bridge_helpers import BOUND, bench_streams_left, bridges, names, wait_until  # noqa: E402,F401

FAST = dict(heartbeat_ivl=0.2, peer_timeout=1.5)  # quick reconnects in restart tests





def endpoint(kind, tmp_path):
    return "tcp://127.0.0.1:*" if kind == "tcp" else f"ipc://{tmp_path}/bridge.sock"


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
@pytest.mark.parametrize("kind", ["tcp", "ipc"])
@pytest.mark.parametrize("mode", ["lossless", "latest"])
@pytest.mark.parametrize("shape", [(16, 24, 3), (256, 256, 3)], ids=["copied", "zero-copy"])
def test_frames_and_metadata_are_byte_exact(kind, mode, shape, names, bridges, tmp_path):
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, meta_capacity=64) as src:
        pub = net.publish(src_name, endpoint(kind, tmp_path), mode=mode)
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        assert sub.mode == mode
        with framebus.open(dst_name, mode="lossless") as dst:
            assert dst.shape == shape and dst.dtype == np.uint8 and dst.meta_capacity == 64
            if mode == "lossless":  # the writer runs ahead, as far as backpressure lets it
                t = threading.Thread(target=lambda: [write(src, i, shape) for i in range(12)])
                t.start()
                for i in range(12):
                    check(dst.read_new_publication(timeout=BOUND), i, shape)
                t.join(BOUND)
            else:  # lock-step: latest mode may skip frames otherwise
                for i in range(12):
                    write(src, i, shape)
                    check(dst.read_new_publication(timeout=BOUND), i, shape)
        assert sub.stats.dropped == 0 and pub.stats.dropped == 0
        assert sub.stats.last_seq == pub.stats.last_seq == 12
        sub.stop()
        pub.stop()
        src.unlink()


@pytest.mark.parametrize("mode", ["lossless", "latest"])
def test_sequence_numbers_cross_the_wire_and_a_replaced_source_continues(mode, names, bridges):
    shape = (8, 8, 3)
    src_name, dst_name = names("src"), names("dst")
    src = framebus.create(src_name, shape=shape, dtype=np.uint8)
    for i in range(5):
        write(src, i, shape)
    pub = net.publish(src_name, "tcp://127.0.0.1:*", mode=mode)
    bridges(pub)
    sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
    bridges(sub)
    with framebus.open(dst_name, mode="lossless") as dst:
        if mode == "latest":
            # The frame that was newest when the subscriber joined arrives with its own number.
            wait_until(lambda: dst.write_sequence == 5, "the newest source frame to arrive")
            if dst.last_seq < 5:  # (else it arrived before this handle opened)
                check(dst.read_new_publication(timeout=BOUND), 4, shape)
            assert dst.last_seq == 5
        for i in range(5, 10):
            write(src, i, shape)
            got = dst.read_new_publication(timeout=BOUND)
            check(got, i, shape)
            assert got.seq == src.write_sequence == i + 1
        # Numbers below the first frame that arrived count as missed; none after it.
        missed = dst.total_missed
        assert missed == (5 if mode == "lossless" else missed)
        # The source is replaced (its numbers start at 1 again): the local stream goes on from
        # 11, so its readers never see a number go backwards.
        src.unlink()  # its writer: ends the stream, and the end reaches the local readers
        src.close()
        with pytest.raises(framebus.StreamEndedError):
            dst.read_new_publication(timeout=BOUND)
        src = framebus.create(src_name, shape=shape, dtype=np.uint8)
        wait_until(lambda: pub.stats.spec_changes >= 1, "the publisher to follow the new source")
        for i in range(10, 14):
            write(src, i, shape)
            if i == 10:  # the new source's first frame starts the local stream again
                wait_until(lambda: not dst.ended, "the local stream to start again")
            got = dst.read_new_publication(timeout=BOUND)
            check(got, i, shape)
            assert got.seq == i + 1 and src.write_sequence == i - 9
        assert sub.seq_offset == 10
        assert dst.total_missed == missed
    sub.stop()
    pub.stop()
    src.unlink()
    src.close()


def _until_end(dst, last):
    """The frame ids ``dst`` reads up to frame ``last`` and the end after it (StreamEndedError,
    not a timeout). An end seen before ``last`` is the previous run's, which that run's first
    frame clears."""
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
    """The writer's end() travels: the publisher keeps serving and sends END after the last
    frame, the subscriber ends its local stream (readers get every frame, then
    StreamEndedError, not a timeout), and a restarted producer's frames are bridged again."""
    shape = (8, 8, 3)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4, auto_unlink=True):
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode=mode)
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            for run in range(2):  # the second run: a restarted producer after the end
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
                assert pub.error is None and sub.error is None
                assert pub.stats.state == "source ended"
        sub.stop()
        pub.stop()  # raises the bridge's error, if it had one


def test_a_subscriber_that_joins_an_ended_source_is_told(names, bridges):
    shape = (4, 4)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, auto_unlink=True) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless")
        bridges(pub)
        for i in range(3):
            write(src, i, shape)
        src.end()
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        wait_until(lambda: sub.source_ended, "the END to arrive")
        with framebus.open(dst_name, mode="lossless") as dst:
            assert dst.ended and dst.read_publication().frame_id == 2 and sub.stats.frames == 3
            with pytest.raises(framebus.StreamEndedError):
                dst.read_new(timeout=BOUND)
        sub.stop()
        pub.stop()


def test_other_dtypes_and_fallback_paths(names, bridges, monkeypatch):
    """float32 frames, and the copy paths used when views/loans are unavailable."""
    monkeypatch.setattr(_publisher, "USE_VIEWS", False)
    monkeypatch.setattr(_subscriber, "USE_LOANS", False)
    shape = (32, 48)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.float32) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless")
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            for i in range(5):
                write(src, i, shape, np.float32)
            for i in range(5):
                check(dst.read_new_publication(timeout=BOUND), i, shape, np.float32)
        sub.stop()
        pub.stop()
        src.unlink()


def test_lossless_slow_subscriber_loses_nothing(names, bridges):
    shape = (64, 64, 3)
    n = 60
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless", hwm=2)
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        errors = []

        def writer():
            try:
                for i in range(n):
                    write(src, i, shape)  # blocks while the remote reader is behind
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        with framebus.open(dst_name, mode="lossless") as dst:
            t = threading.Thread(target=writer)
            t.start()
            for i in range(n):
                if i % 10 == 0:
                    time.sleep(0.2)  # a slow reader: the writer must wait, never drop
                check(dst.read_new_publication(timeout=BOUND), i, shape)
            t.join(BOUND)
        assert not errors and not t.is_alive()
        assert pub.stats.dropped == 0 and sub.stats.dropped == 0 and sub.stats.frames == n
        sub.stop()
        pub.stop()
        src.unlink()


def test_latest_slow_subscriber_keeps_the_newest(names, bridges):
    shape = (64, 64, 3)
    n = 120
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="latest", hwm=1)
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        # A local lossless reader that does not read stalls the subscriber: it must drop, and
        # the source's writer must never wait for it.
        with framebus.open(dst_name, mode="lossless") as dst:
            for i in range(n):
                write(src, i, shape, timeout=BOUND)
            got = [dst.read_new_publication(timeout=BOUND)]
            while got[-1].frame_id != n - 1 and len(got) < n:
                got.append(dst.read_new_publication(timeout=BOUND))
            check(got[-1], n - 1, shape)
            ids = [p.frame_id for p in got]
            assert ids == sorted(ids) and len(got) < n
        assert pub.stats.dropped > 0
        wait_until(lambda: sub.stats.dropped > 0, "the subscriber to count its gaps")
        sub.stop()
        pub.stop()
        src.unlink()


def test_two_subscribers_on_one_publisher(names, bridges):
    shape = (48, 64, 3)
    src_name, a_name, b_name = names("src"), names("a"), names("b")
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless")
        bridges(pub)
        subs = [net.subscribe(pub.endpoint, nm, timeout=BOUND) for nm in (a_name, b_name)]
        for s in subs:
            bridges(s)
        wait_until(lambda: pub.stats.peers == 2, "both subscribers")
        readers = [framebus.open(nm, mode="lossless") for nm in (a_name, b_name)]
        t = threading.Thread(target=lambda: [write(src, i, shape) for i in range(10)])
        t.start()
        for i in range(10):  # lossless: the slower of the two paces both, so read them in turn
            for r in readers:
                check(r.read_new_publication(timeout=BOUND), i, shape)
        for r in readers:
            r.close()
        t.join(BOUND)
        for s in subs:
            s.stop()
        pub.stop()
        src.unlink()


# ------------------------------------------------------------------------------------------------
def test_frame_size_change_is_followed(names, bridges):
    small, large = (24, 32, 3), (40, 56, 3)
    src_name, dst_name = names("src"), names("dst")
    src = framebus.create(src_name, shape=small, dtype=np.uint8)
    pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless", **FAST)
    bridges(pub)
    sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND, **FAST)
    bridges(sub)
    with framebus.open(dst_name, mode="lossless") as dst:
        write(src, 0, small)
        write(src, 1, small)
        src.unlink()  # the camera changes resolution: the stream is made again
        src = framebus.create(src_name, shape=large, dtype=np.uint8)
        check(dst.read_new_publication(timeout=BOUND), 0, small)
        check(dst.read_new_publication(timeout=BOUND), 1, small)
    wait_until(lambda: framebus.stat(src_name).lossless >= 1, "the publisher to attach to the new stream")
    write(src, 2, large)
    wait_until(lambda: sub.stats.spec_changes == 1 and sub.stats.frames == 3, "the subscriber to follow the new spec")
    with framebus.open(dst_name) as dst:
        assert dst.shape == large
        check(dst.read_publication(), 2, large)
    assert pub.stats.spec_changes == 1
    sub.stop()
    pub.stop()
    src.unlink()


def test_publisher_killed_and_restarted(names, bridges, tmp_path):
    shape = (32, 32, 3)
    src_name, dst_name = names("src"), names("dst")
    ep = f"ipc://{tmp_path}/restart.sock"
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        code = f"""
            import sys, time, framebus.net as net
            pub = net.publish({src_name!r}, {ep!r}, mode="lossless", heartbeat_ivl=0.2, peer_timeout=1.5)
            print("ready", flush=True)
            time.sleep(600)
        """
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            sub = net.subscribe(ep, dst_name, timeout=BOUND, **FAST)
            bridges(sub)
            with framebus.open(dst_name, mode="lossless") as dst:
                write(src, 0, shape)
                check(dst.read_new_publication(timeout=BOUND), 0, shape)
                proc.send_signal(signal.SIGKILL)  # no BYE: the subscriber must notice the silence
                proc.wait(BOUND)
                pub = net.publish(src_name, ep, mode="lossless", **FAST)
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
    """Lossless: frames in flight to a subscriber that dies are sent again to its successor
    (same identity). Every frame is either in the dead subscriber's stream (it wrote frames
    0..W-1 in order before dying) or reaches the successor (a frame may arrive twice)."""
    shape = (32, 32, 3)
    n = 40
    src_name, first_name, second_name = names("src"), names("first"), names("second")
    ident = b"restart-" + uuid.uuid4().hex.encode()
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless", hwm=3, **FAST)
        bridges(pub)
        # A slow reader keeps the first subscriber behind, so frames are in flight when it dies.
        code = f"""
            import time, framebus, framebus.net as net
            sub = net.subscribe({pub.endpoint!r}, {first_name!r}, identity={ident!r}, timeout=30, heartbeat_ivl=0.2, peer_timeout=1.5)
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
            assert first.read_publication().frame_id == written - 1  # frames 0..written-1, in order
        # The successor writes into a stream made beforehand, so nothing can arrive unseen.
        with framebus.create(second_name, shape=shape, dtype=np.uint8) as second, framebus.open(second_name, mode="lossless") as dst:
            sub = net.subscribe(pub.endpoint, second_name, identity=ident, timeout=BOUND, **FAST)
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
        framebus.unlink(first_name)  # left by the killed subscriber
        pub.stop()
        src.unlink()


def test_subscriber_stopped_and_started_again(names, bridges):
    shape = (16, 16)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="latest")
        bridges(pub)
        for round_ in range(2):
            sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
            bridges(sub)
            with framebus.open(dst_name, mode="lossless") as dst:
                write(src, round_, shape)
                p = dst.read_new_publication(timeout=BOUND)
                if p.frame_id != round_:  # a latest-mode subscriber first gets the current frame
                    check(p, round_ - 1, shape)
                    p = dst.read_new_publication(timeout=BOUND)
                check(p, round_, shape)
            sub.stop()
            assert not os.path.exists(f"/dev/shm/framebus.{dst_name}")  # removed on stop
        wait_until(lambda: pub.stats.peers == 0, "the publisher to forget the stopped subscriber")
        pub.stop()
        src.unlink()


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["tcp//127.0.0.1:1", "udp://127.0.0.1:5555", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:port"])
def test_bad_endpoints_raise_endpoint_error(bad, names):
    name = names("src")
    with framebus.create(name, shape=4, dtype=np.uint8) as src:
        with pytest.raises(net.EndpointError, match="endpoint"):
            net.publish(name, bad)
        with pytest.raises(net.EndpointError):
            net.subscribe(bad, names("dst"))
        with pytest.raises(ValueError):  # EndpointError is a ValueError
            net.subscribe("tcp://*:5555", names("dst"))
        src.unlink()


def test_clear_errors(names, bridges, tmp_path):
    name = names("src")
    with pytest.raises(FileNotFoundError, match="create it first"):
        net.publish(name, "tcp://127.0.0.1:*")
    with pytest.raises(TypeError):
        net.publish(name, 5555)
    with framebus.create(name, shape=(4, 4), dtype=np.uint8) as src:
        with pytest.raises(ValueError, match="mode"):
            net.publish(name, "tcp://127.0.0.1:*", mode="fast")
        pub = net.publish(name, "tcp://127.0.0.1:*", mode="latest")
        bridges(pub)
        with pytest.raises(net.EndpointInUseError) as info:
            net.publish(name, pub.endpoint)
        assert isinstance(info.value, OSError)
        # nothing listening: a clear timeout, never a hang
        with pytest.raises(net.PeerTimeoutError, match="no framebus publisher answered"):
            net.subscribe(f"ipc://{tmp_path}/nobody.sock", names("dst"), timeout=0.5)
        with pytest.raises(net.SpecMismatchError, match="latest mode"):
            net.subscribe(pub.endpoint, names("dst"), mode="lossless", timeout=BOUND)
        with pytest.raises(net.SpecMismatchError, match="shape"):
            net.subscribe(pub.endpoint, names("dst"), shape=(8, 8), timeout=BOUND)
        other = names("other")
        with framebus.create(other, shape=(2, 2), dtype=np.float32) as taken:
            with pytest.raises(net.SpecMismatchError, match="another process owns it"):
                net.subscribe(pub.endpoint, other, timeout=BOUND)
            taken.unlink()
        pub.stop()
        src.unlink()


def test_compression(names, bridges):
    pytest.importorskip("zstandard")
    shape = (120, 160, 3)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, meta_capacity=32) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless", compress="zstd:3")
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            zeros = np.zeros(shape, np.uint8)
            src.write(zeros, frame_id=100, meta=b"zeros", timeout=BOUND)
            write(src, 1, shape)
            p = dst.read_new_publication(timeout=BOUND)
            assert p.frame_id == 100 and p.meta == b"zeros" and not p.payload.any()
            check(dst.read_new_publication(timeout=BOUND), 1, shape)
        assert pub.stats.wire_bytes < pub.stats.bytes  # the zero frame compresses
        sub.stop()
        pub.stop()
        src.unlink()
    with pytest.raises(ValueError, match="zstd"):
        net.publish(src_name, "tcp://127.0.0.1:*", compress="gzip")


def test_curve_encryption_and_authentication(names, bridges, tmp_path):
    if not zmq.has("curve"):
        pytest.skip("libzmq without CURVE")
    net.create_certificates(tmp_path / "server", "server")
    net.create_certificates(tmp_path / "allowed", "client")
    net.create_certificates(tmp_path / "intruder", "client")
    shape = (8, 8)
    src_name = names("src")
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.publish(
            src_name, "tcp://127.0.0.1:*", mode="lossless",
            curve_certificate=tmp_path / "server" / "server.key_secret", curve_location=tmp_path / "allowed",
        )
        bridges(pub)
        dst_name = names("dst")
        sub = net.subscribe(
            pub.endpoint, dst_name, timeout=BOUND,
            curve_certificate=tmp_path / "allowed" / "client.key_secret", curve_server_certificate=tmp_path / "server" / "server.key",
        )
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            write(src, 0, shape)
            check(dst.read_new_publication(timeout=BOUND), 0, shape)
        with pytest.raises(net.PeerTimeoutError):
            net.subscribe(
                pub.endpoint, names("intruder"), timeout=1.0,
                curve_certificate=tmp_path / "intruder" / "client.key_secret", curve_server_certificate=tmp_path / "server" / "server.key",
            )
        with pytest.raises(ValueError, match="secret"):
            net.publish(src_name, "tcp://127.0.0.1:*", curve_certificate=tmp_path / "server" / "server.key")
        sub.stop()
        pub.stop()
        src.unlink()


# ------------------------------------------------------------------------------------------------
def test_status_records_for_ls(names, bridges, capsys):
    from framebus.cli import main

    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=(4, 4), dtype=np.uint8) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*")
        bridges(pub)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        bridges(sub)
        wait_until(lambda: {(r["role"], r["stream"]) for r in net.bridges()} >= {("publish", src_name), ("subscribe", dst_name)}, "status records")
        assert main(["ls", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
        assert rows[src_name]["bridges"][0].startswith("-> tcp://127.0.0.1:")
        assert rows[dst_name]["bridges"][0].startswith("<- tcp://127.0.0.1:")
        paths = [pub._status.path, sub._status.path]
        sub.stop()
        pub.stop()
        assert not any(os.path.exists(p) for p in paths)
        src.unlink()


def test_cli_publish_and_subscribe(names, tmp_path):
    shape = (8, 12)
    src_name, dst_name = names("src"), names("dst")
    ep = f"ipc://{tmp_path}/cli.sock"
    exe = [sys.executable, "-m", "framebus", "bridge"]
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = subprocess.Popen([*exe, "publish", src_name, ep, "--mode", "lossless", "--quiet"], stdout=subprocess.PIPE, text=True)
        sub = subprocess.Popen([*exe, "subscribe", ep, dst_name, "--quiet", "--timeout", "30"], stdout=subprocess.PIPE, text=True)
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
                assert p.returncode == 143 and "stopped: 1 frames" in out, (p.args, out)  # SIGTERM: 128 + 15
        finally:
            for p in (sub, pub):
                p.kill()
                p.wait(BOUND)
        assert not os.path.exists(f"/dev/shm/framebus.{dst_name}")
        src.unlink()
    assert not [r for r in _status.bridges() if r["stream"] in (src_name, dst_name)]


def test_w5_bridge_benchmark_runs(tmp_path):
    """The benchmark itself (tiny frames, a fraction of a second): it runs and reports all systems."""
    bench = os.path.join(os.path.dirname(__file__), "..", "benches", "w5_bridge.py")
    out = tmp_path / "w5.json"
    proc = subprocess.run(
        [sys.executable, bench, "--shape", "16x16x3", "--seconds", "0.3", "--trials", "1", "--fps", "0,50", "--json", str(out)],
        capture_output=True, text=True, timeout=BOUND * 4,
    )
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(out.read_text())["runs"]
    assert {r["system"] for r in runs} == {"pyzmq", "pyzmq tuned", "framebus latest", "framebus lossless"}
    assert {r["load"] for r in runs} == {"full speed", "pyzmq's rate", "paced 50/s"}
    assert all(r["received"] > 0 for r in runs)

    assert not bench_streams_left()


def test_bridge_options_are_declared_once():
    """Both ends take their options from one declaration: keywords, an options object, or both
    (keywords win); the shared link checks run once; an unknown option names the known ones;
    the command line's defaults are the declaration's."""
    from framebus.commands import bridge as cli_bridge
    from framebus.net import LinkOptions, PublishOptions, SubscribeOptions

    assert issubclass(PublishOptions, LinkOptions) and issubclass(SubscribeOptions, LinkOptions)
    base = PublishOptions(mode="lossless", hwm=2)
    assert framebus.net._options(PublishOptions, base, {"hwm": 3}) == PublishOptions(mode="lossless", hwm=3)
    for kind in (PublishOptions, SubscribeOptions):
        with pytest.raises(framebus.InvalidArgumentError, match="peer_timeout .* must be longer than heartbeat_ivl"):
            kind(heartbeat_ivl=2.0, peer_timeout=1.0)
        with pytest.raises(TypeError, match="hwm must be a positive integer"):
            kind(hwm=1.5)
    with pytest.raises(TypeError, match="the options are: hwm, heartbeat_ivl"):
        framebus.net.publish("nope", "tcp://127.0.0.1:*", hwmm=3)
    with pytest.raises(TypeError, match="options must be a framebus.net.SubscribeOptions"):
        framebus.net.subscribe("tcp://127.0.0.1:1", "nope", PublishOptions())
    parser = __import__("argparse").ArgumentParser()
    cli_bridge.add_arguments(parser)
    pub = parser.parse_args(["publish", "x", "tcp://*:1"])
    sub = parser.parse_args(["subscribe", "tcp://h:1", "x"])
    assert (pub.hwm, pub.heartbeat_ivl, pub.peer_timeout, pub.mode) == (4, 1.0, 10.0, "latest")
    assert (sub.hwm, sub.timeout) == (SubscribeOptions().hwm, SubscribeOptions().timeout)


def test_publisher_and_subscriber_classes_build_zeromq_bridges(names, bridges):
    """framebus.net.Publisher(name, endpoint, options) and Subscriber(endpoint, name, options),
    as documented, are the ZeroMQ engine's ends (the classes are shared by every engine)."""
    shape = (8, 8)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8) as src:
        pub = net.Publisher(src_name, "tcp://127.0.0.1:*", net.PublishOptions(mode="lossless"))
        assert isinstance(pub, net.Publisher) and pub.engine == "zmq"
        pub._start()
        bridges(pub)
        sub = net.Subscriber(pub.endpoint, dst_name, net.SubscribeOptions(timeout=BOUND))
        assert isinstance(sub, net.Subscriber) and sub.engine == "zmq"
        sub._start()
        bridges(sub)
        with framebus.open(dst_name, mode="lossless") as dst:
            write(src, 1, shape)
            check(dst.read_new_publication(timeout=BOUND), 1, shape)
        sub.stop()
        pub.stop()
        src.unlink()
