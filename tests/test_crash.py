"""Processes that die at the worst moment (SIGKILL): a writer in the middle of a write, a holder
of the write lock, a reader attached to the stream. Readers never see a torn frame, the lock is
recovered (with a LockRecoveredWarning) instead of deadlocking, dead readers stop counting and
stop holding the writer back, and ``gc`` removes stale streams but never a live one."""

from __future__ import annotations

import random
import signal
import threading
import time
import warnings

import numpy as np
import pytest

import framebus
from framebus import LockRecoveredWarning

from conftest import lock_holder, private_shm_wrapper

LONG = 30.0


def _intact(pub, modulo=8):
    """Frames in these tests are filled with frame_id % modulo."""
    return pub.seq == pub.frame_id + 1 and bool((pub.payload == pub.frame_id % modulo).all())


WRITER_LOOP = """
s = framebus.open({name!r})
frames = [np.full({shape}, k, np.float32) for k in range(8)]
k = {start}
s.write(frames[k % 8], frame_id=k)
say("writing")
while True:
    k += 1
    s.write(frames[k % 8], frame_id=k)
"""


def test_writer_killed_mid_write_never_exposes_a_torn_frame(name, spawn):
    """12 writers in turn write 4 MB frames back to back and are SIGKILLed at random moments
    (most of them inside write(), holding the lock with a slot claimed). After each kill the
    newest frame is still the previous committed one, intact, or, when the killed write was
    rewriting that frame's slot in place, a read says the frame was lost (StreamEmptyError,
    reason "lost"), never torn; the next write repairs the stream. A reader process watching throughout never sees a torn frame."""
    shape = (1024, 1024)
    rng = random.Random(7)
    mid_write = 0
    with framebus.create(name, shape=shape, dtype=np.float32, slots=3) as s:
        watcher = spawn(
            f"""
            s = framebus.open({name!r})
            say("ready")
            bad, seen, last = 0, 0, -1
            while True:
                try:
                    pub = s.read_new_publication(timeout=60)
                except TimeoutError:
                    break
                if pub.frame_id == -1:
                    break
                if pub.seq != pub.frame_id + 1 or not (pub.payload == pub.frame_id % 8).all():
                    bad += 1
                seen += 1
            say("watched", seen, bad)
            """
        )
        watcher.expect("ready")
        seq = 0
        for i in range(12):
            child = spawn(WRITER_LOOP.format(name=name, shape=shape, start=seq))
            child.expect("writing")
            time.sleep(rng.uniform(0, 0.03))
            child.kill()
            if s.lock_owner == child.pid:
                mid_write += 1
            try:
                pub = s.read_publication()
            except framebus.StreamEmptyError as e:
                # The killed write was rewriting the newest frame's slot in place (every reader
                # had taken that frame): the frame went with it, and that is said, never shown torn.
                assert e.reason == "lost", e
                seq = s.write_sequence
            else:
                assert pub.seq >= seq + 1
                assert _intact(pub), f"iteration {i}: frame {pub.frame_id} (seq {pub.seq}) is torn or mislabelled"
                seq = pub.seq
            # The next write takes the dead writer's lock over and repairs its slot.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                s.write(np.full(shape, seq % 8, np.float32), frame_id=seq, timeout=LONG)
            assert all(issubclass(w.category, LockRecoveredWarning) for w in caught), [str(w.message) for w in caught]
            if s.lock_owner is not None:
                pytest.fail(f"lock still held by {s.lock_owner} after a write")
            pub = s.read_publication()
            assert pub.seq == seq + 1 and _intact(pub)
            seq = pub.seq
        # Every slot of the ring is usable again: a full turn of writes goes through.
        for k in range(seq, seq + 2 * s.slots):
            s.write(np.full(shape, k % 8, np.float32), frame_id=k, timeout=LONG)
            assert _intact(s.read_publication())
        s.write(np.zeros(shape, np.float32), frame_id=-1)
        watched = watcher.line()
        watcher.finish()
        _, seen, bad = watched.split()
        assert int(bad) == 0 and int(seen) > 0, watched
        # Nearly every kill lands inside write() (the copy of 4 MB is most of the loop).
        print(f"{mid_write} of 12 writers were killed holding the lock")
        assert mid_write >= 1, "no writer was killed mid-write; the test did not test anything"
        s.unlink()


