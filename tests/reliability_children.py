"""Child-process bodies of the crash matrix (run through the forkserver of
``reliability_helpers.ctx()``). Children share small ``RawArray('q')`` status blocks with the
driver, so what a child did is known even after it was SIGKILLed:

``[PHASE, COUNT, LAST_FID, RECOVERED, STOP, CHECKED, TORN, LOST]``.
"""

from __future__ import annotations

import random
import time
import warnings
from typing import Any, Dict, Optional

import numpy as np

import framebus
from reliability_helpers import Pattern

# status slots
PHASE, COUNT, LAST_FID, RECOVERED, STOP, CHECKED, TORN, LOST = range(8)
STATUS_WORDS = 8

# phases
IDLE, WRITE, LOAN, LOCK, READ, VIEWS, UNLINKED, CREATING, CREATED, WAITING = range(10)
PHASE_NAMES = ["idle", "write", "loan", "lock", "read", "views", "unlinked", "creating", "created", "waiting"]


def _count_recoveries(status: Any) -> None:
    """Counts LockRecoveredWarning in ``status[RECOVERED]`` instead of printing it."""
    warnings.resetwarnings()

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if issubclass(category, framebus.LockRecoveredWarning):
            status[RECOVERED] += 1

    warnings.simplefilter("always")
    warnings.showwarning = show  # type: ignore[assignment]


def _note(rep: Dict[str, Any], problem: Optional[str]) -> None:
    if problem is not None:
        rep["torn"] += 1
        if len(rep["errors"]) < 20:
            rep["errors"].append(problem)


def _clear(rep: Dict[str, Any], exc: BaseException) -> None:
    k = type(exc).__name__
    rep["clear_errors"][k] = rep["clear_errors"].get(k, 0) + 1


def writer(name: str, shape: tuple, status: Any, seed: int, epoch: int = 0, loan_share: float = 0.35,
           lock_share: float = 0.2, chunk: int = 65536, max_frames: int = 0, timeout: float = 60.0) -> None:
    """Writes checksummed frames continuously (write(), chunked loans, writes inside a held
    lock), continuing the stream's frame ids, until ``status[STOP]`` or ``max_frames``."""
    _count_recoveries(status)
    rng = random.Random(seed)
    s = framebus.open(name)
    pat = Pattern(shape)
    buf = np.empty(shape, np.uint8)
    src = buf.reshape(-1)
    fid = s.frame_id + 1 if s.write_sequence else 1
    done = 0
    while not status[STOP] and (max_frames == 0 or done < max_frames):
        pat.frame(fid, epoch, out=buf)
        meta = pat.meta(buf, fid, epoch)
        r = rng.random()
        if r < loan_share:
            loan = s.loan(timeout, frame_id=fid, meta=meta)
            status[PHASE] = LOAN
            dst = loan.array.reshape(-1)
            for off in range(0, src.size, chunk):
                dst[off:off + chunk] = src[off:off + chunk]
            del dst
            loan.commit()
        elif r < loan_share + lock_share:
            s.acquire(timeout)
            status[PHASE] = LOCK
            s.write(buf, frame_id=fid, meta=meta, timeout=timeout)
            time.sleep(rng.random() * 0.002)
            s.release()
        else:
            status[PHASE] = WRITE
            s.write(buf, frame_id=fid, meta=meta, timeout=timeout)
        status[PHASE] = IDLE
        status[LAST_FID] = fid
        status[COUNT] += 1
        done += 1
        fid += 1
    s.close()


def lock_holder(name: str, status: Any, seed: int, forever: bool) -> None:
    """Takes the write lock (sometimes re-entrantly) and holds it for random times, or forever."""
    _count_recoveries(status)
    rng = random.Random(seed)
    s = framebus.open(name)
    while True:
        depth = rng.choice([1, 1, 2, 3])
        for _ in range(depth):
            s.acquire(60)
        status[PHASE] = LOCK
        status[COUNT] += 1
        if forever:
            time.sleep(3600)
        time.sleep(rng.random() * 0.004)
        status[PHASE] = IDLE
        for _ in range(depth):
            s.release()
        time.sleep(rng.random() * 0.001)


def lock_waiter(name: str, shape: tuple, status: Any, q: Any, epoch: int = 0) -> None:
    """Blocks in acquire() (the holder may die meanwhile), then writes one checksummed frame."""
    _count_recoveries(status)
    s = framebus.open(name)
    pat = Pattern(shape)
    status[PHASE] = WAITING
    try:
        s.acquire(60)
        fid = s.frame_id + 1
        buf = pat.frame(fid, epoch)
        s.write(buf, frame_id=fid, meta=pat.meta(buf, fid, epoch), timeout=60)
        s.release()
        q.put(("ok", int(status[RECOVERED])))
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        q.put(("error", f"{type(exc).__name__}: {exc}"))
    s.close()


