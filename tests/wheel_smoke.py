#!/usr/bin/env python3
"""Smoke suite for an INSTALLED framebus wheel (not collected by pytest: it tests whatever
framebus the running interpreter imports, which must be an installed wheel, not the source tree).

    <venv>/bin/python tests/wheel_smoke.py            (scripts/test-wheels.sh runs it so)

Checks, each printed as PASS/SKIP/FAIL: no Rust toolchain on PATH (cargo, rustc); framebus comes
from site-packages, not the checkout; `framebus demo --seconds 1`; a lossless cross-process
write/read of numbered frames ending with the stream's end; a pipe into FFmpeg (skipped, with the
reason, where no FFmpeg is found); `framebus ls`, `framebus ls --json` and `framebus doctor`;
the wheel holds no benchmark driver (`framebus bench` says how to install the suite, which lives in
the repository's benches/ folder); nothing left in /dev/shm. Exits with 1 if any check failed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import traceback
from pathlib import Path
from typing import Callable, List, Tuple

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PREFIX = f"wheelsmoke-{os.getpid()}"
RESULTS: List[Tuple[str, str, str]] = []


class Skip(Exception):
    pass


def check(fn: Callable[[], str]) -> Callable[[], str]:
    name = fn.__name__.replace("_", " ")
    try:
        detail = fn() or ""
        RESULTS.append(("PASS", name, detail))
    except Skip as e:
        RESULTS.append(("SKIP", name, str(e)))
    except Exception as e:  # noqa: BLE001 - the report shows every failure
        RESULTS.append(("FAIL", name, f"{type(e).__name__}: {e}"))
        traceback.print_exc()
    return fn


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = BIN / "framebus"
    if not exe.exists():
        raise AssertionError(f"{exe} missing: the wheel's console script was not installed")
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"framebus {' '.join(args)} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def no_rust_toolchain_on_path() -> str:
    found = [t for t in ("cargo", "rustc") if shutil.which(t)]
    if found and os.environ.get("FRAMEBUS_SMOKE_ALLOW_RUST") != "1":
        raise AssertionError(
            f"{', '.join(found)} on PATH ({os.environ.get('PATH')}): run with a PATH without Rust "
            "(or set FRAMEBUS_SMOKE_ALLOW_RUST=1 where the system itself ships Rust in /usr/bin)"
        )
    return f"PATH={os.environ.get('PATH')}"


def framebus_is_the_installed_wheel() -> str:
    import framebus
    import framebus._native as native

    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    here = Path(framebus.__file__).resolve()
    if site not in here.parents:
        raise AssertionError(f"framebus imported from {here}, not from {site}")
    dist_info = sorted(site.glob("framebus-*.dist-info"))
    if not dist_info or (dist_info[0] / "direct_url.json").exists() and "editable" in (dist_info[0] / "direct_url.json").read_text():
        raise AssertionError("framebus is not installed from a wheel (editable or missing dist-info)")
    wheel_tag = [ln for ln in (dist_info[0] / "WHEEL").read_text().splitlines() if ln.startswith("Tag:")]
    return f"{Path(native.__file__).name}; {', '.join(t[5:] for t in wheel_tag)}"


def demo_runs_for_a_second() -> str:
    out = cli("demo", "--seconds", "1", timeout=120).stdout
    rows = [" ".join(ln.replace("│", " ").split()) for ln in out.splitlines() if "│" in ln and any(c.isdigit() for c in ln)]
    return f"exit 0; last row: {rows[-1][:100] if rows else '(no table row printed)'}"


def frames_cross_processes_losslessly() -> str:
    import numpy as np

    import framebus

    name = f"{PREFIX}-xproc"
    n = 20
    child = r"""
import sys, numpy as np, framebus
rd = framebus.open(sys.argv[1], mode="lossless", timeout=30.0)
print("ready", flush=True)
got = []
for f in rd.frames(timeout=30.0):
    assert f.shape == (64, 48, 3) and int(f.array[0, 0, 0]) == f.frame_id % 256, (f.frame_id, f.array[0, 0, 0])
    assert bytes(f.meta) == b"m%d" % f.frame_id
    got.append(f.frame_id)
