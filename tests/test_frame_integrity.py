"""Frame integrity: a loan's exports keep their slot, one claim at a time per stream, sequence
numbers never wrap or repeat, a closed reader stops holding the writer back (issue #21).

Every check is byte-exact. The property tests interleave loans, exports, commits, aborts and
writes (one thread against a model, and two threads against the invariants)."""

from __future__ import annotations

import os
import random
import threading
import uuid

import numpy as np
import pytest

import framebus

MAX_SEQ = 2**56 - 1


@pytest.fixture
def name():
    n = f"integrity-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def _drain(fd: int, nbytes: int, delay: float) -> threading.Thread:
    """Reads `nbytes` from `fd` on a thread, starting after `delay` seconds (a slow consumer)."""
    got = bytearray()

    def run() -> None:
        threading.Event().wait(delay)
        while len(got) < nbytes:
            chunk = os.read(fd, nbytes - len(got))
            if not chunk:
                break
            got.extend(chunk)

    t = threading.Thread(target=run, daemon=True)
    t.got = got  # type: ignore[attr-defined]
    t.start()
    return t


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_loan_handed_to_pipe_keeps_its_bytes(name, end):
    """The issue's first case: a loaned frame given to pipe() is written exactly, although the
    writer goes on writing into a 2-slot ring while the pipe's reader is slow."""
    w = framebus.create(name, shape=(1024, 1024), dtype=np.uint8, slots=2)
    r, wfd = os.pipe()
    try:
        reader = _drain(r, 1024 * 1024, delay=0.3)
        loan = w.loan()
        buf = loan.array
        buf[:] = 7
        framebus.pipe(buf, wfd)
        del buf
        loan.commit() if end == "commit" else loan.abort()
        del loan
        for i in range(50):
            w.write(np.full((1024, 1024), 100 + i, np.uint8), timeout=10)
        framebus.sync(wfd, timeout=10)
        reader.join(10)
        assert bytes(reader.got) == b"\x07" * (1024 * 1024)  # type: ignore[attr-defined]
    finally:
        framebus.pipes.close(wfd)
        os.close(r)
        os.close(wfd)
        w.close()


def test_loan_with_block_into_pipe_in_a_loop(name):
    """The common pattern: render into a loan and hand it to a pipe, frame after frame; the
    consumer sees every frame exactly as rendered."""
    w = framebus.create(name, shape=(256, 1024), dtype=np.uint8, slots=3)
    r, wfd = os.pipe()
    frames = 40
    try:
        reader = _drain(r, frames * 256 * 1024, delay=0.2)
        for i in range(frames):
            with w.loan(timeout=10) as buf:
                buf[:] = i
                framebus.pipe(buf, wfd)
        del buf
        framebus.sync(wfd, timeout=10)
        reader.join(10)
        got = np.frombuffer(bytes(reader.got), np.uint8).reshape(frames, -1)  # type: ignore[attr-defined]
        assert [int(v) for v in got[:, 0]] == list(range(frames))
        assert all((row == row[0]).all() for row in got)
    finally:
        framebus.pipes.close(wfd)
        os.close(r)
        os.close(wfd)
        w.close()


@pytest.mark.parametrize("export", ["array", "slice", "memoryview", "dlpack"])
def test_loan_exports_stay_the_published_frame(name, export):
    """After commit, every kind of export of the loan array is a pinned view of the published
    frame: many later writes do not change it, and writing the loan array is refused."""
    w = framebus.create(name, shape=(64,), dtype=np.uint8, slots=3)
    r = framebus.open(name, mode="lossless")
    try:
        with w.loan() as buf:
            buf[:] = np.arange(64, dtype=np.uint8)
            kept = {
                "array": lambda: buf,
                "slice": lambda: buf[8:16],
                "memoryview": lambda: memoryview(buf),
                "dlpack": lambda: np.from_dlpack(buf),
            }[export]()
        expected = bytes(kept)
        with pytest.raises(ValueError, match="read-only"):
            buf[0] = 255
        del buf
        assert r.read_new(timeout=1).tobytes() == bytes(range(64))
        for i in range(20):
            w.write(np.full(64, 200 + i % 50, np.uint8), timeout=1)
            r.read_new(timeout=1)
        assert bytes(kept) == expected
        seq_before = w.write_sequence
        del kept
        # The slot is free again once the export is gone.
        for i in range(6):
            w.write(np.zeros(64, np.uint8), timeout=1)
            r.read_new(timeout=1)
        assert w.write_sequence == seq_before + 6
    finally:
        r.close()
        w.close()