def reader(name: str, mode: str, shape: tuple, stop: Any, q: Any, ready: Any, views: bool = True,
           check_ids: bool = True) -> None:
    """Reads every new frame (copies and zero-copy views alternately) and checks it until
    ``stop`` is set and no frame came for 0.2 s; reports counts through ``q``."""
    warnings.simplefilter("ignore")
    rep: Dict[str, Any] = {"mode": mode, "checked": 0, "torn": 0, "lost": 0, "errors": [], "clear_errors": {}, "last_seq": 0}
    pat = Pattern(shape)
    s = framebus.open(name, mode=mode)
    last_seq = s.last_seq
    last_fid: Optional[int] = None
    ready.set()
    i = 0
    while True:
        try:
            if views and i % 2:
                with s.wait_view(0.2) as f:
                    seq, fid = f.seq, f.frame_id
                    problem = pat.check(f.array, f.meta, fid)
            else:
                pub = s.read_new_publication(timeout=0.2)
                seq, fid = pub.seq, pub.frame_id
                problem = pat.check(pub.payload, pub.meta, fid)
        except (TimeoutError, framebus.StreamEndedError):
            # Ended: a writer closed (its creator exiting cleanly); the next writer's first
            # frame starts the stream again, so it is no frame for now.
            if stop.is_set():
                break
            time.sleep(0.005)
            continue
        except Exception as exc:  # noqa: BLE001 - reported to the driver
            rep["errors"].append(f"{type(exc).__name__}: {exc}")
            break
        i += 1
        rep["checked"] += 1
        _note(rep, problem)
        if mode == "lossless":
            if seq != last_seq + 1:
                rep["lost"] += max(0, seq - last_seq - 1)
                if len(rep["errors"]) < 20:
                    rep["errors"].append(f"lossless reader: sequence {last_seq} then {seq}")
            if check_ids and last_fid is not None and fid != last_fid + 1 and len(rep["errors"]) < 20:
                rep["errors"].append(f"lossless reader: frame id {last_fid} then {fid}")
        last_seq, last_fid = seq, fid
    rep["last_seq"] = last_seq
    s.close()
    q.put(rep)


def victim_reader(name: str, mode: str, shape: tuple, status: Any, seed: int) -> None:
    """A reader to be killed mid-read: mixes read_new, read_new(out=), wait_view and
    read_into, sometimes lagging; keeps its counts in ``status`` (they survive SIGKILL)."""
    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    pat = Pattern(shape)
    s = framebus.open(name, mode=mode)
    out = np.empty(shape, np.uint8)
    last_seq = s.last_seq
    while True:
        status[PHASE] = READ
        k = rng.random()
        try:
            if k < 0.3:
                pub = s.read_new_publication(timeout=1)
                seq, problem = pub.seq, pat.check(pub.payload, pub.meta, pub.frame_id)
            elif k < 0.55:
                pub = s.read_new_publication(timeout=1, out=out)
                seq, problem = pub.seq, pat.check(out, pub.meta, pub.frame_id)
            elif k < 0.85:
                with s.wait_view(1) as f:
                    seq, problem = f.seq, pat.check(f.array, f.meta, f.frame_id)
            else:
                pub = s.read_publication(out=out)
                seq, problem = last_seq, pat.check(out, pub.meta, pub.frame_id) if pub.seq else None
        except TimeoutError:
            continue
        except framebus.StreamEndedError:  # a writer closed; the next one starts the stream again
            time.sleep(0.005)
            continue
        if mode == "lossless" and k < 0.85 and seq != last_seq + 1:
            status[LOST] += max(0, seq - last_seq - 1)
        last_seq = seq
        status[CHECKED] += 1
        if problem is not None:
            status[TORN] += 1
        status[COUNT] += 1
        status[PHASE] = IDLE
        if rng.random() < 0.1:
            time.sleep(rng.random() * 0.005)


def view_holder(name: str, mode: str, shape: tuple, status: Any, seed: int, views: int) -> None:
    """Pins ``views`` frames with zero-copy views, checks them, then waits to be killed."""
    warnings.simplefilter("ignore")
    pat = Pattern(shape)
    s = framebus.open(name, mode=mode)
    held = []
    for _ in range(views):
        f = s.wait_view(30)
        arr = f.array
        if pat.check(arr, f.meta, f.frame_id) is not None:
            status[TORN] += 1
        status[CHECKED] += 1
        held.append((f, arr))
    status[PHASE] = VIEWS
    status[COUNT] += 1
    # Re-check the held views while waiting: a pinned frame must never change.
    while True:
        for f, arr in held:
            if pat.check(arr, f.meta, f.frame_id) is not None:
                status[TORN] += 1
            status[CHECKED] += 1
        time.sleep(0.001)


