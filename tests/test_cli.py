"""The ``framebus`` command line, run as ``python -m framebus`` in a subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import framebus

from conftest import SPAWNED, segment_path

LONG = 120.0


def run_cli(*args: str, timeout: float = LONG) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="400", NO_COLOR="1")
    p = subprocess.Popen([sys.executable, "-m", "framebus", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    SPAWNED.add(p.pid)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"framebus {' '.join(args)} did not finish within {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _entry(rows, name):
    found = [r for r in rows if r["name"] == name]
    assert len(found) == 1, rows
    return found[0]


def test_version_and_help():
    p = run_cli("--version")
    assert p.returncode == 0 and framebus.__version__ in p.stdout
    p = run_cli()
    assert p.returncode == 2 and "demo" in p.stdout and "ls" in p.stdout and "gc" in p.stdout
    p = run_cli("nonsense")
    assert p.returncode == 2


def test_ls_shows_a_stream(name):
    with framebus.create(name, shape=(3, 4), dtype=np.uint8, slots=5) as w, framebus.open(name, mode="lossless") as r:
        w.write(np.zeros((3, 4), np.uint8))
        p = run_cli("ls")
        assert p.returncode == 0, p.stderr
        assert name in p.stdout and "3x4" in p.stdout
        p = run_cli("ls", "--json")
        assert p.returncode == 0, p.stderr
        row = _entry(json.loads(p.stdout), name)
        assert row["shape"] == [3, 4] and row["dtype"] == "uint8" and row["slots"] == 5
        assert row["writer"] == "alive"
        assert row["readers"] == 1 and row["lossless"] == 1  # the writer's own handle is no reader
        assert row["sequence"] == 1 and row["frames_written"] == 1
        assert row["bytes_written"] == 12 and row["frame_bytes"] == 12 and isinstance(row["total_bytes"], int)
        assert row["problem"] is None and row["bridges"] == []
        r.close()
        w.unlink()
    p = run_cli("ls", "--json")
    assert name not in [r["name"] for r in json.loads(p.stdout)]


def test_ls_reports_a_damaged_stream_without_failing(name):
    framebus.create(name, shape=(2,)).close()
    with open(segment_path(name), "r+b") as f:
        f.write(b"NOTMAGIC")
    p = run_cli("ls", "--json")
    assert p.returncode == 0, p.stderr
    row = _entry(json.loads(p.stdout), name)
    assert row["writer"] == "unreadable" and "corrupt" in row["problem"]
    p = run_cli("ls")
    assert p.returncode == 0 and name in p.stdout
    framebus.unlink(name)


def test_gc_dry_run_lists_a_stale_stream_and_removes_nothing(name, spawn):
    child = spawn(f"framebus.create({name!r}, shape=(2,)).close()\nsay('created')")
    child.expect("created")
    child.finish()
    with framebus.create(name + ".live", shape=(2,)) as live:
        p = run_cli("gc", "-n")
        assert p.returncode == 0, p.stderr
        assert f"would remove {name}\n" in p.stdout
        assert name + ".live" not in p.stdout
        p = run_cli("gc", "--dry-run")
        assert f"would remove {name}\n" in p.stdout
        assert os.path.exists(segment_path(name))
        p = run_cli("ls", "--json")
        assert _entry(json.loads(p.stdout), name)["writer"] == "stale"
        assert _entry(json.loads(p.stdout), name + ".live")["writer"] == "alive"
        live.unlink()
    framebus.unlink(name)


@pytest.mark.parametrize("extra", [[], ["--mode", "latest", "--width", "320", "--height", "240", "--slots", "2"]], ids=["default", "latest-small"])
def test_demo_runs_and_leaves_nothing_behind(extra):
    p = subprocess.Popen(
        [sys.executable, "-m", "framebus", "demo", "--seconds", "1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, COLUMNS="200", NO_COLOR="1"),
    )
    SPAWNED.add(p.pid)
    try:
        out, err = p.communicate(timeout=LONG)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"demo did not finish:\n{out}\n{err}")
    assert p.returncode == 0, f"{out}\n{err}"
    assert "frames/s" in out
    assert out.endswith("\n"), repr(out[-80:])  # the table's last line is ended, also to a pipe
    assert "nan" not in out
    assert not os.path.exists(segment_path(f"demo-{p.pid}"))


def _demo_interrupted_before_its_first_frame() -> "tuple[str, str, int, bool]":
    """Starts a demo and sends it SIGINT as soon as its consumer has attached and before the
    producer wrote a frame (the producer writes only once the consumer is ready). Returns
    (stdout, stderr, exit status, whether it was interrupted before any frame was written)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "framebus", "demo", "--seconds", "60", "--width", "64", "--height", "48"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, COLUMNS="200", NO_COLOR="1"),
    )
    SPAWNED.add(p.pid)
    early = False
    try:
        for _ in range(int(LONG / 0.002)):
            if p.poll() is not None:
                break
            try:
                info = framebus.stat(f"demo-{p.pid}")
            except (FileNotFoundError, ValueError):
                time.sleep(0.002)
                continue
            if any(r["role"] != "writer" for r in info.readers):  # the consumer is attached
                early = info.frames_written == 0
                break
            time.sleep(0.002)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=LONG)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"demo did not stop after SIGINT:\n{out}\n{err}")
    assert not os.path.exists(segment_path(f"demo-{p.pid}"))
    return out, err, p.returncode, early


