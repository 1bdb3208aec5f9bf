"""Operating framebus (issue #17): the counters monitors read, `framebus top` (--once, --json,
and the live view driven in a pseudo-terminal), `hz`, `echo`, `framebus.stat`'s per-reader
fields, `doctor`, and InsufficientSpaceError on a /dev/shm that is too small."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

import framebus


@pytest.fixture
def name():
    n = f"top-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "framebus", *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "160"})


def pipeline(name: str):
    """A paused writer with 5 frames, a lossless reader behind by 2 holding a view, a latest
    reader tagged as a recorder, and a closed lossless handle whose view still pins a slot."""
    w = framebus.create(name, shape=(8,), dtype=np.uint8, slots=8)
    lossless = framebus.open(name, mode="lossless")
    latest = framebus.open(name)
    latest.set_role("record", "out.mp4")
    closing = framebus.open(name, mode="lossless")
    for i in range(5):
        w.write(np.full(8, i, np.uint8))
    view = lossless.wait_view(timeout=1)  # consumed 1 of 5 ...
    for _ in range(2):
        lossless.read_new(timeout=1)  # ... then 3: lag 2, pinning frame 1
    latest.read_new(timeout=1)
    kept = closing.wait_view(timeout=1).array
    closing.close()
    return w, lossless, latest, view, kept


def test_stat_has_the_writer_and_every_handle(name):
    w, lossless, latest, view, kept = pipeline(name)
    try:
        info = framebus.stat(name)
        assert info.writer["pid"] == os.getpid() and info.writer["alive"] and info.writer["latest_seq"] == 5
        by_mode = {}
        for r in info.readers:
            by_mode.setdefault(r["mode"], []).append(r)
        assert {r["role"] for r in by_mode["latest"]} == {"writer", "record"}
        (ll,) = by_mode["lossless"]
        assert ll["consumed"] == 3 and ll["reads"] == 3 and ll["pinned_slots"] == 1 and ll["pinned_since_ns"]
        (closed,) = by_mode["closed"]
        assert closed["pinned_slots"] == 1  # the kept view's pin, no backpressure
        (rec,) = [r for r in by_mode["latest"] if r["role"] == "record"]
        assert rec["label"] == "out.mp4" and rec["consumed"] == 5
    finally:
        for h in (lossless, latest, w):
            h.close()


def test_pin_age_is_that_of_the_oldest_pin_still_held(name):
    """A consumer that takes the next view before releasing the last one always holds a pin;
    the age monitors show follows the oldest pin it still holds, so a healthy consumer looks
    young and only a view really kept grows old."""
    w = framebus.create(name, shape=(8,), dtype=np.uint8, slots=6)
    r = framebus.open(name)

    def since() -> int:
        (mine,) = [e for e in framebus.stat(name).readers if e["role"] != "writer"]
        return mine["pinned_since_ns"]

    try:
        w.write(np.zeros(8, np.uint8))
        first = r.view()
        t1 = since()
        w.write(np.ones(8, np.uint8))
        for i in range(3):  # copying reads pin only while they copy: not timed
            r.read()
        second = r.view()
        assert since() == t1  # the first view is still the oldest pin
        first.release()
        t2 = since()
        assert t2 > t1  # now the second view's
        second.release()
        assert since() is None
    finally:
        r.close()
        w.close()


def test_bytes_written_counts_frame_bytes_of_variable_frames(name):
    w = framebus.create(name, capacity="1MiB")
    try:
        for i in range(10):
            w.write(bytes(100), codec="h264")
        assert framebus.stat(name).writer["bytes_written"] == 1000
    finally:
        w.close()


def test_top_json_matches_the_ring(name):
    w, lossless, latest, view, kept = pipeline(name)
    try:
        p = cli("top", "--json", "--interval", "0.2", name)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        (s,) = doc["streams"]
        assert s["name"] == name and s["writer_pid"] == os.getpid() and s["writer_alive"]
        assert s["latest_seq"] == 5 and s["write_fps"] == 0.0 and s["ended"] is False
        modes = sorted((r["mode"], r["role"], r["lag_frames"]) for r in s["readers"])
        assert modes == [("closed", "handle", 0), ("latest", "record", 0), ("latest", "writer", 0), ("lossless", "handle", 2)]
        for r in s["readers"]:
            assert {"pid", "mode", "read_fps", "lag_frames", "missed"} <= set(r)
    finally:
        for h in (lossless, latest, w):
            h.close()


def test_top_rates_follow_a_writer(name):
    """Rates come from counters: a writer that writes N frames during the interval shows a
    positive rate, and a lossless reader that cannot keep up is blamed for the writer's waits."""
    w = framebus.create(name, shape=(1024,), dtype=np.uint8, slots=2)
    r = framebus.open(name, mode="lossless")
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            try:
                w.write(np.zeros(1024, np.uint8), timeout=0.05)
            except TimeoutError:
                pass

    def read() -> None:
        while not stop.is_set():
            try:
                r.read_new(timeout=0.05)
            except TimeoutError:
                pass
            time.sleep(0.005)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    try:
        from framebus.monitor import document

        (s,) = document([name], interval=0.5)["streams"]
        assert s["write_fps"] > 0 and s["write_mbps"] > 0 and s["write_waits"] > 0
        (ll,) = [x for x in s["readers"] if x["mode"] == "lossless"]
        assert ll["read_fps"] > 0 and ll["writer_waits"] > 0
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        r.close()
        w.close()


