"""Damaging real segments from Python (the Python half of the fuzz suite; the Rust half is
crates/framebus/tests/fuzz_header.rs). Offsets follow docs/layout.md; ``fix_checksum`` recomputes
the header's FNV-1a so that the checks behind it see the damaged value."""

from __future__ import annotations

import mmap
import os
import random
import struct
from typing import Any, Dict, List, Tuple

import numpy as np

HEADER = 448
CHECKSUM_AT = 224
READY_AT = 12
ITEMSIZE_AT = 160
DTYPE_AT, DTYPE_LEN = 168, 32
PUBLISHED_AT = 256
READY = 0x52454459


def path(name: str) -> str:
    return f"/dev/shm/framebus.{name}"


def fnv(image: bytes) -> int:
    h = 0xCBF29CE484222325
    for i, b in enumerate(image[:CHECKSUM_AT]):
        if READY_AT <= i < READY_AT + 4:
            b = 0
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class Segment:
    """The file of a stream, mapped read-write for damaging."""

    def __init__(self, name: str) -> None:
        fd = os.open(path(name), os.O_RDWR)
        try:
            self.size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)

    def u32(self, at: int) -> int:
        return struct.unpack_from("<I", self.map, at)[0]

    def u64(self, at: int) -> int:
        return struct.unpack_from("<Q", self.map, at)[0]

    def fix_checksum(self) -> None:
        self.map[CHECKSUM_AT:CHECKSUM_AT + 8] = struct.pack("<Q", fnv(bytes(self.map[:CHECKSUM_AT])))

    def close(self) -> None:
        self.map.close()


INTERESTING = [0, 1, 2, 8, 64, 65, 4096, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF, 1 << 40]
DTYPES = [b"|u1", b"<f4", b"<i8", b"|b1", b">f4", b"<u2", b"", b"\xff\xfe", b"x" * 31, b"y" * 32, b"<f4\x00junk", b"float32", b"|u1,|u1", b"\x00abc", b"\xe9\x00", b"|O", b"<c16", b"<U4"]


def damage(name: str, rng: random.Random) -> List[str]:
    """Applies 1 to 3 random kinds of damage; returns what was done (for messages)."""
    done = []
    seg = Segment(name)
    try:
        max_readers, slots = seg.u32(68), seg.u32(64)
        readers_at, slots_at = seg.u64(200), seg.u64(208)
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["byte", "field", "field", "dtype", "ready", "control", "reader", "slot-record", "resize", "table", "table"])
            if kind == "byte":
                at = rng.randrange(HEADER)
                if PUBLISHED_AT <= at < PUBLISHED_AT + 8:
                    continue  # the published word is a known bug
                seg.map[at] = rng.randrange(256)
                kind = f"byte@{at}"
            elif kind == "field":
                width = rng.choice([1, 4, 8])
                at = rng.randrange(0, CHECKSUM_AT - width + 1) & ~(width - 1)
                value = rng.choice(INTERESTING + [rng.getrandbits(64)]) & ((1 << (8 * width)) - 1)
                seg.map[at:at + width] = value.to_bytes(width, "little")
                seg.fix_checksum()
                kind = f"field@{at}/{width}={value:#x}"
            elif kind == "dtype":
                text = rng.choice(DTYPES)
                seg.map[DTYPE_AT:DTYPE_AT + DTYPE_LEN] = text[:DTYPE_LEN].ljust(DTYPE_LEN, b"\x00")
                seg.fix_checksum()
            elif kind == "ready":
                value = rng.choice([1, 0xFFFFFFFF, READY ^ 1, rng.getrandbits(32) | 1])
                seg.map[READY_AT:READY_AT + 4] = struct.pack("<I", value if value != READY else 1)
            elif kind == "control":
                at = rng.randrange(264, HEADER)  # published (256..264) is a known bug
                n = rng.randint(1, 16)
                seg.map[at:min(HEADER, at + n)] = os.urandom(min(HEADER, at + n) - at)
            elif kind == "reader":
                if not max_readers or readers_at + 64 * max_readers > seg.size:
                    continue
                at = readers_at + 64 * rng.randrange(max_readers) + rng.randrange(64)
                n = rng.randint(1, 24)
                end = min(at + n, readers_at + 64 * max_readers)
                seg.map[at:end] = os.urandom(end - at)
            elif kind == "slot-record":
                if not slots or slots_at + 192 * slots > seg.size:
                    continue
                slot_at = slots_at + 192 * rng.randrange(slots)
                at = slot_at + rng.randrange(8, 192)  # the state word (offset 0) is a known bug
                end = min(at + rng.randint(1, 24), slot_at + 192)
                seg.map[at:end] = os.urandom(end - at)
            elif kind == "table":
                # The start of a slot's payload: a variable-shape stream's frame table (count,
                # end, codec, entries: names, dtypes, ndim, flags, offsets, sizes, shapes).
                payload_at, stride = seg.u64(216), seg.u64(80)
                if not slots or not stride or payload_at + stride * slots > seg.size:
                    continue
                newest = seg.u64(PUBLISHED_AT) & 0xFF
                slot = newest if newest < slots and rng.random() < 0.7 else rng.randrange(slots)
                at = payload_at + stride * slot + rng.choice([rng.randrange(128), 128 + rng.randrange(256), rng.randrange(4096)])
                if rng.random() < 0.5:
                    width = rng.choice([4, 8])
                    at &= ~(width - 1)
                    value = rng.choice(INTERESTING + [rng.getrandbits(64)]) & ((1 << (8 * width)) - 1)
                    seg.map[at:at + width] = value.to_bytes(width, "little")
                    kind = f"table@{at - payload_at}/{width}={value:#x}"
                else:
                    n = rng.randint(1, 8)
                    seg.map[at:at + n] = os.urandom(n)
                    kind = f"table-bytes@{at - payload_at}"
            elif kind == "resize":
                done.append(kind)
                seg.close()
                with open(path(name), "r+b") as f:
                    f.truncate(max(HEADER, seg.size + rng.choice([-4096, -1, 1, 4096, 1 << 20])))
                return done
            done.append(kind)
    finally:
        if not seg.map.closed:
            seg.close()
    return done


