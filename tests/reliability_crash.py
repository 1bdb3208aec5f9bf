"""The crash matrix: each scenario SIGKILLs a process at random points ``iters`` times while
other processes read and check every frame, then checks that the stream still works. Each
returns a :class:`Tally`; the pytest suite runs them short, ``scripts/stress.py`` long.

Timeouts here are generous bounds on waits ("the writer makes progress within 30 s"), never
measurements."""

from __future__ import annotations

import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import framebus
import reliability_any_shape
import reliability_children as ch
from reliability_helpers import Pattern, Tally, ctx, kill, unique_name, unlink_quietly, wait_until

SHAPE = (240, 320, 3)  # 230400 bytes: copies take long enough to be killed inside
BOUND = 30.0


def _status() -> Any:
    return ctx().RawArray("q", ch.STATUS_WORDS)


def _start(target: Callable[..., None], *args: Any) -> Any:
    p = ctx().Process(target=target, args=args, daemon=True)
    p.start()
    return p


class _Readers:
    """Reader children (checking every frame) attached for a whole scenario."""

    def __init__(self, name: str, shape: tuple, modes: List[str], check_ids: bool = True, target: Any = None) -> None:
        c = ctx()
        self.stop, self.q = c.Event(), c.Queue()
        self.procs = []
        for mode in modes:
            ready = c.Event()
            args = (name, mode, self.stop, self.q, ready) if target is ch.follower else (name, mode, shape, self.stop, self.q, ready, True, check_ids)
            self.procs.append(_start(target or ch.reader, *args))
            if not ready.wait(BOUND):
                raise RuntimeError("a reader child did not start")

    def finish(self, tally: Tally, final_seq: Optional[int] = None) -> List[Dict[str, Any]]:
        """Stops the readers after they drained, merges their reports; a lossless reader that
        ends before ``final_seq`` lost frames."""
        self.stop.set()
        reports = []
        for _ in self.procs:
            try:
                reports.append(self.q.get(timeout=120))
            except Exception:  # noqa: BLE001 - queue.Empty: a reader died or hung
                tally.errors.append("a reader child did not report")
        for p in self.procs:
            p.join(BOUND)
            if p.exitcode != 0:
                tally.errors.append(f"reader child exit code {p.exitcode}")
                kill(p)
        self.q.close()
        self.q.join_thread()
        for r in reports:
            tally.add_reader(r)
            if final_seq is not None and r["mode"] == "lossless" and r.get("last_seq", final_seq) < final_seq:
                tally.lost += final_seq - r["last_seq"]
                tally.errors.append(f"lossless reader stopped at {r['last_seq']} of {final_seq}")
        return reports


def _progress(status: Any, at_least: int, tally: Tally, what: str, proc: Any = None) -> bool:
    ok = wait_until(lambda: status[ch.COUNT] >= at_least or (proc is not None and not proc.is_alive()), BOUND)
    if not ok or status[ch.COUNT] < at_least:
        code = None if proc is None else proc.exitcode
        tally.errors.append(f"{what}: no progress within {BOUND:.0f} s (count {status[ch.COUNT]}, exit code {code})")
        return False
    return True


def _finish_with_writer(name: str, shape: tuple, tally: Tally, frames: int) -> None:
    """A fresh writer commits ``frames`` frames: the stream works after the kills."""
    st = _status()
    p = _start(ch.writer, name, shape, st, 12345, 0, 0.3, 0.2, 65536, frames)
    p.join(BOUND * 2)
    if p.exitcode != 0 or st[ch.COUNT] != frames:
        tally.errors.append(f"final writer: exit code {p.exitcode}, {st[ch.COUNT]} of {frames} frames")
        kill(p)
    tally.recoveries += st[ch.RECOVERED]


