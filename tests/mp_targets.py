"""Functions run in ``multiprocessing`` "spawn" children (they must live in an importable module,
not in a test file). Each reports through a queue instead of asserting, so that the parent
test shows what went wrong."""

from __future__ import annotations

from typing import Any

import numpy as np


def read_pickled_stream(stream: Any, results: Any) -> None:
    """Receives a Stream pickled by name, reads the newest frame and writes one back."""
    try:
        results.put(("opened", stream.name, stream.mode, stream.shape, str(stream.dtype), stream.closed))
        results.put(("frame", stream.read().tolist(), stream.frame_id))
        stream.write(np.full(stream.shape, 42, stream.dtype), frame_id=42)
        stream.close()
        results.put(("done",))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", repr(exc)))


def create_and_exit(name: str, results: Any) -> None:
    """Creates a stream, writes one frame and exits without unlinking it."""
    try:
        import framebus

        s = framebus.create(name, shape=(4,), dtype=np.int32)
        s.write(np.arange(4, dtype=np.int32), frame_id=5)
        s.close()
        results.put(("done",))
    except BaseException as exc:  # noqa: BLE001
        results.put(("error", repr(exc)))


def read_lossless_pickled(stream: Any, count: int, timeout: float, results: Any) -> None:
    """Receives a lossless Stream pickled with its position, says it is ready (its reader entry
    exists once it is unpickled), reads up to ``count`` frames with read_new and reports their
    first elements and the handle's missed count."""
    try:
        from framebus.errors import StreamEndedError

        results.put(("ready",))
        got = []
        try:
            while len(got) < count:
                got.append(int(stream.read_new(timeout=timeout)[0]))
        except StreamEndedError:
            pass
        results.put(("got", got, stream.total_missed))
        stream.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", repr(exc)))
