"""Shared pieces of the reliability suites (tests/test_reliability_*.py and scripts/stress.py):
checksummed frames, unique names, child processes, and process/segment bookkeeping.

Frames are ``uint8`` arrays whose every 8-byte word is derived from (frame_id, epoch): word i
is ``i * GOLDEN ^ key(frame_id, epoch)``. A frame mixed from two writes, shifted, stale or
zeroed fails the check. The metadata carries (frame_id, epoch, crc32 of the payload), checked
too. Sizes must be multiples of 8 bytes.

Suite lengths come from the environment so that CI runs short and ``make stress`` runs long:
``FRAMEBUS_STRESS_ITER`` (iterations of each crash scenario, default 10),
``FRAMEBUS_SOAK_SECONDS`` (default 30).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import struct
import time
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import framebus

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
META = struct.Struct("<qQI")  # frame_id, epoch, crc32
SHM = "/dev/shm"
PREFIX = "framebus."

_ids = itertools.count()


def iterations(default: int = 10) -> int:
    """Iterations of each crash scenario (FRAMEBUS_STRESS_ITER)."""
    return int(os.environ.get("FRAMEBUS_STRESS_ITER", default))


def soak_seconds(default: float = 30.0) -> float:
    """Length of the soak (FRAMEBUS_SOAK_SECONDS)."""
    return float(os.environ.get("FRAMEBUS_SOAK_SECONDS", default))


def seed_for(what: str) -> int:
    """Random seed of a scenario: FRAMEBUS_STRESS_SEED (printed by the suites, to replay a run)
    mixed with the scenario's name; a fresh one per run when unset."""
    base = os.environ.get("FRAMEBUS_STRESS_SEED")
    if base is None:
        base = os.environ["FRAMEBUS_STRESS_SEED"] = str(int.from_bytes(os.urandom(4), "little"))
    return (int(base) * 1000003 + zlib.crc32(what.encode())) & 0xFFFFFFFF


def unique_name(tag: str) -> str:
    """A stream name no other test, process or run uses."""
    return f"rel-{tag}-{os.getpid()}-{next(_ids)}-{os.urandom(3).hex()}"


def unlink_quietly(name: str) -> None:
    try:
        framebus.unlink(name)
    except FileNotFoundError:
        pass


# -- checksummed frames ------------------------------------------------------------------------