def writer_mid_write(iters: int, seed: int = 0, shape: tuple = SHAPE) -> Tally:
    """SIGKILL a writer at random points: inside write(), inside a half-filled loan, while it
    holds the lock around a write, or between frames. A latest and a lossless reader check
    every frame; after each kill the next writer (taking over the lock) must commit frames."""
    t = Tally("writer_mid_write")
    t0 = time.monotonic()
    rng = random.Random(seed)
    name = unique_name("wmw")
    w = framebus.create(name, shape=shape, dtype=np.uint8, slots=4, meta_capacity=64)
    try:
        readers = _Readers(name, shape, ["latest", "lossless"])
        for _ in range(iters):
            st = _status()
            p = _start(ch.writer, name, shape, st, rng.randrange(1 << 30), 0, 0.4, 0.2, rng.choice([4096, 65536]))
            if not _progress(st, 1, t, "writer after a kill", p):
                kill(p)
                break
            target = rng.choice([ch.WRITE, ch.LOAN, ch.LOAN, ch.LOCK, None])
            if target is None:
                time.sleep(rng.random() * 0.002)
            else:
                wait_until(lambda: st[ch.PHASE] == target, 2.0, 0)
                if rng.random() < 0.5:
                    time.sleep(rng.random() * 0.0003)
            phase = st[ch.PHASE]
            kill(p)
            t.kills += 1
            t.count(t.phases, ch.PHASE_NAMES[phase])
            t.recoveries += st[ch.RECOVERED]
        _finish_with_writer(name, shape, t, 8)
        readers.finish(t, w.write_sequence)
    finally:
        w.close()
        unlink_quietly(name)
    t.seconds = time.monotonic() - t0
    return t


def lock_holder_killed(iters: int, seed: int = 0, shape: tuple = (64, 64, 8)) -> Tally:
    """SIGKILL a process holding the write lock (re-entrantly at times). Half the time a
    waiter is already blocked in acquire() when the holder dies; it must take the lock over
    (LockRecoveredWarning) and write a frame that the readers check."""
    t = Tally("lock_holder")
    t0 = time.monotonic()
    rng = random.Random(seed)
    name = unique_name("lock")
    w = framebus.create(name, shape=shape, dtype=np.uint8, slots=4, meta_capacity=64)
    q = ctx().Queue()
    try:
        readers = _Readers(name, shape, ["latest", "lossless"])
        for i in range(iters):
            blocked = i % 2 == 0
            st = _status()
            holder = _start(ch.lock_holder, name, st, rng.randrange(1 << 30), blocked)
            if not wait_until(lambda: st[ch.PHASE] == ch.LOCK, BOUND, 0):
                t.errors.append("lock holder never took the lock")
                kill(holder)
                break
            wst = _status()
            waiter = None
            if blocked:
                waiter = _start(ch.lock_waiter, name, shape, wst, q)
                wait_until(lambda: wst[ch.PHASE] == ch.WAITING, BOUND)
                time.sleep(0.005 + rng.random() * 0.01)
            else:
                time.sleep(rng.random() * 0.002)
                wait_until(lambda: st[ch.PHASE] == ch.LOCK, 2.0, 0)
            phase = st[ch.PHASE]
            kill(holder)
            t.kills += 1
            t.count(t.phases, ch.PHASE_NAMES[phase])
            if waiter is None:
                waiter = _start(ch.lock_waiter, name, shape, wst, q)
            try:
                kind, detail = q.get(timeout=BOUND * 2)
            except Exception:  # noqa: BLE001 - queue.Empty
                kind, detail = "error", "the waiter did not report"
            waiter.join(BOUND)
            if kind != "ok":
                t.errors.append(f"waiter: {detail}")
            elif blocked and detail != 1:
                t.errors.append(f"a waiter blocked on a dead holder saw {detail} LockRecoveredWarning (expected 1)")
            else:
                t.recoveries += int(detail)
        if w.lock_owner is not None:
            t.errors.append(f"lock still held by {w.lock_owner} at the end")
        readers.finish(t, w.write_sequence)
    finally:
        q.close()
        q.join_thread()
        w.close()
        unlink_quietly(name)
    t.seconds = time.monotonic() - t0
    return t


def lossless_reader_killed(iters: int, seed: int = 0, shape: tuple = SHAPE) -> Tally:
    """SIGKILL a lossless reader mid-read (copy, copy into out=, view, lagging). The writer,
    held back by it, must go on once it is dead (its entry is reaped); a surviving lossless
    reader loses nothing and sees no torn frame."""
    t = Tally("lossless_reader_mid_read")
    t0 = time.monotonic()
    rng = random.Random(seed)
    name = unique_name("lrk")
    w = framebus.create(name, shape=shape, dtype=np.uint8, slots=4, meta_capacity=64)
    try:
        readers = _Readers(name, shape, ["lossless"])
        wst = _status()
        wp = _start(ch.writer, name, shape, wst, rng.randrange(1 << 30), 0, 0.2, 0.1)
        for _ in range(iters):
            vst = _status()
            victim = _start(ch.victim_reader, name, rng.choice(["lossless", "lossless", "latest"]), shape, vst, rng.randrange(1 << 30))
            if not _progress(vst, 1 + rng.randrange(4), t, "victim reader", victim):
                kill(victim)
                break
            time.sleep(rng.random() * 0.01)
            phase = vst[ch.PHASE]
            kill(victim)
            t.kills += 1
            t.count(t.phases, ch.PHASE_NAMES[phase])
            t.frames_checked += vst[ch.CHECKED]
            t.torn += vst[ch.TORN]
            t.lost += vst[ch.LOST]
            if not _progress(wst, wst[ch.COUNT] + 6, t, "writer after a lossless reader died", wp):
                break
        wst[ch.STOP] = 1
        wp.join(BOUND)
        if wp.exitcode != 0:
            t.errors.append(f"writer exit code {wp.exitcode}")
            kill(wp)
        readers.finish(t, w.write_sequence)
        if not wait_until(lambda: w.attached == 1, BOUND, 0.01):
            t.errors.append(f"attached {w.attached} after all readers died or closed (expected 1)")
    finally:
        w.close()
        unlink_quietly(name)
    t.seconds = time.monotonic() - t0
    return t


