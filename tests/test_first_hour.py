"""What a new user meets in the first hour (issue #20): refused lossy casts, the end of a
stream, `play --wait-readers`, clear messages and exit codes."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import framebus


@pytest.fixture
def name():
    n = f"first-hour-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "framebus", *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


@pytest.mark.parametrize(
    "dtype,value,bad",
    [(np.float32, np.array([1.0, 1e300, 2.0]), r"1e\+300"), (np.int8, np.array([1, 300, 2]), "300"), (np.uint8, np.array([1, -1, 2], np.int16), "-1")],
)
def test_a_cast_that_loses_values_is_refused_and_nothing_written(name, dtype, value, bad):
    with framebus.create(name, shape=(3,), dtype=dtype) as w:
        w.write(np.zeros(3, dtype))
        # Every case is refused by value, as docs/design.md says (-1 into uint8 included: any
        # integer type converts to any other when the values fit).
        with pytest.raises(ValueError, match=rf"value {bad} at index \(1,\).*astype") as err:
            w.write(value)
        assert "nothing was written" in str(err.value)
        assert w.write_sequence == 1 and w.read().tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "src,dtype,value,stored",
    [
        (np.int64, np.float16, 70000, "inf"),
        (np.int32, np.float16, 70000, "inf"),
        (np.uint32, np.float16, 70000, "inf"),
        (np.int16, np.float16, 2049, "2048.0"),
        (np.int64, np.float32, 2**40 + 1, "1099511627776.0"),
        (np.int32, np.float32, 2**24 + 1, "16777216.0"),
        (np.int64, np.float64, 2**53 + 1, "9007199254740992.0"),
        (np.uint64, np.float32, 2**64 - 1, r"1.8446744073709552e\+19"),
    ],
)
def test_an_int_to_float_cast_that_changes_a_value_is_refused(name, src, dtype, value, stored):
    with framebus.create(name, shape=(3,), dtype=dtype) as w:
        w.write(np.zeros(3, dtype))
        with pytest.raises(ValueError, match=rf"{np.dtype(src)} value {value} at index \(1,\).*stored as {stored}.*astype") as err:
            w.write(np.array([1, value, 2], src))
        assert "nothing was written" in str(err.value)
        assert w.write_sequence == 1 and w.read().tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "src,dtype,values",
    [
        (np.uint8, np.float32, [0, 128, 255]),
        (np.uint8, np.float16, [0, 128, 255]),
        (np.int16, np.float32, [-32768, 0, 32767]),
        (np.int32, np.float64, [-(2**31), 0, 2**31 - 1]),
        (np.int64, np.float32, [2**40, -(2**24), 3]),  # large, but exact in float32
        (np.int64, np.float16, [-2048, 2048, 65504]),
    ],
)
def test_an_int_to_float_cast_that_keeps_every_value_is_accepted(name, src, dtype, values):
    with framebus.create(name, shape=(3,), dtype=dtype) as w:
        w.write(np.array(values, src))
        assert w.read().tolist() == values


def test_a_cast_that_only_rounds_is_accepted(name):
    with framebus.create(name, shape=(2,), dtype=np.float32) as w:
        w.write(np.array([0.1, 3e38]))
        assert w.read().tolist() == np.array([0.1, 3e38], np.float32).tolist()


def _drain(name: str, mode: str, q) -> None:
    r = framebus.open(name, mode=mode)
    q.put("ready")
    got = []
    try:
        while True:
            got.append(int(r.read_new(timeout=30)[0]))
    except framebus.StreamEndedError as e:
        q.put((got, isinstance(e, EOFError)))
    finally:
        r.close()


@pytest.mark.parametrize("mode", ["lossless", "latest"])
def test_end_of_stream_wakes_readers_in_other_processes(name, mode):
    w = framebus.create(name, shape=(4,), dtype=np.int32, slots=8)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_drain, args=(name, mode, q))
    p.start()
    try:
        assert q.get(timeout=60) == "ready"
        for i in range(60):
            w.write(np.full(4, i, np.int32), timeout=10)
        w.end()
        got, eof = q.get(timeout=60)
        assert eof
        if mode == "lossless":
            assert got == list(range(60))
        else:
            assert got and got == sorted(set(got)) and got[-1] == 59
    finally:
        p.join(30)
        w.close()


def test_a_write_after_end_starts_again(name):
    with framebus.create(name, shape=(2,), dtype=np.uint8) as w, framebus.open(name, mode="lossless") as r:
        w.write(np.ones(2, np.uint8))
        w.end()
        assert w.ended
        assert r.read_new(timeout=1).tolist() == [1, 1]
        with pytest.raises(framebus.StreamEndedError):
            r.read_new(timeout=1)
        assert [f.seq for f in r.frames(timeout=1)] == []
        w.write(np.full(2, 2, np.uint8))
        assert not w.ended
        assert r.read_new(timeout=1).tolist() == [2, 2]


def test_leaving_the_writers_with_block_ends_the_stream_for_a_reader_in_another_process(name, spawn):
    """The README's idiom: a reader blocked with no timeout in another process gets every
    frame and then StreamEndedError when the writer's `with` block exits (no end() call)."""
    with framebus.create(name, shape=(2,), dtype=np.int32, slots=8, auto_unlink=True) as cam:
        child = spawn(
            f"""
            r = framebus.open({name!r}, mode="lossless")
            say("ready")
            try:
                while True:
                    say(int(r.read_new(timeout=None)[0]))
            except framebus.StreamEndedError:
                say("ended")
            """
        )
        child.expect("ready")
        for i in range(3):
            cam.write(np.full(2, i, np.int32), timeout=10)
    assert [child.line() for _ in range(4)] == ["0", "1", "2", "ended"]
    child.finish()


