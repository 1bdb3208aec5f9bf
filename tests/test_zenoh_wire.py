"""The Zenoh engine's payload path (framebus.net.zenoh.frames): frames into Zenoh payloads and
back, the sessions' settings, and frames larger than one Zenoh batch (delivered in fragments)
arriving intact over a real bridge: fixed and variable layouts, zstd, metadata."""

from __future__ import annotations

import json
import threading
import time
import uuid

import numpy as np
import pytest

import framebus

pytest.importorskip("zmq")
zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install 'framebus[zenoh]')")
net = pytest.importorskip("framebus.net")
from framebus.net.zenoh import ZenohLink, frames as zenoh_wire  # noqa: E402
from bridge_helpers import bridges, free_port, names  # noqa: E402,F401

BOUND = 30.0
BATCH = 65535  # Zenoh's largest batch: a payload above it travels in fragments




# -- the sessions' settings ----------------------------------------------------------------------
def test_sessions_without_a_config_file_get_no_shm_and_a_deep_queue():
    cfg = ZenohLink(scouting=False).config()
    assert json.loads(cfg.get_json("transport/shared_memory/enabled")) is False
    assert json.loads(cfg.get_json("transport/link/tx/queue/size/data")) == zenoh_wire.TX_QUEUE_BATCHES == 16


def test_a_config_file_decides_for_itself(tmp_path):
    path = tmp_path / "zenoh.json5"
    path.write_text("{ transport: { link: { tx: { queue: { size: { data: 4 } } } } } }")
    cfg = ZenohLink(zenoh_config=str(path), scouting=False).config()
    assert json.loads(cfg.get_json("transport/link/tx/queue/size/data")) == 4
    assert json.loads(cfg.get_json("transport/shared_memory/enabled")) is True  # Zenoh's default


# -- payloads ------------------------------------------------------------------------------------
def test_frame_payload_is_a_copy_of_the_slot():
    arr = np.arange(3 * BATCH, dtype=np.uint8)
    payload = zenoh_wire.frame_payload(arr)
    want = arr.tobytes()
    arr[:] = 0  # the slot is reused after the payload was made
    assert isinstance(payload, zenoh.ZBytes) and payload.to_bytes() == want
    assert zenoh_wire.frame_payload(memoryview(b"abc")).to_bytes() == b"abc"


def test_staged_payload_is_a_copy_of_the_staging_buffer():
    """A staged payload owns its bytes: reusing the staging buffer (and the slot) for the next
    frame leaves the payload already made (and kept for a resend) as it was."""
    staging = zenoh_wire.Staging()
    first = np.arange(3 * BATCH, dtype=np.uint8)
    payload = zenoh_wire.frame_payload(first, staging)
    want = first.tobytes()
    first[:] = 0
    second = zenoh_wire.frame_payload(np.full(3 * BATCH, 7, np.uint8), staging)
    assert payload.to_bytes() == want and second.to_bytes() == bytes([7]) * (3 * BATCH)
    # Other sizes and layouts: staged when contiguous, copied another way when not.
    wide = np.arange(12, dtype=np.uint16).reshape(3, 4)
    assert zenoh_wire.frame_payload(wide, staging).to_bytes() == wide.tobytes()
    assert staging.stage(wide[:, ::2]) is None
    assert zenoh_wire.frame_payload(wide[:, ::2], staging).to_bytes() == wide[:, ::2].tobytes()
    assert zenoh_wire.frame_payload(memoryview(b"abc"), staging).to_bytes() == b"abc"
    assert zenoh_wire.frame_payload(b"", staging).to_bytes() == b""