def view_holder_killed(iters: int, seed: int = 0, shape: tuple = SHAPE) -> Tally:
    """SIGKILL a reader that pins 1 to 3 frames with zero-copy views (with 5 slots and a view
    held by this process all free slots can be pinned, so the writer waits on it). The writer
    must go on after the kill, and a view held here all along never changes."""
    t = Tally("reader_holding_views")
    t0 = time.monotonic()
    rng = random.Random(seed)
    name = unique_name("vhk")
    pat = Pattern(shape)
    w = framebus.create(name, shape=shape, dtype=np.uint8, slots=5, meta_capacity=64)
    try:
        readers = _Readers(name, shape, ["lossless"])
        wst = _status()
        wp = _start(ch.writer, name, shape, wst, rng.randrange(1 << 30), 0, 0.3, 0.1)
        _progress(wst, 1, t, "writer")
        mine = w.view(timeout=BOUND)
        arr = mine.array
        for _ in range(iters):
            vst = _status()
            victim = _start(ch.view_holder, name, rng.choice(["latest", "lossless"]), shape, vst, rng.randrange(1 << 30), rng.randint(1, 3))
            if not wait_until(lambda: vst[ch.PHASE] == ch.VIEWS or not victim.is_alive(), BOUND):
                t.errors.append("view holder never pinned its views")
            time.sleep(rng.random() * 0.005)
            kill(victim)
            t.kills += 1
            t.count(t.phases, ch.PHASE_NAMES[vst[ch.PHASE]])
            t.frames_checked += vst[ch.CHECKED]
            t.torn += vst[ch.TORN]
            if not _progress(wst, wst[ch.COUNT] + 6, t, "writer after a view holder died", wp):
                break
        problem = pat.check(arr, mine.meta, mine.frame_id)
        t.frames_checked += 1
        if problem:
            t.torn += 1
            t.errors.append(f"a view held through the scenario changed: {problem}")
        del arr
        mine.release()
        wst[ch.STOP] = 1
        wp.join(BOUND)
        if wp.exitcode != 0:
            t.errors.append(f"writer exit code {wp.exitcode}")
            kill(wp)
        readers.finish(t, w.write_sequence)
    finally:
        w.close()
        unlink_quietly(name)
    t.seconds = time.monotonic() - t0
    return t


