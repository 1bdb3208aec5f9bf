"""Kept loan arrays never deadlock a writer: an array still referenced after its loan ended
(the `with` target Python leaves bound, a list of frames, a buffer handed to pipe()) keeps the
committed frame, and when a writer needs its slot the array gets a private copy of its bytes and
the slot is taken. Multi-process: several writers keeping loans on a 2-slot ring, a kept array in
a process that waits for frames, and one in a process that does nothing framebus can see (the
only case a writer still waits for, with a message that names it)."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import framebus

sys.path.insert(0, str(Path(__file__).parent))
import kept_loan_children as children  # noqa: E402
from test_frame_integrity import _drain  # noqa: E402


@pytest.fixture
def name():
    n = f"kept-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def test_readme_loan_then_writes_on_a_two_slot_ring(name):
    """The README's `with cam.loan() as buf:` and then write()s, with no reader at all: the
    writer used to wait forever for the slot `buf` kept."""
    with framebus.create(name, shape=(1080, 1920, 3), dtype=np.uint8, slots=2) as cam:
        rd = framebus.open(name)
        with cam.loan() as buf:
            buf[:] = 255
        for i in range(6):
            cam.write(np.full((1080, 1920, 3), i, np.uint8), timeout=10)
            assert rd.read()[0, 0, 0] == i
        assert (buf == 255).all(), "the kept array still shows the frame it committed"
        assert not buf.flags.writeable
        rd.close()


def test_several_kept_arrays_on_four_slots(name):
    """A list of loan arrays (more kept frames than free slots) and writes between them."""
    with framebus.create(name, shape=(256, 256), dtype=np.uint8, slots=4) as w:
        rd = framebus.open(name)
        kept = []
        for i in range(12):
            with w.loan(timeout=10) as buf:
                buf[:] = i
            kept.append(buf)
            for j in range(3):
                w.write(np.full((256, 256), 100 + j, np.uint8), timeout=10)
            assert rd.read()[0, 0] == 102
        assert [int(a[0, 0]) for a in kept] == list(range(12))
        assert all((a == a[0, 0]).all() for a in kept)
        del kept, buf
        for j in range(8):
            w.write(np.full((256, 256), j, np.uint8), timeout=10)
            assert rd.read()[-1, -1] == j
        rd.close()


def test_a_loan_handed_to_a_pipe_then_writes(name):
    """A loan given to pipe() (written with vmsplice: the pipe refers to the slot's pages until
    its reader has read them), its array left bound, then write()s on a 2-slot ring: the writer
    waits only while the pipe still refers to the pages, and the reader gets the loan's bytes."""
    w = framebus.create(name, shape=(512, 1024), dtype=np.uint8, slots=2)
    r, wfd = os.pipe()
    try:
        reader = _drain(r, 3 * 512 * 1024, delay=0)
        for value in (7, 8, 9):
            with w.loan(timeout=10) as buf:
                buf[:] = value
                framebus.pipe(buf, wfd)
            for i in range(4):
                w.write(np.full((512, 1024), 100 + i, np.uint8), timeout=10)
            assert (buf == value).all()
        framebus.sync(wfd, timeout=10)
        reader.join(10)
        assert bytes(reader.got) == b"\x07" * (512 * 1024) + b"\x08" * (512 * 1024) + b"\x09" * (512 * 1024)
    finally:
        framebus.pipes.close(wfd)
        os.close(r)
        os.close(wfd)
        w.close()


@pytest.mark.parametrize("alias", ["numpy view", "memoryview"])
def test_a_writable_alias_of_an_evicted_frame_stays_private(name, alias):
    """A writable alias made during the loan writes only this process's copy, before and after
    the slot is taken back: readers see exactly the frames written."""
    with framebus.create(name, shape=(64, 64), dtype=np.uint8, slots=2) as w:
        rd = framebus.open(name)
        with w.loan() as buf:
            buf[:] = 9
            stale = buf.reshape(-1) if alias == "numpy view" else memoryview(buf).cast("B")
        for i in range(6):
            w.write(np.full((64, 64), 100 + i, np.uint8), timeout=10)
            stale[0] = 200
            got = rd.read()
            assert (got == 100 + i).all()
        assert buf[0, 0] == 200 and (buf.reshape(-1)[1:] == 9).all()
        del stale, buf
        rd.close()


