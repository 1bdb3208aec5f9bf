"""``framebus doctor``: checks this machine for what framebus needs and says the exact fix for
each problem: /dev/shm's size and free space against the streams you plan (``--plan``) or have
(``--stream``), containers with Docker's default 64 MiB /dev/shm, permissions and umask, futex
and robust-list support, FFmpeg, pyzmq, openfilter, CUDA (``framebus.gpu_info()``: the driver's
version, the devices, and whether CUDA IPC works: a device stream written here is read back by
another process), stale segments and segments this framebus cannot read. Exit status 0 when
nothing would fail, 1 when something would."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any, List, Mapping, Optional, Tuple

HELP = "check the machine (/dev/shm, containers, permissions, futex, FFmpeg, CUDA and CUDA IPC, stale streams) and say the fix"

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
        help="a stream you plan, as HxWxC:dtype[:slots=N] (e.g. 1080x1920x3:uint8:slots=4) or capacity=SIZE[:slots=N] for a variable-shape stream (e.g. capacity=32MiB:slots=4); repeatable",
    )
    p.add_argument("--stream", action="append", default=[], metavar="NAME", help="an existing stream to account for; repeatable")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


PLAN_FORMS = "HxWxC[:dtype][:slots=N] (e.g. 1080x1920x3:uint8:slots=4) or, for a variable-shape stream, capacity=SIZE[:slots=N] (e.g. capacity=32MiB:slots=4)"


@dataclass(frozen=True)
class Plan:
    """A stream planned with ``--plan``: a fixed shape and dtype, or a capacity (``shape`` is
    then ``(capacity,)`` and ``dtype`` ``|u1``)."""

    shape: Tuple[int, ...]
    dtype: str
    slots: int
    variable: bool = False


def parse_plan(text: str) -> Plan:
    """The stream a ``--plan`` value describes, checked with the limits of ``framebus.create``
    (dimensions, dtypes, the core's range of slots, a positive capacity); ValueError naming the
    problem."""
    from framebus import _native
    from framebus._convert import normalize_dtype, normalize_shape, parse_capacity

    shape: Tuple[int, ...]
    head, *rest = text.split(":")
    size = head[len("capacity="):] if head.lower().startswith("capacity=") else None
    if size is None and head and head[-1:].isalpha() and "x" not in head.lower():
        size = head  # "32MiB": a capacity without the key
    try:
        if size is not None:
            shape, dtype, variable = (parse_capacity(size),), "|u1", True
        else:
            try:
                dims = [int(d) for d in head.lower().split("x")]
            except ValueError:
                raise ValueError(f"{head!r} is neither a shape HxWxC nor capacity=SIZE") from None
            shape, variable = normalize_shape(dims), False
            dtype = normalize_dtype((rest.pop(0) if rest and "=" not in rest[0] else "") or "uint8").str
        slots = 4
        for extra in rest:
            key, eq, value = extra.partition("=")
            if key != "slots" or not eq:
                raise ValueError(f"{extra!r} is not slots=N" + (" (a variable-shape stream takes no dtype)" if variable and not eq else ""))
            try:
                slots = int(value)
            except ValueError:
                raise ValueError(f"slots={value!r} is not a number") from None
            low, high = _native.COUNT_LIMITS["slots"]
            if not low <= slots <= high:
                raise ValueError(f"slots must be between {low} and {high}, got {slots}")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--plan {text!r}: {exc}; the forms are {PLAN_FORMS}") from None
    return Plan(shape, dtype, slots, variable)


def planned_bytes(plan: Plan) -> int:
    """The segment size framebus would allocate for ``plan`` (the core's own layout; a
    variable-shape stream's slot also holds its frame table)."""
    import numpy as np

    from framebus import _native

    frame = int(np.prod(plan.shape, dtype=object)) * np.dtype(plan.dtype).itemsize
    return int(_native.segment_bytes(frame + (_native.FRAME_TABLE_BYTES if plan.variable else 0), plan.slots))


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
            which = "Docker's default 64 MiB" if size == DOCKER_DEFAULT else f"a {human(size)}"
            out.append(
                Check(
                    "container",
                    "warn",
                    f"running in a container ({runtime}) with {which} /dev/shm: one 4-slot 1080p RGB stream needs 24 MiB",
                    "start it with `--shm-size=1g` (Docker/Podman) or `--ipc=host` to share the host's; "
                    "Kubernetes: mount an `emptyDir: {medium: Memory, sizeLimit: 1Gi}` volume at /dev/shm",
                )
            )
        else:
            out.append(Check("container", "info", f"running in a container ({runtime}); /dev/shm is {human(size)}", "processes in other containers share streams only with `--ipc=shareable`/`--ipc=container:NAME` or `--ipc=host`"))
    return out


def read_only() -> bool:
    """Whether /dev/shm is mounted read-only (no chmod helps then)."""
    try:
        return bool(os.statvfs(SHM).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def can_create() -> bool:
    """Whether this user can create a stream in /dev/shm at all."""
    return os.path.isdir(SHM) and not read_only() and os.access(SHM, os.W_OK | os.X_OK)


def check_permissions() -> List[Check]:
    mask = os.umask(0)
    os.umask(mask)
    if read_only():
        runtime = in_container()
        return [
            Check(
                "permissions",
                "fail",
                f"{SHM} is mounted read-only: no stream can be created",
                ("give the container a writable /dev/shm (with `docker run --read-only`, add `--tmpfs /dev/shm`); or " if runtime else "")
                + f"remount it writable (as root): `mount -o remount,rw {SHM}`",
            )
        ]
    if not os.access(SHM, os.W_OK | os.X_OK):
        return [Check("permissions", "fail", f"this user cannot create files in {SHM}", f"`chmod 1777 {SHM}` (as root), as on a standard system")]
    return [
        Check(
            "permissions",
            "ok",
            f"{SHM} writable; umask {mask:03o} (framebus applies the permissions you give, 0o600 by default, whatever the umask)",
            "" if mask & 0o077 == 0o022 else "to share streams with other users, create them with permissions=0o660 and a common group",
        )
    ]


def check_futex() -> List[Check]:
    """A real cross-thread futex wait and wake through a stream, and the robust-list syscall."""
    import threading
    import uuid

    import numpy as np

    import framebus

    if not can_create():  # the permissions check says why; a futex failure would mislead
        return [Check("futex", "info", f"not checked: no stream can be created in {SHM} (see above)")] + check_robust_list()
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
    return out + check_robust_list()


#: get_robust_list's system call number per architecture (the numbers differ: 274 on aarch64
#: is sched_setattr). Other architectures are not checked rather than risk a wrong call.
GET_ROBUST_LIST = {"x86_64": 274, "aarch64": 100}


def check_robust_list(machine: Optional[str] = None, libc: Any = None) -> List[Check]:
    """Asks the kernel for this thread's robust futex list (get_robust_list), with the system
    call number of this machine's architecture."""
    machine = machine or os.uname().machine
    number = GET_ROBUST_LIST.get(machine)
    if number is None:
        return [Check("robust list", "info", f"not checked on {machine} (framebus knows get_robust_list's number only on {', '.join(GET_ROBUST_LIST)})")]
    why = "framebus detects dead lock holders by pid and start time, so this only matters to other libraries"
    try:
        libc = libc or ctypes.CDLL(None, use_errno=True)
        head, size = ctypes.c_void_p(), ctypes.c_size_t()
        rc = libc.syscall(number, 0, ctypes.byref(head), ctypes.byref(size))
    except OSError as exc:
        return [Check("robust list", "warn", f"could not ask: {exc}", why)]
    if rc == 0:
        return [Check("robust list", "ok", f"get_robust_list (system call {number} on {machine}) works")]
    return [Check("robust list", "warn", f"get_robust_list (system call {number} on {machine}) returned {rc} (errno {ctypes.get_errno()})", why)]


def check_video() -> Check:
    """Which video encoders work here (encoded bridges: ``--encode``; ``auto`` picks the first
    hardware one listed for a codec, else its software one)."""
    try:
        from framebus.media import codec as video

        found = video.available_encoders()
    except ImportError:
        return Check("video encoders", "info", "PyAV not installed: encoded bridges (--encode) are not available", "`pip install 'framebus[video]'` if you need them")
    works = [f"{codec} {name}" for codec, name, ok in found if ok]
    hardware = [name for codec, name, ok in found if ok and name in video.CODECS[codec]["hardware"]]
    detail = f"working: {', '.join(works) or 'none'}; hardware: {', '.join(hardware) or 'none found (software encoding)'}"
    return Check("video encoders", "ok" if works else "warn", detail)


def check_tools() -> List[Check]:
    out = []
    try:
        from framebus.ffmpeg import find_ffmpeg

        out.append(Check("FFmpeg", "ok", f"found {find_ffmpeg()} (record, play, framebus.ffmpeg)"))
    except (ImportError, OSError) as exc:
        out.append(Check("FFmpeg", "warn", f"not found ({exc.__class__.__name__}): record/play and framebus.ffmpeg will fail", "`pip install 'framebus[ffmpeg]'` (imageio-ffmpeg) or install ffmpeg on PATH"))
    out.append(check_video())
    for module, what, extra in (("zmq", "pyzmq (bridges, framebus.net)", "net"), ("openfilter", "openfilter (framebus.integrations.openfilter)", "openfilter")):
        try:
            mod = __import__(module)
            out.append(Check(what.split(" ")[0], "ok", f"{what} {getattr(mod, '__version__', '')}".strip()))
        except Exception:  # noqa: BLE001 - not installed or broken: both are "not available"
            out.append(Check(what.split(" ")[0], "info", f"{what} not installed", f"`pip install 'framebus[{extra}]'` if you need it"))
    return out


def _driver_text(version: Optional[int]) -> str:
    """``13000`` -> ``"driver API 13.0"``."""
    if not version:
        return "driver version unknown"
    return f"driver API {version // 1000}.{version % 1000 // 10}"


def _device_text(d: dict) -> str:
    cc = d.get("compute_capability") or ("?", "?")
    memory = human(d["total_memory"]) if d.get("total_memory") else "memory unknown"
    return f"cuda:{d.get('ordinal', '?')} {d.get('name', '?')} (compute {cc[0]}.{cc[1]}, {memory})"


#: The driver's codes (``CUresult``) the fix is chosen by: the kernel module and libcuda.so.1 of
#: different versions, a driver older than the CUDA calls need.
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803


def _own_code(name: str) -> Optional[int]:
    """framebus's own door error code ``name`` (``_native.DOOR_CODES``), None if unknown."""
    from framebus import _native

    return getattr(_native, "DOOR_CODES", {}).get(name)


def cuda_fix(code: Optional[int], env: Optional[Mapping[str, str]] = None, runtime: Optional[str] = None) -> str:
    """What to do when framebus finds no CUDA device, judged from the door's error ``code``
    (``gpu_info()["error_code"]``, a DeviceError's ``code``: the driver's ``CUresult`` or
    framebus's own, negative, from ``_native.DOOR_CODES``; None when the door opened and saw no
    device), the environment and the container runtime. Never looks at message text."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if code is not None and code == _own_code("FRAMEBUS_GPU_NOT_BUILT"):
        return "this framebus was built without GPU streams: install a build with them (the published wheels: `pip install framebus`)"
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU: unset it or name one (`CUDA_VISIBLE_DEVICES=0`)"
    if env.get("FRAMEBUS_CUDA", "").strip().lower() == "fake":
        return "unset FRAMEBUS_CUDA to use the CUDA driver (FRAMEBUS_CUDA=fake selects the test door)"
    if code is not None and code == _own_code("FRAMEBUS_BAD_SETTING") or env.get("FRAMEBUS_CUDA", "").strip().lower() not in ("", "cuda"):
        return "FRAMEBUS_CUDA must be unset, empty, 'cuda' or 'fake'"
    if code == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        return "the NVIDIA kernel module and libcuda.so.1 are of different versions (typically after a driver update): reboot, or reload the nvidia kernel module"
    if code == CUDA_ERROR_INSUFFICIENT_DRIVER:
        return "the NVIDIA driver is older than framebus's CUDA calls need: update the driver (`nvidia-smi` shows its version)"
    no_driver = code is not None and code == _own_code("FRAMEBUS_NO_CUDA_DRIVER")
    if runtime:
        how = (
            "start the container with the GPU: `docker run --gpus all` (Docker with the NVIDIA Container Toolkit), "
            "`podman run --device nvidia.com/gpu=all` (CDI); on Kubernetes request `nvidia.com/gpu` in the pod's resources"
        )
        return how if no_driver else f"{how}; then check `nvidia-smi` inside the container"
    if no_driver:
        return "install the NVIDIA driver (framebus loads libcuda.so.1 at run time; `nvidia-smi` must list the GPU)"
    return "check `nvidia-smi` (it must list the GPU); `framebus doctor --json` shows the driver's error"


#: The child of the CUDA IPC probe: opens the stream, reads the newest frame, prints its bytes.
IPC_CHILD = """\
import sys
import framebus
r = framebus.open(sys.argv[1])
x = r.read()
sys.stdout.write(x.to_numpy().tobytes().hex())
r.close()
"""

IPC_FIX = (
    "CUDA IPC needs both processes on one machine seeing the same GPU: in containers share the IPC and PID "
    "namespaces (`--ipc=host --pid=host`, or run both processes in one container) and pass the GPU to each; "
    "CUDA_VISIBLE_DEVICES may renumber GPUs but must leave the stream's GPU visible; on a MIG-partitioned GPU "
    "both processes must use the same MIG instance; WSL2 does not support CUDA IPC"
)


def check_cuda_ipc(device: str = "cuda:0", timeout: float = 120.0) -> Check:
    """Creates a small device stream on ``device``, writes a frame, has another process open
    the stream and read the frame back, and compares the bytes."""
    import subprocess
    import uuid

    import numpy as np

    import framebus

    if not can_create():
        return Check("CUDA IPC", "info", f"not checked: no stream can be created in {SHM} (see above)")
    name = f"doctor-gpu-{uuid.uuid4().hex[:8]}"
    pattern = (np.arange(256, dtype=np.uint32) * 7 + 3).astype(np.uint8)
    try:
        with framebus.create(name, shape=pattern.shape, dtype=np.uint8, slots=2, device=device) as s:
            try:
                s.write(pattern)
                p = subprocess.run([sys.executable, "-c", IPC_CHILD, name], capture_output=True, text=True, timeout=timeout)
            finally:
                s.unlink()
    except subprocess.TimeoutExpired:
        return Check("CUDA IPC", "warn", f"another process did not read the probe frame within {timeout:.0f} s", IPC_FIX)
    except Exception as exc:  # noqa: BLE001 - the doctor reports anything
        return Check("CUDA IPC", "warn", f"could not write a device stream on {device}: {type(exc).__name__}: {exc}", "check `nvidia-smi`: the GPU must have a little free memory")
    if p.returncode != 0:
        lines = [line for line in p.stderr.strip().splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit status {p.returncode}"
        return Check("CUDA IPC", "warn", f"another process could not read a device stream on {device}: {why}", IPC_FIX)
    if p.stdout.strip() != pattern.tobytes().hex():
        return Check("CUDA IPC", "fail", f"another process read other bytes than were written to a device stream on {device}", "report this with `framebus doctor --json`")
    return Check("CUDA IPC", "ok", f"a frame written to a device stream on {device} was read back, byte for byte, by another process")


def check_cuda(info: Optional[dict] = None, ipc: Any = check_cuda_ipc) -> List[Check]:
    """The CUDA section: what ``framebus.gpu_info()`` says (which door, the driver's version,
    the devices) and, when there is a device, whether CUDA IPC works (``ipc``: a device stream
    written here and read by another process). No GPU is not a failure: CPU streams do not need
    one; a device that cannot share frames between processes is a warning."""
    if info is None:
        import framebus

        gpu_info = getattr(framebus, "gpu_info", None)
        if gpu_info is None:
            return [Check("CUDA", "info", "this framebus has no GPU streams (CPU streams only)")]
        info = gpu_info()
    devices = info.get("devices") or []
    door = info.get("door")
    if not devices:
        error = info.get("error") or ("the driver reports no device" if door else "no CUDA driver")
        code = info.get("error_code")
        if code is None and not door and not info.get("error"):
            code = _own_code("FRAMEBUS_NO_CUDA_DRIVER")
        return [Check("CUDA", "info", f"no GPU streams here ({error}); CPU streams are unaffected", cuda_fix(code, runtime=in_container()))]
    listing = "; ".join(_device_text(d) for d in devices)
    if door == "fake":
        head = "the fake CUDA door (FRAMEBUS_CUDA=fake: \"device\" memory in host shared memory, for tests)"
        fix = "unset FRAMEBUS_CUDA to use the GPU"
    else:
        head = f"CUDA driver, {_driver_text(info.get('driver_version'))}"
        fix = ""
    out = [Check("CUDA", "ok", f"{head}, {len(devices)} device(s): {listing}", fix)]
    if ipc is not None:
        out.append(ipc(f"cuda:{devices[0].get('ordinal', 0)}"))
    return out


def _names(names: List[str]) -> str:
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")


def check_stale() -> List[Check]:
    """Stale streams (``framebus gc`` would remove them), segments this framebus cannot read
    that are not stale (their creator lives, or someone maps them), and entries named
    ``framebus.*`` that are no stream (not regular files, or not valid stream names)."""
    import framebus
    from framebus.info import dead_unreadable, mapped_by, not_streams

    from .gc import CREATION_GRACE_S, being_created

    stale = framebus.gc(dry_run=True)
    young = [str(i) for i in being_created()]
    out = []
    if stale:
        out.append(Check("stale streams", "warn", f"{len(stale)} left by processes that died: {_names(stale)}", "`framebus gc` removes them (never a live stream)"))
    else:
        out.append(Check("stale streams", "ok", "none"))
    if young:
        out.append(
            Check(
                "streams being created",
                "info",
                f"{len(young)} not initialised yet, younger than {CREATION_GRACE_S:g} s: {_names(young)}",
                f"if they stay so, `framebus gc` removes them once they are {CREATION_GRACE_S:g} s old",
            )
        )
    unreadable = [i for i in framebus.list_streams() if i.problem and str(i) not in stale and str(i) not in young]
    left = [i for i in unreadable if dead_unreadable(i) and not mapped_by(i.path)[0]]
    used = [i for i in unreadable if i not in left]
    if left:
        out.append(
            Check(
                "stale unreadable streams",
                "warn",
                f"{len(left)} this framebus cannot read, left by processes that died, mapped by no process this user can see: "
                f"{_names([str(i) for i in left])} ({left[0]}: {left[0].problem})",
                "`framebus gc --unreadable` removes them; do it when no framebus of another version still uses them",
            )
        )
    if used:
        out.append(
            Check(
                "unreadable streams",
                "warn",
                f"{len(used)} this framebus cannot read, still in use: {_names([str(i) for i in used])} ({used[0]}: {used[0].problem})",
                "use them with the framebus version that created them; once their creator is dead and nothing maps them, `framebus gc --unreadable` removes them",
            )
        )
    others = not_streams()
    if others:
        out.append(
            Check(
                "not framebus streams",
                "info",
                f"{len(others)} in {SHM} named framebus.* but no framebus stream: "
                + "; ".join(f"{o.file!r} ({o.reason})" for o in others[:5])
                + (" ..." if len(others) > 5 else ""),
                "framebus never opens or removes them (not even `framebus gc`): remove them yourself if you know what they are",
            )
        )
    return out


def check_copy() -> List[Check]:
    """How frames are copied on this machine (the copy kernels' own plan, when exposed)."""
    try:
        from framebus import tuning  # type: ignore[attr-defined]

        return [Check("copy", "info", tuning.explain())]
    except (ImportError, AttributeError):
        return [Check("copy", "info", "memcpy below 4 MiB, non-temporal (streaming) stores from 4 MiB on x86-64")]


#: What starting MPS changed for two processes handing frames on one GPU (W10, 1080p RGB, latest
#: mode, one NVIDIA H200, each pair of figures measured in one run).
MPS_MEASURED = (
    "measured on an H200 (1080p RGB, latest mode, hop p50 without -> with MPS): bare torch CUDA IPC hand-off "
    "347 -> 84 µs; framebus loan + view 453 -> 254 µs (2,841 -> 5,288 frames/s); write + read_new 531 -> 198 µs "
    "(2,157 -> 7,396 frames/s)"
)


def check_mps(info: Optional[dict] = None, status: Any = None) -> List[Check]:
    """Whether NVIDIA's Multi-Process Service runs for this process's CUDA (``status``: a
    ``framebus._mps.MpsStatus``, found here when None) and, where a CUDA GPU is and MPS does
    not run, what starting it changes when several processes share the GPU."""
    from framebus._mps import mps_status

    if info is None:
        import framebus

        gpu_info = getattr(framebus, "gpu_info", None)
        info = gpu_info() if gpu_info is not None else {}
    status = mps_status() if status is None else status
    gpu = info.get("door") == "cuda" and bool(info.get("devices"))
    text = status.describe()
    if not gpu:
        return [Check("MPS", "info", f"{text}; it matters only for device streams on a CUDA GPU (none here)")]
    if status.control_pipe:
        return [Check("MPS", "ok", f"{text}: device streams between processes on this GPU go through one MPS server, which shortens each hop ({MPS_MEASURED})")]
    how = "`nvidia-cuda-mps-control -d` starts it (as the user that runs the GPU processes; `echo quit | nvidia-cuda-mps-control` stops it; see docs/gpu.md, \"Faster hops: MPS\")"
    return [Check("MPS", "info", text, f"where several processes share this GPU (a device stream's writer and its readers), MPS shortens each hop: {MPS_MEASURED}; {how}")]


def check_stream(name: str) -> Check:
    """One stream named with ``--stream``: it exists, this user may open it, and this framebus
    can read it (its layout version, an undamaged header)."""
    import framebus
    from framebus.cli import error_text
    from framebus.info import dead_unreadable, mapped_by

    what = f"stream {name}"
    try:
        info = framebus.stat(name)
    except FileNotFoundError:
        return Check(what, "fail", "does not exist", "create it first (or check the name with `framebus ls`)")
    except PermissionError as exc:
        return Check(what, "fail", f"this user may not open it: {error_text(exc)}", "run as the stream's owner, or have it created with permissions=0o660 and a group both users are in")
    if info.problem:
        if dead_unreadable(info) and not mapped_by(info.path)[0]:
            fix = "its creator is dead and no process this user can see maps it: `framebus gc --unreadable` removes it"
        else:
            fix = "open it with the framebus version that created it, or recreate it once its users have stopped"
        return Check(what, "fail", f"unreadable: {info.problem}", fix)
    return Check(what, "ok", f"exists, {human(info.total_bytes)} (already allocated)")


def run_checks(plans: List[str], streams: List[str]) -> List[Check]:
    planned = []
    for text in plans:
        planned.append((text, planned_bytes(parse_plan(text))))
    checks = []
    for name in streams:
        checks.append(check_stream(name))
    return check_shm(planned) + checks + check_permissions() + check_futex() + check_tools() + check_cuda() + check_stale() + check_copy() + check_mps()


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
