"""The public API of streams: creating, opening, properties, writing and reading, read_new
semantics, lossless mode, locking, lifecycle, pickling and pyshmem-compatible names."""

from __future__ import annotations

import dataclasses
import inspect
import multiprocessing as mp
import pickle
import re
import signal
import threading
import time

import numpy as np
import pytest

import framebus
from framebus import errors

import mp_targets
from conftest import CHILD_TIMEOUT, segment_path

# Generous upper bound for waits that must succeed (never a performance threshold).
LONG = 30.0


def frame(shape, dtype, k):
    """A frame whose every element is derived from ``k``."""
    n = int(np.prod(shape))
    return ((np.arange(n) + k) % 100).astype(dtype).reshape(shape)


# -- module ---------------------------------------------------------------------------------


def test_version_and_exports():
    assert isinstance(framebus.__version__, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", framebus.__version__)
    for n in framebus.__all__:
        assert hasattr(framebus, n), n
    for n in ("create", "open", "unlink", "list_streams", "stat", "Stream", "gpu_available"):
        assert n in framebus.__all__
    assert framebus.gpu_available() is False
    assert isinstance(framebus.LAYOUT_VERSION, int)


def test_compat_arguments_are_not_part_of_the_native_api(name):
    """What the native API would ignore it refuses: pyshmem's and turbopipe's vocabulary lives in
    framebus.pyshmem and framebus.turbopipe (docs/moving-from-0.1.md)."""
    for kwargs in ({"gpu_device": 0}, {"notify": True}):
        with pytest.raises(TypeError, match=next(iter(kwargs))):
            framebus.create(name, shape=(2,), **kwargs)
    with framebus.create(name, shape=(2,), auto_unlink=True) as s:
        for call in (lambda: s.read(safe=False), lambda: s.read(timeout=1), lambda: s.read_new(poll_interval=0.1),
                     lambda: s.acquire(1, poll_interval=0.1), lambda: s.close(timeout=1), lambda: s.read_publication(safe=True)):
            with pytest.raises(TypeError):
                call()
        for alias in ("count", "missed_writes", "total_missed_writes", "delete", "ownercount"):
            assert not hasattr(s, alias), alias


# -- create / open / properties -------------------------------------------------------------


def test_create_properties(name):
    s = framebus.create(name, shape=(3, 5), dtype=np.uint16, slots=3)
    try:
        assert s.name == name
        assert s.shape == (3, 5)
        assert s.dtype == np.dtype(np.uint16)
        assert s.size == 3 * 5 * 2
        assert s.slots == 3
        assert s.attached == 1
        assert s.write_time == 0.0
        assert s.write_sequence == 0
        assert s.frame_id == 0
        assert s.closed is False
        assert s.mode == "latest"
        assert s.missed == 0
        assert s.total_missed == 0
        assert s.readonly is False
        assert isinstance(s, framebus.Stream)
    finally:
        s.unlink()


def test_create_defaults_and_shape_forms(name):
    with framebus.create(name, shape=7) as s:
        assert s.shape == (7,)
        assert s.dtype == np.float32
        assert s.slots == 4
        s.unlink()
    with framebus.create(name, shape=[2, 3], dtype="int8", size=6) as s:
        assert s.shape == (2, 3) and s.dtype == np.int8 and s.size == 6
        s.unlink()
    with framebus.create(name, shape=(np.int64(4),), dtype=np.dtype(">f8")) as s:
        assert s.shape == (4,) and s.dtype == np.dtype(">f8")
        s.unlink()


def test_open_sees_the_creators_spec_and_counts_handles(name):
    w = framebus.create(name, shape=(4, 4), dtype=np.float64, slots=5)
    try:
        r = framebus.open(name)
        assert (r.shape, r.dtype, r.size, r.slots) == ((4, 4), np.dtype(np.float64), 128, 5)
        assert w.attached == 2 and r.attached == 2
        r2 = framebus.open(name, mode="lossless")
        assert r2.mode == "lossless"
        assert w.attached == 3
        r.close()
        r2.close()
        assert w.attached == 1
    finally:
        w.unlink()


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.int8, np.uint8, np.int16, np.uint32, np.int64, np.float16, np.float32, np.float64, np.complex64, np.complex128, ">i4", "<f8"]
)
def test_write_read_round_trip(name, dtype):
    shape = (3, 4)
    with framebus.create(name, shape=shape, dtype=dtype) as w, framebus.open(name) as r:
        value = frame(shape, dtype, 7)
        w.write(value)
        got = r.read()
        assert got.dtype == np.dtype(dtype)
        assert got.shape == shape
        np.testing.assert_array_equal(got, value)
        assert got.flags.c_contiguous and got.flags.writeable
        # An independent copy: changing it does not change the stream.
        got[...] = 0
        np.testing.assert_array_equal(r.read(), value)
        w.unlink()