def test_a_timeout_names_a_view_that_holds_the_slot(name):
    """A slot held by a view (not a kept loan) still makes the writer wait; the message names
    the view and the newest frame."""
    with framebus.create(name, shape=(16,), dtype=np.uint8, slots=2) as w:
        rd = framebus.open(name)
        w.write(np.zeros(16, np.uint8))
        view = rd.view()
        w.write(np.ones(16, np.uint8))
        with pytest.raises(framebus.StreamTimeoutError) as info:
            w.write(np.ones(16, np.uint8), timeout=0.2)
        text = str(info.value)
        assert "pinned by a view in this process" in text and "holds the newest frame (2)" in text, text
        view.release()
        w.write(np.ones(16, np.uint8), timeout=10)
        rd.close()


def _spawn():
    return mp.get_context("spawn")


def _collect(queue, count):
    reports = [queue.get(timeout=120) for _ in range(count)]
    errors = [r for r in reports if r[0] == "error"]
    assert not errors, errors
    return reports


def test_several_writers_keeping_loans_on_a_two_slot_ring(name):
    """Three writer processes alternate write() and a loan they keep (plus their last three
    loan arrays), two readers view frames: every write lands, no frame is torn, no kept array
    changes. This is pyshmem's own stress test's pattern, which used to hang.
    (`scripts/stress.py --only kept` runs it longer.)"""
    r = children.run_writers_keeping_loans(name, writers=3, iterations=300, keep=3)
    assert r["errors"] == [], r
    assert r["writes_reported"] == r["writes_in_stream"] == 900, r
    assert (r["torn"], r["kept_arrays_changed"]) == (0, 0), r
    assert r["exit_codes"] == [0] * 5, r


def test_a_process_waiting_for_frames_gives_up_its_kept_frame(name):
    """A kept array in a process that waits for frames (read_new) lets another process's writer
    take the slot: that process's frame wait gives the array a private copy."""
    ctx = _spawn()
    w = framebus.create(name, shape=(1024,), dtype=np.uint8, slots=2)
    results, ready = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=children.keep_and_wait_for_frames, args=(name, ready, results))
    try:
        child.start()
        assert ready.wait(60)
        for value in (1, 2, 3):
            w.write(np.full(1024, value, np.uint8), timeout=30)
        (report,) = _collect(results, 1)
        assert report == ("frames", [1, 2, 3], True)
        child.join(60)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.terminate()
            child.join()
        w.close()


def test_a_kept_array_of_an_idle_process_is_named_in_the_timeout(name):
    """The one case left: another process keeps a loan array and never writes or waits. The
    writer waits for it like for a view, and its timeout says which process keeps what."""
    ctx = _spawn()
    w = framebus.create(name, shape=(1024,), dtype=np.uint8, slots=2)
    results, ready, release = ctx.Queue(), ctx.Event(), ctx.Event()
    child = ctx.Process(target=children.keep_and_idle, args=(name, ready, release, results))
    try:
        child.start()
        assert ready.wait(60)
        w.write(np.ones(1024, np.uint8), timeout=10)
        with pytest.raises(framebus.StreamTimeoutError) as info:
            w.write(np.ones(1024, np.uint8), timeout=0.3)
        assert f"kept loan array of process {child.pid}" in str(info.value), str(info.value)
        release.set()
        (report,) = _collect(results, 1)
        assert report == ("kept", True)
        child.join(60)
        w.write(np.ones(1024, np.uint8), timeout=10)
    finally:
        release.set()
        if child.is_alive():
            child.terminate()
            child.join()
        w.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_writing_through_an_inherited_writer_with_kept_frames(name):
    """The parent keeps loan arrays (one with a writable alias, so its slot is detached in the
    parent's mapping), forks, and lets them go once the child has adopted the handle; the child
    then writes through it on every slot: each frame reaches a reader (none lands in a range the
    parent had made private), and the child's copies of the kept arrays keep their bytes."""
    from test_fork_handles import Forked

    with framebus.create(name, shape=(64,), dtype=np.uint8, slots=3) as w:
        rd = framebus.open(name)
        with w.loan() as a:
            a[:] = 1
            alias = memoryview(a)
        with w.loan() as b:
            b[:] = 2
        go_r, go_w = os.pipe()

        def child(say):
            w.last_seq  # first use: the child's own entry; the inherited kept frames are disowned
            say("adopted")
            os.read(go_r, 1)
            got = []
            for value in range(10, 20):
                w.write(np.full(64, value, np.uint8), timeout=10)
                got.append(int(rd.read()[0]))
            say("got", got, bool((a == 1).all() and (b == 2).all()))

        kid = Forked(child)
        assert kid.hear() == ["adopted"]
        del alias, a, b  # the parent's pins go: every slot is free for the child
        os.write(go_w, b"x")
        assert kid.hear() == ["got", list(range(10, 20)), True]
        kid.join()
        os.close(go_r)
        os.close(go_w)
        rd.close()