def test_demo_interrupted_before_the_first_frame_says_no_frames():
    """Ctrl-C before any frame arrived: the table says "no frames" for the latencies (not
    "nan µs") and its last line is ended."""
    for _ in range(5):  # a table printed before any frame arrived (the race is retried)
        out, err, rc, early = _demo_interrupted_before_its_first_frame()
        assert rc == 130, f"rc {rc}\n{out}\n{err}"
        assert "nan" not in out, out
        assert out == "" or out.endswith("\n"), repr(out[-80:])
        if early and "latency p50" in out:
            assert "no frames" in out, out
            return
    pytest.fail("the demo was never interrupted after its table appeared and before its first frame")


def test_demo_interrupted_leaves_nothing_behind():
    """Ctrl-C (SIGINT) in the middle of a demo: it stops, and its stream is removed."""
    p = subprocess.Popen(
        [sys.executable, "-m", "framebus", "demo", "--seconds", "60", "--width", "320", "--height", "240"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, COLUMNS="200", NO_COLOR="1"),
    )
    SPAWNED.add(p.pid)
    try:
        # Wait until the demo has created its stream, then interrupt it.
        for _ in range(int(LONG / 0.05)):
            if os.path.exists(segment_path(f"demo-{p.pid}")) or p.poll() is not None:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=LONG)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"demo did not stop after SIGINT:\n{out}\n{err}")
    assert p.returncode in (130, 1), f"rc {p.returncode}\n{out}\n{err}"
    assert "Traceback" not in err, err
    assert not os.path.exists(segment_path(f"demo-{p.pid}"))


# -- the exit status convention (framebus --help): 2 usage, 1 runtime, 0 normal end -----------


@pytest.mark.parametrize(
    "args,what",
    [
        (["play", "/nonexistent/clip.mp4", "NAME", "--slots", "0"], "--slots: must be from 2 to 64, got 0"),
        (["play", "/nonexistent/clip.mp4", "NAME", "--slots", "-1"], "--slots: must be from 2 to 64, got -1"),
        (["play", "/nonexistent/clip.mp4", "bad/name"], 'invalid stream name "bad/name"'),
        (["play", "/nonexistent/clip.mp4", "NAME", "--wait-readers", "-1"], "--wait-readers: must be 0 or more"),
        (["demo", "--slots", "1"], "--slots: must be from 2 to 64, got 1"),
        (["demo", "--width", "0"], "--width: must be a positive integer, got 0"),
        (["demo", "--height", "-5"], "--height: must be a positive integer, got -5"),
        (["demo", "--seconds", "0"], "--seconds: must be a positive number, got 0"),
        (["demo", "--seconds", "-1"], "--seconds: must be a positive number, got -1"),
        (["record", "bad/name", "/nonexistent/out.mp4"], 'invalid stream name "bad/name"'),
        (["echo", "bad/name"], 'invalid stream name "bad/name"'),
        (["bridge", "publish", "bad/name", "tcp://127.0.0.1:1"], 'invalid stream name "bad/name"'),
    ],
)
def test_a_bad_option_value_is_a_usage_error(args, what, name):
    args = [name if a == "NAME" else a for a in args]
    p = run_cli(*args)
    assert p.returncode == 2, p.stderr
    assert what in p.stderr and f"usage: framebus {args[0]}" in p.stderr and "Traceback" not in p.stderr
    assert not os.path.exists(segment_path(name))