def test_zbytes_takes_only_bytes_bytearray_or_str():
    """What zenoh_wire is built around: ZBytes copies bytes/bytearray and refuses buffers it
    would have to borrow (so a frame is copied out of its slot first)."""
    assert zenoh.ZBytes(bytearray(b"ab")).to_bytes() == b"ab"
    for borrowed in (memoryview(b"ab"), np.zeros(2, np.uint8)):
        with pytest.raises(TypeError):
            zenoh.ZBytes(borrowed)
    with pytest.raises(TypeError):
        memoryview(zenoh.ZBytes(b"ab"))  # no buffer protocol on a payload


def test_frame_bytes_reads_the_payload():
    assert zenoh_wire.frame_bytes(zenoh.ZBytes(b"xyz")) == b"xyz"
    assert zenoh_wire.frame_bytes(zenoh.ZBytes(b"")) == b""


def test_fragmented_sample_reads_back_exactly():
    """A payload of several batches sent over loopback TCP arrives in fragments; frame_bytes
    gives it back byte for byte."""
    port = free_port()
    key = f"fbtest/{uuid.uuid4().hex[:12]}"

    def session(where, endpoint):
        cfg = zenoh.Config()
        cfg.insert_json5("scouting/multicast/enabled", "false")
        zenoh_wire.tune(cfg)
        cfg.insert_json5(f"{where}/endpoints", json.dumps([endpoint]))
        return zenoh.open(cfg)

    data = np.random.default_rng(3).integers(0, 255, 5 * BATCH + 17, dtype=np.uint8)
    a = session("listen", f"tcp/127.0.0.1:{port}")
    try:
        b = session("connect", f"tcp/127.0.0.1:{port}")
        try:
            got, arrived = [], threading.Event()
            sub = b.declare_subscriber(key, lambda s: (got.append((zenoh_wire.frame_bytes(s.payload), s.payload.to_bytes())), arrived.set()))
            pub = a.declare_publisher(key, congestion_control=zenoh.CongestionControl.BLOCK, reliability=zenoh.Reliability.RELIABLE, express=True)
            deadline = time.monotonic() + BOUND
            while not pub.matching_status.matching:
                assert time.monotonic() < deadline, "the subscriber never matched"
                time.sleep(0.01)
            pub.put(zenoh_wire.frame_payload(data, zenoh_wire.Staging()))
            assert arrived.wait(BOUND)
            assert got == [(data.tobytes(), data.tobytes())]  # bytes() and to_bytes() read the same
            pub.undeclare()
            sub.undeclare()
        finally:
            b.close()
    finally:
        a.close()


# -- over a bridge -------------------------------------------------------------------------------
def _bridge(src_name, dst_name, bridges, **kw):
    port, key = free_port(), f"fbtest/{uuid.uuid4().hex[:12]}"
    pub = net.publish(src_name, key, mode="lossless", engine="zenoh", listen=[f"tcp/127.0.0.1:{port}"], scouting=False, **kw)
    bridges(pub)
    sub = net.subscribe(key, dst_name, timeout=BOUND, engine="zenoh", connect=[f"tcp/127.0.0.1:{port}"], scouting=False)
    bridges(sub)
    return pub, sub


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_large_fixed_frames_with_metadata_arrive_intact(compress, names, bridges):
    if compress:
        pytest.importorskip("zstandard")
    shape = (300, 400, 3)  # 360 kB: six batches
    src_name, dst_name = names("src"), names("dst")
    frames = [np.random.default_rng(i).integers(0, 255 if i % 2 else 4, size=shape, dtype=np.uint8) for i in range(6)]
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4, meta_capacity=32) as src:
        pub, sub = _bridge(src_name, dst_name, bridges, compress=compress)
        with framebus.open(dst_name, mode="lossless") as dst:
            writer = threading.Thread(target=lambda: [
                src.write(f, frame_id=100 + i, meta=b"m%d" % i, timestamp_ns=5_000 + i, timeout=BOUND) for i, f in enumerate(frames)
            ])
            writer.start()
            for i, f in enumerate(frames):
                got = dst.read_new_publication(timeout=BOUND)
                assert (got.frame_id, got.meta, got.timestamp_ns) == (100 + i, b"m%d" % i, 5_000 + i)
                assert got.payload.tobytes() == f.tobytes()
            writer.join(BOUND)
        assert sub.stats.dropped == 0
        sub.stop()
        pub.stop()
        src.unlink()


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_large_variable_frames_arrive_intact(compress, names, bridges):
    if compress:
        pytest.importorskip("zstandard")
    src_name, dst_name = names("src"), names("dst")
    arrays = [np.random.default_rng(n).integers(0, 60000, size=(n, 3), dtype=np.uint16) for n in (7, 40_000, 90_000, 1)]
    with framebus.create(src_name, capacity=1 << 20, slots=4) as src:
        pub, sub = _bridge(src_name, dst_name, bridges, compress=compress)
        with framebus.open(dst_name, mode="lossless") as dst:
            writer = threading.Thread(target=lambda: [src.write(a, frame_id=i, meta=b"v%d" % i, timeout=BOUND) for i, a in enumerate(arrays)])
            writer.start()
            for i, a in enumerate(arrays):
                got = dst.read_new_publication(timeout=BOUND)
                assert got.frame_id == i and got.meta == b"v%d" % i
                assert np.asarray(got.payload).dtype == a.dtype and np.array_equal(np.asarray(got.payload), a)
            writer.join(BOUND)
        sub.stop()
        pub.stop()
        src.unlink()