def creator_exits(iters: int, seed: int = 0, shape: tuple = (120, 160, 3)) -> Tally:
    """The creator exits with readers attached: SIGKILLed while writing (``iters`` times) or
    cleanly (a quarter as often). The
    readers keep working, the stream is not stale while they are attached (gc leaves it), a
    new writer takes over, and once everybody left gc would remove it and
    create(exist_ok=True) reclaims it."""
    t = Tally("creator_exit")
    t0 = time.monotonic()
    rng = random.Random(seed)
    pat = Pattern(shape)
    plan = [True] * iters + [False] * max(2, iters // 4)
    rng.shuffle(plan)
    for killed in plan:
        name = unique_name("cx")
        st = _status()
        cp = _start(ch.creator, name, shape, st, rng.randrange(1 << 30), 4, 0 if killed else 3 + rng.randrange(5))
        try:
            if not _progress(st, 1, t, "creator", cp):
                kill(cp)
                continue
            mine = framebus.open(name)
            readers = _Readers(name, shape, ["lossless"])
            if killed:
                time.sleep(rng.random() * 0.01)
                t.count(t.phases, ch.PHASE_NAMES[st[ch.PHASE]])
                kill(cp)
                t.kills += 1
            else:
                cp.join(BOUND)
                t.count(t.phases, "clean exit")
            try:
                pub = mine.read_publication()
            except framebus.StreamEmptyError:  # the creator died before its first frame
                pub = None
            if pub is not None:
                t.frames_checked += 1
                problem = pat.check(pub.payload, pub.meta, pub.frame_id)
                if problem:
                    t.torn += 1
                    t.errors.append(problem)
            info = framebus.stat(name)
            if info.stale or info.creator_alive or name in framebus.gc(dry_run=True):
                t.errors.append(f"stream with readers attached reported stale={info.stale} creator_alive={info.creator_alive}")
            _finish_with_writer(name, shape, t, 3)
            seq = mine.write_sequence
            mine.close()
            readers.finish(t, seq)
            if not wait_until(lambda: framebus.stat(name).stale, BOUND, 0.01):
                t.errors.append("stream not stale after its creator died and everybody left")
            elif name not in framebus.gc(dry_run=True):
                t.errors.append("gc would not remove a stale stream")
            re = framebus.create(name, shape=shape, dtype=np.uint8, slots=4, meta_capacity=64, exist_ok=True)
            if re.write_sequence != 0:
                t.errors.append("create(exist_ok=True) reused a stale stream instead of replacing it")
            re.close()
        except Exception as exc:  # noqa: BLE001 - recorded
            t.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            kill(cp)
            unlink_quietly(name)
    t.seconds = time.monotonic() - t0
    return t


def _race_once(rng_seed: int, kill_it: bool, t: Tally, lock: threading.Lock) -> None:
    rng = random.Random(rng_seed)
    name = unique_name("race")
    shape = rng.choice([(1024, 1024, 4), (512, 1024, 3), (64, 64, 1)])
    slots = rng.choice([2, 4, 8])
    st = _status()
    outcome: Dict[str, Any] = {}
    go = threading.Event()

    def opener() -> None:
        go.set()
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            try:
                s = framebus.open(name)
            except FileNotFoundError:
                if st[ch.PHASE] == ch.CREATED and not cp.is_alive():
                    outcome["result"] = "creator died, segment gone"
                    return
                if kill_it and outcome.get("killed") and not _exists(name):
                    outcome["result"] = "FileNotFoundError after creator died"
                    return
                time.sleep(0.0002)
                continue
            except framebus.StreamNotReadyError:
                outcome["result"] = "StreamNotReadyError"
                return
            except Exception as exc:  # noqa: BLE001 - recorded
                outcome["error"] = f"open: {type(exc).__name__}: {exc}"
                return
            try:
                if s.shape != shape or s.dtype != np.uint8 or s.slots != slots or s.size != int(np.prod(shape)):
                    outcome["error"] = f"half-initialised handle: shape {s.shape} dtype {s.dtype} slots {s.slots}"
                try:
                    pub = s.read_publication()
                except framebus.StreamEmptyError:  # no frame yet
                    pub = None
                if pub is not None:
                    problem = Pattern(shape).check(pub.payload, pub.meta, pub.frame_id)
                    outcome["checked"] = 1
                    if problem:
                        outcome["error"] = problem
                else:
                    try:
                        pub = s.read_new_publication(timeout=0.5 if kill_it else BOUND)
                        problem = Pattern(shape).check(pub.payload, pub.meta, pub.frame_id)
                        outcome["checked"] = 1
                        if problem:
                            outcome["error"] = problem
                    except TimeoutError:
                        if not kill_it:
                            outcome["error"] = "the creator's first frame never arrived"
                outcome["result"] = "opened"
            finally:
                s.close()
            return
        outcome["error"] = "opener found nothing within the bound"

    cp = _start(ch.racing_creator, name, shape, st, slots)
    th = threading.Thread(target=opener, daemon=True)
    th.start()
    go.wait(BOUND)
    try:
        if kill_it:
            wait_until(lambda: st[ch.PHASE] == ch.CREATING, BOUND, 0)
            time.sleep(rng.random() * 0.004)
            phase = st[ch.PHASE]
            kill(cp)
            outcome["killed"] = True
        th.join(BOUND * 2)
        st[ch.STOP] = 1
        cp.join(BOUND)
        if kill_it and _exists(name):
            # A half-made segment of a dead creator is reclaimed by create(exist_ok=True).
            try:
                framebus.create(name, shape=shape, dtype=np.uint8, slots=slots, meta_capacity=64, exist_ok=True).close()
            except Exception as exc:  # noqa: BLE001 - recorded
                outcome["error"] = f"create(exist_ok=True) after a creator died: {type(exc).__name__}: {exc}"
    finally:
        kill(cp)
        unlink_quietly(name)
    with lock:
        if kill_it:
            t.kills += 1
            t.count(t.phases, ch.PHASE_NAMES[phase])
        t.count(t.clear_errors, outcome.get("result", "none"))
        t.frames_checked += outcome.get("checked", 0)
        if "error" in outcome:
            t.errors.append(outcome["error"])


def _exists(name: str) -> bool:
    import os

    return os.path.exists(f"/dev/shm/framebus.{name}")


def attach_while_creating(iters: int, seed: int = 0) -> Tally:
    """Races open() against create() (segments of up to 32 MiB, so fallocate takes a while)
    ``2 * iters`` times, and SIGKILLs the creator while it creates in half of them. An opener gets
    FileNotFoundError, StreamNotReadyError or a complete handle (right shape, dtype, slots;
    zeros or an intact frame), never a half-initialised map; a dead creator's leftover is
    reclaimed by create(exist_ok=True)."""
    t = Tally("attach_while_creating")
    t0 = time.monotonic()
    rng = random.Random(seed)
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(_race_once, rng.randrange(1 << 30), i % 2 == 1, t, lock) for i in range(2 * iters)]
        for f in futures:
            f.result()
    t.seconds = time.monotonic() - t0
    return t