def creator(name: str, shape: tuple, status: Any, seed: int, slots: int, exit_after: int, epoch: int = 0) -> None:
    """Creates a stream, writes checksummed frames, and exits without unlinking after
    ``exit_after`` frames (0: writes until killed)."""
    _count_recoveries(status)
    status[PHASE] = CREATING
    s = framebus.create(name, shape=shape, dtype=np.uint8, slots=slots, meta_capacity=64)
    status[PHASE] = CREATED
    pat = Pattern(shape)
    buf = np.empty(shape, np.uint8)
    fid = 1
    while exit_after == 0 or fid <= exit_after:
        pat.frame(fid, epoch, out=buf)
        status[PHASE] = WRITE
        s.write(buf, frame_id=fid, meta=pat.meta(buf, fid, epoch), timeout=60)
        status[PHASE] = IDLE
        status[COUNT] += 1
        status[LAST_FID] = fid
        fid += 1
    s.close()


def racing_creator(name: str, shape: tuple, status: Any, slots: int) -> None:
    """Creates a (large) stream as soon as told, writes frame 1, and waits for STOP."""
    warnings.simplefilter("ignore")
    status[PHASE] = CREATING
    s = framebus.create(name, shape=shape, dtype=np.uint8, slots=slots, meta_capacity=64)
    status[PHASE] = CREATED
    pat = Pattern(shape)
    buf = pat.frame(1)
    s.write(buf, frame_id=1, meta=pat.meta(buf, 1))
    status[COUNT] = 1
    while not status[STOP]:
        time.sleep(0.001)
    s.close()


def restarter(name: str, shapes: list, status: Any, seed: int, epoch: int) -> None:
    """A writer restarting a stream: unlinks the name, creates it anew (shape by epoch) and
    writes checksummed frames of ``epoch`` until killed."""
    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    shape = tuple(shapes[epoch % len(shapes)])
    try:
        framebus.unlink(name)
    except FileNotFoundError:
        pass
    status[PHASE] = UNLINKED
    time.sleep(rng.random() * 0.003)
    s = framebus.create(name, shape=shape, dtype=np.uint8, slots=4, meta_capacity=64)
    status[PHASE] = CREATED
    pat = Pattern(shape)
    buf = np.empty(shape, np.uint8)
    fid = 1
    while True:
        pat.frame(fid, epoch, out=buf)
        status[PHASE] = WRITE
        s.write(buf, frame_id=fid, meta=pat.meta(buf, fid, epoch), timeout=60)
        status[PHASE] = IDLE
        status[COUNT] += 1
        fid += 1
        time.sleep(rng.random() * 0.001)


def follower(name: str, mode: str, stop: Any, q: Any, ready: Any) -> None:
    """Follows a stream that is re-created under the same name: keeps a handle while frames
    come, reopens after 0.1 s without one or when told the stream was replaced. Every frame through one handle must belong to one
    epoch (the handle's segment) and have the handle's shape; epochs never go back."""
    warnings.simplefilter("ignore")
    rep: Dict[str, Any] = {"mode": mode, "checked": 0, "torn": 0, "lost": 0, "errors": [], "clear_errors": {},
                           "handles": 0, "epochs": []}
    s = None
    pat: Optional[Pattern] = None
    epoch: Optional[int] = None
    newest_epoch = -1
    last_seq = 0
    ready.set()
    while not stop.is_set():
        if s is None:
            try:
                s = framebus.open(name, mode=mode)
            except (FileNotFoundError, framebus.StreamNotReadyError) as exc:
                _clear(rep, exc)
                time.sleep(0.001)
                continue
            rep["handles"] += 1
            pat, epoch, last_seq = Pattern(s.shape), None, s.last_seq
        try:
            if rep["checked"] % 2:
                with s.wait_view(0.1) as f:
                    seq, meta, problem = f.seq, f.meta, pat.check(f.array, f.meta, f.frame_id)
            else:
                pub = s.read_new_publication(timeout=0.1)
                seq, meta, problem = pub.seq, pub.meta, pat.check(pub.payload, pub.meta, pub.frame_id)
        except (TimeoutError, framebus.StreamEndedError, framebus.StreamReplacedError) as exc:
            # Ended: its writer closed. Replaced: a restarted writer made the stream anew (or
            # the name is gone and its writer with it): follow it.
            if isinstance(exc, framebus.StreamReplacedError):
                _clear(rep, exc)
            s.close()
            s = None
            continue
        rep["checked"] += 1
        _note(rep, problem)
        e = pat.epoch_of(meta) if problem is None else None
        if e is not None:
            if epoch is None:
                if e < newest_epoch:
                    rep["errors"].append(f"handle {rep['handles']} shows epoch {e} after epoch {newest_epoch}")
                epoch = e
                newest_epoch = max(newest_epoch, e)
                rep["epochs"].append(e)
            elif e != epoch:
                rep["errors"].append(f"one handle showed epochs {epoch} and {e}: a stale frame from another stream")
        if mode == "lossless" and epoch is not None and seq != last_seq + 1:
            rep["lost"] += max(0, seq - last_seq - 1)
        last_seq = seq
    if s is not None:
        s.close()
    q.put(rep)
