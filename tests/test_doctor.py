"""``framebus doctor`` (issue #17): --plan refuses what create() refuses and takes a capacity
form for variable-shape streams; --stream and the stale check report segments this framebus
cannot read, and ``framebus gc`` removes such a segment once its creator is dead and nobody
maps it; the robust-list check uses the system call number of the machine's architecture; a
missing FFmpeg, permission problems and stale streams (variable-shape ones too) are reported.
The CUDA section is tested in test_doctor_gpu.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import framebus
from framebus.commands import doctor


def cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "framebus", *args], capture_output=True, text=True, timeout=120, env=env)


def checks(p: subprocess.CompletedProcess) -> dict:
    return {c["name"]: c for c in json.loads(p.stdout)["checks"]}


@pytest.mark.parametrize(
    "plan, problem",
    [
        ("1080x1920x3:uint8:slots=0", "slots must be between 2 and 64, got 0"),
        ("1080x1920x3:uint8:slots=-3", "slots must be between 2 and 64, got -3"),
        ("64x64:uint8:slots=65", "slots must be between 2 and 64, got 65"),
        ("64x64:object", "unsupported dtype"),
        ("64x64:U5", "unsupported dtype"),
        ("64x0x3", "shape dimensions must be positive"),
        ("capacity=0", "capacity must be a positive number of bytes"),
        ("capacity=lots", "is not a size"),
        ("capacity=1MiB:uint8", "a variable-shape stream takes no dtype"),
        ("64x64:uint8:frames=3", "is not slots=N"),
    ],
)
def test_plan_refuses_what_create_refuses(plan, problem):
    p = cli("doctor", "--plan", plan)
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"framebus doctor: --plan {plan!r}: ") and problem in line and "capacity=SIZE" in line


@pytest.mark.parametrize(
    "plan, spec",
    [
        ("1080x1920x3:uint8:slots=4", dict(shape=(1080, 1920, 3), dtype=np.uint8, slots=4)),
        ("7x3:complex64:slots=64", dict(shape=(7, 3), dtype=np.complex64, slots=64)),
        ("capacity=3MiB:slots=3", dict(capacity="3MiB", slots=3)),
        ("5MB", dict(capacity="5MB")),
    ],
)
def test_plan_counts_the_bytes_create_allocates(name, plan, spec):
    with framebus.create(name, **spec) as s:
        assert doctor.planned_bytes(doctor.parse_plan(plan)) == framebus.stat(name).total_bytes
        s.unlink()


def test_a_capacity_plan_that_does_not_fit_fails():
    p = cli("doctor", "--plan", "capacity=32MiB:slots=4", "--json")
    assert checks(p)["planned streams"]["status"] == "ok"
    p = cli("doctor", "--plan", "capacity=1000000GiB:slots=2", "--json")
    assert p.returncode == 1 and checks(p)["planned streams"]["status"] == "fail"


def set_version(name: str, version: int) -> None:
    """Writes another layout version into a segment's header (offset 8, docs/layout.md)."""
    with open(f"/dev/shm/framebus.{name}", "r+b") as f:
        f.seek(8)
        f.write(struct.pack("=I", version))


def test_a_stream_of_another_layout_version_is_reported(name):
    with framebus.create(name, shape=(4,), dtype=np.uint8) as s:
        set_version(name, 3)
        p = cli("doctor", "--stream", name, "--json")
        assert p.returncode == 1
        c = checks(p)[f"stream {name}"]
        assert c["status"] == "fail" and "layout version 3" in c["detail"] and "version that created it" in c["fix"]
        doc = checks(cli("doctor", "--json"))
        assert name in doc["unreadable streams"]["detail"] and name not in doc["stale streams"]["detail"]
        assert name not in framebus.gc(dry_run=True)  # its creator (this process) lives
        set_version(name, framebus.LAYOUT_VERSION)
        s.unlink()


def test_a_stale_segment_of_an_older_version_is_listed_and_removable(name, spawn):
    """A segment of layout version 1 whose creator died: doctor lists it; plain gc keeps it
    (its reader table cannot be read); ``gc --unreadable`` removes it, but never one that a
    process still maps."""
    kept = f"{name}.mapped"
    for n in (name, kept):
        child = spawn(f"framebus.create({n!r}, shape=(4,), dtype=np.uint8).close()\nsay('created')")
        child.expect("created")
        child.finish()
    mapping = framebus.open(kept)  # someone still maps this one: it is never removed
    set_version(name, 1)
    set_version(kept, 1)
    try:
        assert framebus.stat(name).problem and not framebus.stat(name).creator_alive
        doc = checks(cli("doctor", "--json"))
        stale = doc["stale unreadable streams"]
        assert name in stale["detail"] and "layout version 1" in stale["detail"] and "`framebus gc --unreadable`" in stale["fix"]
        assert kept not in stale["detail"] and kept in doc["unreadable streams"]["detail"]
        c = checks(cli("doctor", "--stream", name, "--json"))[f"stream {name}"]
        assert c["status"] == "fail" and "layout version 1" in c["detail"] and "gc --unreadable" in c["fix"]
        assert name not in cli("gc").stdout and os.path.exists(f"/dev/shm/framebus.{name}")
        p = cli("gc", "--unreadable", "--dry-run")
        assert f"would remove {name}\n" in p.stdout and kept not in p.stdout and os.path.exists(f"/dev/shm/framebus.{name}")
        p = cli("gc", "--unreadable")
        assert p.returncode == 0 and f"removed {name}\n" in p.stdout and kept not in p.stdout
        assert not os.path.exists(f"/dev/shm/framebus.{name}") and os.path.exists(f"/dev/shm/framebus.{kept}")
    finally:
        mapping.close()
        set_version(kept, framebus.LAYOUT_VERSION)
        framebus.unlink(kept)


