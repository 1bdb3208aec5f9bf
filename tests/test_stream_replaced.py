"""A read waiting on a stream that can get no frame any more is told so, whatever its timeout:
StreamReplacedError when the stream's name was taken by a new stream (a restarted producer) or
removed with no handle left that writes it. A stream that ended still ends (frames() stops
silently), and one whose name was removed while its writer lives goes on.

Every wait runs on a thread of its own, on a handle of its own, and must end before a generous
join bound; nothing is asserted about how long it took."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

import framebus
from framebus.errors import FramebusError, StreamClosedError, StreamReplacedError

#: Generous: a wait that ends at all ends long before this.
BOUND = 10.0


def _frames(r: framebus.Stream, timeout: Any) -> str:
    for _ in r.frames(timeout):
        pass
    return "ended silently"


def _frames_copy(r: framebus.Stream, timeout: Any) -> str:
    for _ in r.frames(timeout, copy=True):
        pass
    return "ended silently"


async def _iterate(r: framebus.Stream, timeout: Any) -> str:
    from framebus.aio import iterate

    async for _ in iterate(r, timeout):
        pass
    return "ended silently"


WAYS: Dict[str, Callable[[framebus.Stream, Any], Any]] = {
    "read_new": lambda r, t: r.read_new(timeout=t),
    "wait_view": lambda r, t: r.wait_view(t),
    "wait": lambda r, t: r.wait(timeout=t),
    "frames": _frames,
    "frames_copy": _frames_copy,
    "read_new_async": lambda r, t: asyncio.run(r.read_new_async(timeout=t)),
    "wait_view_async": lambda r, t: asyncio.run(r.wait_view_async(t)),
    "iterate": lambda r, t: asyncio.run(_iterate(r, t)),
}


class Waits:
    """Every way of waiting for the next frame, with no timeout and with 30 s, each on a thread
    and a handle of its own."""

    def __init__(self, name: str, mode: str = "latest") -> None:
        self.handles: List[framebus.Stream] = []
        self.results: Dict[str, Tuple[str, str]] = {}
        self.threads: List[Tuple[str, threading.Thread]] = []
        for label, way in WAYS.items():
            for timeout in (None, 30):
                r = framebus.open(name, mode=mode)
                self.handles.append(r)
                key = f"{label}/{timeout}"
                t = threading.Thread(target=self._run, args=(key, way, r, timeout), daemon=True)
                t.start()
                self.threads.append((key, t))

    def _run(self, key: str, way: Callable[[framebus.Stream, Any], Any], r: framebus.Stream, timeout: Any) -> None:
        try:
            got = way(r, timeout)
            self.results[key] = ("returned", repr(got)[:60])
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.results[key] = (type(e).__name__, str(e))

    def outcomes(self) -> Dict[str, Tuple[str, str]]:
        """Each wait's outcome; ("still waiting", "") for one that did not end within BOUND (its
        handle is closed then, which ends it)."""
        end = time.monotonic() + BOUND
        for _, t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        out = {key: self.results.get(key, ("still waiting", "")) for key, _ in self.threads}
        for r in self.handles:
            r.close()
        for _, t in self.threads:
            t.join(BOUND)
        return out


def settle() -> None:
    """Gives the waits time to be under way (not asserted: they are checked by outcome)."""
    time.sleep(0.5)


def test_a_name_taken_by_a_new_stream_raises_stream_replaced(name):
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    w.write(np.arange(4, dtype=np.uint8))
    waits = Waits(name)
    settle()
    framebus.unlink(name)
    fresh = framebus.create(name, shape=(8,), dtype=np.uint8)  # a restarted producer
    try:
        got = waits.outcomes()
    finally:
        w.close()
        fresh.unlink()
    assert len(got) == 2 * len(WAYS)
    for key, (kind, msg) in got.items():
        assert kind == "StreamReplacedError", (key, kind, msg)
        assert f'stream "{name}" was replaced by a new stream of the same name' in msg and "open it again" in msg, msg


def test_a_name_removed_after_its_writer_was_killed_raises_stream_replaced(name, spawn):
    child = spawn(f"w = framebus.create({name!r}, shape=(4,), dtype=np.uint8)\nw.write(np.ones(4, np.uint8))\nsay('made')\nhear()\n")
    child.expect("made")
    waits = Waits(name, mode="lossless")
    settle()
    child.kill()  # SIGKILL: the stream is not ended
    framebus.unlink(name)
    for key, (kind, msg) in waits.outcomes().items():
        assert kind == "StreamReplacedError", (key, kind, msg)
        assert f'stream "{name}" was unlinked' in msg and "no handle that writes it is left" in msg, msg


def test_an_ended_stream_whose_name_was_removed_still_just_ends(name):
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    w.write(np.ones(4, np.uint8))
    waits = Waits(name)
    settle()
    w.unlink()  # ends it (the last writer), then removes the name
    for key, (kind, msg) in waits.outcomes().items():
        silent = key.startswith(("frames", "iterate"))
        assert (kind, msg) == ("returned", "'ended silently'") if silent else kind == "StreamEndedError", (key, kind, msg)


def test_a_name_removed_while_its_writer_lives_goes_on(name):
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    w.write(np.ones(4, np.uint8))
    r = framebus.open(name, mode="lossless")
    framebus.unlink(name)
    got: Dict[str, Any] = {}

    def wait() -> None:
        try:
            got["frame"] = r.read_new(timeout=None).tolist()
        except FramebusError as e:
            got["error"] = repr(e)

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    time.sleep(1.0)  # several looks at the name meanwhile (not asserted)
    w.write(np.full(4, 7, np.uint8))
    t.join(BOUND)
    r.close()
    w.close()
    assert got == {"frame": [7, 7, 7, 7]}


def test_stream_replaced_error_is_no_end_and_is_exported():
    assert issubclass(StreamReplacedError, FramebusError) and issubclass(StreamReplacedError, RuntimeError)
    # frames() and async for stop silently on StreamClosedError and TimeoutError: not on this.
    assert not issubclass(StreamReplacedError, (StreamClosedError, TimeoutError))
    assert framebus.StreamReplacedError is StreamReplacedError
    from framebus import _native

    assert "StreamReplacedError" in _native.ERROR_KINDS


@pytest.mark.parametrize("mode", ["latest", "lossless"])
def test_frames_left_in_the_old_stream_come_first(name, mode):
    """A lossless reader still gets the frames it has not read from the old stream before it is
    told the stream was replaced."""
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    r = framebus.open(name, mode=mode)
    for v in (1, 2):
        w.write(np.full(4, v, np.uint8))
    framebus.unlink(name)
    fresh = framebus.create(name, shape=(4,), dtype=np.uint8)
    seen: List[int] = []
    try:
        with pytest.raises(StreamReplacedError):
            for f in r.frames(30):
                seen.append(int(f[0]))
    finally:
        r.close()
        w.close()
        fresh.unlink()
    assert seen == ([1, 2] if mode == "lossless" else [2])
