"""Variable-shape streams across the ZeroMQ bridge (wire protocol version 2 and later): each frame's table
travels with it, the subscriber's stream is created with the same capacity and validates every
table before it writes; compressed frames too. 127.0.0.1 only."""

from __future__ import annotations

import os
import threading
import uuid

import numpy as np
import pytest

import framebus

zmq = pytest.importorskip("zmq")
net = pytest.importorskip("framebus.net")
from framebus.net.wire import protocol as P  # noqa: E402

BOUND = 30.0


def frames(n):
    """Frames of changing shape and kind: arrays, dicts with a variable number of boxes, bytes."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        h, w = 8 + 4 * (i % 5), 12 + 8 * (i % 3)
        if i % 3 == 0:
            out.append(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        elif i % 3 == 1:
            out.append({"image": rng.integers(0, 255, (h, w), dtype=np.uint8), "boxes": rng.random((i % 4, 4), dtype=np.float32)})
        else:
            out.append(bytes(rng.integers(0, 255, 50 + i, dtype=np.uint8)))
    return out


def same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, bytes):
        return a == b
    return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("mode", ["lossless", "latest"])
@pytest.mark.parametrize("compress", [None, "zstd"])
def test_variable_frames_cross_the_bridge(mode, compress):
    if compress:
        pytest.importorskip("zstandard")
    tag = f"t-vnet-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    src_name, dst_name = f"{tag}-src", f"{tag}-dst"
    sent = frames(12)
    with framebus.create(src_name, capacity="256KiB", meta_capacity=32) as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode=mode, compress=compress, copy_threshold=64)
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        try:
            with framebus.open(dst_name, mode="lossless") as dst:
                assert dst.variable and dst.capacity == 256 * 1024 and dst.meta_capacity == 32
                info = framebus.stat(dst_name)
                assert info.variable and info.capacity == 256 * 1024 and info.shape is None
                if mode == "lossless":
                    t = threading.Thread(target=lambda: [src.write(f, frame_id=i, meta=b"m%d" % i, timeout=BOUND) for i, f in enumerate(sent)])
                    t.start()
                    got = [dst.read_new_publication(timeout=BOUND) for _ in sent]
                    t.join(BOUND)
                else:
                    got = []
                    for i, f in enumerate(sent):
                        src.write(f, frame_id=i, meta=b"m%d" % i)
                        got.append(dst.read_new_publication(timeout=BOUND))
                for i, (f, pub_) in enumerate(zip(sent, got)):
                    assert pub_.frame_id == i and pub_.meta == b"m%d" % i
                    assert same(f, pub_.payload), i
        finally:
            sub.stop()
            pub.stop()
            src.unlink()
    assert not os.path.exists(f"/dev/shm/framebus.{dst_name}")


def test_spec_of_and_protocol_version():
    assert P.VERSION == 4  # 2 added variable-shape streams, 3 the END message, 4 encoded packets
    header = P.FramePacker().pack(
        flags=0, source_id=1, seq=2, timestamp_ns=3, frame_id=4, nbytes=5000, slots=4, meta_capacity=8, spec=(P.VARIABLE, (1 << 20,)), meta=b"x"
    )
    h = P.unpack_frame(header)
    assert h.spec == ("var", (1 << 20,)) and h.nbytes == 5000


def test_raw_frames_are_validated_before_they_are_written():
    name = f"t-vraw-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with framebus.create(name, capacity=4096) as s:
        s.write({"a": np.arange(4, dtype=np.int32)}, frame_id=7)
        with s.view() as f:
            raw = bytes(f._raw)
        assert len(raw) == framebus._native.FRAME_TABLE_BYTES + 16
        s._write_raw(raw, frame_id=8)
        assert s.read_publication().frame_id == 8 and list(s.read()) == ["a"]
        for at, data in ((0, b"JUNK"), (4, (99).to_bytes(4, "little")), (128 + 56, (1 << 40).to_bytes(8, "little"))):
            bad = bytearray(raw)
            bad[at:at + len(data)] = data
            with pytest.raises(ValueError, match="table is invalid"):
                s._write_raw(bad)
        with pytest.raises(ValueError, match="table is invalid"):
            s._write_raw(raw[:100])
        assert s.write_sequence == 2
        s.unlink()


def test_a_codec_crosses_the_bridge_and_the_subscriber_is_shown_as_a_writer():
    """Byte payloads keep their codec across the bridge (it travels in the frame table), and
    the subscriber's handle on its stream ("bridge in") writes: monitors give it no lag (it
    showed the stream's whole sequence as lag and came first in ``top --sort lag``)."""
    from framebus.monitor import document

    tag = f"t-vcodec-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    src_name, dst_name = f"{tag}-src", f"{tag}-dst"
    packets = [(b"\x00\x00\x00\x01\x67" + bytes([i]) * (10 + i), "h264" if i % 2 else "hevc") for i in range(6)]
    with framebus.create(src_name, capacity="64KiB") as src:
        pub = net.publish(src_name, "tcp://127.0.0.1:*", mode="lossless")
        sub = net.subscribe(pub.endpoint, dst_name, timeout=BOUND)
        try:
            with framebus.open(dst_name, mode="lossless") as dst:
                t = threading.Thread(target=lambda: [src.write(p, codec=c, timeout=BOUND) for p, c in packets])
                t.start()
                for data, codec in packets:
                    with dst.wait_view(BOUND) as f:
                        assert f.is_bytes and bytes(f.array) == data and f.codec == codec
                t.join(BOUND)
                (s,) = document([dst_name], interval=0.05)["streams"]
                assert s["latest_seq"] == len(packets)
                (bridge,) = [r for r in s["readers"] if r["role"] == "bridge in"]
                assert bridge["writes"] and bridge["lag_frames"] == 0 and bridge["label"].startswith("<- tcp://")
                (reader,) = [r for r in s["readers"] if r["mode"] == "lossless" and not r["writes"]]
                assert reader["lag_frames"] == 0
        finally:
            sub.stop()
            pub.stop()
            src.unlink()
    assert not os.path.exists(f"/dev/shm/framebus.{dst_name}")