def test_write_converts_compatible_values(name):
    with framebus.create(name, shape=(2, 3), dtype=np.float32) as s:
        s.write([[1, 2, 3], [4, 5, 6]])
        np.testing.assert_array_equal(s.read(), [[1, 2, 3], [4, 5, 6]])
        s.write(np.arange(6, dtype=np.float64).reshape(2, 3) / 2)  # same-kind cast
        np.testing.assert_array_equal(s.read(), np.arange(6).reshape(2, 3) / 2)
        big = np.arange(12, dtype=np.float32).reshape(2, 6)
        s.write(big[:, ::2])  # not contiguous
        np.testing.assert_array_equal(s.read(), big[:, ::2])
        s.write(np.asfortranarray(np.ones((2, 3), np.float32) * 3))
        np.testing.assert_array_equal(s.read(), np.full((2, 3), 3))
        assert s.write_sequence == 4
        s.unlink()


def test_read_out_read_into_and_read_new_out(name):
    with framebus.create(name, shape=(8,), dtype=np.int32) as w, framebus.open(name) as r:
        w.write(np.arange(8, dtype=np.int32))
        out = np.full(8, -1, np.int32)
        assert r.read(out=out) is out
        np.testing.assert_array_equal(out, np.arange(8))
        out2 = np.zeros(8, np.int32)
        assert r.read_into(out2) is out2
        np.testing.assert_array_equal(out2, np.arange(8))
        w.write(np.arange(8, dtype=np.int32) * 2)
        out3 = np.zeros(8, np.int32)
        assert r.read_new(timeout=LONG, out=out3) is out3
        np.testing.assert_array_equal(out3, np.arange(8) * 2)
        w.unlink()


def test_read_before_first_write_raises_stream_empty(name):
    """Before the first frame a copying read has nothing to return: StreamEmptyError (reason
    "empty"), ``out`` untouched, on fixed and variable-shape streams alike. Only
    framebus.pyshmem reads zeros then, as pyshmem does."""
    with framebus.create(name, shape=(2, 2), dtype=np.float64) as w, framebus.open(name) as r:
        out = np.full((2, 2), 9.0)
        for call in (r.read, lambda: r.read(out=out), lambda: r.read_into(out), r.read_publication, w.read):
            with pytest.raises(framebus.StreamEmptyError, match="has no frame yet") as e:
                call()
            assert (e.value.reason, e.value.stream) == ("empty", name)
            assert isinstance(e.value, RuntimeError)
        np.testing.assert_array_equal(out, np.full((2, 2), 9.0))
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0)
        w.write(np.ones((2, 2)))
        np.testing.assert_array_equal(r.read(), np.ones((2, 2)))
        w.unlink()
    with framebus.create(name + "-v", capacity=64) as w, framebus.open(name + "-v") as r:
        for call in (r.read, r.read_publication):
            with pytest.raises(framebus.StreamEmptyError, match="has no frame yet"):
                call()
        w.write(b"abc")
        assert r.read() == b"abc"
        w.unlink()


def test_sequence_time_and_frame_id(name):
    with framebus.create(name, shape=(2,), dtype=np.int16) as w, framebus.open(name) as r:
        t0 = time.time()
        w.write(np.array([1, 2], np.int16), frame_id=10)
        t1 = time.time()
        assert w.write_sequence == r.write_sequence == 1
        assert r.frame_id == 10
        # The timestamp is the wall-clock time of the write (a correctness check, not a speed one).
        assert t0 - 1 <= r.write_time <= t1 + 1
        w.write(np.array([3, 4], np.int16))  # frame_id=None keeps the previous id
        assert r.frame_id == 10 and r.write_sequence == 2
        w.write(np.array([3, 4], np.int16), frame_id=-5)
        assert r.frame_id == -5
        w.write(np.array([3, 4], np.int16), frame_id=2**63 - 1)
        assert r.frame_id == 2**63 - 1
        assert r.write_time >= t0 - 1
        w.unlink()


