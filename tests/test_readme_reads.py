"""README.md's table of what each read returns holds: every call it names returns the type its
row says (a plain NumPy array, a Publication or a Frame) with the attributes the row lists, and
the copying rows copy while the Frame row does not."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from pathlib import Path

import numpy as np
import pytest

import framebus

README = Path(__file__).resolve().parent.parent / "README.md"
SHAPE = (4, 6)


def table():
    """(calls, returns text, copies) per row of the README's "What each read returns" table."""
    text = README.read_text()
    start = text.index("What each read returns:")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|") and rows:
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("call", "---"):
            continue
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1], cells[2]))
    return rows


def async_for(rd, check):
    async def go():
        async for frame in rd:
            check(frame)  # while the loop holds it
            return

    asyncio.run(go())


def frames(rd, check, **kw):
    it = rd.frames(timeout=5, **kw)
    try:
        check(next(it))
    finally:
        it.close()


#: Each call the table names, run on a reader: ``check`` gets what it returned, still live.
CALLS = {
    "read()": lambda rd, check: check(rd.read()),
    "read_new()": lambda rd, check: check(rd.read_new(timeout=5)),
    "read_into(out)": lambda rd, check: check(rd.read_into(np.empty(SHAPE, np.uint8))),
    "read_new_async()": lambda rd, check: check(asyncio.run(rd.read_new_async(timeout=5))),
    "read_publication()": lambda rd, check: check(rd.read_publication()),
    "read_new_publication()": lambda rd, check: check(rd.read_new_publication(timeout=5)),
    "frames(copy=True)": lambda rd, check: frames(rd, check, copy=True),
    "view()": lambda rd, check: check(rd.view()),
    "wait_view()": lambda rd, check: check(rd.wait_view(timeout=5)),
    "frames()": lambda rd, check: frames(rd, check),
    "wait_view_async()": lambda rd, check: check(asyncio.run(rd.wait_view_async(timeout=5))),
    "async for": async_for,
}


@pytest.fixture
def stream():
    name = f"t-readme-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with framebus.create(name, shape=SHAPE, dtype=np.uint8, auto_unlink=True) as cam:
        yield name, cam
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


def test_the_table_names_every_read():
    named = [c for calls, _, _ in table() for c in calls]
    assert sorted(named) == sorted(CALLS), named


@pytest.mark.parametrize("row", range(3))
def test_each_read_returns_what_its_row_says(stream, row):
    name, cam = stream
    calls, returns, copies = table()[row]
    expected = np.ndarray if "plain NumPy array" in returns else framebus.Publication if "`Publication`" in returns else framebus.Frame
    attrs = re.findall(r"`([a-z_]+)`", returns.split(" with ", 1)[1]) if " with " in returns else []
    for i, call in enumerate(calls):

        def check(got):
            assert type(got) is expected, (call, type(got))
            for a in attrs:
                assert hasattr(got, a), (call, a)
            if attrs:
                assert (got.seq, got.frame_id, got.meta) == (cam.write_sequence, 100 + i, b"m"), call
            arr = got if expected is np.ndarray else got.payload if expected is framebus.Publication else got.array
            assert np.array_equal(arr, np.full(SHAPE, i + 1, np.uint8)), call
            if copies == "yes":
                assert arr.flags.writeable and arr.flags.owndata, call
            else:
                assert not arr.flags.writeable and not arr.flags.owndata, call
            if expected is framebus.Frame and call not in ("frames()", "async for"):
                got.release()

        rd = framebus.open(name)
        try:
            cam.write(np.full(SHAPE, i + 1, np.uint8), frame_id=100 + i, meta=b"m")
            CALLS[call](rd, check)
        finally:
            rd.close()