def test_the_engine_puts_and_reads_frames_through_zenoh_wire(names, bridges, monkeypatch):
    """The engine's two ends use these functions (so their copy counts are the engine's)."""
    calls = {"frame_payload": 0, "frame_bytes": 0, "tune": 0}
    for name in calls:
        real = getattr(zenoh_wire, name)

        def counted(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(zenoh_wire, name, counted)
    shape = (200, 200, 3)
    src_name, dst_name = names("src"), names("dst")
    with framebus.create(src_name, shape=shape, dtype=np.uint8, slots=4) as src:
        pub, sub = _bridge(src_name, dst_name, bridges)
        with framebus.open(dst_name, mode="lossless") as dst:
            for i in range(3):
                src.write(np.full(shape, i, np.uint8), frame_id=i, timeout=BOUND)
                assert int(dst.read_new_publication(timeout=BOUND).payload[199, 199, 2]) == i
        sub.stop()
        pub.stop()
        src.unlink()
    assert calls["tune"] == 2 and calls["frame_payload"] >= 3 and calls["frame_bytes"] >= 3


def test_the_subscriber_socket_reads_samples_on_zenoh_s_thread_and_hands_over_failures():
    """The subscriber's transport copies a sample out of Zenoh in the callback (so the copy
    overlaps the bridge thread's write of the previous frame) and queues the parts; a sample
    it cannot read is raised by recv() on the bridge's thread instead of being lost."""
    from framebus.net.zenoh import Inbox
    from framebus.net.zenoh.transport import _SubscriberSocket

    sock = object.__new__(_SubscriberSocket)
    Inbox.__init__(sock)

    class Sample:
        def __init__(self, attachment, payload):
            self.attachment, self.payload = attachment, payload

    class Payload:
        reads = 0

        def __bytes__(self):
            Payload.reads += 1
            return b"frame"

    sock._on_sample(Sample(zenoh.ZBytes(b"head"), Payload()))
    assert Payload.reads == 1  # read in the callback, not left for the bridge's thread
    sock._on_sample(Sample(None, zenoh.ZBytes(b"ack")))
    sock._on_sample(Sample(None, object()))  # not a payload: bytes() raises TypeError
    first, second = sock.recv(), sock.recv()
    assert [bytes(p.buffer) for p in first] == [b"head", b"frame"]
    assert [bytes(p.buffer) for p in second] == [b"ack"]
    with pytest.raises(TypeError):
        sock.recv()
    assert sock.recv() is None
