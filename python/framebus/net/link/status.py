"""Status records of running bridges, for ``framebus ls``. No ZeroMQ needed to read them.

Each running bridge keeps one small JSON file in ``/dev/shm/framebus-bridges-<uid>/`` (mode 0700
directory, written atomically by rename about once a second, removed when the bridge stops):
its role, local stream, endpoint, mode, state, peers, counters and rates. Records of processes
that died are ignored and removed by :func:`bridges`.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

#: Directory of this user's records (kept out of /dev/shm/framebus.* so stream listings skip it).
DIR = f"/dev/shm/framebus-bridges-{os.getuid()}"

#: A record not refreshed for this long belongs to a bridge that is stuck (shown as such).
STALE_AFTER_S = 10.0

_serial = itertools.count(1)
_lock = threading.Lock()


def _start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


class StatusFile:
    """The record of one bridge in this process. ``update`` rewrites it; ``remove`` deletes it."""

    def __init__(self, role: str) -> None:
        with _lock:
            serial = next(_serial)
        self.path = os.path.join(DIR, f"{role}.{os.getpid()}.{serial}.json")
        self._base = {"role": role, "pid": os.getpid(), "pid_start": _start_time(os.getpid())}
        self._failed = False

    def update(self, fields: Dict[str, Any]) -> None:
        """Writes the record (best effort: a full or read-only /dev/shm only disables it)."""
        if self._failed:
            return
        record = dict(self._base, **fields, updated=time.time())
        tmp = self.path + ".tmp"
        try:
            os.makedirs(DIR, mode=0o700, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self.path)
        except OSError:
            self._failed = True

    def remove(self) -> None:
        """Deletes the record (idempotent), and the records folder once it is empty, so that
        nothing of framebus stays in /dev/shm after the last bridge ends."""
        for p in (self.path, self.path + ".tmp"):
            try:
                os.unlink(p)
            except OSError:
                pass
        try:
            os.rmdir(DIR)
        except OSError:  # not empty (other bridges run) or already gone
            pass


def bridges() -> List[Dict[str, Any]]:
    """Records of this user's running bridges, sorted by stream then role. Each is a dict with
    role ("publish"/"subscribe"), stream, endpoint, mode, state, peers, frames, bytes, dropped,
    fps, bytes_per_s, pid, updated, and ``stale`` (True when not refreshed lately). Records of
    dead processes are deleted, not returned."""
    try:
        names = os.listdir(DIR)
    except OSError:
        return []
    out = []
    now = time.time()
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(DIR, name)
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        pid = rec.get("pid")
        if not isinstance(pid, int) or _start_time(pid) is None or _start_time(pid) != rec.get("pid_start"):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        rec["stale"] = now - float(rec.get("updated", 0)) > STALE_AFTER_S
        out.append(rec)
    if not out:
        try:
            os.rmdir(DIR)
        except OSError:
            pass
    out.sort(key=lambda r: (str(r.get("stream")), str(r.get("role")), r.get("pid", 0)))
    return out


def summary(rec: Dict[str, Any]) -> str:
    """One line for ``framebus ls``: direction, endpoint, state and rates."""
    arrow = "->" if rec.get("role") == "publish" else "<-"
    parts = [f"{arrow} {rec.get('endpoint')}", str(rec.get("state"))]
    if rec.get("role") == "publish":
        parts.append(f"{rec.get('peers', 0)} sub")
    parts.append(f"{rec.get('fps', 0.0):.1f} fps")
    parts.append(f"{rec.get('bytes_per_s', 0.0) / 1e6:.1f} MB/s")
    if rec.get("dropped"):
        parts.append(f"{rec['dropped']} dropped")
    video = rec.get("video")
    if isinstance(video, dict):  # an encoded bridge: what encodes, the rate on the wire, the GOP
        bits = f"{rec.get('bytes_per_s', 0.0) * 8 / 1e6:.2f} Mbit/s"
        if rec.get("role") == "publish":
            parts.append(f"{video.get('encoder')} {bits}, keyframe every {video.get('gop')}")
        else:
            parts.append(f"{video.get('codec')} {bits} decoded, {video.get('skipped', 0)} skipped")
    if rec.get("stale"):
        parts.append("not updating")
    return " ".join(parts[:1]) + " (" + ", ".join(parts[1:]) + ")"


def by_stream() -> Dict[str, List[str]]:
    """Stream name -> summaries of the bridges attached to it (the hook ``framebus ls`` uses)."""
    out: Dict[str, List[str]] = {}
    for rec in bridges():
        out.setdefault(str(rec.get("stream")), []).append(summary(rec))
    return out
