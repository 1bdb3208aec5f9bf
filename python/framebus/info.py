"""Listing streams and removing stale ones."""

from __future__ import annotations

import os
import stat as _stat
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from . import _native

__all__ = ["StreamInfo", "NotAStream", "list_streams", "not_streams", "stat", "gc"]


class StreamInfo:
    """What ``framebus ls`` knows about one stream: its ``name`` (also ``str(info)``) and the
    fields below. Not a ``str``: compare ``info.name`` (``framebus.pyshmem.list_streams()``
    returns plain names, as pyshmem's does)."""

    name: str
    path: str
    dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    #: A variable-shape stream (then dtype and shape are None and capacity is set).
    variable: bool
    #: Bytes of arrays a frame of a variable-shape stream may hold; None for a fixed shape.
    capacity: Optional[int]
    slots: Optional[int]
    frame_bytes: Optional[int]
    #: A device stream's GPU as its creator numbered it ("cuda:0"); None for a host stream.
    device: Optional[str]
    #: Whether that device stream's frames are also in host memory.
    cpu_mirror: bool
    total_bytes: int
    creator_pid: int
    creator_alive: bool
    attached: int
    lossless: int
    sequence: int
    frames_written: int
    bytes_written: int
    lock_holder: Optional[int]
    #: Why the segment could not be read (text for people), or None.
    problem: Optional[str]
    #: The same as a code to decide on, one of ``_native.PROBLEM_KINDS``: "not_ready" (not
    #: initialised: its creator is still setting it up, or died or got stuck doing so; gc
    #: removes it once it is stale), "incompatible" (a layout version this framebus cannot
    #: read), "corrupt" (damaged, or no framebus stream), "other"; None when it was read.
    problem_kind: Optional[str]
    stale: bool
    #: Only from :func:`stat`: the writer's counters (``pid``, ``alive``, ``frames_written``,
    #: ``bytes_written``, ``write_waits``, ``write_wait_ns``, ``latest_seq``, ``latest_ns``,
    #: ``ended``, ``lock_holder``) and one dict per attached handle (``pid``, ``alive``,
    #: ``mode`` latest/lossless/closed, ``role``, ``label``, ``reads``, ``missed``,
    #: ``consumed``, ``pinned_slots``, ``pinned_since_ns``, ``writer_waits``).
    writer: Optional[Dict[str, Any]] = None
    readers: List[Dict[str, Any]] = []

    def __init__(self, info: Dict[str, Any]) -> None:
        for key, value in info.items():
            if key == "shape" and value is not None:
                value = tuple(value)
            setattr(self, key, value)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        what = self.problem or (f"capacity {self.capacity}" if self.variable else f"{self.dtype} {self.shape}")
        return f"<StreamInfo {self.name!r} {what}>"

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a plain dict (for JSON), ``name`` included."""
        return dict(vars(self))


def list_streams() -> List[StreamInfo]:
    """Every framebus stream in /dev/shm that this user can read, sorted by name."""
    return [StreamInfo(d) for d in _native.list_info()]


#: Where framebus keeps its segments (POSIX shared memory on Linux), and their file prefix.
SHM_DIR = "/dev/shm"
PREFIX = "framebus."


class NotAStream(NamedTuple):
    """A /dev/shm entry named ``framebus.*`` that is no framebus stream: ``file`` (its file
    name), ``path`` and ``reason`` ("not a framebus stream name", or "not a framebus segment:
    a FIFO (named pipe)" and the like)."""

    file: str
    path: str
    reason: str


def _kind(mode: int) -> Optional[str]:
    """What a file of ``st_mode`` is, in words, when it is not a regular file."""
    for test, words in (
        (_stat.S_ISLNK, "a symbolic link"),
        (_stat.S_ISDIR, "a directory"),
        (_stat.S_ISFIFO, "a FIFO (named pipe)"),
        (_stat.S_ISSOCK, "a socket"),
        (_stat.S_ISCHR, "a character device"),
        (_stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return None if _stat.S_ISREG(mode) else "not a regular file"


def not_streams() -> List[NotAStream]:
    """The entries of /dev/shm named ``framebus.*`` that :func:`list_streams` leaves out
    because they are no framebus stream, sorted by file name: those that are not regular files
    (FIFOs, sockets, directories, device files, symbolic links: judged with lstat, a link never
    by what it points to) and regular files whose name is not a valid stream name. framebus
    never opens, removes or follows them; ``framebus ls`` and ``doctor`` list them, ``gc``
    says it leaves them."""
    try:
        entries = sorted(f for f in os.listdir(SHM_DIR) if f.startswith(PREFIX))
    except FileNotFoundError:
        return []
    valid = set(_native.stream_names())
    out = []
    for file in entries:
        path = os.path.join(SHM_DIR, file)
        try:
            kind = _kind(os.lstat(path).st_mode)
        except FileNotFoundError:
            continue  # gone meanwhile
        if kind is not None:
            out.append(NotAStream(file, path, f"not a framebus segment: {kind}"))
        elif file[len(PREFIX):] not in valid:
            out.append(NotAStream(file, path, "not a framebus stream name"))
    return out


def stat(name: str) -> StreamInfo:
    """What ``framebus ls`` knows about one stream, plus its writer's and every attached
    handle's counters (``writer``, ``readers``; see :class:`StreamInfo`), read without
    attaching to it. Rates need two looks: see ``framebus.monitor``. Raises
    StreamNotFoundError (FileNotFoundError) if it does not exist."""
    info = StreamInfo(_native.stream_info(name))
    if not info.problem:
        try:
            stats = _native.stream_stats(name)
        except (OSError, ValueError):
            return info
        info.writer = stats["writer"]
        info.readers = list(stats["readers"])
    return info


def gc(*, dry_run: bool = False, unreadable: bool = False, zenoh: bool = False) -> List[str]:
    """Removes stale streams (creator dead and no live process attached, or never initialised
    by a creator that died) and returns their names, sorted. Live streams are never removed.

    A segment this framebus cannot read (another layout version, a damaged header) is left
    alone: its reader table cannot be read, so "nobody attached" cannot be established. With
    ``unreadable=True`` such a segment is removed too when its creator is dead (the creator's
    pid and start time sit at the same header offsets in every layout version) and no process
    this user can inspect maps it (``/proc/*/maps``); processes of other users cannot be
    inspected, so use it when you know that no older or newer framebus still uses it.

    With ``zenoh=True`` it also removes the files of Zenoh's shared-memory transport
    (``/dev/shm/*.zenoh``) that no process this user can inspect holds open or maps, listed as
    ``zenoh:FILE``: what a Zenoh process killed with SIGKILL leaves (and eclipse-zenoh 1.10
    leaves one even at a normal exit). Zenoh applies the same rule itself when a process first
    uses its shared memory. Processes of other users, and of other PID namespaces (containers
    sharing /dev/shm), cannot be inspected: use it when none of those runs Zenoh with shared
    memory on this /dev/shm.

    Nothing but regular files is ever removed: a FIFO, socket, directory, device file or
    symbolic link named like a stream (see :func:`not_streams`) is left alone, whatever the
    options, and so is a file whose name is not a valid stream name."""
    removed = set(_native.gc(dry_run=dry_run))
    if zenoh:
        removed.update(f"zenoh:{f}" for f in gc_zenoh(dry_run=dry_run))
    if unreadable:
        for info in list_streams():
            if str(info) in removed or not dead_unreadable(info) or mapped_by(info.path)[0]:
                continue
            try:
                if not dry_run:
                    _native.unlink(str(info))
            except FileNotFoundError:
                continue
            removed.add(str(info))
    return sorted(removed)


#: Where Zenoh's shared-memory transport keeps its segments (POSIX shared memory on Linux).
ZENOH_SHM_DIR = "/dev/shm"


def gc_zenoh(*, dry_run: bool = False) -> List[str]:
    """Removes the files of Zenoh's shared-memory transport (``*.zenoh`` in /dev/shm) that no
    process this user can inspect holds open (``/proc/*/fd``) or maps (``/proc/*/maps``), and
    returns their file names, sorted. See ``gc(zenoh=True)``."""
    try:
        names = sorted(f for f in os.listdir(ZENOH_SHM_DIR) if f.endswith(".zenoh"))
    except FileNotFoundError:
        return []
    if not names:
        return []
    in_use = _zenoh_files_in_use()
    removed = []
    for name in names:
        path = os.path.join(ZENOH_SHM_DIR, name)
        try:
            if path in in_use or not _stat.S_ISREG(os.lstat(path).st_mode):
                continue  # in use, or no file of Zenoh's (a symbolic link is never followed)
        except FileNotFoundError:
            continue
        try:
            if not dry_run:
                os.unlink(path)
        except (FileNotFoundError, PermissionError):
            continue  # gone meanwhile, or another user's (/dev/shm is sticky)
        removed.append(name)
    return removed


def _zenoh_files_in_use() -> Set[str]:
    """Paths of ``*.zenoh`` files that a process this user can inspect holds open or maps."""
    used: Set[str] = set()
    for pid in _pids():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue  # closed meanwhile
                if target.endswith(".zenoh"):
                    used.add(target)
            used.update(p for p in _mapped_paths(pid) if p.endswith(".zenoh"))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited meanwhile, or not inspectable
    return used


def _pids() -> List[str]:
    """The process ids listed in /proc, as strings."""
    return [e for e in os.listdir("/proc") if e.isdigit()]


def _mapped_paths(pid: str) -> List[str]:
    """The file paths process ``pid`` maps (the last column of ``/proc/PID/maps``). Raises
    FileNotFoundError/ProcessLookupError for a process that exited, PermissionError for one
    this user cannot inspect."""
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        return [parts[5] for parts in (line.rstrip("\n").split(None, 5) for line in f) if len(parts) == 6]


def dead_unreadable(info: StreamInfo) -> bool:
    """Whether ``info`` is a segment this framebus cannot read whose creator is dead."""
    return bool(info.problem) and info.creator_pid != 0 and not info.creator_alive


def mapped_by(path: str) -> Tuple[List[int], int]:
    """(pids of the processes that map the file ``path``, how many processes could not be
    inspected): ``/proc/PID/maps`` of another user's process, or of one with more privileges,
    cannot be read."""
    out: List[int] = []
    hidden = 0
    for pid in _pids():
        try:
            if path in _mapped_paths(pid):
                out.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        except PermissionError:
            hidden += 1
    return out, hidden