def _screen(fd: int, seconds: float) -> str:
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", " ", out.decode(errors="replace"))


def test_live_top_in_a_terminal_shows_what_json_says(name):
    """Drives the live view in a pseudo-terminal: the screen shows the stream, its writer, every
    handle with its mode and role, and the same sequence and lags as --json; q quits."""
    w, lossless, latest, view, kept = pipeline(name)
    pid, fd = pty.fork()
    if pid == 0:  # child: the live view at 160x40
        os.environ.update(COLUMNS="160", LINES="40", TERM="xterm")
        os.execv(sys.executable, [sys.executable, "-m", "framebus", "top", "--interval", "0.2", name])
    try:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        screen = _screen(fd, 3.0)
        doc = json.loads(cli("top", "--json", "--interval", "0.1", name).stdout)
        (s,) = doc["streams"]
        assert name in screen
        assert f"writer {s['writer_pid']} alive" in screen
        assert f"seq {s['latest_seq']}" in screen
        for r in s["readers"]:
            assert f"pid {r['pid']}" in screen
            assert f"{r['mode']} {r['role']}" in screen
        (ll,) = [r for r in s["readers"] if r["mode"] == "lossless"]
        assert f"lag {ll['lag_frames']} " in screen
        assert "caused 0" in screen and "missed 0" in screen
        os.write(fd, b"s")  # sort by rate: still running
        os.write(fd, b"q")
        status = None
        end = time.monotonic() + 30
        while status is None and time.monotonic() < end:
            _screen(fd, 0.2)  # keep reading, or the view blocks writing to the terminal
            done, st = os.waitpid(pid, os.WNOHANG)
            status = st if done else None
        assert status is not None, "q did not quit"
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
        os.close(fd)
        for h in (lossless, latest, w):
            h.close()


def test_top_once_prints_a_table(name):
    w, lossless, latest, view, kept = pipeline(name)
    try:
        p = cli("top", "--once", "--interval", "0.1", "--filter", name[:8])
        assert p.returncode == 0, p.stderr
        assert name in p.stdout and "lossless handle" in p.stdout and "closed handle" in p.stdout
    finally:
        for h in (lossless, latest, w):
            h.close()


