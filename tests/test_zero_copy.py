"""Zero-copy views, writer loans, reader modes and dead-reader recovery (issue 3)."""

from __future__ import annotations

import gc
import itertools
import multiprocessing as mp
import os
import pickle
import signal

import numpy as np
import pytest

import framebus

_ids = itertools.count()
CTX = mp.get_context("spawn")


@pytest.fixture
def name():
    n = f"zc-{os.getpid()}-{next(_ids)}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def frame_of(i: int, shape=(8, 16)) -> np.ndarray:
    return np.full(shape, i, dtype=np.int32)


# -- child processes ----------------------------------------------------------------------


def _write_many(name: str, count: int, start: int, timeout: float, results) -> None:
    s = framebus.open(name)
    done = 0
    try:
        for i in range(start, start + count):
            s.write(frame_of(i, s.shape), frame_id=i, timeout=timeout)
            done += 1
    except TimeoutError:
        pass
    results.put(done)
    s.close()


def _hold_view(name: str, ready, mode: str) -> None:
    s = framebus.open(name, mode=mode)
    frame = s.view(timeout=5)
    arr = frame.array
    ready.set()
    signal.pause()
    print(arr)


def _lossless_reader(name: str, count: int, results) -> None:
    s = framebus.open(name, mode="lossless")
    got = []
    for _ in range(count):
        pub = s.read_new_publication(timeout=10)
        assert np.all(pub.payload == pub.frame_id)
        got.append(pub.frame_id)
    results.put(got)
    s.close()


def _stalled_lossless_reader(name: str, ready) -> None:
    s = framebus.open(name, mode="lossless")
    ready.set()
    signal.pause()
    s.close()


def _open_pickled(blob: bytes, results) -> None:
    s = pickle.loads(blob)
    results.put((s.name, s.read().tolist()))
    s.close()


# -- views --------------------------------------------------------------------------------


def test_view_is_read_only_and_carries_the_frame_record(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32) as w:
        w.write(frame_of(3), frame_id=33, meta=b"abc")
        with w.view() as f:
            a = f.array
            assert not a.flags.writeable
            with pytest.raises(ValueError):
                a.flags.writeable = True
            assert (a == 3).all() and a.shape == (8, 16) and a.dtype == np.int32
            assert (f.seq, f.frame_id, f.meta) == (1, 33, b"abc")
            assert f.timestamp == pytest.approx(w.write_time)
            assert f.array is a
            assert memoryview(f).readonly
            assert np.asarray(f).sum() == 3 * 8 * 16
        assert f.released
        with pytest.raises(RuntimeError, match="released"):
            f.array


def test_held_view_survives_1000_writes_from_another_process(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=3) as w:
        w.write(frame_of(7))
        frame = w.view()
        results = CTX.Queue()
        p = CTX.Process(target=_write_many, args=(name, 1000, 100, 10.0, results))
        p.start()
        assert results.get(timeout=60) == 1000
        p.join(30)
        assert (frame.array == 7).all() and frame.seq == 1
        assert w.write_sequence == 1001
        frame.release()


def test_writer_never_overwrites_pinned_slots_and_times_out(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=3) as w:
        # A reader that has not taken frame 2 keeps it (else a copy write may rewrite its slot).
        r = framebus.open(name)
        views = []
        for i in range(2):
            w.write(frame_of(i))
            views.append(w.view())
            r.read()
        w.write(frame_of(2))  # the third slot; latest now, the other two pinned
        with pytest.raises(TimeoutError):
            w.write(frame_of(3), timeout=0.2)
        assert w.write_sequence == 3
        assert [int(v.array[0, 0]) for v in views] == [0, 1]
        views[0].release()
        w.write(frame_of(3), timeout=5)
        assert (views[1].array == 1).all()
        r.close()


def test_a_copy_write_rewrites_the_newest_slot_only_once_every_reader_took_it(name):
    # 1 MiB frames: smaller ones never rewrite the newest frame's slot.
    shape = (512, 512)

    def frame(i):
        return np.full(shape, i, np.int32)

    with framebus.create(name, shape=shape, dtype=np.int32, slots=2) as w:
        r = framebus.open(name)
        w.write(frame(0))
        with w.view() as pinned:  # slot A pinned; frame 1 goes to slot B
            w.write(frame(1))
            assert r.read_new(timeout=1)[0, 0] == 1  # every reader took frame 1
            # Slot A pinned, slot B holds the newest frame, which nobody needs any more.
            w.write(frame(2), timeout=1)
            assert (pinned.array == 0).all()
            assert (w.read() == 2).all()  # (the writing handle's own reads do not count)
            # Frame 2 not yet taken by r: the writer must not rewrite it, and waits.
            with pytest.raises(TimeoutError):
                w.write(frame(3), timeout=0.2)
            assert (r.read_new(timeout=1) == 2).all()
        r.close()


def test_array_outlives_release_and_close_without_changing(name):
    w = framebus.create(name, shape=(8, 16), dtype=np.int32, slots=3)
    r = framebus.open(name)
    w.write(frame_of(1))
    with r.view() as f:
        arr = f.array
    r.close()
    for i in range(2, 20):
        w.write(frame_of(i), timeout=1)
    assert (arr == 1).all()  # its slot stayed pinned, the writer used the other slots
    del arr, f
    gc.collect()
    for i in range(20, 30):
        w.write(frame_of(i), timeout=1)
    w.close()


