"""Stream.view_seq: a pinned view of one named frame, for consumers told the sequence number by
another channel (the OpenFilter integration's messages). It never returns a different frame than
the one asked for, a pinned frame is never rewritten, and a lossless handle that takes frame N
releases every frame up to N to the writer."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import framebus


@pytest.fixture
def name():
    n = f"viewseq-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def _frame(i: int) -> np.ndarray:
    return np.full((64,), i % 256, np.uint8)


def test_returns_exactly_the_frame_named(name):
    w = framebus.create(name, shape=(64,), dtype="u1", slots=4)
    r = framebus.open(name)
    for i in range(1, 4):
        w.write(_frame(i))
    for seq in (1, 2, 3):
        f = r.view_seq(seq)
        if f is None:  # reused already: never a different frame
            continue
        assert f.seq == seq
        assert np.array_equal(np.asarray(f), _frame(seq))
        f.release()
    assert r.view_seq(3) is not None  # the newest frame is always there
    assert r.view_seq(4) is None  # not written yet
    assert r.view_seq(0) is None


def test_overwritten_frame_is_none_never_another(name):
    w = framebus.create(name, shape=(64,), dtype="u1", slots=2)
    r = framebus.open(name)
    for i in range(1, 20):
        w.write(_frame(i))
    assert r.view_seq(5) is None
    f = r.view_seq(19)
    assert f is not None and np.asarray(f)[0] == 19


def test_pinned_frame_survives_later_writes(name):
    w = framebus.create(name, shape=(64,), dtype="u1", slots=4)
    r = framebus.open(name)
    w.write(_frame(1))
    kept = r.view_seq(1)
    assert kept is not None
    arr = np.asarray(kept)
    for i in range(2, 50):
        w.write(_frame(i))
    assert arr[0] == 1 and np.array_equal(arr, _frame(1))
    assert not arr.flags.writeable
    del arr
    kept.release()


def test_lossless_handle_releases_frames_up_to_the_one_taken(name):
    w = framebus.create(name, shape=(64,), dtype="u1", slots=4)
    r = framebus.open(name, mode="lossless")
    for i in range(1, 5):
        w.write(_frame(i), timeout=1)
    with pytest.raises(TimeoutError):
        w.write(_frame(5), timeout=0)  # four unread frames fill the ring
    f = r.view_seq(3)
    assert f is not None and f.seq == 3
    f.release()
    w.write(_frame(5), timeout=0)  # frames 1..3 were released
    nxt = r.wait_view(timeout=1)
    assert nxt.seq == 4  # in-order reads go on after the frame taken
    nxt.release()


def test_variable_stream_views_keep_their_shape(name):
    w = framebus.create(name, capacity=4096, slots=4)
    r = framebus.open(name)
    w.write(np.arange(12, dtype=np.int16).reshape(3, 4))
    w.write(np.ones((5,), np.float32))
    f = r.view_seq(1)
    assert f is not None and f.shape == (3, 4) and f.dtype == np.int16
    assert np.array_equal(np.asarray(f), np.arange(12, dtype=np.int16).reshape(3, 4))


@pytest.mark.parametrize("bad,exc", [(-1, ValueError), (2**64, ValueError), ("3", TypeError), (None, TypeError), (1.5, TypeError)])
def test_bad_seq_is_a_clear_error(name, bad, exc):
    framebus.create(name, shape=(64,), dtype="u1")
    r = framebus.open(name)
    with pytest.raises(exc, match="seq"):
        r.view_seq(bad)


def test_closed_handle(name):
    framebus.create(name, shape=(64,), dtype="u1").write(_frame(1))
    r = framebus.open(name)
    r.close()
    with pytest.raises(framebus.StreamClosedError):
        r.view_seq(1)