def test_closing_the_writer_wakes_a_reader_waiting_without_timeout(name):
    import threading

    w = framebus.create(name, shape=(2,), dtype=np.uint8)
    r = framebus.open(name, mode="lossless")
    got: list = []

    def wait() -> None:
        try:
            got.append(r.read_new(timeout=None).tolist())
            r.read_new(timeout=None)
        except Exception as exc:  # noqa: BLE001 - what the waiter got is the result
            got.append(type(exc))

    t = threading.Thread(target=wait)
    t.start()
    try:
        w.write(np.ones(2, np.uint8))
        w.close()
        t.join(60)
        assert got == [[1, 1], framebus.StreamEndedError]
    finally:
        r.close()  # wakes the thread if the end never came
        t.join(60)
        framebus.unlink(name)


def test_only_the_last_writer_ends_the_stream_when_it_closes(name):
    with framebus.create(name, shape=(2,), dtype=np.uint8) as w, framebus.open(name) as watch:
        w.write(np.ones(2, np.uint8))
        for reader in (framebus.open(name), framebus.open(name, mode="lossless"), framebus.open(name, readonly=True)):
            reader.read()
            reader.close()
            assert not watch.ended, reader
        other = framebus.open(name)
        other.write(np.zeros(2, np.uint8))  # an opened handle that wrote is a writer ...
        other.close()
        assert not watch.ended  # ... but the creator still writes: not the end yet
        w.close()
        assert watch.ended  # the last writer closed
        other = framebus.open(name)
        other.write(np.ones(2, np.uint8))  # a write clears the end (a restarted producer)
        assert not watch.ended
        other.close()
        assert watch.ended
        tagged = framebus.open(name)
        tagged.write(np.ones(2, np.uint8))
        tagged.set_role("play")  # a writer's role may change; it stays a writer
        tagged.close()
        assert watch.ended
        framebus.unlink(name)


def test_writers_in_other_processes_keep_the_stream_going(name, spawn):
    with framebus.create(name, shape=(2,), dtype=np.uint8) as w, framebus.open(name, mode="lossless") as r:
        child = spawn(
            f"""
            s = framebus.open({name!r})
            s.write(np.full(2, 7, np.uint8))
            say("wrote")
            hear()
            s.close()
            say("closed")
            """
        )
        child.expect("wrote")
        w.close()  # the child still writes
        assert not r.ended and r.read_new(timeout=30).tolist() == [7, 7]
        child.send("close")
        child.expect("closed")
        assert r.ended
        with pytest.raises(framebus.StreamEndedError):
            r.read_new(timeout=30)
        child.finish()
        framebus.unlink(name)


def _count_frames(name: str, q) -> None:
    import time

    while True:
        try:
            r = framebus.open(name, mode="lossless")
            break
        except FileNotFoundError:
            time.sleep(0.005)
    q.put("attached")
    n = sum(1 for _ in r.frames(copy=True, timeout=60))
    q.put(n)
    r.close()


def test_play_waits_for_readers_and_ends_the_stream(name, tmp_path):
    from framebus.ffmpeg import VideoWriter

    clip = tmp_path / "clip.mp4"
    with VideoWriter(str(clip), (64, 48), fps=30, preset="ultrafast") as video:
        for i in range(60):
            video.write(np.full((48, 64, 3), i * 4, np.uint8))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_count_frames, args=(name, q))
    p.start()
    try:
        res = run_cli("play", str(clip), name, "--fast", "--quiet", "--wait-readers", "1")
        assert res.returncode == 0, res.stderr
        assert q.get(timeout=60) == "attached"
        assert q.get(timeout=60) == 60  # every frame, then the end (not the reader's timeout)
    finally:
        p.join(30)