def test_explicit_sequence_numbers(name):
    """write(seq=) and loan(seq=) keep a given number (a bridge keeps its source's this way):
    it must increase, gaps count as missed, a refused number writes nothing."""
    with framebus.create(name, shape=(2,), dtype=np.int16) as w, framebus.open(name) as r:
        w.write(np.array([1, 1], np.int16), seq=100)
        assert r.write_sequence == 100
        assert r.read_new_publication(timeout=LONG).seq == 100
        with w.loan(seq=105, frame_id=7) as buf:
            buf[:] = 5
        pub = r.read_new_publication(timeout=LONG)
        assert (pub.seq, pub.frame_id, pub.payload.tolist()) == (105, 7, [5, 5])
        assert r.missed == 4
        w.write(np.array([6, 6], np.int16))  # no number: the next one
        assert r.write_sequence == 106
        for bad, exc in ((106, ValueError), (3, ValueError), (0, ValueError), (-1, ValueError), (2**64, ValueError), (2**56, ValueError), ("7", TypeError), (7.0, TypeError)):
            with pytest.raises(exc, match="seq"):
                w.write(np.array([9, 9], np.int16), seq=bad)
            with pytest.raises(exc, match="seq"):
                w.loan(seq=bad)
        assert r.write_sequence == 106 and r.read().tolist() == [6, 6]
        assert not w.lock_held()
        w.write(np.array([8, 8], np.int16), seq=2**56 - 1)
        assert r.write_sequence == 2**56 - 1
        w.unlink()


def test_metadata_round_trip(name):
    with framebus.create(name, shape=(2,), dtype=np.uint8, meta_capacity=16) as w, framebus.open(name) as r:
        w.write(np.array([1, 2], np.uint8), frame_id=3, meta=b"hello\x00world")
        pub = r.read_publication()
        assert pub.meta == b"hello\x00world"
        assert pub.frame_id == 3 and pub.seq == 1
        assert pub.timestamp_ns > 0 and pub.timestamp == pytest.approx(pub.timestamp_ns / 1e9)
        w.write(np.array([3, 4], np.uint8), meta=bytearray(b"x" * 16))  # exactly the capacity
        assert r.read_publication().meta == b"x" * 16
        w.write(np.array([5, 6], np.uint8), meta=memoryview(b"mv"))
        assert r.read_publication().meta == b"mv"
        w.write(np.array([7, 8], np.uint8))  # no meta: empty, not the previous frame's
        assert r.read_publication().meta == b""
        w.unlink()


def test_meta_over_capacity_writes_nothing(name):
    with framebus.create(name, shape=(3,), dtype=np.int32, meta_capacity=8) as w, framebus.open(name) as r:
        w.write(np.array([1, 2, 3], np.int32), frame_id=1, meta=b"ok")
        with pytest.raises(ValueError, match="meta"):
            w.write(np.array([9, 9, 9], np.int32), frame_id=2, meta=b"x" * 9)
        assert r.write_sequence == 1
        pub = r.read_publication()
        assert pub.frame_id == 1 and pub.meta == b"ok"
        np.testing.assert_array_equal(pub.payload, [1, 2, 3])
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0)
        w.unlink()


def test_zero_meta_capacity(name):
    with framebus.create(name, shape=(1,), meta_capacity=0) as w:
        w.write(np.ones(1, np.float32), meta=b"")
        with pytest.raises(ValueError):
            w.write(np.ones(1, np.float32), meta=b"a")
        assert w.write_sequence == 1
        w.unlink()


def test_read_publication_and_read_new_publication(name):
    with framebus.create(name, shape=(2,), dtype=np.int64) as w, framebus.open(name) as r:
        for k in range(3):
            w.write(np.array([k, k]), frame_id=100 + k, meta=bytes([k]))
        pub = r.read_new_publication(timeout=LONG)
        assert isinstance(pub, framebus.Publication)
        assert (pub.seq, pub.frame_id, pub.meta, pub.missed) == (3, 102, b"\x02", 2)
        np.testing.assert_array_equal(pub.payload, [2, 2])
        out = np.zeros(2, np.int64)
        w.write(np.array([7, 7]), frame_id=7)
        pub = r.read_new_publication(timeout=LONG, out=out)
        assert pub.payload is out and pub.missed == 0 and pub.seq == 4
        pub = r.read_publication(out=out)
        assert pub.payload is out and pub.frame_id == 7
        w.unlink()


def test_publication_has_framebus_names_not_pyshmems(name):
    """A Publication's fields are a Frame's (seq, frame_id, timestamp, timestamp_ns, meta) and
    missed; pyshmem's names (count, write_time, missed_publications) live in framebus.pyshmem
    and here raise an AttributeError naming the new one."""
    with framebus.create(name, shape=(2,), dtype=np.int64, meta_capacity=8) as w, framebus.open(name) as r:
        w.write(np.array([1, 2]), frame_id=5, meta=b"m")
        pub = r.read_publication()
        assert [f.name for f in dataclasses.fields(pub)] == ["payload", "seq", "frame_id", "timestamp", "timestamp_ns", "meta", "missed"]
        assert (pub.seq, pub.frame_id, pub.meta, pub.missed) == (1, 5, b"m", 0)
        assert pub.timestamp == pytest.approx(pub.timestamp_ns / 1e9)
        for old, new in (("count", "seq"), ("write_time", "timestamp"), ("missed_publications", "missed")):
            with pytest.raises(AttributeError, match=f"has no '{old}': it is '{new}'"):
                getattr(pub, old)