def writer_recreates(iters: int, seed: int = 0) -> Tally:
    """A writer restarts the same name (unlink + create, alternating shapes, a new epoch each
    time) and is SIGKILLed at random points, between unlink and create included, while a
    latest and a lossless follower keep reading. A handle only ever shows frames of one epoch
    with its own shape; re-opening follows to newer epochs; a missing name is a clear
    FileNotFoundError."""
    t = Tally("writer_recreates_name")
    t0 = time.monotonic()
    rng = random.Random(seed)
    name = unique_name("rec")
    shapes = [(120, 160, 3), (96, 128, 3)]
    st = _status()
    p = _start(ch.restarter, name, shapes, st, rng.randrange(1 << 30), 1)
    _progress(st, 1, t, "first writer", p)
    readers = _Readers(name, shapes[1], ["latest", "lossless"], target=ch.follower)
    try:
        for epoch in range(2, iters + 2):
            if rng.random() < 0.3:
                wait_until(lambda: st[ch.COUNT] >= 1 or not p.is_alive(), BOUND)
            else:
                wait_until(lambda: st[ch.COUNT] >= 3 + rng.randrange(10) or not p.is_alive(), BOUND)
            t.count(t.phases, ch.PHASE_NAMES[st[ch.PHASE]])
            kill(p)
            t.kills += 1
            st = _status()
            p = _start(ch.restarter, name, shapes, st, rng.randrange(1 << 30), epoch)
            if rng.random() < 0.25:
                # Kill it between unlink and create: readers must see a clear FileNotFoundError.
                wait_until(lambda: st[ch.PHASE] != ch.IDLE or st[ch.COUNT] > 0, BOUND, 0)
                t.count(t.phases, ch.PHASE_NAMES[st[ch.PHASE]])
                kill(p)
                t.kills += 1
                time.sleep(0.02)
                st = _status()
                p = _start(ch.restarter, name, shapes, st, rng.randrange(1 << 30), epoch)
            if not _progress(st, 1, t, "restarted writer", p):
                break
        wait_until(lambda: st[ch.COUNT] >= 5, BOUND)
        time.sleep(0.3)
    finally:
        kill(p)
        reports = readers.finish(t)
        unlink_quietly(name)
    t.extra["handles"] = sum(r.get("handles", 0) for r in reports)
    t.extra["epochs_followed"] = [len(set(r.get("epochs", []))) for r in reports]
    t.seconds = time.monotonic() - t0
    return t


SCENARIOS: Dict[str, Callable[..., Tally]] = {
    "writer_mid_write": writer_mid_write,
    "lock_holder": lock_holder_killed,
    "lossless_reader_mid_read": lossless_reader_killed,
    "reader_holding_views": view_holder_killed,
    "creator_exit": creator_exits,
    "attach_while_creating": attach_while_creating,
    "writer_recreates_name": writer_recreates,
    "variable_writer_mid_write": reliability_any_shape.variable_writer_mid_write,
}


def run(scenario: str, iters: int, seed: int = 0) -> Tally:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", framebus.LockRecoveredWarning)
        return SCENARIOS[scenario](iters, seed)