def test_play_gives_up_waiting_for_readers_with_exit_1(name, tmp_path):
    from framebus.ffmpeg import VideoWriter

    clip = tmp_path / "clip.mp4"
    with VideoWriter(str(clip), (32, 32), fps=30, preset="ultrafast") as video:
        video.write(np.zeros((32, 32, 3), np.uint8))
    res = run_cli("play", str(clip), name, "--quiet", "--wait-readers", "2", "--wait-timeout", "0.2")
    assert res.returncode == 1 and "0 of 2 readers" in res.stderr
    assert name not in [s.name for s in framebus.list_streams()]


def test_ls_at_80_columns_never_cuts_a_name(name):
    long = name + "-a-rather-long-camera-name"
    with framebus.create(long, shape=(1080, 1920, 3), dtype=np.uint8):
        res = run_cli("ls", COLUMNS="80")
        assert res.returncode == 0, res.stderr
        assert long in res.stdout
        assert "…" not in res.stdout
        framebus.unlink(long)


def test_exit_codes_follow_one_convention(name):
    assert run_cli("ls", "--no-such-option").returncode == 2
    assert run_cli("record", name, "/tmp/never.mp4").returncode == 1
    res = run_cli("--help")
    assert "exit status" in res.stdout and "usage error" in res.stdout


def test_messages_say_what_to_do(name):
    with pytest.raises(ValueError, match="slots must be between 2 and 64, got -1"):
        framebus.create(name, shape=(2,), slots=-1)
    with framebus.create(name, shape=(2,)) as w:
        with pytest.raises(framebus.LockNotHeldError, match="does not hold"):
            w.release()
        with pytest.raises(framebus.StreamExistsError, match="framebus gc.*auto_unlink=True"):
            framebus.create(name, shape=(2,))
        w.unlink()
    with pytest.raises(FileNotFoundError, match="nothing to unlink"):
        framebus.unlink(name)


def test_bench_hints_name_the_suite_package_and_its_peers():
    from framebus_bench import transport

    res = run_cli("bench", "W1", "--smoke", "--quick")
    assert res.returncode == 0, res.stderr
    if "is not installed" in res.stdout:
        assert "./benches[peers]" in res.stdout
    assert transport is not None


def test_play_wait_readers_does_not_count_the_writers_handle(name, tmp_path):
    """A stream whose creator is attached and nobody reads: `--wait-readers 1` waits for a
    reader (the creator's handle is not one) and gives up with exit 1."""
    from framebus.ffmpeg import VideoWriter

    clip = tmp_path / "clip.mp4"
    with VideoWriter(str(clip), (32, 32), fps=30, preset="ultrafast") as video:
        video.write(np.zeros((32, 32, 3), np.uint8))
    with framebus.create(name, shape=(32, 32, 3), dtype=np.uint8) as w:
        res = run_cli("play", str(clip), name, "--quiet", "--wait-readers", "1", "--wait-timeout", "0.3")
        assert res.returncode == 1 and "0 of 1 readers" in res.stderr, res.stderr
        assert w.write_sequence == 0


def test_a_different_spec_is_named_with_numpy_dtype_names(name):
    with framebus.create(name, shape=(4, 3), dtype=np.uint8) as w:
        with pytest.raises(framebus.StreamExistsError) as err:
            framebus.create(name, shape=(4,), dtype=np.float32, exist_ok=True)
        text = str(err.value)
        assert "existing dtype uint8 shape (4, 3)" in text and "requested dtype float32 shape (4,)" in text
        assert "|u1" not in text and "<f4" not in text
        w.unlink()


def test_the_ffmpeg_hint_quotes_the_extra(monkeypatch):
    import builtins

    from framebus.ffmpeg import find_ffmpeg

    real_import = builtins.__import__

    def no_imageio(mod, *args, **kwargs):
        if mod == "imageio_ffmpeg":
            raise ImportError("not installed")
        return real_import(mod, *args, **kwargs)

    monkeypatch.delenv("FRAMEBUS_FFMPEG", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(builtins, "__import__", no_imageio)
    with pytest.raises(FileNotFoundError, match=r"pip install 'framebus\[ffmpeg\]'"):
        find_ffmpeg()


def test_stream_frames_docstring_says_it_stops_at_the_end():
    assert "end of the stream" in framebus.Stream.frames.__doc__


def test_slow_pipeline_example_documents_its_options():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, os.path.join(root, "examples", "slow_pipeline.py"), "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    help_text = " ".join(res.stdout.split())
    for option, words in (("--prefix", "stream names"), ("--fps", "frames per second"), ("--slow-ms", "slow sink"), ("--seconds", "how long")):
        assert option in help_text and words in help_text, option