# -- read_new semantics ---------------------------------------------------------------------


def test_new_handle_has_seen_the_latest_frame(name):
    with framebus.create(name, shape=(1,), dtype=np.int64) as w:
        for k in range(3):
            w.write(np.array([k]))
        with framebus.open(name) as r:
            with pytest.raises(TimeoutError):
                r.read_new(timeout=0)
            with pytest.raises(TimeoutError):
                r.read_new(timeout=0.01)
            w.write(np.array([3]))
            assert r.read_new(timeout=0)[0] == 3
            with pytest.raises(TimeoutError):
                r.read_new(timeout=0)
        w.unlink()


def test_read_new_returns_first_newer_frame_and_counts_missed(name):
    with framebus.create(name, shape=(1,), dtype=np.int64, slots=4) as w, framebus.open(name) as r:
        for k in range(1, 6):
            w.write(np.array([k]))
        assert r.read_new(timeout=LONG)[0] == 5  # latest mode: the newest frame
        assert (r.missed, r.total_missed) == (4, 4)
        w.write(np.array([6]))
        assert r.read_new(timeout=LONG)[0] == 6
        assert (r.missed, r.total_missed) == (0, 4)
        for k in range(7, 10):
            w.write(np.array([k]))
        pub = r.read_new_publication(timeout=LONG)
        assert pub.payload[0] == 9 and pub.missed == 2
        assert (r.missed, r.total_missed) == (2, 6)
        assert (r.missed, r.total_missed) == (2, 6)
        w.unlink()


def test_read_marks_the_frame_seen(name):
    with framebus.create(name, shape=(1,), dtype=np.int64) as w, framebus.open(name) as r:
        w.write(np.array([1]))
        assert r.read()[0] == 1
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0)
        w.write(np.array([2]))
        assert r.read_new(timeout=0)[0] == 2
        w.unlink()


def test_read_new_wakes_on_a_write_from_another_thread(name):
    with framebus.create(name, shape=(16,), dtype=np.float32) as w, framebus.open(name) as r:
        started = threading.Event()

        def writer():
            started.wait(LONG)
            time.sleep(0.05)
            w.write(np.full(16, 5, np.float32), frame_id=77)

        t = threading.Thread(target=writer)
        t.start()
        started.set()
        try:
            pub = r.read_new_publication(timeout=LONG)
        finally:
            t.join(LONG)
        assert pub.frame_id == 77 and pub.payload[0] == 5
        w.unlink()


def test_read_new_is_interruptible_by_signal_handlers(name):
    """A blocked read_new runs Python signal handlers (Ctrl-C) while it waits."""

    class Interrupted(Exception):
        pass

    def handler(signum, frame_):
        raise Interrupted

    with framebus.create(name, shape=(4,)) as w:
        old = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                w.read_new(timeout=LONG)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert not w.closed
        w.unlink()


def test_close_from_another_thread_stops_a_blocked_read_new(name):
    with framebus.create(name, shape=(4,)) as w:
        r = framebus.open(name)
        outcome = []

        def wait():
            try:
                r.read_new(timeout=LONG)
                outcome.append("frame")
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)
        r.close()
        t.join(LONG)
        assert not t.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError), outcome
        assert "open" in str(outcome[0])
        w.unlink()


# -- lossless mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("numbers", ["next", "explicit, with gaps"])
def test_lossless_reader_gets_every_frame_in_order(name, numbers):
    n = 200
    seq = (lambda k: None) if numbers == "next" else (lambda k: 10 + 7 * k)
    with framebus.create(name, shape=(64,), dtype=np.int64, slots=2) as w, framebus.open(name, mode="lossless") as r:
        errors_ = []

        def writer():
            try:
                for k in range(n):
                    w.write(np.full(64, k, np.int64), frame_id=k, seq=seq(k), timeout=LONG)
            except BaseException as exc:  # noqa: BLE001
                errors_.append(exc)

        t = threading.Thread(target=writer)
        t.start()
        got = []
        try:
            for _ in range(n):
                pub = r.read_new_publication(timeout=LONG)
                assert (pub.payload == pub.frame_id).all()
                got.append(pub)
        finally:
            t.join(LONG)
        assert not errors_, errors_
        assert [p.frame_id for p in got] == list(range(n))
        if numbers == "next":
            assert [p.seq for p in got] == list(range(1, n + 1))
            assert r.total_missed == 0
        else:  # the numbers the writer skipped count as missed; no frame is lost
            assert [p.seq for p in got] == [seq(k) for k in range(n)]
            assert r.total_missed == 9 + 6 * (n - 1)
        w.unlink()


