"""A handle belongs to one process: a handle inherited through fork() registers a reader entry of
its own in the child on first use (same mode, a lossless one resuming from the inherited
position), a pickled handle opens its own in the receiving process, and neither side's close,
views, loans or write-lock holds touch the other's.

Children report by lines on a pipe; timeouts are generous upper bounds so that nothing hangs,
never performance thresholds."""

from __future__ import annotations

import gc
import json
import multiprocessing as mp
import os
import pickle
import threading

import numpy as np
import pytest

import framebus
from framebus.errors import StreamEndedError

import mp_targets
from conftest import CHILD_TIMEOUT

# Upper bound for any single wait (never a performance threshold).
LONG = 30.0

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


class Forked:
    """A forked child running ``body(say)``; ``say(*parts)`` sends one JSON line to the parent.
    The child leaves with os._exit, so no destructor of the parent's objects runs there unless
    the body drops them itself."""

    def __init__(self, body):
        rfd, wfd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - runs in the child
            os.close(rfd)
            out = os.fdopen(wfd, "w")

            def say(*parts):
                out.write(json.dumps(parts) + "\n")
                out.flush()

            code = 0
            try:
                body(say)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                say("error", repr(exc))
                code = 1
            finally:
                os._exit(code)
        os.close(wfd)
        self.lines = os.fdopen(rfd, "r")

    def __del__(self):
        if self.pid:
            self.lines.close()

    def hear(self):
        line = self.lines.readline()
        assert line, "the child exited without a report"
        msg = json.loads(line)
        assert msg[0] != "error", f"child failed: {msg[1]}"
        return msg

    def join(self):
        _, status = os.waitpid(self.pid, 0)
        self.lines.close()
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child ended with status {status}"


def read_all(r, count):
    """Reads up to ``count`` frames with read_new (stopping at the end of the stream): the first
    element of each, and the handle's total missed count."""
    got = []
    try:
        while len(got) < count:
            got.append(int(r.read_new(timeout=LONG)[0]))
    except StreamEndedError:
        pass
    return got, r.total_missed


def frame(k):
    return np.full((4,), k, np.int64)


