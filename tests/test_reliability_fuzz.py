"""Randomly damaged segments opened from Python (issue 6), each in a child process: never a
crash (the child must exit normally), never a hang (bounded), always success or a clear
framebus/builtin exception. ``FRAMEBUS_FUZZ_CASES`` cases (30 in CI; ``make stress`` runs
thousands). The Rust half (proptest) is crates/framebus/tests/fuzz_header.rs.

Kinds of damage that used to crash, hang or raise the wrong exception (hostile dtype strings, a
garbage published word) also have their own tests below."""

from __future__ import annotations

import os
import random
import struct
from typing import Any, Callable

import numpy as np
import pytest

import framebus
import reliability_corrupt as rc
from reliability_helpers import ctx, seed_for, unique_name, unlink_quietly

BOUND = 60.0


def _fuzz_child(name: str, seed: int, q: Any) -> None:
    import warnings

    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    done = rc.damage(name, rng)
    q.put(("damaged", done))
    q.put(("outcomes", rc.exercise(name, lambda what: q.put(("last", what)))))


def _run_in_child(target: Callable[..., None], *args: Any, bound: float = BOUND) -> tuple:
    c = ctx()
    q = c.SimpleQueue()  # put() writes through at once: messages survive a child killed later
    p = c.Process(target=target, args=(*args, q))
    p.start()
    p.join(bound)
    hung = p.exitcode is None
    if hung:
        p.kill()
        p.join()
    msgs = {}
    while not q.empty():
        k, v = q.get()
        msgs[k] = v
    q.close()
    return p.exitcode, hung, msgs


def _fresh(rng: random.Random) -> str:
    name = unique_name("fz")
    if rng.random() < 0.35:
        # A variable-shape stream (frames with their own table of arrays, fuzzed by "table").
        s = framebus.create(name, capacity=rng.choice([256, 1000, 8192]), slots=rng.randint(2, 5), meta_capacity=rng.choice([0, 16]))
        for i in range(rng.randint(0, 3)):
            value = rng.choice([np.arange(i + 2, dtype=np.float32), {"a": np.ones((2, i), np.int16), "b": b"x" * i}, b"pkt" * i])
            s.write(value, frame_id=i)
        s.close()
        return name
    shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
    dtype = rng.choice([np.uint8, np.float32, np.int64, np.complex64, np.bool_])
    s = framebus.create(name, shape=shape, dtype=dtype, slots=rng.randint(2, 5), meta_capacity=rng.choice([0, 16]), max_readers=rng.randint(2, 6))
    for i in range(rng.randint(0, 3)):
        s.write(np.full(shape, i, dtype), frame_id=i)
    s.close()
    return name


def fuzz_cases(count: int, seed: int) -> dict:
    """Runs ``count`` damaged-segment cases; returns counts and the failures."""
    rng = random.Random(seed)
    result: dict = {"cases": 0, "crashes": 0, "hangs": 0, "unclear": [], "outcomes": {}}
    for _ in range(count):
        name = _fresh(rng)
        try:
            code, hung, msgs = _run_in_child(_fuzz_child, name, rng.randrange(1 << 30))
        finally:
            unlink_quietly(name)
        result["cases"] += 1
        what = msgs.get("damaged")
        if hung:
            result["hangs"] += 1
            result["unclear"].append(f"hang in {msgs.get('last')} after damage {what}")
        elif code != 0:
            result["crashes"] += 1
            result["unclear"].append(f"child exit code {code} after damage {what}")
        for problem in rc.unexpected(msgs.get("outcomes", [])):
            result["unclear"].append(f"{problem} after damage {what}")
        for k, v in rc.summary(msgs.get("outcomes", [])).items():
            result["outcomes"][k] = result["outcomes"].get(k, 0) + v
    return result


@pytest.mark.timeout(600)
def test_random_damage_gives_clear_errors() -> None:
    count = int(os.environ.get("FRAMEBUS_FUZZ_CASES", 30))
    r = fuzz_cases(count, seed_for("pyfuzz"))
    assert r["cases"] == count
    assert r["unclear"] == []
    assert r["crashes"] == 0 and r["hangs"] == 0


# -- damage that used to crash, hang or raise the wrong exception (bugs found by this suite) -------


def _known_child(name: str, patch: str, q: Any) -> None:
    import warnings

    warnings.simplefilter("ignore")
    seg = rc.Segment(name)
    if patch == "object-dtype":
        seg.map[rc.DTYPE_AT:rc.DTYPE_AT + rc.DTYPE_LEN] = b"|O".ljust(rc.DTYPE_LEN, b"\x00")
        seg.fix_checksum()
    elif patch == "wider-dtype":
        seg.map[rc.DTYPE_AT:rc.DTYPE_AT + rc.DTYPE_LEN] = b"<c16".ljust(rc.DTYPE_LEN, b"\x00")  # itemsize stays 8
        seg.fix_checksum()
    elif patch == "garbage-dtype":
        seg.map[rc.DTYPE_AT:rc.DTYPE_AT + rc.DTYPE_LEN] = b"x" * 31 + b"\x00"
        seg.fix_checksum()
    elif patch == "published":
        seg.map[rc.PUBLISHED_AT:rc.PUBLISHED_AT + 8] = struct.pack("<Q", (99 << 8) | 1)
    seg.close()
    q.put(("outcomes", rc.exercise(name)))


@pytest.mark.parametrize(
    "patch",
    [
        pytest.param("object-dtype"),
        pytest.param("wider-dtype"),
        pytest.param("garbage-dtype"),
        pytest.param("published"),
    ],
)
@pytest.mark.timeout(120)
def test_known_crashing_damage(patch: str) -> None:
    shape, dtype = ((1024,), np.float64) if patch == "wider-dtype" else ((4,), np.float64)
    name = unique_name("known")
    s = framebus.create(name, shape=shape, dtype=dtype, slots=2)
    s.write(np.arange(shape[0], dtype=dtype))
    s.write(np.arange(shape[0], dtype=dtype))  # the newest frame sits in the last slot
    s.close()
    try:
        code, hung, msgs = _run_in_child(_known_child, name, patch, bound=10.0)
    finally:
        unlink_quietly(name)
    assert not hung, "a call hung"
    assert code == 0, f"the child process crashed (exit code {code})"
    assert rc.unexpected(msgs.get("outcomes", [])) == []
    # A damaged dtype must be refused at open, not half-used.
    if patch != "published":
        assert any(w.startswith("open") and o != "ok" for w, o in msgs["outcomes"])