def test_lossless_write_times_out_when_the_reader_does_not_read(name):
    with framebus.create(name, shape=(2,), dtype=np.int64, slots=3) as w, framebus.open(name, mode="lossless") as r:
        for k in range(3):  # the ring holds `slots` unread frames
            w.write(np.array([k, k]), frame_id=k, timeout=LONG)
        with pytest.raises(TimeoutError):
            w.write(np.array([9, 9]), frame_id=9, timeout=0.05)
        with pytest.raises(framebus.StreamTimeoutError):
            w.write(np.array([9, 9]), frame_id=9, timeout=0)
        assert w.write_sequence == 3
        assert r.read_new(timeout=0)[0] == 0
        w.write(np.array([3, 3]), frame_id=3, timeout=LONG)  # one slot was released
        got = [r.read_new(timeout=0)[0] for _ in range(3)]
        assert got == [1, 2, 3]
        # Closing the lossless reader releases the writer for good.
        r.close()
        for k in range(10):
            w.write(np.array([k, k]), timeout=LONG)
        w.unlink()


def test_frames_iterator(name):
    with framebus.create(name, shape=(1,), dtype=np.int32, slots=8) as w, framebus.open(name, mode="lossless") as r:
        for k in range(5):
            w.write(np.array([k], np.int32), frame_id=k)
        pubs = list(r.frames(timeout=0.05, copy=True))
        assert all(isinstance(p, framebus.Publication) for p in pubs)
        assert [p.frame_id for p in pubs] == list(range(5))
        assert [p.seq for p in pubs] == list(range(1, 6))
        assert [int(p.payload[0]) for p in pubs] == list(range(5))
        with framebus.open(name) as latest:
            for k in range(5, 8):
                w.write(np.array([k], np.int32), frame_id=k)
            pubs = list(latest.frames(timeout=0.05, copy=True))
            assert [p.frame_id for p in pubs] == [7]
            assert pubs[0].missed == 2
        # The default yields zero-copy frames, each released when the loop moves on.
        got = []
        for f in r.frames(timeout=0.05):
            assert isinstance(f, framebus.Frame) and not f.released
            got.append((f.frame_id, f.seq, int(f.array[0])))
        assert got == [(k, k + 1, k) for k in range(5, 8)]
        out = np.zeros(1, np.int32)
        w.write(np.array([8], np.int32), frame_id=8)
        it = r.frames(timeout=LONG, copy=True, out=out)
        p = next(it)
        assert p.frame_id == 8 and p.payload is out
        r.close()
        assert list(it) == []  # a closed handle ends the iteration
        w.unlink()


def test_clear_writes_zeros(name):
    with framebus.create(name, shape=(3,), dtype=np.float32) as w, framebus.open(name) as r:
        w.write(np.ones(3, np.float32), frame_id=4)
        r.read()
        w.clear()
        assert r.read_new(timeout=0).sum() == 0
        np.testing.assert_array_equal(r.read(), np.zeros(3))
        assert r.write_sequence == 2
        w.unlink()


# -- lifecycle -------------------------------------------------------------------------------


def test_close_is_idempotent_and_keeps_the_stream(name):
    s = framebus.create(name, shape=(2,))
    s.write(np.ones(2, np.float32))
    s.close()
    s.close()
    assert s.closed
    with framebus.open(name) as r:  # a closed handle does not remove the stream
        np.testing.assert_array_equal(r.read(), np.ones(2))
        assert r.attached == 1
        r.unlink()


def test_unlink_removes_the_name_but_open_handles_keep_working(name):
    w = framebus.create(name, shape=(2,), dtype=np.int32)
    r = framebus.open(name)
    w.write(np.array([1, 2], np.int32))
    w.unlink()
    assert w.closed
    assert name not in [s.name for s in framebus.list_streams()]
    with pytest.raises(FileNotFoundError):
        framebus.open(name)
    np.testing.assert_array_equal(r.read(), [1, 2])
    r.write(np.array([3, 4], np.int32))  # any handle may write
    np.testing.assert_array_equal(r.read(), [3, 4])
    # A new stream under the same name is independent of the old one...
    n = framebus.create(name, shape=(3,), dtype=np.int8)
    r.write(np.array([5, 6], np.int32))
    assert n.write_sequence == 0  # nothing the old handle wrote reached it
    # ...and the old handle's unlink leaves it alone.
    r.unlink()
    assert name in [s.name for s in framebus.list_streams()]
    assert framebus.stat(name).shape == (3,)
    n.unlink()
    assert n.closed
    assert name not in [s.name for s in framebus.list_streams()]


def test_module_unlink(name):
    framebus.create(name, shape=(2,)).close()
    framebus.unlink(name)
    with pytest.raises(FileNotFoundError, match="nothing to unlink") as err:
        framebus.unlink(name)
    assert "create" not in str(err.value)  # unlinking a missing stream does not advise creating it


