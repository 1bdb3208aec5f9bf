"""Children of tests/test_kept_loans.py, run in ``multiprocessing`` "spawn" processes (they must
live in an importable module). Each reports through a queue instead of asserting, so that the
parent test shows what went wrong."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any, Dict

import numpy as np

ELEMENTS = 16_384


def writer(name: str, value: int, iterations: int, keep: int, results: Any) -> None:
    """Alternates write() and a loan whose array stays bound after its with block (as pyshmem
    programs do with write_view), keeping the last `keep` loan arrays alive as well; then checks
    that every kept array still shows the frame it committed."""
    try:
        import framebus

        w = framebus.open(name)
        payload = np.full(ELEMENTS, value, np.int64)
        kept: list = []
        for i in range(iterations):
            if i % 2:
                w.write(payload, frame_id=value, timeout=30)
            else:
                with w.loan(frame_id=value, timeout=30) as view:
                    view[: ELEMENTS // 2] = value
                    view[ELEMENTS // 2 :] = value
                kept = (kept + [view])[-keep:] if keep else []
        bad = sum(not (a == value).all() for a in kept + [view])
        w.close()
        results.put(("writer", value, iterations, bad))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", f"writer {value}: {exc!r}"))


def reader(name: str, stop: Any, results: Any) -> None:
    """Views the newest frame until `stop`; counts frames whose halves or id disagree."""
    try:
        import framebus

        r = framebus.open(name)
        reads = torn = 0
        while not stop.is_set():
            with r.view() as frame:  # the parent wrote a first frame
                a = frame.array
                if not (a == a[0]).all() or frame.frame_id != a[0]:
                    torn += 1
                del a
            reads += 1
        r.close()
        results.put(("reader", reads, torn))
    except BaseException as exc:  # noqa: BLE001
        results.put(("error", f"reader: {exc!r}"))


def keep_and_idle(name: str, ready: Any, release: Any, results: Any) -> None:
    """Keeps a loan array and then does nothing framebus can see until `release`."""
    try:
        import framebus

        w = framebus.open(name)
        with w.loan() as view:
            view[:] = 5
        ready.set()
        release.wait(60)
        results.put(("kept", bool((view == 5).all())))
        del view
        w.close()
    except BaseException as exc:  # noqa: BLE001
        results.put(("error", repr(exc)))


def keep_and_wait_for_frames(name: str, ready: Any, results: Any) -> None:
    """Keeps a loan array, then waits for three frames of another writer."""
    try:
        import framebus

        w = framebus.open(name)
        with w.loan() as view:
            view[:] = 5
        r = framebus.open(name, mode="lossless")
        ready.set()
        got = [int(r.read_new(timeout=30)[0]) for _ in range(3)]
        results.put(("frames", got, bool((view == 5).all())))
        del view
        r.close()
        w.close()
    except BaseException as exc:  # noqa: BLE001
        results.put(("error", repr(exc)))


def run_writers_keeping_loans(name: str, writers: int, iterations: int, keep: int, slots: int = 2, readers: int = 2) -> Dict[str, Any]:
    """Spawns `writers` writer processes (each alternating write() and a kept loan, keeping
    its last `keep` loan arrays) and `readers` viewing readers on a new stream, waits for them
    and returns what they reported: every write counted, torn frames, changed kept arrays."""
    import framebus

    ctx = mp.get_context("spawn")
    started = time.monotonic()
    w = framebus.create(name, shape=(ELEMENTS,), dtype=np.int64, slots=slots)
    w.write(np.zeros(ELEMENTS, np.int64), frame_id=0)
    results, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=reader, args=(name, stop, results)) for _ in range(readers)]
    procs += [ctx.Process(target=writer, args=(name, v, iterations, keep, results)) for v in range(1, writers + 1)]
    reports = []
    try:
        for p in procs:
            p.start()
        reports = [results.get(timeout=600) for _ in range(writers)]
        stop.set()
        reports += [results.get(timeout=120) for _ in range(readers)]
        for p in procs:
            p.join(60)
        written = w.write_sequence - 1
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
        w.close()
        try:
            framebus.unlink(name)
        except FileNotFoundError:
            pass
    return {
        "writers": writers,
        "iterations": iterations,
        "keep": keep,
        "slots": slots,
        "errors": [r[1] for r in reports if r[0] == "error"],
        "writes_reported": sum(r[2] for r in reports if r[0] == "writer"),
        "writes_in_stream": written,
        "kept_arrays_changed": sum(r[3] for r in reports if r[0] == "writer"),
        "reads": sum(r[1] for r in reports if r[0] == "reader"),
        "torn": sum(r[2] for r in reports if r[0] == "reader"),
        "exit_codes": [p.exitcode for p in procs],
        "seconds": round(time.monotonic() - started, 1),
    }