def test_gc_removes_stale_variable_streams_and_keeps_live_ones(name, spawn):
    child = spawn(f"s = framebus.create({name!r}, capacity='64KiB')\ns.write({{'image': np.ones((4, 4), np.uint8), 'raw': b'xyz'}})\ns.close()\nsay('created')")
    child.expect("created")
    child.finish()
    with framebus.create(f"{name}.live", capacity="64KiB") as live:
        live.write(b"abc", codec="h264")
        assert framebus.stat(name).variable and framebus.stat(name).stale
        assert name in framebus.gc(dry_run=True) and f"{name}.live" not in framebus.gc(dry_run=True)
        assert os.path.exists(f"/dev/shm/framebus.{name}")
        doc = checks(cli("doctor", "--json"))
        assert name in doc["stale streams"]["detail"]
        removed = framebus.gc()
        assert name in removed and f"{name}.live" not in removed
        assert not os.path.exists(f"/dev/shm/framebus.{name}")
        assert live.read() == b"abc"
        live.unlink()


def test_a_missing_ffmpeg_is_a_warning(tmp_path):
    (tmp_path / "imageio_ffmpeg.py").write_text("raise ImportError('hidden by the test')\n")
    env = {k: v for k, v in os.environ.items() if k != "FRAMEBUS_FFMPEG"}
    env.update(PATH=str(tmp_path / "empty"), PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]))
    p = cli("doctor", "--json", env=env)
    c = checks(p)["FFmpeg"]
    assert c["status"] == "warn" and "not found" in c["detail"] and "imageio-ffmpeg" in c["fix"]
    assert p.returncode == 0, p.stdout  # a warning: nothing framebus itself needs fails


def _as_nobody(name: str, unwritable: str, q) -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    doctor.SHM = unwritable
    q.put((doctor.check_stream(name), doctor.check_permissions()[0]))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user in a child")
def test_permission_problems_are_reported(name, tmp_path):
    unwritable = tmp_path / "shm"
    unwritable.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    with framebus.create(name, shape=(4,), dtype=np.uint8) as s:  # permissions 0o600: only root
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        proc = ctx.Process(target=_as_nobody, args=(name, str(unwritable), q))
        proc.start()
        stream, perms = q.get(timeout=60)
        proc.join(60)
        s.unlink()
    assert stream.status == "fail" and "may not open it" in stream.detail and "permissions=0o660" in stream.fix
    assert perms.status == "fail" and "cannot create files" in perms.detail


class FakeLibc:
    def __init__(self):
        self.calls = []

    def syscall(self, number, *args):
        self.calls.append(number)
        return 0


@pytest.mark.parametrize("machine, number", [("x86_64", 274), ("aarch64", 100), ("riscv64", None), ("armv7l", None)])
def test_robust_list_uses_the_number_of_the_architecture(machine, number):
    libc = FakeLibc()
    (c,) = doctor.check_robust_list(machine, libc)
    if number is None:
        assert libc.calls == [] and c.status == "info" and "not checked" in c.detail
    else:
        assert libc.calls == [number] and c.status == "ok" and f"system call {number}" in c.detail


def test_robust_list_on_this_machine():
    (c,) = doctor.check_robust_list()
    assert c.status in ("ok", "info"), c


@pytest.mark.parametrize("size, words", [(1 << 20, "with a 1.0 MiB /dev/shm"), (64 << 20, "with Docker's default 64 MiB /dev/shm")])
def test_container_warning_calls_only_64_mib_the_default(monkeypatch, size, words):
    real = os.statvfs

    def statvfs(path):
        st = real(path)
        if path != doctor.SHM:
            return st
        return os.statvfs_result((st.f_bsize, 4096, size // 4096, size // 4096, size // 4096, st.f_files, st.f_ffree, st.f_favail, st.f_flag, st.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)
    monkeypatch.setattr(doctor, "in_container", lambda: "docker")
    (c,) = [c for c in doctor.check_shm([]) if c.name == "container"]
    assert c.status == "warn" and words in c.detail
    if size != 64 << 20:
        assert "default" not in c.detail