def test_lock_holder_killed_is_recovered_with_a_warning(name, spawn):
    with framebus.create(name, shape=(4,)) as s:
        s.write(np.ones(4, np.float32), frame_id=1)
        holder = lock_holder(spawn, name)
        assert s.lock_owner == holder.pid
        with pytest.raises(TimeoutError):
            s.acquire(timeout=0.05)
        holder.kill()
        with pytest.warns(LockRecoveredWarning, match="died"):
            s.acquire(timeout=LONG)
        assert s.lock_held() and s.lock_owner is not None
        assert s.lock_recoveries == 1
        s.write(np.full(4, 2, np.float32), frame_id=2)
        s.release()
        assert s.lock_owner is None
        # Once recovered, the lock works normally (no further warning).
        s.acquire(timeout=LONG)
        s.release()
        assert s.read().tolist() == [2, 2, 2, 2]
        s.unlink()


def test_waiter_in_another_process_takes_over_a_dead_holders_lock(name, spawn):
    """A process blocked in acquire() while the holder is SIGKILLed gets the lock (it is not
    deadlocked) and is told so with LockRecoveredWarning."""
    with framebus.create(name, shape=(4,)) as s:
        holder = lock_holder(spawn, name)
        waiter = spawn(
            f"""
            import warnings
            s = framebus.open({name!r})
            say("waiting")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                s.acquire(timeout={LONG})
            say("acquired", [w.category.__name__ for w in caught], s.lock_recoveries)
            s.write(np.full(4, 7, np.float32), frame_id=7)
            s.release()
            say("released")
            """
        )
        waiter.expect("waiting")
        time.sleep(0.1)  # let it block in acquire (not required for correctness)
        holder.kill()
        assert waiter.line() == "acquired ['LockRecoveredWarning'] 1"
        waiter.expect("released")
        waiter.finish()
        assert s.lock_owner is None
        assert s.read_publication().frame_id == 7
        s.unlink()


def test_blocked_acquire_in_this_process_recovers_when_the_holder_is_killed(name, spawn):
    with framebus.create(name, shape=(4,)) as s:
        holder = lock_holder(spawn, name)
        killer = threading.Timer(0.2, lambda: holder.kill())
        killer.start()
        try:
            with pytest.warns(LockRecoveredWarning):
                s.acquire(timeout=LONG)
        finally:
            killer.join()
        s.release()
        s.unlink()


def test_writer_waiting_for_a_killed_holder_recovers(name, spawn):
    """write() (which takes the lock itself) also recovers from a dead holder."""
    with framebus.create(name, shape=(4,)) as s:
        holder = lock_holder(spawn, name)
        holder.kill()
        with pytest.warns(LockRecoveredWarning):
            s.write(np.ones(4, np.float32), frame_id=1, timeout=LONG)
        assert s.read_publication().frame_id == 1 and s.lock_owner is None
        s.unlink()


def test_killed_reader_stops_counting(name, spawn):
    with framebus.create(name, shape=(4,)) as s:
        readers = [
            spawn(
                f"""
                s = framebus.open({name!r}, mode={mode!r})
                say("attached")
                while True:
                    try:
                        s.read_new(timeout=60)
                    except TimeoutError:
                        pass
                """
            )
            for mode in ("latest", "lossless")
        ]
        for r in readers:
            r.expect("attached")
        assert s.attached == 3
        st = framebus.stat(name)
        assert (st.attached, st.lossless) == (3, 1)
        readers[0].kill()
        assert s.attached == 2
        readers[1].kill()
        assert s.attached == 1
        st = framebus.stat(name)
        assert (st.attached, st.lossless) == (1, 0)
        # Their entries are reclaimed: the table has room for new handles again.
        with framebus.open(name) as again:
            assert again.attached == 2
        s.unlink()


def test_killed_lossless_reader_no_longer_holds_the_writer_back(name, spawn):
    with framebus.create(name, shape=(4,), dtype=np.int32, slots=2) as s:
        reader = spawn(
            f"""
            s = framebus.open({name!r}, mode="lossless")
            say("attached")
            hear()
            """
        )
        reader.expect("attached")
        for k in range(2):
            s.write(np.full(4, k, np.int32), frame_id=k, timeout=LONG)
        with pytest.raises(TimeoutError):
            s.write(np.full(4, 9, np.int32), timeout=0.05)
        reader.kill()
        for k in range(2, 10):
            s.write(np.full(4, k, np.int32), frame_id=k, timeout=LONG)
        assert s.read_publication().frame_id == 9
        s.unlink()


