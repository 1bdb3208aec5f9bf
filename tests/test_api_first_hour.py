"""What a new user meets in the first hour of the Python API: frames that behave as arrays,
clear errors for out-of-range ints and for bytes, integer casts as the docs describe them,
the frame_id a write without one gets, ``open(timeout=)``, ``framebus.stream()``,
``dir(framebus)``, docs that stand on their own, and a quiet OpenFilter example."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import framebus
import framebus.aio
from conftest import CHILD_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent


# -- 1. frames behave as their arrays ---------------------------------------------------------
def test_frames_yields_frames_that_behave_as_arrays(name):
    with framebus.create(name, shape=(3, 4), dtype=np.float32, slots=8, auto_unlink=True) as w:
        r = framebus.open(name, mode="lossless")
        data = np.arange(12, dtype=np.float32).reshape(3, 4)
        w.write(data, frame_id=9)
        w.end()
        seen = []
        for frame in r.frames(timeout=5):
            assert frame.mean() == pytest.approx(data.mean())
            np.testing.assert_array_equal(frame * 2, data * 2)
            np.testing.assert_array_equal(2 * frame, data * 2)
            np.testing.assert_array_equal(frame + frame, data * 2)
            np.testing.assert_array_equal(data - frame, 0)
            np.testing.assert_array_equal(frame[1], data[1])
            assert frame[2, 3] == 11
            np.testing.assert_array_equal(np.asarray(frame), data)
            np.testing.assert_array_equal(-frame, -data)
            np.testing.assert_array_equal(frame > 5, data > 5)
            assert np.sum(frame) == data.sum()
            assert (len(frame), frame.ndim, frame.size, frame.shape, frame.dtype) == (3, 2, 12, (3, 4), np.float32)
            assert [row.tolist() for row in frame] == data.tolist()
            assert not frame[0].flags.writeable  # views stay read-only
            assert frame.frame_id == 9 and frame.seq == 1  # the per-frame values are still there
            assert {frame: 1}[frame] == 1 and frame == frame and bool(frame)
            seen.append(frame)
        r.close()
    assert len(seen) == 1
    with pytest.raises(framebus.StreamClosedError, match="released"):
        seen[0].mean()  # released when the loop moved on
    with pytest.raises(AttributeError):
        seen[0]._no_such_attribute


def test_frames_copy_yields_publications_that_behave_as_arrays(name):
    with framebus.create(name, shape=(2, 2), dtype=np.int32, slots=8, auto_unlink=True) as w:
        r = framebus.open(name, mode="lossless")
        w.write(np.array([[1, 2], [3, 4]], np.int32), frame_id=3)
        w.end()
        (pub,) = list(r.frames(timeout=5, copy=True))
        r.close()
    assert pub.mean() == 2.5 and pub.frame_id == 3
    np.testing.assert_array_equal(pub * 2, [[2, 4], [6, 8]])
    np.testing.assert_array_equal(10 - pub, [[9, 8], [7, 6]])
    assert pub[1, 0] == 3 and len(pub) == 2 and np.asarray(pub).shape == (2, 2)
    assert isinstance(pub * 2, np.ndarray)


def test_a_frame_of_named_arrays_is_indexed_by_name(name):
    with framebus.create(name, capacity="1MiB", auto_unlink=True) as w:
        r = framebus.open(name)
        w.write({"image": np.ones((2, 2), np.uint8), "boxes": np.zeros(4, np.float32)})
        with r.view(timeout=5) as frame:
            np.testing.assert_array_equal(frame["image"], np.ones((2, 2)))
            with pytest.raises(KeyError, match="image"):
                frame["nope"]
            with pytest.raises(ValueError, match="arrays"):
                frame.mean()
        r.close()


# -- 2. every int argument out of range is a ValueError naming it -------------------------
@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda w, r: w.write(np.zeros(4, np.uint8), frame_id=2**64), "frame_id"),
        (lambda w, r: w.write(np.zeros(4, np.uint8), frame_id=-(2**63) - 1), "frame_id"),
        (lambda w, r: w.write(np.zeros(4, np.uint8), seq=2**64), "seq"),
        (lambda w, r: w.write(np.zeros(4, np.uint8), seq=-1), "seq"),
        (lambda w, r: w.write(np.zeros(4, np.uint8), timestamp_ns=2**64), "timestamp_ns"),
        (lambda w, r: w.write(np.zeros(4, np.uint8), timeout=10**400), "timeout"),
        (lambda w, r: w.loan(frame_id=2**63), "frame_id"),
        (lambda w, r: w.loan(timeout=10**400), "timeout"),
        (lambda w, r: w.clear(timeout=10**400), "timeout"),
        (lambda w, r: w.acquire(timeout=10**400), "timeout"),
        (lambda w, r: r.read_new(timeout=10**400), "timeout"),
        (lambda w, r: r.wait(timeout=10**400), "timeout"),
        (lambda w, r: r.view(timeout=10**400), "timeout"),
        (lambda w, r: r.wait_view(timeout=10**400), "timeout"),
        (lambda w, r: r.wait_after(2**64, timeout=0), "after"),
        (lambda w, r: r.wait_after(-1, timeout=0), "after"),
        (lambda w, r: r.view_seq(2**64), "seq"),
        (lambda w, r: framebus.open(w.name, timeout=10**400), "timeout"),
        (lambda w, r: next(r.frames(timeout=10**400)), "timeout"),
        (lambda w, r: next(r.frames(timeout=10**400, copy=True)), "timeout"),
        (lambda w, r: asyncio.run(r.read_new_async(timeout=10**400)), "timeout"),
        (lambda w, r: asyncio.run(r.wait_view_async(timeout=-1)), "timeout"),
        (lambda w, r: asyncio.run(framebus.aio.wait_after_async(r, 0, timeout=float("nan"))), "timeout"),
        (lambda w, r: asyncio.run(framebus.aio.wait_after_async(r, 2**64, timeout=1)), "after"),
        (lambda w, r: framebus._native.segment_bytes(2**64, 4), "frame_bytes"),
        (lambda w, r: framebus._native.segment_bytes(16, 2**32), "slots"),
        (lambda w, r: framebus._native.segment_bytes(16, 4, max_readers=-1), "max_readers"),
        (lambda w, r: framebus._native.copy_plan(2**64), "nbytes"),
        (lambda w, r: framebus.sync(None, 10**400), "timeout"),
        (lambda w, r: framebus.pipes.close(None, 10**400), "timeout"),
        (lambda w, r: framebus.configure(queue=2**64), "queue"),
        (lambda w, r: framebus.configure(pipe_size=2**63), "pipe_size"),
        (lambda w, r: framebus.create(w.name + ".x", shape=4, slots=2**64), "slots"),
        (lambda w, r: framebus.create(w.name + ".x", shape=4, meta_capacity=2**64), "meta_capacity"),
        (lambda w, r: framebus.create(w.name + ".x", shape=4, max_readers=2**64), "max_readers"),
        (lambda w, r: framebus.create(w.name + ".x", shape=(2**64,)), "shape"),
        (lambda w, r: framebus.create(w.name + ".x", capacity=2**64), "capacity"),
    ],
)
def test_an_int_out_of_range_is_a_value_error_naming_the_argument(name, call, argument):
    with framebus.create(name, shape=4, dtype=np.uint8, auto_unlink=True) as w:
        r = framebus.open(name)
        try:
            with pytest.raises(ValueError, match=rf"\b{argument}\b") as info:
                call(w, r)
            assert not isinstance(info.value, OverflowError)
            assert w.write_sequence == 0  # nothing written
        finally:
            r.close()


def test_an_int_out_of_range_on_a_variable_shape_stream(name):
    with framebus.create(name, capacity=1024, auto_unlink=True) as w:
        with pytest.raises(ValueError, match="frame_id must be an int from -2\\*\\*63 to 2\\*\\*63-1"):
            w.write(b"abc", frame_id=2**64)
        with pytest.raises(ValueError, match="frame_id"):
            w.loan(nbytes=3, frame_id=2**64)
        assert w.write_sequence == 0


# -- 3. bytes to a fixed-shape stream ----------------------------------------------------------
def test_bytes_of_a_frames_size_are_its_raw_bytes(name):
    with framebus.create(name, shape=(2, 2), dtype=np.uint16, auto_unlink=True) as w:
        raw = np.array([[1, 2], [3, 65535]], np.uint16).tobytes()
        for value in (raw, bytearray(raw), memoryview(raw)):
            w.write(value)
            np.testing.assert_array_equal(w.read(), [[1, 2], [3, 65535]])


@pytest.mark.parametrize("value", [b"abc", bytearray(9), memoryview(b"")])
def test_bytes_of_another_size_say_a_byte_stream_is_needed(name, value):
    with framebus.create(name, shape=(2, 2), dtype=np.uint16, auto_unlink=True) as w:
        with pytest.raises(ValueError, match=r"\(8 bytes\).*capacity=") as info:
            w.write(value)
        assert "shape ()" not in str(info.value)
        assert w.write_sequence == 0


# -- 4. integer casts as docs/design.md describes them ----------------------------------------
def test_ints_that_fit_are_written_to_an_unsigned_stream(name):
    with framebus.create(name, shape=(2, 2), dtype=np.uint8, auto_unlink=True) as w:
        w.write([[0, 1], [2, 255]])  # a list: NumPy makes it int64
        np.testing.assert_array_equal(w.read(), [[0, 1], [2, 255]])
        w.write(np.array([[7, 7], [7, 7]], np.int64))
        assert w.read().dtype == np.uint8 and int(w.read()[0, 0]) == 7
        with pytest.raises(ValueError, match=r"-1 at index \(1, 1\).*wrap around"):
            w.write(np.array([[0, 1], [2, -1]], np.int64))
        with pytest.raises(ValueError, match="float to int"):
            w.write(np.zeros((2, 2), np.float32))
        assert w.write_sequence == 2


def test_unsigned_ints_that_fit_are_written_to_a_signed_stream(name):
    with framebus.create(name, shape=2, dtype=np.int32, auto_unlink=True) as w:
        w.write(np.array([1, 2**31 - 1], np.uint64))
        np.testing.assert_array_equal(w.read(), [1, 2**31 - 1])
        with pytest.raises(ValueError, match="wrap around"):
            w.write(np.array([1, 2**31], np.uint64))


def test_design_md_describes_the_integer_rule():
    text = (ROOT / "docs" / "design.md").read_text()
    assert "int64 into uint8" in text


# -- 5. a write without frame_id ----------------------------------------------------------------
def test_a_write_without_frame_id_keeps_the_previous_id_as_documented(name):
    with framebus.create(name, shape=1, dtype=np.uint8, auto_unlink=True) as w:
        w.write(np.zeros(1, np.uint8))
        assert w.frame_id == 0
        w.write(np.zeros(1, np.uint8), frame_id=7)
        w.write(np.zeros(1, np.uint8))
        assert w.frame_id == 7
    stub = (ROOT / "python" / "framebus" / "_native.pyi").read_text()
    assert "keeps the id of the frame before it" in stub
    assert "keeps the id of the frame before it" in (ROOT / "docs" / "design.md").read_text()
    assert "frame_id" in (ROOT / "README.md").read_text() and "previous frame's id" in (ROOT / "README.md").read_text()


# -- 6. open(timeout=) --------------------------------------------------------------------------
def test_open_waits_for_a_stream_another_process_creates_later(name, spawn):
    child = spawn(
        f"""
        import numpy as np
        hear()  # created only once the parent is already waiting
        time.sleep(0.2)
        with framebus.create({name!r}, shape=2, dtype=np.int32, auto_unlink=True) as w:
            w.write(np.array([4, 2], np.int32))
            say("created")
            hear()
        """
    )
    with pytest.raises(framebus.StreamNotFoundError):
        framebus.open(name)  # the default does not wait
    child.send("go")
    r = framebus.open(name, timeout=CHILD_TIMEOUT)
    assert r.read().tolist() == [4, 2]
    r.close()
    child.expect("created")
    child.send("done")
    child.finish()


def test_open_with_a_timeout_names_it_when_nothing_appears(name):
    with pytest.raises(framebus.StreamNotFoundError, match=r"did not appear within timeout=0\.05") as info:
        framebus.open(name, timeout=0.05)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ValueError, match="timeout"):
        framebus.open(name, timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        framebus.open(name, timeout="1")


# -- 8. framebus.stream and dir(framebus) ---------------------------------------------------
def test_stream_is_a_function_that_creates_a_stream_for_a_with_block(name):
    assert callable(framebus.stream)
    with framebus.stream(name, shape=(2,), dtype=np.uint8) as s:
        s.write(np.ones(2, np.uint8))
        assert os.path.exists(f"/dev/shm/framebus.{name}")
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


def test_dir_shows_only_the_public_api():
    names = dir(framebus)
    assert names == sorted(framebus.__all__)
    assert "annotations" not in names and "stream" in names and "open" in names
    for public in framebus.__all__:
        assert hasattr(framebus, public), public


# -- 7. docs stand on their own -----------------------------------------------------------------
_FOREIGN = re.compile(r"\.\./shared|DESIGN\.md|BENCHMARKS\.md|STYLE\.md|/work/|/home/\w|\bissues? #?\d+|(?<![\w/&\"'])#\d{1,4}\b")


def _doc_files():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield from sorted((ROOT / "examples").glob("*.py"))
    yield from sorted((ROOT / "python" / "framebus").rglob("*.py"))
    yield from sorted((ROOT / "python" / "framebus").rglob("*.pyi"))


def test_docs_point_only_at_what_the_repository_has():
    found = []
    for path in _doc_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _FOREIGN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


# -- 9. the OpenFilter example prints only its own lines ----------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("openfilter") is None, reason="openfilter is not installed")
def test_openfilter_example_prints_only_its_table():
    env = dict(os.environ)
    for key in ("LOG_LEVEL", "DO_NOT_TRACK", "SCARF_NO_ANALYTICS", "LOG_PATH"):
        env.pop(key, None)
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "openfilter_pipeline.py"), "--transport", "framebus", "--resolution", "tiny", "--frames", "3"],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = (run.stdout + run.stderr).splitlines()
    assert "WARNING" not in run.stdout + run.stderr
    assert len(lines) == 6, lines  # the two tables: a header and a row each, a blank line and a title


def test_quieting_openfilter_leaves_framebus_loggers_alone(monkeypatch):
    import logging

    from framebus_bench import openfilter_pipeline

    for key in ("DO_NOT_TRACK", "SCARF_NO_ANALYTICS", "LOG_LEVEL", "LOG_PATH"):
        monkeypatch.delenv(key, raising=False)  # restored after the test
    of_logger = logging.getLogger("openfilter")
    previous = of_logger.level
    try:
        openfilter_pipeline._quiet_openfilter()
        assert logging.getLogger("openfilter.filter_runtime.filter").getEffectiveLevel() == logging.ERROR
        assert logging.getLogger("framebus.openfilter").getEffectiveLevel() == logging.getLogger().getEffectiveLevel()
    finally:
        of_logger.setLevel(previous)