def test_wait_view_follows_read_new_semantics(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32) as w:
        r = framebus.open(name)
        with pytest.raises(TimeoutError):
            r.wait_view(timeout=0.05)
        w.write(frame_of(1))
        w.write(frame_of(2))
        with r.wait_view(timeout=1) as f:
            assert f.seq == 2 and (f.array == 2).all()
        assert r.missed == 1
        r.close()


def test_frames_iterator_yields_views_and_ends_on_timeout(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=4) as w:
        r = framebus.open(name, mode="lossless")
        for i in range(3):
            w.write(frame_of(i))
        seen = [int(f.array[0, 0]) for f in r.frames(timeout=0.05)]
        assert seen == [0, 1, 2]
        for i in range(3, 5):
            w.write(frame_of(i))
        pubs = list(r.frames(timeout=0.05, copy=True))
        assert [int(p.payload[0, 0]) for p in pubs] == [3, 4]
        r.close()


def test_dlpack_and_array_interface(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32) as w:
        w.write(frame_of(5))
        with w.view() as f:
            assert f.__dlpack_device__() == (1, 0)
            assert f.__array_interface__["shape"] == (8, 16)
            try:
                via = np.from_dlpack(f)
            except BufferError:
                pytest.skip("this NumPy cannot export read-only arrays over DLPack")
            assert (via == 5).all()


def test_torch_from_dlpack(name):
    torch = pytest.importorskip("torch")
    with framebus.create(name, shape=(8, 16), dtype=np.float32) as w:
        w.write(np.full((8, 16), 2.5, np.float32))
        with w.view() as f:
            t = torch.from_dlpack(f)
            assert float(t.sum()) == 2.5 * 128


# -- loans --------------------------------------------------------------------------------


def test_loan_publishes_on_exit_and_discards_on_error(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32) as w:
        r = framebus.open(name)
        with w.loan(frame_id=9, meta=b"m") as a:
            assert a.flags.writeable
            a[:] = 4
        pub = r.read_new_publication(timeout=1)
        assert (pub.payload == 4).all() and pub.frame_id == 9 and pub.meta == b"m"
        with pytest.raises(KeyError):
            with w.loan() as a:
                a[:] = 99
                raise KeyError("abort")
        assert w.write_sequence == 1
        assert (r.read() == 4).all()
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.05)
        loan = w.loan(timestamp_ns=123)
        loan.array[:] = 5
        assert loan.seq == 2
        assert loan.commit() is None
        with pytest.raises(RuntimeError):
            loan.array
        assert r.read_new_publication(timeout=1).timestamp_ns == 123
        r.close()


def test_loan_validates_metadata_and_times_out_when_slots_are_pinned(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=2, meta_capacity=4) as w:
        with pytest.raises(ValueError, match="meta_capacity"):
            w.loan(meta=b"12345")
        w.write(frame_of(0))
        held = w.view()  # pins frame 0's slot
        w.write(frame_of(1))  # the other slot, now the latest: no slot is free
        with pytest.raises(TimeoutError):
            with w.loan(timeout=0.2):
                pass
        held.release()
        with w.loan(timeout=5) as a:
            a[:] = 2
        assert (w.read() == 2).all()


# -- reader modes and dead readers -----------------------------------------------------------


def test_lossless_reader_gets_every_frame_in_order(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=3) as w:
        results = CTX.Queue()
        reader = CTX.Process(target=_lossless_reader, args=(name, 500, results))
        reader.start()
        # wait until the reader is attached before writing
        for _ in range(2000):
            if w.attached >= 2:
                break
            reader.join(0.01)
        for i in range(500):
            w.write(frame_of(i), frame_id=i, timeout=30)
        assert results.get(timeout=60) == list(range(500))
        reader.join(30)


def test_stalled_lossless_reader_makes_write_time_out_then_its_death_frees_the_writer(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=3) as w:
        ready = CTX.Event()
        reader = CTX.Process(target=_stalled_lossless_reader, args=(name, ready))
        reader.start()
        assert ready.wait(30)
        for i in range(3):
            w.write(frame_of(i), timeout=5)
        with pytest.raises(TimeoutError):
            w.write(frame_of(9), timeout=0.3)
        assert w.write_sequence == 3
        os.kill(reader.pid, signal.SIGKILL)
        reader.join(30)
        w.write(frame_of(3), timeout=10)  # the dead reader is detected and dropped
        assert w.write_sequence == 4


def test_killed_view_holder_releases_its_pins(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32, slots=2) as w:
        w.write(frame_of(0))
        ready = CTX.Event()
        holder = CTX.Process(target=_hold_view, args=(name, ready, "latest"))
        holder.start()
        assert ready.wait(30)
        w.write(frame_of(1))
        with pytest.raises(TimeoutError):
            w.write(frame_of(2), timeout=0.3)
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        w.write(frame_of(2), timeout=10)
        assert (w.read() == 2).all()


def test_latest_mode_counts_missed_frames(name):
    with framebus.create(name, shape=(8, 16), dtype=np.int32) as w:
        r = framebus.open(name)
        for i in range(5):
            w.write(frame_of(i))
        assert (r.read_new(timeout=1) == 4).all()
        assert (r.missed, r.total_missed) == (4, 4)
        w.write(frame_of(5))
        r.read_new(timeout=1)
        assert (r.missed, r.total_missed) == (0, 4)
        r.close()


def test_stream_pickles_by_name_into_a_spawned_child(name):
    with framebus.create(name, shape=(2,), dtype=np.int64) as w:
        w.write(np.array([4, 2]))
        results = CTX.Queue()
        p = CTX.Process(target=_open_pickled, args=(pickle.dumps(w), results))
        p.start()
        assert results.get(timeout=60) == (name, [4, 2])
        p.join(30)