def test_forked_child_reads_every_frame_after_the_parent_closes_its_copy(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")

        def child(say):
            r.last_seq  # first use in the child: the handle takes its own reader entry
            say("ready")
            say("got", *read_all(r, 10))
            r.close()

        c = Forked(child)
        assert c.hear() == ["ready"]
        r.close()  # the parent has no use for its copy
        for k in range(10):
            w.write(frame(k), timeout=LONG)
        w.end()
        assert c.hear() == ["got", list(range(10)), 0]
        c.join()
        w.unlink()


def test_parent_and_child_both_read_every_frame_through_one_handle(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")

        def child(say):
            r.last_seq
            say("ready")
            say("got", *read_all(r, 10))

        c = Forked(child)
        assert c.hear() == ["ready"]
        assert w.attached == 3  # the writer, the parent's reader and the child's own entry

        def produce():
            for k in range(10):
                w.write(frame(k), timeout=LONG)

        t = threading.Thread(target=produce)
        t.start()
        mine = read_all(r, 10)
        t.join()
        assert mine == (list(range(10)), 0)
        assert c.hear() == ["got", list(range(10)), 0]
        c.join()
        r.close()
        w.unlink()


def test_child_that_exits_without_closing_leaves_the_parent_reading(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")
        w.write(frame(0))
        w.write(frame(1))

        def child(say):
            say("got", *read_all(r, 1))  # reads one frame, then leaves without closing

        c = Forked(child)
        assert c.hear() == ["got", [0], 0]
        c.join()

        def produce():
            for k in range(2, 12):
                w.write(frame(k), timeout=LONG)  # the dead child's entry is reaped, not waited for

        t = threading.Thread(target=produce)
        t.start()
        got = read_all(r, 12)
        t.join()
        assert got == (list(range(12)), 0)
        r.close()
        w.unlink()


def test_inherited_handles_closed_unused_in_the_child_touch_nothing(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")

        def child(say):
            r.close()  # never used here: no entry of its own, and the parent's stays
            w.close()  # nor does the child end the parent's stream
            say("done")

        c = Forked(child)
        assert c.hear() == ["done"]
        c.join()
        assert w.attached == 2

        def produce():
            for k in range(8):
                w.write(frame(k), timeout=LONG)  # waits for r: its backpressure is intact

        t = threading.Thread(target=produce)
        t.start()
        got = read_all(r, 8)
        t.join()
        assert got == (list(range(8)), 0)
        r.close()
        w.unlink()


def test_child_closing_and_dropping_inherited_views_keeps_the_parents_pins(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name)
        w.write(frame(7))
        view = r.view()
        arr = view.array

        def child(say):
            nonlocal view, arr
            r.read()  # the child uses the handle (its own entry) ...
            view.release()
            del view, arr  # ... and drops the views it inherited
            gc.collect()
            r.close()
            say("done")

        c = Forked(child)
        assert c.hear() == ["done"]
        c.join()
        for k in range(20):  # the writer never takes the slot the parent's view still pins
            w.write(frame(100 + k), timeout=LONG)
        assert arr.tolist() == [7] * 4
        view.release()
        del arr
        r.close()
        w.unlink()


def test_child_closing_an_inherited_writer_keeps_the_parents_lock(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        w.acquire(timeout=LONG)

        def child(say):
            say("held", w.lock_held())
            w.close()  # must not release the parent's hold, nor end the parent's stream
            say("done")

        c = Forked(child)
        assert c.hear() == ["held", False]
        assert c.hear() == ["done"]
        c.join()
        assert w.lock_held()
        assert w.lock_owner == os.getpid()
        w.release()
        r = framebus.open(name)
        w.write(frame(1))
        assert r.read_new(timeout=LONG).tolist() == [1] * 4  # not ended by the child's close
        r.close()
        w.unlink()


def test_child_dropping_an_inherited_loan_leaves_the_parents_loan_open(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name)
        loan = w.loan(timeout=LONG)
        loan.array[:] = 5

        def child(say):
            nonlocal loan
            try:
                loan.commit()  # only the process that took the loan can publish it
            except framebus.errors.StreamClosedError as exc:
                say("refused", "before fork()" in str(exc))
            del loan  # an unpublished loan dropped in the child is not the parent's to discard
            gc.collect()
            say("done")

        c = Forked(child)
        assert c.hear() == ["refused", True]
        assert c.hear() == ["done"]
        c.join()
        assert w.lock_held()
        loan.commit()
        assert r.read_new(timeout=LONG).tolist() == [5] * 4
        r.close()
        w.unlink()


def test_pickled_handle_carries_its_position(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")
        w.write(frame(0))
        w.write(frame(1))
        r2 = pickle.loads(pickle.dumps(r))  # the copy resumes where r is: before frame 0
        assert read_all(r2, 2) == ([0, 1], 0)
        assert read_all(r, 2) == ([0, 1], 0)  # r is its own reader
        r.close()
        r2.close()
        w.unlink()


@pytest.mark.parametrize("keep", [False, True], ids=["parent-copy-closed", "parent-copy-kept"])
def test_spawned_child_reads_every_frame_from_a_pickled_handle(name, keep):
    ctx = mp.get_context("spawn")
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")
        w.write(frame(0))  # written before the handle is sent: the child still gets it
        results = ctx.Queue()
        p = ctx.Process(target=mp_targets.read_lossless_pickled, args=(r, 10, LONG, results))
        p.start()
        try:
            assert results.get(timeout=CHILD_TIMEOUT) == ("ready",)
            if not keep:
                r.close()

            def produce():
                for k in range(1, 10):
                    w.write(frame(k), timeout=LONG)
                if not keep:
                    w.end()

            t = threading.Thread(target=produce)
            t.start()
            if keep:
                assert read_all(r, 10) == (list(range(10)), 0)
            t.join()
            assert results.get(timeout=CHILD_TIMEOUT) == ("got", list(range(10)), 0)
        finally:
            p.join(CHILD_TIMEOUT)
            results.close()
            results.join_thread()
        assert p.exitcode == 0
        r.close()
        w.unlink()


def test_lossless_child_counts_frames_reclaimed_before_it_registered(name, monkeypatch):
    monkeypatch.setenv("FRAMEBUS_FORK_GRACE", "0")  # no reservation at fork: the writer runs ahead
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")
        go_r, go_w = os.pipe()

        def child(say):
            os.read(go_r, 1)  # the parent closed its copy and wrote everything meanwhile
            say("got", *read_all(r, 10))

        c = Forked(child)
        os.close(go_r)
        r.close()
        for k in range(10):
            w.write(frame(k), timeout=LONG)
        w.end()
        os.write(go_w, b"1")
        os.close(go_w)
        _, got, missed = c.hear()
        c.join()
        # Every frame is either read, in order, or counted as missed: none is lost silently.
        assert got and got == list(range(got[0], 10)) and missed == got[0] > 0
        w.unlink()


def test_latest_child_continues_from_the_frame_it_had_seen(name):
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name)
        w.write(frame(0))
        assert r.read_new(timeout=LONG)[0] == 0

        go_r, go_w = os.pipe()

        def child(say):
            r.last_seq
            os.read(go_r, 1)  # both frames are written
            say("got", int(r.read_new(timeout=LONG)[0]), r.missed)

        c = Forked(child)
        os.close(go_r)
        w.write(frame(1))
        w.write(frame(2))
        os.write(go_w, b"1")
        os.close(go_w)
        assert c.hear() == ["got", 2, 1]  # the newest frame after frame 0; frame 1 skipped
        c.join()
        assert r.read_new(timeout=LONG)[0] == 2  # the parent's handle saw nothing of the child's reads
        r.close()
        w.unlink()


# Lossless handles across fork() whatever the order: the child's reader entry is reserved before
# fork() (ring/fork.rs), so the writer keeps every frame after the inherited position for it.


@pytest.mark.parametrize("slots", [2, 4])
@pytest.mark.parametrize("close", ["at_once", "after_first_read"])
@pytest.mark.parametrize("writes", ["before_child_reads", "while_child_reads"])
def test_forked_lossless_child_gets_every_frame_in_any_order(name, slots, close, writes, monkeypatch):
    monkeypatch.setenv("FRAMEBUS_FORK_GRACE", "600")  # a reservation outlives any wait here
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=slots) as w:
        r = framebus.open(name, mode="lossless")
        go_r, go_w = os.pipe()

        def child(say):
            os.read(go_r, 1)  # the parent says when to start reading
            first = int(r.read_new(timeout=LONG)[0])
            say("first", first)
            rest, missed = read_all(r, 9)
            say("got", [first, *rest], missed, r.missed)

        c = Forked(child)
        os.close(go_r)
        if close == "at_once":
            r.close()  # before anything is written or read in the child
        if writes == "before_child_reads":
            for k in range(slots):  # fills the ring: the child's reserved entry holds all of it
                w.write(frame(k), timeout=LONG)
        os.write(go_w, b"1")
        os.close(go_w)
        start = slots if writes == "before_child_reads" else 0
        if close == "after_first_read":
            if start == 0:
                w.write(frame(0), timeout=LONG)
                start = 1
            assert c.hear() == ["first", 0]
            r.close()
        for k in range(start, 10):
            w.write(frame(k), timeout=LONG)
        w.end()
        if close == "at_once":
            assert c.hear() == ["first", 0]
        assert c.hear() == ["got", list(range(10)), 0, 0]
        c.join()
        w.unlink()


@pytest.mark.parametrize("how", ["exits", "closes", "drops"])
def test_child_that_never_uses_an_inherited_handle_frees_its_reservation(name, how, monkeypatch):
    # With a grace this long, a reservation that stayed behind would hold the writer until its
    # write timed out: each write below succeeds only because the child's entry was freed.
    monkeypatch.setenv("FRAMEBUS_FORK_GRACE", "600")
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=2) as w:
        r = framebus.open(name, mode="lossless")
        go_r, go_w = os.pipe()

        def child(say):
            nonlocal r
            if how == "closes":
                r.close()
            elif how == "drops":
                del r
                gc.collect()
            say("done", how)
            if how != "exits":
                os.read(go_r, 1)  # stays alive while the parent writes

        c = Forked(child)
        os.close(go_r)
        assert c.hear() == ["done", how]
        if how == "exits":
            c.join()
        r.close()
        for k in range(6):
            w.write(frame(k), timeout=LONG)
        assert w.attached == 1  # the writer alone: no entry of the child's is left
        if how != "exits":
            os.write(go_w, b"1")
            c.join()
        os.close(go_w)
        w.unlink()


def test_reservation_of_an_unused_handle_holds_frames_only_for_the_grace(name, monkeypatch):
    # A child that does not use its copy (a worker that inherited every handle) holds the
    # writer back for the grace only; when it reads later, it counts what it lost as missed.
    monkeypatch.setenv("FRAMEBUS_FORK_GRACE", "0.2")
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=4) as w:
        r = framebus.open(name, mode="lossless")
        go_r, go_w = os.pipe()

        def child(say):
            os.read(go_r, 1)
            say("got", *read_all(r, 10))

        c = Forked(child)
        os.close(go_r)
        r.close()
        for k in range(10):
            w.write(frame(k), timeout=LONG)  # waits for the grace, then goes on
        w.end()
        os.write(go_w, b"1")
        os.close(go_w)
        _, got, missed = c.hear()
        c.join()
        # Every frame is read, in order, or counted as missed (the writer may have kept any
        # old frames in the slots it did not need).
        assert got == sorted(set(got)) and got[-1] == 9 and missed > 0 and len(got) + missed == 10
        w.unlink()


def test_grandchild_reserves_from_the_childs_position(name, monkeypatch):
    monkeypatch.setenv("FRAMEBUS_FORK_GRACE", "600")
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=2) as w:
        r = framebus.open(name, mode="lossless")
        w.write(frame(0))

        def child(say):
            assert int(r.read_new(timeout=LONG)[0]) == 0
            inner = Forked(lambda say2: say2("got", *read_all(r, 5)))
            r.close()  # the child closes its copy at once, as the parent did
            say("grandchild", *inner.hear())
            inner.join()

        c = Forked(child)
        r.close()
        for k in range(1, 6):
            w.write(frame(k), timeout=LONG)
        w.end()
        assert c.hear() == ["grandchild", "got", [1, 2, 3, 4, 5], 0]
        c.join()
        w.unlink()


def test_reservation_no_child_claimed_is_freed_after_its_grace(name, monkeypatch):
    # fork() failed after the hooks reserved entries: nobody claims them, the writer stops
    # holding frames for them after the grace, and a full reader table reaps them.
    monkeypatch.setenv("FRAMEBUS_FORK_GRACE", "0.2")
    with framebus.create(name, shape=(4,), dtype=np.int64, slots=2, max_readers=3) as w:
        r = framebus.open(name, mode="lossless")
        framebus._native.fork_prepare()
        framebus._native.fork_parent()
        assert w.attached == 3  # the writer, the reader and the reservation fill the table
        r.close()
        for k in range(6):
            w.write(frame(k), timeout=LONG)  # waits for the grace, then goes on
        other = framebus.open(name)  # the table is full again
        r2 = framebus.open(name, mode="lossless")  # succeeds only because the reservation is reaped
        assert w.attached == 3
        r2.close()
        other.close()
        w.unlink()
