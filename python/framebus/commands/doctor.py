"""``framebus doctor``: checks this machine for what framebus needs and says the exact fix for
each problem: /dev/shm's size and free space against the streams you plan (``--plan``) or have
(``--stream``), containers with Docker's default 64 MiB /dev/shm, permissions and umask, futex
and robust-list support, FFmpeg, pyzmq, openfilter, the CUDA driver and CUDA IPC, and stale
segments. Exit status 0 when nothing would fail, 1 when something would."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import List, Optional, Tuple

HELP = "check the machine (/dev/shm, containers, permissions, futex, FFmpeg, CUDA, stale streams) and say the fix"

SHM = "/dev/shm"
DOCKER_DEFAULT = 64 << 20


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn" (works, with a caveat), "fail" (something would fail), "info"
    detail: str
    fix: str = ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plan",
        action="append",
        default=[],
        metavar="SPEC",
        help="a stream you plan, as HxWxC:dtype[:slots=N] (e.g. 1080x1920x3:uint8:slots=4); repeatable",
    )
    p.add_argument("--stream", action="append", default=[], metavar="NAME", help="an existing stream to account for; repeatable")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


def parse_plan(text: str) -> Tuple[Tuple[int, ...], str, int]:
    """(shape, dtype, slots) of a ``--plan`` value; ValueError saying the form when it is wrong."""
    import numpy as np

    parts = text.split(":")
    try:
        shape = tuple(int(d) for d in parts[0].lower().split("x"))
        dtype = np.dtype(parts[1] if len(parts) > 1 and parts[1] else "uint8").str
        slots = 4
        for extra in parts[2:]:
            key, _, value = extra.partition("=")
            if key != "slots":
                raise ValueError(extra)
            slots = int(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--plan {text!r} is not HxWxC:dtype[:slots=N], e.g. 1080x1920x3:uint8:slots=4 ({exc})") from None
    return shape, dtype, slots


def planned_bytes(shape: Tuple[int, ...], dtype: str, slots: int) -> int:
    """The segment size framebus would allocate (header, tables, page-aligned slots)."""
    import numpy as np

    page = 4096
    frame = int(np.prod(shape)) * np.dtype(dtype).itemsize
    stride = (frame + 256 + page - 1) // page * page
    control = (448 + 64 * 128 + slots * 192 + page - 1) // page * page
    return control + slots * stride


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def in_container() -> Optional[str]:
    """The container runtime this process seems to run in, or None."""
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    try:
        cgroup = open("/proc/1/cgroup").read()
    except OSError:
        return None
    for word in ("kubepods", "docker", "containerd", "libpod", "lxc"):
        if word in cgroup:
            return word
    return None


def check_shm(plans: List[Tuple[str, int]]) -> List[Check]:
    out = []
    if not os.path.isdir(SHM):
        return [Check("/dev/shm", "fail", f"{SHM} does not exist", "mount a tmpfs there: `mount -t tmpfs -o size=1g tmpfs /dev/shm`")]
    st = os.statvfs(SHM)
    size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    need = sum(b for _, b in plans)
    runtime = in_container()
    out.append(Check("/dev/shm", "ok", f"{human(size)} in all, {human(free)} free"))
    if plans:
        listing = ", ".join(f"{what} {human(b)}" for what, b in plans)
        if need > free:
            out.append(
                Check(
                    "planned streams",
                    "fail",
                    f"need {human(need)} ({listing}), {human(free)} free in {SHM}",
                    "free space (`framebus gc`, fewer slots, smaller frames) or enlarge /dev/shm: "
                    + ("`docker run --shm-size=2g` (or `--ipc=host`)" if runtime else "`mount -o remount,size=2g /dev/shm`"),
                )
            )
        else:
            out.append(Check("planned streams", "ok", f"need {human(need)} ({listing}), {human(free)} free"))
    if runtime:
        if size <= DOCKER_DEFAULT:
            out.append(
                Check(
                    "container",
                    "warn",
                    f"running in a container ({runtime}) with the default {human(size)} /dev/shm: one 4-slot 1080p RGB stream needs 24 MiB",
                    "start it with `--shm-size=1g` (Docker/Podman) or `--ipc=host` to share the host's; "
                    "Kubernetes: mount an `emptyDir: {medium: Memory, sizeLimit: 1Gi}` volume at /dev/shm",
                )
            )
        else:
            out.append(Check("container", "info", f"running in a container ({runtime}); /dev/shm is {human(size)}", "processes in other containers share streams only with `--ipc=shareable`/`--ipc=container:NAME` or `--ipc=host`"))
    return out


def check_permissions() -> List[Check]:
    mask = os.umask(0)
    os.umask(mask)
    if not os.access(SHM, os.W_OK | os.X_OK):
        return [Check("permissions", "fail", f"this user cannot create files in {SHM}", f"`chmod 1777 {SHM}` (as root), as on a standard system")]
    return [
        Check(
            "permissions",
            "ok",
            f"{SHM} writable; umask {mask:03o} (framebus applies the mode you give, 0o600 by default, whatever the umask)",
            "" if mask & 0o077 == 0o022 else "to share streams with other users, create them with mode=0o660 and a common group",
        )
    ]


def check_futex() -> List[Check]:
    """A real cross-thread futex wait and wake through a stream, and the robust-list syscall."""
    import threading
    import uuid

    import numpy as np

    import framebus

    name = f"doctor-{uuid.uuid4().hex[:8]}"
    out = []
    try:
        with framebus.create(name, shape=(8,), dtype=np.uint8, auto_unlink=True) as w:
            r = framebus.open(name)
            t = threading.Timer(0.05, lambda: w.write(np.ones(8, np.uint8)))
            t.start()
            got = r.read_new(timeout=5)
            t.join()
            r.close()
        out.append(Check("futex", "ok", "a reader blocked in read_new() was woken by a write" if got.sum() == 8 else "unexpected frame"))
    except Exception as exc:  # noqa: BLE001 - the doctor reports anything
        out.append(Check("futex", "fail", f"a blocking read failed: {exc}", "framebus needs Linux futexes (any Linux 2.6+); report this with `framebus doctor --json`"))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        head, size = ctypes.c_void_p(), ctypes.c_size_t()
        rc = libc.syscall(274, 0, ctypes.byref(head), ctypes.byref(size))  # get_robust_list (x86-64)
        ok = rc == 0 or os.uname().machine != "x86_64"
        out.append(Check("robust list", "ok" if ok else "warn", "get_robust_list works" if rc == 0 else f"get_robust_list returned {rc}", "" if ok else "framebus detects dead lock holders by pid and start time, so this only matters to other libraries"))
    except OSError as exc:
        out.append(Check("robust list", "warn", f"could not ask: {exc}"))
    return out


def check_tools() -> List[Check]:
    out = []
    try:
        from framebus.ffmpeg import find_ffmpeg

        out.append(Check("FFmpeg", "ok", f"found {find_ffmpeg()} (record, play, framebus.ffmpeg)"))
    except (ImportError, OSError) as exc:
        out.append(Check("FFmpeg", "warn", f"not found ({exc.__class__.__name__}): record/play and framebus.ffmpeg will fail", "`pip install 'framebus[ffmpeg]'` (imageio-ffmpeg) or install ffmpeg on PATH"))
    for module, what, extra in (("zmq", "pyzmq (bridges, framebus.net)", "net"), ("openfilter", "openfilter (framebus.integrations.openfilter)", "openfilter")):
        try:
            mod = __import__(module)
            out.append(Check(what.split(" ")[0], "ok", f"{what} {getattr(mod, '__version__', '')}".strip()))
        except Exception:  # noqa: BLE001 - not installed or broken: both are "not available"
            out.append(Check(what.split(" ")[0], "info", f"{what} not installed", f"`pip install 'framebus[{extra}]'` if you need it"))
    return out


def check_cuda() -> List[Check]:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return [Check("CUDA", "info", "no CUDA driver (libcuda.so.1): GPU streams unavailable; CPU streams unaffected", "install the NVIDIA driver (and run containers with `--gpus all`) for GPU streams")]
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return [Check("CUDA", "warn", "the CUDA driver loads but reports no usable device", "check `nvidia-smi`; in containers pass `--gpus all`")]
    ipc = "CUDA IPC needs the processes to share the IPC namespace in containers (`--ipc=host`)" if in_container() else "CUDA IPC available between processes of this machine"
    return [Check("CUDA", "ok", f"{count.value} device(s); {ipc}")]


def check_stale() -> List[Check]:
    import framebus

    stale = framebus.gc(dry_run=True)
    if stale:
        return [Check("stale streams", "warn", f"{len(stale)} left by processes that died: {', '.join(stale[:5])}{' ...' if len(stale) > 5 else ''}", "`framebus gc` removes them (never a live stream)")]
    return [Check("stale streams", "ok", "none")]


def check_copy() -> List[Check]:
    """How frames are copied on this machine (the copy kernels' own plan, when exposed)."""
    try:
        from framebus import tuning  # type: ignore[attr-defined]

        return [Check("copy", "info", tuning.explain())]
    except (ImportError, AttributeError):
        return [Check("copy", "info", "memcpy below 4 MiB, non-temporal (streaming) stores from 4 MiB on x86-64")]


def run_checks(plans: List[str], streams: List[str]) -> List[Check]:
    import framebus

    planned = []
    for text in plans:
        shape, dtype, slots = parse_plan(text)
        planned.append((text, planned_bytes(shape, dtype, slots)))
    checks = []
    for name in streams:
        try:
            info = framebus.stat(name)
            checks.append(Check(f"stream {name}", "ok", f"exists, {human(info.total_bytes)} (already allocated)"))
        except FileNotFoundError:
            checks.append(Check(f"stream {name}", "fail", "does not exist", "create it first (or check the name with `framebus ls`)"))
    return check_shm(planned) + checks + check_permissions() + check_futex() + check_tools() + check_cuda() + check_stale() + check_copy()


def run(args: argparse.Namespace) -> int:
    try:
        checks = run_checks(args.plan, args.stream)
    except ValueError as exc:
        print(f"framebus doctor: {exc}", file=sys.stderr)
        return 2
    failed = any(c.status == "fail" for c in checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
        return 1 if failed else 0
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "info": "info"}
    for c in checks:
        print(f"[{marks[c.status]}] {c.name}: {c.detail}")
        if c.fix and c.status in ("warn", "fail", "info"):
            print(f"       fix: {c.fix}")
    print("all good" if not failed else "something would fail: see FAIL above")
    return 1 if failed else 0