def test_top_once_at_80_columns_keeps_long_names_whole(name):
    """As `framebus ls`: a 67-character name is never cut, columns that do not fit whole are
    left out (never squeezed to nothing) and the note says which."""
    long = (name + "-a-rather-long-camera-name-for-the-top-view-" + "x" * 67)[:67]
    w = framebus.create(long, shape=(4,), dtype=np.uint8)
    r = framebus.open(long, mode="lossless")
    try:
        w.write(np.zeros(4, np.uint8))
        env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
        p = subprocess.run([sys.executable, "-m", "framebus", "top", "--once", "--interval", "0.1", long], capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stderr
        out = p.stdout
        assert long in out and "…" not in out and "..." not in out
        assert "┃┃" not in out and "││" not in out and "┳┳" not in out  # no column squeezed to nothing
        header = next(line for line in out.splitlines() if "stream / handle" in line)
        shown = [h.strip() for h in header.strip("┃ ").split("┃")]
        from framebus.commands.top import HEADERS

        dropped = [h for h in HEADERS if h not in shown]
        assert shown[0] == "stream / handle" and dropped and all(h in HEADERS for h in shown)
        note = " ".join(out.split())
        assert f"({', '.join(dropped)} not shown at this width" in note
        assert max(len(line) for line in out.splitlines()) <= 80
    finally:
        r.close()
        w.unlink()


def test_hz_and_echo(name):
    w = framebus.create(name, shape=(2, 3), dtype=np.float32)
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            w.write(np.full((2, 3), i, np.float32), frame_id=i, meta=b'{"k": 1}')
            i += 1
            time.sleep(0.01)

    t = threading.Thread(target=write)
    t.start()
    try:
        p = cli("hz", name, "--every", "0.5", "--count", "2")
        assert p.returncode == 0, p.stderr
        assert p.stdout.count("average rate:") == 2 and "std dev" in p.stdout
        p = cli("echo", name, "--json", "--count", "2")
        assert p.returncode == 0, p.stderr
        frames = [json.loads(line) for line in p.stdout.splitlines()]
        assert len(frames) == 2 and frames[1]["seq"] > frames[0]["seq"]
        assert frames[0]["shape"] == [2, 3] and frames[0]["dtype"] == "float32" and frames[0]["meta"] == '{"k": 1}'
        assert frames[0]["min"] == frames[0]["max"] == frames[0]["frame_id"]
    finally:
        stop.set()
        t.join(5)
        w.close()


def test_hz_says_when_the_writer_stopped(name):
    """Once frames stop, hz reports "no new frames" (it waits for a frame after the last one it
    counted; it used to see the last frame again at once, spin on a core and repeat the old
    rate)."""
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            w.write(np.full(4, i % 256, np.uint8))
            i += 1
            time.sleep(0.01)

    t = threading.Thread(target=write)
    t.start()
    hz = subprocess.Popen([sys.executable, "-m", "framebus", "hz", name, "--every", "0.2", "--count", "12"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [hz.stdout.readline()]  # type: ignore[union-attr]
        while "average rate" not in lines[-1] and lines[-1]:
            lines.append(hz.stdout.readline())  # type: ignore[union-attr]
        assert "average rate" in lines[-1], lines
        stop.set()
        t.join(5)
        rest, _ = hz.communicate(timeout=60)
        assert hz.returncode == 0
        assert rest.splitlines()[-1] == "no new frames", rest
    finally:
        stop.set()
        if hz.poll() is None:
            hz.kill()
            hz.wait()
        w.close()


def test_top_hides_dead_handles_and_shows_hz_as_a_monitor(name):
    """After a subscriber is killed and restarted, top lists the live one only (not the dead
    process's entry, which the writer reclaims when it runs short of slots), and ``framebus
    hz`` watching the stream is a monitor with no lag, however many frames it did not read."""
    w = framebus.create(name, shape=(8,), dtype=np.uint8, slots=8)
    child = f"import sys, framebus\nr = framebus.open({name!r}, mode='lossless')\nprint('attached', flush=True)\nsys.stdin.read()"
    dead = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hz = None
    again = None
    try:
        assert dead.stdout.readline().strip() == "attached"  # type: ignore[union-attr]
        dead.kill()
        dead.wait(60)
        again = framebus.open(name, mode="lossless")  # the subscriber, restarted
        hz = subprocess.Popen([sys.executable, "-m", "framebus", "hz", name, "--every", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(600):  # until hz has attached (bounded: 60 s)
            if any(r["role"] == "monitor" and r["pid"] == hz.pid for r in framebus.stat(name).readers) or hz.poll() is not None:
                break
            time.sleep(0.1)
        for i in range(5):
            w.write(np.full(8, i, np.uint8))
            again.read_new(timeout=5)
        info = framebus.stat(name)
        assert [r for r in info.readers if r["pid"] == dead.pid and not r["alive"]]  # still in the table
        (mon,) = [r for r in info.readers if r["role"] == "monitor"]
        assert mon["consumed"] < 5  # hz never consumes: what used to show as a growing lag
        p = cli("top", "--json", "--interval", "0.2", name)
        assert p.returncode == 0, p.stderr
        (s,) = json.loads(p.stdout)["streams"]
        assert dead.pid not in [r["pid"] for r in s["readers"]]
        assert all(r["alive"] for r in s["readers"])
        (mon,) = [r for r in s["readers"] if r["role"] == "monitor"]
        assert mon["pid"] == hz.pid and mon["label"] == "hz" and mon["monitor"] is True
        assert mon["lag_frames"] == 0 and mon["lag_ms"] == 0.0
        (sub,) = [r for r in s["readers"] if r["role"] == "handle"]
        assert sub["pid"] == os.getpid() and sub["lag_frames"] == 0 and sub["monitor"] is False
        p = cli("top", "--once", name)
        assert p.returncode == 0, p.stderr
        assert f"pid {dead.pid}" not in p.stdout and "dead" not in p.stdout, p.stdout
        (row,) = [line for line in p.stdout.splitlines() if f"pid {hz.pid}" in line]
        assert "monitor hz" in row and "lag" not in row and "missed" not in row, row
    finally:
        if hz is not None:
            hz.kill()
            hz.communicate(timeout=60)
        if dead.poll() is None:
            dead.kill()
        dead.wait(60)
        dead.stdin.close()  # type: ignore[union-attr]
        dead.stdout.close()  # type: ignore[union-attr]
        if again is not None:
            again.close()
        w.close()


def test_doctor_passes_here_and_fails_a_plan_that_does_not_fit():
    p = cli("doctor")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "/dev/shm" in p.stdout and "futex" in p.stdout and "all good" in p.stdout
    free = shutil.disk_usage("/dev/shm").free
    rows = int(free // (1920 * 3 * 2)) + 1000
    p = cli("doctor", "--plan", f"{rows}x1920x3:uint8:slots=2", "--json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert not doc["ok"]
    (bad,) = [c for c in doc["checks"] if c["status"] == "fail"]
    assert bad["name"] == "planned streams" and "free" in bad["detail"] and bad["fix"]
    p = cli("doctor", "--plan", "not-a-plan")
    assert p.returncode == 2 and "HxWxC" in p.stderr


def _can_mount_private_tmpfs() -> bool:
    if not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True)
    return p.returncode == 0


@pytest.mark.skipif(not _can_mount_private_tmpfs(), reason="needs unshare -m and mount (root) to put a 1 MiB tmpfs on /dev/shm")
def test_a_stream_that_does_not_fit_fails_at_create():
    """In a private mount namespace with a 1 MiB /dev/shm: create fails with
    InsufficientSpaceError naming the bytes needed, the bytes free and the fix; nothing is left."""
    code = (
        "import os, numpy as np, framebus\n"
        "try:\n"
        "    framebus.create('big', shape=(1080, 1920, 3), dtype=np.uint8)\n"
        "except framebus.InsufficientSpaceError as e:\n"
        "    assert e.errno == 28 and isinstance(e, OSError)\n"
        "    assert 'needs 24' in str(e) and '1048576 are free' in str(e) and '--shm-size' in str(e), str(e)\n"
        "    assert os.listdir('/dev/shm') == []\n"
        "    print('refused')\n"
        "w = framebus.create('small', shape=(64, 64), dtype=np.uint8)\n"
        "w.write(np.ones((64, 64), np.uint8)); assert w.read().sum() == 4096; w.unlink()\n"
    )
    p = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {sys.executable} -c \"$0\"", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "refused" in p.stdout