rd.close()
print(" ".join(map(str, got)), flush=True)
"""
    with framebus.create(name, shape=(64, 48, 3), dtype=np.uint8, auto_unlink=True) as w:
        proc = subprocess.Popen([sys.executable, "-c", child, name], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise AssertionError(f"reader process did not start: {line!r}")
            listed = json.loads(cli("ls", "--json").stdout)
            if name not in json.dumps(listed):
                raise AssertionError(f"framebus ls --json does not list {name}: {listed}")
            for i in range(1, n + 1):
                w.write(np.full((64, 48, 3), i % 256, np.uint8), frame_id=i, meta=b"m%d" % i)
            w.end()
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        raise AssertionError(f"reader process exited with {proc.returncode}")
    got = [int(x) for x in out.split()]
    if got != list(range(1, n + 1)):
        raise AssertionError(f"reader got frames {got}")
    return f"{n} frames written here, all read in order in another process; `framebus ls --json` listed the stream"


def frames_pipe_into_ffmpeg() -> str:
    import numpy as np

    from framebus.errors import FFmpegNotFoundError
    from framebus.ffmpeg import VideoReader, VideoWriter, find_ffmpeg

    try:
        exe = find_ffmpeg()
    except FFmpegNotFoundError as e:
        raise Skip(f"no FFmpeg here ({e}); install imageio-ffmpeg to run this check") from None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "smoke.mp4")
        with VideoWriter(path, (64, 48), fps=10, preset="ultrafast") as video:
            for i in range(10):
                video.write(np.full((48, 64, 3), i * 20, np.uint8))
        frames = list(VideoReader(path))
    if len(frames) != 10 or frames[0].shape != (48, 64, 3):
        raise AssertionError(f"decoded {len(frames)} frames of shape {frames[0].shape if frames else None}")
    return f"10 frames through {exe} and back"


def cli_ls_and_doctor() -> str:
    cli("ls")
    out = cli("doctor").stdout
    return f"ls ok; doctor: {len(out.splitlines())} lines"


def bench_is_not_in_the_wheel() -> str:
    import importlib.util

    import framebus

    if importlib.util.find_spec("framebus_bench") is not None:
        raise Skip("the benchmark suite (framebus_bench) is installed here as well")
    pkg = Path(framebus.__file__).resolve().parent
    drivers = [
        f"{p.relative_to(pkg)} ({m})"
        for p in pkg.rglob("*.py")
        for m in re.findall(r"(?:from|import) (framebus_bench[\w.]*)", p.read_text(encoding="utf-8"))
        if m != "framebus_bench.cli"  # `framebus bench` runs the suite's driver when it is installed
    ]
    if drivers:
        raise AssertionError(f"the wheel imports from the benchmark suite in {drivers}: the driver belongs in benches/")
    proc = subprocess.run([str(BIN / "framebus"), "bench", "--list"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 1 or "pip install -e ./benches" not in proc.stderr:
        raise AssertionError(f"framebus bench without the suite exited with {proc.returncode}: {proc.stderr}")
    return "framebus bench says how to install the suite (exit 1)"


def nothing_left_in_dev_shm() -> str:
    left = [p.name for p in Path("/dev/shm").glob(f"framebus.{PREFIX}*")]
    if left:
        raise AssertionError(f"left in /dev/shm: {left}")
    return ""


def main() -> int:
    os.chdir(tempfile.gettempdir())  # never import the checkout's python/framebus by accident
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != REPO]
    print(f"framebus wheel smoke suite: Python {sys.version.split()[0]} at {sys.executable}")
    for fn in (
        no_rust_toolchain_on_path,
        framebus_is_the_installed_wheel,
        demo_runs_for_a_second,
        frames_cross_processes_losslessly,
        frames_pipe_into_ffmpeg,
        cli_ls_and_doctor,
        bench_is_not_in_the_wheel,
        nothing_left_in_dev_shm,
    ):
        check(fn)
    for status, name, detail in RESULTS:
        print(f"  {status}  {name}" + (f": {detail}" if detail else ""))
    failed = sum(s == "FAIL" for s, _n, _d in RESULTS)
    print(f"wheel smoke: {sum(s == 'PASS' for s, _n, _d in RESULTS)} passed, "
          f"{sum(s == 'SKIP' for s, _n, _d in RESULTS)} skipped, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