def test_reader_killed_while_reading_large_frames_releases_its_pins(name, spawn):
    """A reader SIGKILLed while copying (its slot pinned) does not keep that slot from the
    writer forever: the writer reclaims dead readers' pins."""
    shape = (1024, 1024)
    with framebus.create(name, shape=shape, dtype=np.float32, slots=2) as s:
        s.write(np.zeros(shape, np.float32), frame_id=0)
        for i in range(5):
            reader = spawn(
                f"""
                s = framebus.open({name!r})
                out = np.empty({shape}, np.float32)
                say("reading")
                while True:
                    s.read(out=out)
                """
            )
            reader.expect("reading")
            time.sleep(0.01 * i)
            reader.kill()
            for k in range(1, 2 * s.slots + 1):  # needs every slot in turn
                s.write(np.full(shape, k, np.float32), frame_id=k, timeout=LONG)
            assert s.attached == 1
        s.unlink()


# -- gc --------------------------------------------------------------------------------------

GC_SCENARIO = """
import subprocess
def child(code):
    return subprocess.Popen([sys.executable, "-c", "import framebus, numpy as np, sys\\n" + code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

# stale: created by a process that exited, nobody attached
p = child("framebus.create('gc-stale', shape=(2,)).close()")
p.wait()
# live: creator alive (this process)
live = framebus.create("gc-live", shape=(2,))
# creator dead but a live process still attached
p = child("framebus.create('gc-attached', shape=(2,)).close()")
p.wait()
attached = framebus.open("gc-attached")
# creator alive in another process that keeps its handle open
keeper = child("s = framebus.create('gc-kept', shape=(2,)); print('ok', flush=True); sys.stdin.readline()")
keeper.stdout.readline()
# creator killed, a reader killed too: stale
victim = child("s = framebus.create('gc-killed', shape=(2,)); print('ok', flush=True); sys.stdin.readline()")
victim.stdout.readline()
reader = child("s = framebus.open('gc-killed'); print('ok', flush=True); sys.stdin.readline()")
reader.stdout.readline()
victim.kill(); victim.wait(); reader.kill(); reader.wait()

say("stale", sorted(n.name for n in framebus.list_streams() if n.stale))
say("dry", sorted(framebus.gc(dry_run=True)))
say("listed", sorted(n.name for n in framebus.list_streams()))
say("{how}", sorted({gc_call}))
say("left", sorted(n.name for n in framebus.list_streams()))
say("again", sorted(framebus.gc()))
keeper.stdin.close(); keeper.wait()
say("after keeper exit", sorted(framebus.gc()))
attached.close(); live.unlink()
say("end", sorted(n.name for n in framebus.list_streams()))
"""


@pytest.mark.parametrize("how", ["python", "cli"])
def test_gc_removes_stale_streams_but_never_a_live_one(spawn, how):
    """Runs in a private /dev/shm (a mount namespace of its own) so that gc cannot touch
    other sessions' streams."""
    wrap = private_shm_wrapper()
    if wrap is None:
        pytest.skip("needs root and unshare for a private /dev/shm (gc is global)")
    gc_call = "framebus.gc()" if how == "python" else (
        "[l.split()[-1] for l in subprocess.run([sys.executable, '-m', 'framebus', 'gc'], capture_output=True, text=True, check=True).stdout.splitlines() if l.startswith('removed')]"
    )
    child = spawn(GC_SCENARIO.format(how="gc", gc_call=gc_call), wrap=wrap)
    stale = ["gc-killed", "gc-stale"]
    assert child.line() == f"stale {stale}"
    assert child.line() == f"dry {stale}"
    assert child.line() == f"listed {sorted(stale + ['gc-attached', 'gc-kept', 'gc-live'])}"
    assert child.line() == f"gc {stale}"
    assert child.line() == "left ['gc-attached', 'gc-kept', 'gc-live']"
    assert child.line() == "again []"
    assert child.line() == "after keeper exit ['gc-kept']"
    assert child.line() == "end ['gc-attached']"
    child.finish()


def test_gc_removes_an_uninitialised_segment_only_once_it_is_old(spawn):
    """A segment never initialised (its creator died before writing the header) is stale once
    it is older than the creation grace period; a young one may still be being created."""
    wrap = private_shm_wrapper()
    if wrap is None:
        pytest.skip("needs root and unshare for a private /dev/shm (gc is global)")
    child = spawn(
        """
        open("/dev/shm/framebus.gc-old", "wb").close()
        os.utime("/dev/shm/framebus.gc-old", (0, 0))
        open("/dev/shm/framebus.gc-young", "wb").close()
        # "Young" whatever the time the listing takes: modified in the future.
        os.utime("/dev/shm/framebus.gc-young", (time.time() + 3600, time.time() + 3600))
        say("removed", framebus.gc())
        say("left", sorted(os.listdir("/dev/shm")))
        """,
        wrap=wrap,
    )
    assert child.line() == "removed ['gc-old']"
    assert child.line() == "left ['framebus.gc-young']"
    child.finish()