def test_context_manager_closes(name):
    with framebus.create(name, shape=(2,)) as s:
        assert not s.closed
    assert s.closed
    with framebus.open(name) as r:
        assert r.attached == 1
    assert r.closed
    framebus.unlink(name)


def test_repr(name):
    s = framebus.create(name, shape=(4, 3), dtype=np.uint8)
    text = repr(s)
    assert name in text and "(4, 3)" in text and "uint8" in text and "latest" in text
    s.unlink()
    assert name in repr(s) and "closed" in repr(s)


def test_readonly_handle_refuses_writes(name):
    with framebus.create(name, shape=(2,)) as w:
        w.write(np.ones(2, np.float32))
        r = framebus.open(name, readonly=True)
        assert r.readonly
        np.testing.assert_array_equal(r.read(), [1, 1])
        for call in (lambda: r.write(np.zeros(2, np.float32)), r.clear, r.acquire, r.unlink, r.end, r.loan, r.locked().__enter__):
            with pytest.raises(framebus.StreamPermissionError, match="read-only"):
                call()
        with pytest.raises(PermissionError, match="read-only"):
            with r.loan() as buf:
                buf[:] = 42
        assert w.write_sequence == 1 and not w.ended
        np.testing.assert_array_equal(r.read(), [1, 1])
        r.close()
        w.unlink()


# -- listing ---------------------------------------------------------------------------------


def test_list_streams_and_stat(name):
    w = framebus.create(name, shape=(2, 5), dtype=np.int16, slots=3)
    try:
        r = framebus.open(name, mode="lossless")
        w.write(np.zeros((2, 5), np.int16))
        infos = {i.name: i for i in framebus.list_streams()}
        info = infos[name]
        assert not isinstance(info, str) and str(info) == name and info.name == name
        st = framebus.stat(name)
        assert st.shape == (2, 5) and np.dtype(st.dtype) == np.int16 and st.slots == 3
        assert st.frame_bytes == 20
        assert st.attached == 2 and st.lossless == 1
        assert st.creator_alive and not st.stale and st.problem is None
        assert st.sequence == 1 and st.frames_written == 1 and st.bytes_written == 20
        assert st.path == segment_path(name)
        assert st.total_bytes >= 3 * 20
        assert "shape" in st.as_dict()
        r.close()
        assert framebus.stat(name).attached == 1
    finally:
        w.unlink()
    with pytest.raises(FileNotFoundError):
        framebus.stat(name)


# -- pickling --------------------------------------------------------------------------------


def test_pickle_reopens_by_name(name):
    with framebus.create(name, shape=(2,), dtype=np.int32) as w:
        r = framebus.open(name, mode="lossless")
        r2 = pickle.loads(pickle.dumps(r))
        assert r2.name == name and r2.mode == "lossless" and not r2.closed
        assert w.attached == 3
        ro = pickle.loads(pickle.dumps(framebus.open(name, readonly=True)))
        assert ro.readonly
        ro.close()
        r.close()
        r2.close()
        w.unlink()


def test_stream_pickles_into_a_spawned_child(name):
    ctx = mp.get_context("spawn")
    with framebus.create(name, shape=(3,), dtype=np.int16) as w:
        w.write(np.array([1, 2, 3], np.int16), frame_id=9)
        results = ctx.Queue()
        p = ctx.Process(target=mp_targets.read_pickled_stream, args=(w, results))
        p.start()
        try:
            msgs = [results.get(timeout=CHILD_TIMEOUT) for _ in range(3)]
        finally:
            p.join(CHILD_TIMEOUT)
            results.close()
            results.join_thread()
        assert p.exitcode == 0
        assert msgs[0] == ("opened", name, "latest", (3,), "int16", False), msgs
        assert msgs[1] == ("frame", [1, 2, 3], 9), msgs
        assert msgs[2] == ("done",), msgs
        pub = w.read_publication()
        assert pub.frame_id == 42 and pub.payload.tolist() == [42, 42, 42]
        assert w.attached == 1
        w.unlink()


# -- write lock ------------------------------------------------------------------------------


def test_acquire_is_reentrant(name):
    with framebus.create(name, shape=(2,)) as s:
        assert not s.lock_held()
        s.acquire()
        s.acquire(timeout=1.0)
        assert s.lock_held() and s.lock_owner is not None
        s.write(np.ones(2, np.float32))  # writing while holding the lock
        s.release()
        assert s.lock_held()
        s.release()
        assert not s.lock_held() and s.lock_owner is None
        with pytest.raises(RuntimeError):
            s.release()
        with s.locked(timeout=1.0) as held:
            assert held is s and s.lock_held()
            with s.locked():
                s.write(np.zeros(2, np.float32))
            assert s.lock_held()
        assert not s.lock_held()
        assert s.write_sequence == 2
        s.unlink()