_READ_IN_CHILD = """
import sys, framebus
r = framebus.open(sys.argv[1])
print(bytes(r.read().reshape(-1)[:8]).hex())
r.close()
"""


@pytest.mark.parametrize("alias", ["memoryview", "numpy view", "frombuffer", "dlpack"])
def test_writable_alias_made_during_the_loan_cannot_change_the_frame(name, alias):
    """A writable alias made while the loan was open keeps its writable flag (nothing can revoke
    it), but what it writes after the commit stays in the writing process's private copy of the
    slot: other handles and other processes see exactly the committed bytes, and once the alias
    is gone the slot is written and read normally again."""
    import subprocess
    import sys

    w = framebus.create(name, shape=(3, 4096), dtype=np.uint8, slots=2)
    r = framebus.open(name)
    try:
        with w.loan() as buf:
            buf[:] = 7
            stale = {
                "memoryview": lambda: memoryview(buf).cast("B"),
                "numpy view": lambda: buf.view(),
                "frombuffer": lambda: np.frombuffer(memoryview(buf), np.uint8).reshape(3, 4096),
                "dlpack": lambda: np.from_dlpack(buf),
            }[alias]()
        del buf
        assert not memoryview(stale).readonly  # the alias is still writable...
        if alias == "memoryview":
            stale[0:4096] = b"\xff" * 4096
        else:
            stale[:] = 255
        # ... but only this process's copy changed.
        assert (r.read() == 7).all()
        with r.view() as f:
            assert (f.array == 7).all()
        child = subprocess.run([sys.executable, "-c", _READ_IN_CHILD, name], capture_output=True, text=True, timeout=60, check=True)
        assert child.stdout.strip() == "07" * 8
        del stale
        # The slot is the writer's again, shared: every later frame reaches the reader.
        for i in range(6):
            w.write(np.full((3, 4096), 20 + i, np.uint8), timeout=1)
            assert (r.read() == 20 + i).all()
    finally:
        r.close()
        w.close()


def test_loan_without_exports_pins_nothing(name):
    """A loan whose array is gone when it ends leaves every slot free (2 slots suffice)."""
    w = framebus.create(name, shape=(16,), dtype=np.uint8, slots=2)
    try:
        for i in range(10):
            loan = w.loan(timeout=1)
            loan.array[:] = i
            loan.commit()
        assert w.read().tolist() == [9] * 16
    finally:
        w.close()


def test_second_loan_and_write_during_loan_are_refused(name):
    w = framebus.create(name, shape=(8,), dtype=np.uint8, slots=4)
    r = framebus.open(name, mode="lossless")
    try:
        a = w.loan()
        with pytest.raises(framebus.LoanOpenError, match="open loan"):
            w.loan()
        with pytest.raises(framebus.LoanOpenError, match="frame 1"):
            w.write(np.ones(8, np.uint8))
        other = framebus.open(name)  # another handle of the same thread: the same claim
        with pytest.raises(framebus.LoanOpenError):
            other.write(np.ones(8, np.uint8))
        other.close()
        assert w.write_sequence == 0
        a.array[:] = 3
        a.commit()
        w.write(np.full(8, 4, np.uint8))
        seqs = []
        for _ in range(2):
            p = r.read_new_publication(timeout=1)
            seqs.append((p.seq, int(p.payload[0])))
        assert seqs == [(1, 3), (2, 4)]
        assert w.write_sequence == 2
    finally:
        r.close()
        w.close()