#: Exceptions a damaged segment may raise: framebus's own and the builtin families they subclass.
ALLOWED = ("FramebusError", "ValueError", "TimeoutError", "RuntimeError", "OSError")


def exercise(name: str, starting: Any = None) -> List[Tuple[str, str]]:
    """Every public read/write/inspect call on a (damaged) stream; returns (call, outcome).
    ``starting(call)`` is told each call before it runs (to name the one that hangs)."""
    import framebus

    out: List[Tuple[str, str]] = []

    def attempt(what: str, fn: Any) -> Any:
        if starting is not None:
            starting(what)
        try:
            r = fn()
            out.append((what, "ok"))
            return r
        except Exception as exc:  # noqa: BLE001 - classified by the caller
            out.append((what, f"{'|'.join(c.__name__ for c in type(exc).__mro__)}: {exc}"))
            return None

    attempt("stat", lambda: framebus.stat(name))
    attempt("list_streams", lambda: [i for i in [s.name for s in framebus.list_streams()] if i == name])
    attempt("gc-dry", lambda: framebus.gc(dry_run=True))
    for mode in ("latest", "lossless"):
        s = attempt(f"open-{mode}", lambda: framebus.open(name, mode=mode))
        if s is None:
            continue
        attempt("read", lambda: _total(s.read()))
        attempt("read_publication", lambda: s.read_publication().meta)
        attempt("read_new", lambda: s.read_new(timeout=0))
        attempt("view", lambda: _total(s.view(timeout=0).arrays))
        attempt("wait_view", lambda: s.wait_view(0).meta)
        if s.variable:
            attempt("write", lambda: s.write({"a": np.zeros(3), "b": b"xy"}, timeout=0.02))
            attempt("loan", lambda: s.loan(0.02, nbytes=4).abort())
        else:
            attempt("write", lambda: s.write(np.zeros(s.shape, s.dtype), timeout=0.02))
            attempt("loan", lambda: s.loan(0.02).abort())
        attempt("acquire", lambda: (s.acquire(0.02), s.release()))
        attempt("properties", lambda: (s.write_sequence, s.write_time, s.frame_id, s.attached, s.lock_owner, repr(s)))
        attempt("close", s.close)
    return out


def _total(value: Any) -> float:
    """Sum of every element of a read (an array, a dict of arrays, bytes or None)."""
    if value is None:
        return 0.0
    if isinstance(value, dict):
        return sum(_total(v) for v in value.values())
    if isinstance(value, bytes):
        return float(sum(value))
    return float(np.asarray(value, dtype=np.complex128).real.sum())


def unexpected(outcomes: List[Tuple[str, str]]) -> List[str]:
    """Outcomes that are neither success nor one of the allowed clear exceptions."""
    bad = []
    for what, outcome in outcomes:
        if outcome == "ok":
            continue
        mro, _, msg = outcome.partition(": ")
        if not any(a in mro.split("|") for a in ALLOWED) or not msg.strip():
            bad.append(f"{what}: {outcome}")
    return bad


def summary(outcomes: List[Tuple[str, str]]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for what, outcome in outcomes:
        k = f"{what}: {'ok' if outcome == 'ok' else outcome.split('|')[0]}"
        counts[k] = counts.get(k, 0) + 1
    return counts