def test_lock_is_released_when_the_with_block_raises(name):
    with framebus.create(name, shape=(2,)) as s:
        with pytest.raises(KeyError):
            with s.locked():
                raise KeyError("x")
        assert not s.lock_held()
        s.unlink()


def test_lock_held_by_another_thread_times_out(name):
    with framebus.create(name, shape=(2,)) as s, framebus.open(name) as other:
        s.acquire()
        outcome = []

        def contender():
            try:
                other.acquire(timeout=0.05)
                outcome.append("acquired")
                other.release()
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)
            try:
                other.write(np.ones(2, np.float32), timeout=0.05)
                outcome.append("wrote")
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)

        t = threading.Thread(target=contender)
        t.start()
        t.join(LONG)
        assert len(outcome) == 2 and all(isinstance(o, TimeoutError) for o in outcome), outcome
        s.release()
        t = threading.Thread(target=lambda: (other.acquire(timeout=LONG), other.write(np.ones(2, np.float32)), other.release()))
        t.start()
        t.join(LONG)
        assert s.write_sequence == 1
        s.unlink()


def test_lock_held_by_another_process_times_out(name, spawn):
    with framebus.create(name, shape=(2,)) as s:
        child = spawn(
            f"""
            s = framebus.open({name!r})
            s.acquire()
            say("locked")
            hear()
            s.release()
            say("released")
            hear()
            """
        )
        child.expect("locked")
        with pytest.raises(TimeoutError):
            s.acquire(timeout=0.1)
        with pytest.raises(TimeoutError):
            with s.locked(timeout=0):
                pass
        with pytest.raises(TimeoutError):
            s.write(np.ones(2, np.float32), timeout=0.1)
        assert s.write_sequence == 0
        assert s.lock_owner == child.pid
        child.send("go")
        child.expect("released")
        s.acquire(timeout=LONG)
        s.release()
        child.finish()
        s.unlink()


def test_blocked_acquire_wakes_when_another_process_releases(name, spawn):
    with framebus.create(name, shape=(2,)) as s:
        child = spawn(
            f"""
            s = framebus.open({name!r})
            s.acquire()
            say("locked")
            time.sleep(0.2)
            s.write(np.full(2, 3, np.float32))
            s.release()
            hear()
            """
        )
        child.expect("locked")
        s.acquire(timeout=LONG)
        try:
            np.testing.assert_array_equal(s.read(), [3, 3])
        finally:
            s.release()
        child.finish()
        s.unlink()


# -- pyshmem compatibility -------------------------------------------------------------------

_SHARED_CALLS = ["create", "open", "unlink", "list_streams", "stat"]
_SHARED_METHODS = ["write", "read", "read_new", "read_publication", "read_new_publication", "acquire", "release", "locked", "clear", "close", "unlink"]


def _pyshmem():
    return pytest.importorskip("pyshmem")


def _pairs(pyshmem):
    for n in _SHARED_CALLS:
        yield n, getattr(pyshmem, n), getattr(framebus, n)
    for n in _SHARED_METHODS:
        yield f"Stream.{n}", getattr(pyshmem.SharedMemory, n), getattr(framebus.Stream, n)


def _keywords(fn):
    return {
        k: p
        for k, p in inspect.signature(fn).parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and k != "self" and not k.startswith("_")
    }


def test_pyshmem_keyword_defaults_match():
    """Keywords both libraries accept have the same defaults."""
    pyshmem = _pyshmem()
    differ = []
    for label, theirs, ours in _pairs(pyshmem):
        mine = _keywords(ours)
        for k, p in _keywords(theirs).items():
            if k in mine and mine[k].default != p.default and (label, k) not in _DEFAULTS_ON_PURPOSE:
                differ.append((label, k, p.default, mine[k].default))
    assert not differ


# create(shape=) is required in pyshmem; framebus takes shape= or capacity= (variable-shape
# streams), so shape defaults to None and create() raises a ValueError naming both when neither
# is given. pyshmem's cpu_mirror defaults to None; framebus's device streams have no CPU mirror
# unless asked (False); framebus.pyshmem translates pyshmem's default (docs/pyshmem.md).
_DEFAULTS_ON_PURPOSE = {("create", "shape"), ("create", "cpu_mirror")}


def test_pyshmem_exception_types_match(name):
    """Same exception types as pyshmem 1.4 for the same mistakes."""
    pyshmem = _pyshmem()
    with pytest.raises(FileNotFoundError):
        pyshmem.open(name + ".absent")
    with pytest.raises(FileNotFoundError):
        framebus.open(name + ".absent")
    with framebus.create(name, shape=(2,)) as s:
        with pytest.raises(FileExistsError):
            framebus.create(name, shape=(2,))
        with pytest.raises(ValueError):
            s.write(np.zeros(3, np.float32))
        s.unlink()