def test_write_from_another_thread_waits_for_the_open_loan(name):
    w = framebus.create(name, shape=(8,), dtype=np.uint8, slots=4)
    r = framebus.open(name, mode="lossless")
    try:
        loan = w.loan()
        done = threading.Event()

        def other() -> None:
            w.write(np.full(8, 9, np.uint8), timeout=5)
            done.set()

        t = threading.Thread(target=other)
        t.start()
        assert not done.wait(0.2)  # blocked on the write lock, not writing a duplicate
        loan.array[:] = 1
        loan.commit()
        t.join(5)
        assert done.is_set()
        got = [(p.seq, int(p.payload[0])) for p in (r.read_new_publication(timeout=1) for _ in range(2))]
        assert got == [(1, 1), (2, 9)]
    finally:
        r.close()
        w.close()


def test_sequence_end_is_refused_and_nothing_written(name):
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    r = framebus.open(name)
    try:
        w.write(np.ones(4, np.uint8), seq=MAX_SEQ)
        assert r.read_new(timeout=1).tolist() == [1] * 4
        with pytest.raises(framebus.SequenceExhaustedError, match="largest sequence number"):
            w.write(np.full(4, 2, np.uint8))
        with pytest.raises(framebus.SequenceExhaustedError):
            w.loan()
        with pytest.raises(ValueError):
            w.write(np.full(4, 2, np.uint8), seq=MAX_SEQ + 1)
        assert isinstance(framebus.SequenceExhaustedError("x"), ValueError)
        assert w.write_sequence == MAX_SEQ
        assert w.read().tolist() == [1] * 4
        assert not w.lock_held()
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.05)
    finally:
        r.close()
        w.close()


def test_closed_lossless_reader_stops_backpressure_but_keeps_its_view(name):
    """The issue's fifth case: closing a lossless reader that still holds a view frees the
    writer at once; the view keeps only its own slot, byte-exact."""
    w = framebus.create(name, shape=(32,), dtype=np.uint8, slots=4)
    try:
        w.write(np.zeros(32, np.uint8))
        lossless = framebus.open(name, mode="lossless")
        w.write(np.full(32, 42, np.uint8))
        frame = lossless.wait_view(timeout=0)
        arr = frame.array
        lossless.close()
        for i in range(20):
            w.write(np.full(32, i, np.uint8), timeout=1)
        assert arr.tolist() == [42] * 32 and frame.seq == 2
        info = framebus.stat(name)
        assert info.lossless == 0
    finally:
        w.close()


# -- property tests ------------------------------------------------------------------------


class _Model:
    """What readers must see: every committed frame once, in order, with its bytes."""

    def __init__(self) -> None:
        self.published: list[tuple[int, bytes]] = []