@pytest.mark.parametrize("command", ["ls", "gc", "doctor", "top", "bench"])
def test_an_unknown_option_shows_the_commands_usage(command):
    p = run_cli(command, "--bogus")
    assert p.returncode == 2
    assert f"usage: framebus {command}" in p.stderr and "unrecognized arguments: --bogus" in p.stderr


def test_bench_compare_with_a_missing_file_is_a_runtime_error(tmp_path):
    p = run_cli("bench", "--compare", str(tmp_path / "none.json"), "W1", "--smoke")
    assert p.returncode == 1, p.stderr
    assert "does not exist" in p.stderr and "framebus bench --json" in p.stderr


@pytest.mark.parametrize("args", [["echo", "{}"], ["hz", "{}"], ["record", "{}", "/nonexistent/out.mp4"], ["bridge", "publish", "{}", "tcp://127.0.0.1:1"]], ids=lambda a: " ".join(a[:2]))
def test_a_missing_stream_says_what_to_run(args, name):
    p = run_cli(*[a.format(name) for a in args])
    assert p.returncode == 1, p.stderr
    assert "does not exist" in p.stderr and "framebus ls" in p.stderr
    assert "framebus.create" not in p.stderr and "[Errno" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [["echo", "--new"], ["hz", "--count", "3"]], ids=["echo", "hz"])
def test_an_ended_stream_is_a_normal_end(args, name):
    with framebus.create(name, shape=(2,), dtype=np.uint8) as w:
        w.write(np.ones(2, np.uint8))
        w.end()
        p = run_cli(args[0], name, *args[1:])
        assert p.returncode == 0, p.stderr
        assert f"stream {name!r} ended" in p.stdout
        w.unlink()


def test_ls_counts_readers_not_the_writers_handle_and_names_dtypes(name):
    with framebus.create(name, shape=(2, 2), dtype=np.float32) as w, framebus.create(name + ".v", capacity=64) as v:
        rows = json.loads(run_cli("ls", "--json").stdout)
        row = _entry(rows, name)
        assert row["readers"] == 0 and row["lossless"] == 0 and row["dtype"] == "float32"
        var = _entry(rows, name + ".v")
        assert var["variable"] is True and var["capacity"] == 64 and var["dtype"] is None and var["readers"] == 0
        table = run_cli("ls").stdout
        line = next(l for l in table.splitlines() if l.split() and l.split()[0] == name)
        assert "float32" in line.split() and "<f4" not in line
        assert line.split()[line.split().index("alive") + 1] == "0"  # the readers column
        with framebus.open(name), framebus.open(name, mode="lossless"):
            row = _entry(json.loads(run_cli("ls", "--json").stdout), name)
            assert row["readers"] == 2 and row["lossless"] == 1
        w.unlink()
        v.unlink()


def test_ls_json_help_lists_every_key():
    from framebus.commands.ls import JSON_HELP

    with framebus.create(f"t-lskeys-{os.getpid()}", shape=(1,), auto_unlink=True):
        (row,) = [r for r in json.loads(run_cli("ls", "--json").stdout) if r["name"] == f"t-lskeys-{os.getpid()}"]
    for key in row:
        assert re.search(rf"\b{key}\b", JSON_HELP), key