#: pyshmem's keywords the native API does not take: what it would only accept and ignore.
#: framebus.pyshmem takes all of them (tests/test_pyshmem_edges.py compares its signatures).
_COMPAT_ONLY = {
    ("create", "gpu_device"), ("create", "notify"), ("open", "gpu_device"),
    ("Stream.read", "safe"), ("Stream.read", "poll_interval"), ("Stream.read", "timeout"),
    ("Stream.read_new", "safe"), ("Stream.read_new", "poll_interval"),
    ("Stream.read_publication", "safe"), ("Stream.read_publication", "poll_interval"), ("Stream.read_publication", "timeout"),
    ("Stream.read_new_publication", "safe"), ("Stream.read_new_publication", "poll_interval"),
    ("Stream.acquire", "poll_interval"), ("Stream.locked", "poll_interval"), ("Stream.close", "timeout"),
}


def test_pyshmem_keywords_the_native_api_leaves_to_the_compat_module():
    """The native API takes pyshmem's keywords where they mean something to framebus, and
    leaves the rest (accepted and ignored there) to framebus.pyshmem, which takes them all."""
    import framebus.pyshmem as compat

    pyshmem = _pyshmem()
    missing = set()
    for label, theirs, ours in _pairs(pyshmem):
        mine = _keywords(ours)
        missing |= {(label, k) for k in _keywords(theirs) if k not in mine}
    assert missing == _COMPAT_ONLY
    for label, k in _COMPAT_ONLY:
        owner = compat.SharedMemory if label.startswith("Stream.") else compat
        assert k in _keywords(getattr(owner, label.split(".")[-1])), (label, k)


def test_lock_of_a_thread_that_exited_is_recovered(name):
    with framebus.create(name, shape=(2,)) as s:
        t = threading.Thread(target=s.acquire)  # takes the lock and ends without releasing it
        t.start()
        t.join(LONG)
        assert s.lock_owner is not None and not s.lock_held()
        with pytest.warns(framebus.LockRecoveredWarning):
            s.acquire(timeout=LONG)
        assert s.lock_held()
        s.release()
        s.unlink()


def test_close_releases_the_lock_this_thread_holds(name):
    w = framebus.create(name, shape=(2,))
    other = framebus.open(name)
    try:
        with framebus.open(name) as s:
            s.acquire()
        outcome = []

        def contender():
            try:
                other.write(np.ones(2, np.float32), timeout=1.0)
                outcome.append("wrote")
            except BaseException as exc:  # noqa: BLE001
                outcome.append(type(exc).__name__)

        t = threading.Thread(target=contender)
        t.start()
        t.join(LONG)
        assert outcome == ["wrote"]
    finally:
        while w.lock_held():
            w.release()
        other.close()
        w.unlink()


def test_reader_table_full_is_a_clear_error(name):
    with framebus.create(name, shape=(2,), max_readers=2) as s:
        r = framebus.open(name)
        with pytest.raises(RuntimeError, match="max_readers") as info:
            framebus.open(name)
        assert isinstance(info.value, framebus.TooManyReadersError)
        r.close()
        with framebus.open(name) as again:
            assert again.attached == 2
        s.unlink()


def test_garbage_collected_handle_detaches(name):
    import gc

    with framebus.create(name, shape=(2,)) as s:
        r = framebus.open(name, mode="lossless")
        assert s.attached == 2
        del r
        gc.collect()
        assert s.attached == 1
        for _ in range(10):  # the lossless reader no longer holds the writer back
            s.write(np.zeros(2, np.float32), timeout=LONG)
        s.unlink()


@pytest.mark.parametrize("what", ["acquire", "write"])
def test_blocked_acquire_and_write_are_interruptible(name, what):
    """acquire() waiting for another thread's lock and write() waiting for a lossless reader run
    Python signal handlers while they wait (Ctrl-C works)."""

    class Interrupted(Exception):
        pass

    def handler(signum, frame_):
        raise Interrupted

    with framebus.create(name, shape=(2,), slots=2) as s, framebus.open(name, mode="lossless") as r:
        release = threading.Event()
        held = threading.Event()
        t = None
        if what == "acquire":
            def hold():
                with r.locked():
                    held.set()
                    release.wait(LONG)

            t = threading.Thread(target=hold)
            t.start()
            held.wait(LONG)
            call = lambda: s.acquire(timeout=LONG)  # noqa: E731
        else:
            for k in range(2):
                s.write(np.full(2, k, np.float32))
            call = lambda: s.write(np.zeros(2, np.float32), timeout=LONG)  # noqa: E731
        old = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            release.set()
            if t is not None:
                t.join(LONG)
        assert not s.lock_held()
        assert s.write_sequence == (0 if what == "acquire" else 2)
        s.unlink()