@pytest.mark.parametrize("seed", range(12))
def test_interleavings_against_a_model(name, seed):
    rng = random.Random(seed)
    w = framebus.create(name, shape=(48,), dtype=np.uint8, slots=6)
    lossless = framebus.open(name, mode="lossless")
    model = _Model()
    loan = None
    exports: list[tuple[object, bytes]] = []
    seen = 0
    try:
        for step in range(300):
            op = rng.choice(["write", "loan", "loan", "export", "commit", "abort", "drop", "read", "read"])
            value = bytes(rng.randrange(256) for _ in range(48))
            if op == "write":
                if loan is not None:
                    with pytest.raises(framebus.LoanOpenError):
                        w.write(np.frombuffer(value, np.uint8), timeout=0)
                    continue
                try:
                    w.write(np.frombuffer(value, np.uint8), timeout=0)
                except TimeoutError:
                    continue  # every free slot pinned or unread: nothing written
                model.published.append((len(model.published) + 1, value))
            elif op == "loan":
                if loan is not None:
                    with pytest.raises(framebus.LoanOpenError):
                        w.loan(timeout=0)
                    continue
                try:
                    loan = w.loan(timeout=0)
                except TimeoutError:
                    continue
                assert loan.seq == len(model.published) + 1
                loan.array[:] = np.frombuffer(value, np.uint8)
            elif op == "export" and loan is not None and len(exports) < 2:
                kind = rng.choice(["array", "slice", "memoryview"])
                a = loan.array
                exports.append(({"array": a, "slice": a[4:40], "memoryview": memoryview(a)}[kind], b""))
            elif op in ("commit", "abort") and loan is not None:
                # Fix the expected bytes of this loan's exports at the end of the loan.
                exports = [(e, bytes(e) if not exp else exp) for e, exp in exports]  # type: ignore[call-overload]
                if op == "commit":
                    model.published.append((loan.seq, loan.array.tobytes()))
                    loan.commit()
                else:
                    loan.abort()
                loan = None
            elif op == "drop" and exports:
                exports.pop(rng.randrange(len(exports)))
            elif op == "read":
                while True:
                    try:
                        p = lossless.read_new_publication(timeout=0)
                    except TimeoutError:
                        break
                    seen += 1
                    assert (p.seq, p.payload.tobytes()) == model.published[seen - 1], f"step {step}"
            for e, expected in exports:
                if expected:
                    assert bytes(e) == expected, f"an export changed at step {step}"  # type: ignore[call-overload]
            assert w.write_sequence == len(model.published)
        if loan is not None:
            loan.abort()
        while True:
            try:
                p = lossless.read_new_publication(timeout=0)
            except TimeoutError:
                break
            seen += 1
            assert (p.seq, p.payload.tobytes()) == model.published[seen - 1]
        assert seen == len(model.published)
    finally:
        exports.clear()
        lossless.close()
        w.close()


@pytest.mark.parametrize("seed", range(4))
def test_two_threads_never_duplicate_or_lose_a_frame(name, seed):
    """One thread writes with loans (keeping exports now and then), another with write(); a
    lossless reader sees consecutive sequence numbers, every frame exactly once, and kept
    exports never change."""
    w = framebus.create(name, shape=(64,), dtype=np.uint8, slots=8)
    lossless = framebus.open(name, mode="lossless")
    per_thread = 150
    stop = threading.Event()
    received: list[tuple[int, bytes]] = []
    errors: list[BaseException] = []

    def frame(tag: int, i: int) -> np.ndarray:
        return np.frombuffer(bytes([tag]) + i.to_bytes(4, "little") + bytes(59), np.uint8)

    def loaner() -> None:
        rng = random.Random(seed)
        kept: list[tuple[object, bytes]] = []
        try:
            for i in range(per_thread):
                with w.loan(timeout=10) as buf:
                    buf[:] = frame(1, i)
                if rng.random() < 0.3:
                    kept.append((buf, buf.tobytes()))
                del buf
                if len(kept) > 2:
                    kept.pop(0)
                for e, expected in kept:
                    assert bytes(e) == expected  # type: ignore[call-overload]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def writer() -> None:
        try:
            for i in range(per_thread):
                w.write(frame(2, i), timeout=10)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def reader() -> None:
        while len(received) < 2 * per_thread and not stop.is_set():
            try:
                p = lossless.read_new_publication(timeout=0.1)
            except TimeoutError:
                continue
            received.append((p.seq, p.payload.tobytes()))

    threads = [threading.Thread(target=f) for f in (loaner, writer, reader)]
    try:
        for t in threads:
            t.start()
        for t in threads[:2]:
            t.join(60)
        threads[2].join(30)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        lossless.close()
        w.close()
    assert not errors, errors
    assert [s for s, _ in received] == list(range(1, 2 * per_thread + 1))
    tags = sorted((p[0], int.from_bytes(p[1:5], "little")) for _, p in received)
    assert tags == sorted([(1, i) for i in range(per_thread)] + [(2, i) for i in range(per_thread)])
