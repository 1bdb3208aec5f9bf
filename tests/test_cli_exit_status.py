"""Every ``framebus`` command follows ``framebus --help``: 2 for a usage error (an invalid stream
name included), 130 after Ctrl-C, 143 after SIGTERM, a quiet exit on a closed standard output;
and what ``ls``, ``top``, ``gc``, ``doctor``, ``bridge`` and ``demo`` tell a new user."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import framebus
from framebus import cli

from conftest import SPAWNED, segment_path

BOUND = 60.0  # generous upper bound for a child to react (never a performance threshold)


def run_cli(*args: str, env=None, timeout: float = BOUND) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "framebus", *args], capture_output=True, text=True, timeout=timeout, env=env)


def start(*args: str, **kw) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "framebus", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    SPAWNED.add(p.pid)
    return p


# -- usage errors: 2 ---------------------------------------------------------------------------

NAMED = [
    ["top", "{}"],
    ["top", "--once", "{}"],
    ["hz", "{}"],
    ["echo", "{}"],
    ["record", "{}", "/nonexistent/out.mp4"],
    ["play", "/nonexistent/in.mp4", "{}"],
    ["bridge", "publish", "{}", "tcp://127.0.0.1:1"],
    ["bridge", "subscribe", "tcp://127.0.0.1:1", "{}"],
]


@pytest.mark.parametrize("args", NAMED, ids=lambda a: " ".join(a[:2]).replace("{}", "NAME"))
def test_an_invalid_stream_name_is_a_usage_error(args):
    p = run_cli(*[a.format("bad/name") for a in args])
    assert p.returncode == 2, p.stderr
    assert 'invalid stream name "bad/name"' in p.stderr and "usage: framebus" in p.stderr and "Traceback" not in p.stderr


# -- Ctrl-C: 130, SIGTERM: 143, for every command ----------------------------------------------


@pytest.mark.parametrize("command", cli.COMMANDS)
@pytest.mark.parametrize("status", [130, 143], ids=["ctrl-c", "sigterm"])
def test_every_command_exits_130_after_ctrl_c_and_143_after_sigterm(command, status, monkeypatch, capsys):
    """Whatever the command is doing when the signal arrives, ``main`` turns it into the
    documented status (SIGTERM raises Terminated, a KeyboardInterrupt, once main runs)."""
    import importlib

    from framebus.commands import _signals

    exc = KeyboardInterrupt if status == 130 else _signals.Terminated
    module = importlib.import_module(f"framebus.commands.{command}")

    def interrupted(args):
        raise exc()

    monkeypatch.setattr(module, "run", interrupted)
    argv = {"record": ["record", "x", "out.mp4"], "play": ["play", "in.mp4", "x"], "hz": ["hz", "x"], "echo": ["echo", "x"],
            "bridge": ["bridge", "publish", "x", "tcp://127.0.0.1:1"], "ros2": ["ros2", "publish", "x", "--topic", "/t"]}.get(command, [command])
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert cli.main(argv) == status
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before, "main restores the caller's handlers"
    assert ("interrupted" if status == 130 else "terminated") in capsys.readouterr().err


def catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` handles SIGTERM (framebus's main has started: before that a
    signal would kill the interpreter instead of reaching the command)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def _signal_when(p: subprocess.Popen, ready, signum: int) -> "tuple[str, str]":
    end = time.monotonic() + BOUND
    while not (catches_sigterm(p.pid) and ready()):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end, "the command did not get ready"
        time.sleep(0.05)
    p.send_signal(signum)
    try:
        return p.communicate(timeout=BOUND)
    finally:
        p.kill()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("command", ["hz", "echo", "top", "record"])
def test_a_signal_stops_a_reading_command_with_its_status(command, signum, name, tmp_path):
    pytest.importorskip("rich")
    if command == "record":
        pytest.importorskip("imageio_ffmpeg")
    with framebus.create(name, shape=(8, 8, 3), dtype=np.uint8) as w:
        w.write(np.zeros((8, 8, 3), np.uint8))
        args = {"hz": ["hz", name], "echo": ["echo", name, "--new", "--timeout", "600"], "top": ["top", name, "--interval", "0.1"],
                "record": ["record", name, str(tmp_path / "r.mp4"), "--quiet"]}[command]
        p = start(*args)
        # Attached (hz, echo, record); top attaches nothing: main has started.
        _signal_when(p, lambda: w.attached >= 2 if command != "top" else True, signum)
        w.unlink()
    # record of no frame: nothing recorded, stopped by the signal: its status, not 1
    assert p.returncode == 128 + signum, (p.returncode, command)


def test_play_loop_stopped_by_ctrl_c_exits_130(name, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    from framebus.ffmpeg import VideoWriter

    clip = tmp_path / "loop.mp4"
    with VideoWriter(str(clip), (16, 16), fps=25, preset="ultrafast") as vw:
        for i in range(3):
            vw.write(np.full((16, 16, 3), i, np.uint8))
    p = start("play", str(clip), name, "--loop", "--quiet")

    def looping() -> bool:
        try:
            with framebus.open(name) as s:
                return s.write_sequence > 3  # a second pass is under way
        except FileNotFoundError:
            return False

    _, err = _signal_when(p, looping, signal.SIGINT)
    assert p.returncode == 130, err
    assert not os.path.exists(segment_path(name))


@pytest.mark.parametrize("action", ["publish", "subscribe-waiting"])
def test_a_bridge_stopped_by_ctrl_c_exits_130(action, name, tmp_path):
    pytest.importorskip("zmq")
    ep = f"ipc://{tmp_path}/b.sock"
    if action == "publish":
        with framebus.create(name, shape=(4,), dtype=np.uint8):
            p = start("bridge", "publish", name, ep, "--quiet")
            out, err = _signal_when(p, lambda: os.path.exists(f"{tmp_path}/b.sock"), signal.SIGINT)
            framebus.unlink(name)
        assert "stopped:" in out
    else:
        # Nobody publishes: the subscriber waits for an answer for up to 600 s; Ctrl-C stops it now.
        p = start("bridge", "subscribe", ep, name, "--quiet", "--timeout", "600")
        from framebus.net.link import bridges

        _, err = _signal_when(p, lambda: any(r["stream"] == name for r in bridges()), signal.SIGINT)
        assert "stopped while waiting for the publisher" in err
    assert p.returncode == 130, err
    assert not os.path.exists(segment_path(name))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_stopped_by_a_signal_exits_with_its_status_and_removes_its_stream(signum):
    p = start("demo", "--seconds", "600", "--width", "64", "--height", "48", env={**os.environ, "COLUMNS": "200"})
    # any moment after main started works: every stage cleans up
    _, err = _signal_when(p, lambda: os.path.exists(segment_path(f"demo-{p.pid}")), signum)
    assert p.returncode == 128 + signum, err
    assert not os.path.exists(segment_path(f"demo-{p.pid}"))


def test_demo_stopped_by_two_quick_signals_still_cleans_up():
    """A second Ctrl-C right after the first (or a terminal signalling the whole process group
    after `timeout -s INT`) does not cut the demo's clean-up short: a signal never raises in
    the demo, it only asks the loops to stop, so the stream is removed and the status is 130."""
    p = start("demo", "--seconds", "600", "--width", "64", "--height", "48", env={**os.environ, "COLUMNS": "200"})
    end = time.monotonic() + BOUND
    while not (catches_sigterm(p.pid) and os.path.exists(segment_path(f"demo-{p.pid}"))):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end, "the demo did not get ready"
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=BOUND)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert "Traceback" not in err, err
    assert not os.path.exists(segment_path(f"demo-{p.pid}"))


# -- a closed standard output --------------------------------------------------------------------


@pytest.mark.parametrize("args", [["doctor"], ["ls"], ["top", "--once", "--interval", "0.1"], ["--help"]], ids=lambda a: a[0])
def test_a_closed_stdout_ends_quietly(args, name):
    with framebus.create(name, shape=(4,), dtype=np.uint8, auto_unlink=True):
        r, w = os.pipe()
        p = subprocess.Popen([sys.executable, "-m", "framebus", *args], stdout=w, stderr=subprocess.PIPE, text=True)
        os.close(w)
        os.close(r)  # `| head` that has already exited
        _, err = p.communicate(timeout=BOUND)
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err, err
    assert p.returncode in (0, 1)


# -- ls / top to a pipe: every column; one dtype spelling ---------------------------------------


def test_ls_and_top_to_a_pipe_keep_every_column(name):
    long = (name + "-" + "x" * 150)[:150]  # wider than any terminal default
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with framebus.create(long, shape=(4,), dtype=np.uint8) as w, framebus.open(long, mode="lossless"):
        w.write(np.zeros(4, np.uint8))
        top = subprocess.run([sys.executable, "-m", "framebus", "top", "--once", "--interval", "0.1", long], capture_output=True, text=True, env=env, timeout=BOUND)
        ls = subprocess.run([sys.executable, "-m", "framebus", "ls"], capture_output=True, text=True, env=env, timeout=BOUND)
        w.unlink()
    assert top.returncode == 0, top.stderr
    assert "waits / missed" in top.stdout and "pins" in top.stdout and "not shown" not in top.stdout
    assert ls.returncode == 0, ls.stderr
    assert "not shown" not in ls.stdout and "written" in ls.stdout


def test_top_json_names_dtypes_as_ls_does(name):
    with framebus.create(name, shape=(4,), dtype=np.uint8, auto_unlink=True):
        doc = json.loads(run_cli("top", "--json", "--interval", "0.1", name).stdout)
        rows = json.loads(run_cli("ls", "--json").stdout)
    assert doc["streams"][0]["dtype"] == "uint8"
    assert [r["dtype"] for r in rows if r["name"] == name] == ["uint8"]


# -- damaged and abandoned segments ------------------------------------------------------------


@pytest.mark.parametrize("args", [["top", "--once", "--interval", "0.1"], ["top", "--json", "--interval", "0.1"]], ids=["once", "json"])
def test_top_of_a_damaged_stream_says_so(args, name):
    framebus.create(name, shape=(2,)).close()
    with open(segment_path(name), "r+b") as f:
        f.write(b"NOTMAGIC")
    try:
        p = run_cli(*args, name)
    finally:
        framebus.unlink(name)
    assert p.returncode == 1, p.stdout
    assert "cannot be read" in p.stderr and "framebus doctor --stream" in p.stderr and "Traceback" not in p.stderr


def test_gc_explains_a_segment_being_created_and_removes_it_once_abandoned(name):
    """An empty segment: `ls` says to run gc; while it is younger than the creation grace gc
    says why it leaves it (not "no stale streams"), once older gc removes it."""
    from framebus.commands.gc import CREATION_GRACE_S

    path = segment_path(name)
    open(path, "wb").close()
    try:
        ls = run_cli("ls", env={"COLUMNS": "1000"})
        assert "framebus gc" in ls.stdout and f"once it is {CREATION_GRACE_S:g} s old" in ls.stdout
        young = run_cli("gc")
        assert young.returncode == 0 and f"left {name}: not initialised yet" in young.stdout and "no stale streams" not in young.stdout
        assert os.path.exists(path)
        doctor = run_cli("doctor")
        assert "streams being created" in doctor.stdout and "still in use" not in doctor.stdout.split(name)[0].rsplit("\n", 1)[-1]
        past = time.time() - CREATION_GRACE_S - 60
        os.utime(path, (past, past))
        p = run_cli("gc")
        assert p.returncode == 0 and f"removed {name}" in p.stdout and not os.path.exists(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_doctor_on_a_read_only_shm_says_so_and_skips_the_futex_check(monkeypatch):
    from framebus.commands import doctor

    real = os.statvfs(doctor.SHM)
    fields = list(real)
    fields[8] = real.f_flag | os.ST_RDONLY
    monkeypatch.setattr(doctor.os, "statvfs", lambda path: os.statvfs_result(fields))
    monkeypatch.setattr(doctor.os, "access", lambda path, mode: False)
    checks = {c.name: c for c in doctor.check_permissions() + doctor.check_futex()}
    perms = checks["permissions"]
    assert perms.status == "fail" and "read-only" in perms.detail and "chmod" not in perms.fix and "remount,rw" in perms.fix
    assert checks["futex"].status == "info" and "not checked" in checks["futex"].detail


# -- bridge without pyzmq ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["bridge", "publish", "x", "tcp://127.0.0.1:1"], ["bridge", "subscribe", "tcp://127.0.0.1:1", "x"], ["bridge", "keys", "/nonexistent"]], ids=["publish", "subscribe", "keys"])
def test_bridge_without_pyzmq_says_how_to_install_it(args):
    code = "import sys; sys.modules['zmq'] = None; from framebus.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=BOUND)
    assert p.returncode == 1, p.stderr
    assert "pyzmq" in p.stderr and "framebus[net]" in p.stderr and "Traceback" not in p.stderr


# -- demo: frames/s from the first frame ---------------------------------------------------------


def test_demo_rate_counts_from_the_first_frame():
    from framebus.commands.demo import _display, rate

    assert rate(11, 1_000_000_000, 2_000_000_000) == 10.0
    assert rate(1, 5, 5) == 0.0

    class Done:
        def is_alive(self) -> bool:
            return False

    stats: "queue.Queue" = queue.Queue()
    # 11 frames between t=1 s and t=2 s: 10 frames/s, however long the processes took to start.
    stats.put({"received": 11, "latencies": [1.0], "corrupt": 0, "missed": 0, "first_ns": 10**9, "last_ns": 2 * 10**9, "done": True})

    class Args:
        seconds, mode, slots = 1.0, "lossless", 4

    final = _display(Args(), stats, Done(), threading.Event(), 100, (10, 10, 3), threading.Event())
    assert final["fps"] == 10.0


@pytest.mark.parametrize("command", ["echo", "hz"])
def test_a_damaged_stream_points_to_doctor_not_to_a_python_call(command, name):
    framebus.create(name, shape=(2,)).close()
    with open(segment_path(name), "r+b") as f:
        f.write(b"NOTMAGIC")
    try:
        p = run_cli(command, name)
    finally:
        framebus.unlink(name)
    assert p.returncode == 1, p.stderr
    assert "corrupt" in p.stderr and f"framebus doctor --stream {name}" in p.stderr and "framebus.unlink(" not in p.stderr