def key(frame_id: int, epoch: int = 0) -> np.uint64:
    """Per-frame key (splitmix64 of frame id and epoch)."""
    z = (frame_id * 0x9E3779B97F4A7C15 + (epoch << 40) + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return np.uint64(z ^ (z >> 31))


class Pattern:
    """Makes and checks checksummed frames of one shape (uint8, size a multiple of 8)."""

    def __init__(self, shape: tuple) -> None:
        self.shape = tuple(shape)
        nbytes = int(np.prod(self.shape))
        if nbytes % 8:
            raise ValueError(f"frame size {nbytes} is not a multiple of 8")
        self.base = np.arange(nbytes // 8, dtype=np.uint64) * GOLDEN
        self.scratch = np.empty_like(self.base)

    def frame(self, frame_id: int, epoch: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The frame's payload (into ``out``, a uint8 array of the shape, if given)."""
        if out is None:
            out = np.empty(self.shape, np.uint8)
        np.bitwise_xor(self.base, key(frame_id, epoch), out=out.reshape(-1).view(np.uint64))
        return out

    @staticmethod
    def meta(payload: np.ndarray, frame_id: int, epoch: int = 0) -> bytes:
        return META.pack(frame_id, epoch, zlib.crc32(payload.reshape(-1)))

    def check(self, payload: np.ndarray, meta: bytes, frame_id: Optional[int] = None, crc: bool = True) -> Optional[str]:
        """None if ``payload``/``meta`` are one intact frame (of ``frame_id`` if given), else
        what is wrong."""
        if len(meta) != META.size:
            return f"metadata of {len(meta)} bytes"
        fid, epoch, want = META.unpack(meta)
        if frame_id is not None and fid != frame_id:
            return f"metadata says frame {fid}, slot says {frame_id}"
        flat = np.ascontiguousarray(payload).reshape(-1).view(np.uint64)
        if flat.shape != self.base.shape:
            return f"payload of {flat.size * 8} bytes"
        np.bitwise_xor(flat, key(fid, epoch), out=self.scratch)
        if not np.array_equal(self.scratch, self.base):
            bad = int(np.argmax(self.scratch != self.base))
            return f"frame {fid} epoch {epoch}: word {bad} of {flat.size} does not match (torn or stale)"
        if crc and zlib.crc32(flat) != want:
            return f"frame {fid}: crc32 mismatch"
        return None

    def epoch_of(self, meta: bytes) -> int:
        return META.unpack(meta)[1]


# -- processes -----------------------------------------------------------------------------------

_CTX: Optional[Any] = None


def ctx() -> Any:
    """A forkserver context whose server has numpy, framebus and these modules loaded, so each
    child starts in milliseconds and inherits no stream handle."""
    global _CTX
    if _CTX is None:
        c = mp.get_context("forkserver")
        c.set_forkserver_preload(["numpy", "framebus", "reliability_helpers", "reliability_children", "reliability_soak", "reliability_any_shape"])
        p = c.Process(target=_nothing)  # start the server now, so that its descriptors are in any baseline
        p.start()
        p.join()
        p.close()
        _CTX = c
    return _CTX


def _nothing() -> None:
    pass


def wait_until(cond: Callable[[], bool], timeout: float, interval: float = 0.001) -> bool:
    """Polls ``cond`` until true or ``timeout`` (a generous bound, never a measurement)."""
    end = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(interval)


def kill(proc: Any) -> None:
    """SIGKILL a child and reap it."""
    if proc.is_alive():
        proc.kill()
    proc.join(30)


def shm_entries() -> set:
    """framebus segments currently in /dev/shm."""
    try:
        return {n for n in os.listdir(SHM) if n.startswith(PREFIX)}
    except FileNotFoundError:
        return set()


def fd_count(pid: Optional[int] = None) -> int:
    """Open file descriptors of a process, not counting multiprocessing's shared heap arenas
    (``/dev/shm/pym-*``, kept for reuse by RawArray; they are not framebus's)."""
    fds = f"/proc/{pid or os.getpid()}/fd"
    n = 0
    for fd in os.listdir(fds):
        try:
            if "/pym-" in os.readlink(f"{fds}/{fd}"):
                continue
        except OSError:
            continue
        n += 1
    return n


def rss_kb(pid: Optional[int] = None) -> int:
    """VmRSS of a process in KiB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


# -- results ---------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one scenario observed. ``errors`` are unexpected exceptions or broken promises."""

    scenario: str
    kills: int = 0
    frames_checked: int = 0
    torn: int = 0
    lost: int = 0
    recoveries: int = 0
    clear_errors: Dict[str, int] = field(default_factory=dict)
    phases: Dict[str, int] = field(default_factory=dict)
    errors: List[str] = field(default_factory=list)
    seconds: float = 0.0
    extra: Dict[str, Any] = field(default_factory=dict)

    def add_reader(self, r: Dict[str, Any]) -> None:
        """Merges a reader child's report."""
        self.frames_checked += r.get("checked", 0)
        self.torn += r.get("torn", 0)
        self.lost += r.get("lost", 0)
        self.errors.extend(r.get("errors", []))
        for k, v in r.get("clear_errors", {}).items():
            self.clear_errors[k] = self.clear_errors.get(k, 0) + v

    def count(self, table: Dict[str, int], key_: str) -> None:
        table[key_] = table.get(key_, 0) + 1

    def ok(self) -> bool:
        return self.torn == 0 and self.lost == 0 and not self.errors

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"{self.scenario}: kills={self.kills} checked={self.frames_checked} torn={self.torn} lost={self.lost} "
            f"recoveries={self.recoveries} phases={self.phases} clear_errors={self.clear_errors} errors={self.errors[:5]}"
        )
