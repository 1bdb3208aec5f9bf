"""Crash scenario of variable-shape streams (issue #15): a writer of frames whose shape, kind
and number of arrays change every frame is SIGKILLed at random points (inside write(), inside a
half-filled loan of several arrays, between frames). Readers check every frame they get against
the frame its id names; after every kill the newest committed frame must still read back whole,
and a new writer must carry on. Children run in the forkserver of ``reliability_helpers``."""

from __future__ import annotations

import random
import time
import warnings
from typing import Any, Dict

import numpy as np

import framebus
from reliability_helpers import Tally, ctx, kill, unique_name, unlink_quietly, wait_until

BOUND = 30.0
COUNT, LAST, PHASE = 0, 1, 2
IDLE, WRITE, LOAN = 0, 1, 2
PHASE_NAMES = {IDLE: "between frames", WRITE: "write", LOAN: "loan"}


def layout(i: int) -> Dict[str, Any]:
    """Shapes of frame ``i``: an image of changing size (up to about 0.7 MB) and 0..6 boxes."""
    return {"image": ((16 + (i * 37) % 400, 24 + (i * 53) % 600, 3), np.uint8), "boxes": ((i % 7, 4), np.float32)}


def fill(i: int, arrays: Dict[str, np.ndarray]) -> None:
    arrays["image"][...] = ((np.arange(arrays["image"].size, dtype=np.uint32) + i) % 251).astype(np.uint8).reshape(arrays["image"].shape)
    arrays["boxes"][...] = (np.arange(arrays["boxes"].size, dtype=np.float32) + i).reshape(arrays["boxes"].shape)


def frame(i: int) -> Any:
    """Frame ``i``: a dict most of the time, a bare array or a byte payload now and then."""
    arrays = {k: np.empty(shape, dtype) for k, (shape, dtype) in layout(i).items()}
    fill(i, arrays)
    if i % 5 == 3:
        return arrays["image"]
    if i % 5 == 4:
        return arrays["boxes"].tobytes()
    return arrays


def matches(value: Any, i: int) -> bool:
    """Whether ``value`` (a read or a view's arrays) is exactly frame ``i``."""
    want = frame(i)
    if isinstance(want, dict):
        return isinstance(value, dict) and list(value) == list(want) and all(
            value[k].shape == want[k].shape and value[k].dtype == want[k].dtype and np.array_equal(value[k], want[k]) for k in want
        )
    if isinstance(want, bytes):
        return bytes(value) == want
    return isinstance(value, np.ndarray) and value.shape == want.shape and np.array_equal(value, want)


def writer(name: str, status: Any, seed: int, first: int) -> None:
    """Writes frames first, first+1, ... (half through write(), half through loans)."""
    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    s = framebus.open(name)
    i = first
    while True:
        if i % 5 in (3, 4) or rng.random() < 0.5:
            status[PHASE] = WRITE
            s.write(frame(i), frame_id=i, timeout=BOUND)
        else:
            status[PHASE] = LOAN
            with s.loan(arrays=layout(i), frame_id=i, timeout=BOUND) as arrays:
                fill(i, arrays)
        status[PHASE] = IDLE
        status[LAST] = i
        status[COUNT] += 1
        i += 1


def reader(name: str, mode: str, stop: Any, q: Any, ready: Any) -> None:
    """Checks every frame it gets (views in latest mode, copies in lossless mode)."""
    warnings.simplefilter("ignore")
    s = framebus.open(name, mode=mode)
    checked = torn = 0
    errors = []
    ready.set()
    while not stop.is_set() or s.write_sequence > s.last_seq:
        try:
            if mode == "latest":
                with s.wait_view(0.1) as f:
                    value = f.arrays if f.names else (f.array if not f.is_bytes else bytes(f.array))
                    ok = matches(value, f.frame_id)
            else:
                pub = s.read_new_publication(timeout=0.1)
                ok = matches(pub.payload, pub.frame_id)
        except TimeoutError:
            if stop.is_set():
                break
            continue
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.append(f"{mode} reader: {type(exc).__name__}: {exc}")
            break
        checked += 1
        torn += not ok
    q.put({"checked": checked, "torn": torn, "errors": errors, "mode": mode})
    s.close()


def variable_writer_mid_write(iters: int, seed: int = 0) -> Tally:
    """SIGKILL a variable-shape writer at random points; the newest committed frame stays
    readable whole after every kill, readers never see a frame that is not the one its id
    names, and the next writer carries on."""
    t = Tally("variable_writer_mid_write")
    t0 = time.monotonic()
    rng = random.Random(seed)
    name = unique_name("vmw")
    c = ctx()
    w = framebus.create(name, capacity="1MiB", slots=4)
    stop, q = c.Event(), c.Queue()
    readers = []
    try:
        for mode in ("latest", "lossless"):
            ready = c.Event()
            p = c.Process(target=reader, args=(name, mode, stop, q, ready), daemon=True)
            p.start()
            readers.append(p)
            if not ready.wait(BOUND):
                t.errors.append("a reader child did not start")
        first = 1
        for _ in range(iters):
            st = c.RawArray("q", 3)
            p = c.Process(target=writer, args=(name, st, rng.randrange(1 << 30), first), daemon=True)
            p.start()
            if not wait_until(lambda: st[COUNT] >= 1 or not p.is_alive(), BOUND) or st[COUNT] < 1:
                t.errors.append(f"writer after a kill made no progress (exit code {p.exitcode})")
                kill(p)
                break
            target = rng.choice([WRITE, LOAN, LOAN, None])
            if target is None:
                time.sleep(rng.random() * 0.002)
            else:
                wait_until(lambda: st[PHASE] == target, 2.0, 0)
                time.sleep(rng.random() * 0.0005)
            phase = st[PHASE]
            kill(p)
            t.kills += 1
            t.count(t.phases, PHASE_NAMES[phase])
            # The previous frame (or the one committed just before the kill) reads back whole.
            pub = w.read_publication()
            if pub.frame_id not in (st[LAST], st[LAST] + 1) or not matches(pub.payload, pub.frame_id):
                t.errors.append(f"after a kill in {PHASE_NAMES[phase]}: the newest frame is id {pub.frame_id} (last committed {st[LAST]}), intact: {matches(pub.payload, pub.frame_id)}")
            t.frames_checked += 1
            first = max(st[LAST], pub.frame_id) + 1
        # A fresh writer commits frames: the stream works after the kills.
        st = c.RawArray("q", 3)
        p = c.Process(target=writer, args=(name, st, 1, first), daemon=True)
        p.start()
        if not wait_until(lambda: st[COUNT] >= 5 or not p.is_alive(), BOUND * 2):
            t.errors.append(f"final writer: {st[COUNT]} frames, exit code {p.exitcode}")
        kill(p)
    finally:
        stop.set()
        for _ in readers:
            try:
                t.add_reader(q.get(timeout=120))
            except Exception:  # noqa: BLE001 - queue.Empty: a reader died or hung
                t.errors.append("a reader child did not report")
        for p in readers:
            p.join(BOUND)
            if p.exitcode not in (0, None):
                t.errors.append(f"reader child exit code {p.exitcode}")
            kill(p)
        w.close()
        unlink_quietly(name)
    t.seconds = time.monotonic() - t0
    return t
