"""Rates and lags of streams for monitors (``framebus top``, ``framebus hz``, scripts): two
snapshots of the counters the ring keeps (``framebus._native.stream_stats``, read without
attaching), and the differences between them. Looking costs the monitored processes nothing."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Optional

from . import _native
from .info import StreamInfo, list_streams, stat

__all__ = ["snapshot", "measure", "document", "readers", "downloads", "WRITING_ROLES", "MONITOR_ROLES"]

#: Roles of handles that write the stream rather than read it: ``create()`` tags its handle
#: "writer" (and the core tags a handle "writer" at its first write), a bridge subscriber
#: "bridge in" and ``framebus play`` "play". They consume nothing, so they have no lag.
WRITING_ROLES = frozenset({"writer", "bridge in", "play"})

#: Roles of handles that only look at a stream: ``framebus hz`` and ``framebus echo`` tag their
#: handle "monitor" (``top``, ``ls`` and ``framebus.stat`` do not attach at all). A monitor
#: follows the writer without consuming frames in order, so it has no lag either.
MONITOR_ROLES = frozenset({"monitor"})


def snapshot(name: str) -> Dict[str, Any]:
    """The counters of stream ``name`` now (see ``framebus.stat`` for the fields).
    Raises StreamNotFoundError (FileNotFoundError) if it does not exist."""
    return dict(_native.stream_stats(name))


def readers(name: str) -> "tuple[int, int]":
    """(readers, lossless readers) attached to stream ``name`` now: live handles that are not
    closed and do not write (the writer's own handle is not a reader), read without attaching.
    Raises StreamNotFoundError (FileNotFoundError) if it does not exist."""
    table = [r for r in _native.stream_stats(name)["readers"] if r["alive"] and r["mode"] != "closed" and r["role"] not in WRITING_ROLES]
    return len(table), sum(1 for r in table if r["mode"] == "lossless")


def downloads(name: str) -> int:
    """Live handles of stream ``name`` that copy its device frames to host memory (a bridge,
    ``framebus record`` or a pipe reading a device stream without a CPU mirror), read without
    attaching. Raises StreamNotFoundError (FileNotFoundError) if it does not exist."""
    return sum(1 for r in _native.stream_stats(name)["readers"] if r["alive"] and r["mode"] != "closed" and r.get("download"))


def _rate(after: float, before: float, seconds: float) -> float:
    return max(0.0, after - before) / seconds if seconds > 0 else 0.0


def compare(info: StreamInfo, before: Dict[str, Any], after: Dict[str, Any]) -> Dict[str, Any]:
    """One stream's entry of the document: the writer's and each reader's rates between two
    snapshots, lags, waits and pins. Handles of processes that are dead are left out (the
    writer reclaims their entries, their pins and backpressure, when it runs short of slots)."""
    seconds = (after["taken_ns"] - before["taken_ns"]) / 1e9
    w0, w1 = before["writer"], after["writer"]
    write_fps = _rate(w1["frames_written"], w0["frames_written"], seconds)
    latest = w1["latest_seq"]
    old = {(r["entry"], r["pid"]): r for r in before["readers"]}
    readers = []
    for r in after["readers"]:
        if not r["alive"]:
            continue  # its process died: nothing to watch; the writer reclaims the entry
        prev = old.get((r["entry"], r["pid"]), r)
        # A handle that writes, a monitor and a closed one consume nothing: no lag to speak of.
        writes = r["role"] in WRITING_ROLES
        monitor = r["role"] in MONITOR_ROLES
        lag = max(0, latest - r["consumed"]) if r["mode"] != "closed" and not writes and not monitor else 0
        since = r["pinned_since_ns"]
        readers.append(
            {
                "pid": r["pid"],
                "alive": r["alive"],
                "mode": r["mode"],
                "role": r["role"],
                "label": r["label"],
                "download": bool(r.get("download")),
                "writes": writes,
                "monitor": monitor,
                "read_fps": _rate(r["reads"], prev["reads"], seconds),
                "reads": r["reads"],
                "lag_frames": lag,
                "lag_ms": (lag / write_fps * 1e3) if write_fps > 0 else (0.0 if lag == 0 else None),
                "missed": r["missed"],
                "missed_per_s": _rate(r["missed"], prev["missed"], seconds),
                "writer_waits": r["writer_waits"],
                "pinned_slots": r["pinned_slots"],
                "pinned_for_s": (after["taken_ns"] - since) / 1e9 if since else None,
            }
        )
    return {
        "name": str(info),
        "shape": list(info.shape) if info.shape else None,
        "dtype": dtype_name(info.dtype),
        "device": getattr(info, "device", None),
        "slots": info.slots,
        "writer_pid": w1["pid"],
        "writer_alive": w1["alive"],
        "write_fps": write_fps,
        "write_mbps": _rate(w1["bytes_written"], w0["bytes_written"], seconds) / 1e6,
        "latest_seq": latest,
        "frames_written": w1["frames_written"],
        "write_waits": w1["write_waits"],
        "write_wait_ms_per_s": _rate(w1["write_wait_ns"], w0["write_wait_ns"], seconds) / 1e6,
        "ended": w1["ended"],
        "readers": readers,
    }


def dtype_name(dtype: Any) -> Any:
    """A stored dtype string ("|u1", "<f4") as NumPy names it ("uint8", "float32"; a byte order
    other than this machine's stays explicit, ">f4"); None stays None."""
    import numpy as np

    if not dtype:
        return None
    try:
        return str(np.dtype(dtype))
    except TypeError:
        return str(dtype)


def measure(names: Optional[Iterable[str]] = None, interval: float = 1.0) -> List[Dict[str, Any]]:
    """Every stream (or those named), sampled twice ``interval`` seconds apart: one entry each,
    as in :func:`document`. Streams that cannot be read (damaged, vanished) are left out."""
    infos = [stat(n) for n in names] if names is not None else [i for i in list_streams() if not i.problem]
    first = {}
    for info in infos:
        try:
            first[str(info)] = snapshot(str(info))
        except (OSError, ValueError):
            continue
    time.sleep(interval)
    out = []
    for info in infos:
        if str(info) not in first:
            continue
        try:
            second = snapshot(str(info))
        except (OSError, ValueError):
            continue
        out.append(compare(info, first[str(info)], second))
    return out


def document(names: Optional[Iterable[str]] = None, interval: float = 1.0) -> Dict[str, Any]:
    """What ``framebus top --once --json`` prints: ``{"interval_s", "streams": [{"name",
    "writer_pid", "writer_alive", "write_fps", "write_mbps", "latest_seq", "frames_written",
    "write_waits", "write_wait_ms_per_s", "ended", "readers": [{"pid", "mode", "role", "label",
    "download", "writes", "monitor", "read_fps", "lag_frames", "lag_ms", "missed", "writer_waits", "pinned_slots",
    "pinned_for_s", ...}]}]}``. Rates are over ``interval`` seconds; ``lag_ms`` is the lag in
    frames at the writer's current rate (None when the writer is idle and the reader behind).
    ``writes`` is true for handles of a writing role (:data:`WRITING_ROLES`), ``monitor`` for
    handles that only look (:data:`MONITOR_ROLES`: ``hz``, ``echo``): their lag is 0.
    ``download`` is true for handles that copy a device stream's frames to host memory. Handles
    of dead processes are not listed (the writer reclaims them)."""
    return {"interval_s": interval, "streams": measure(names, interval)}
