"""``framebus demo``: a producer process streams synthetic 1080p RGB frames to a consumer
process through a framebus stream; the terminal shows frames/s, GB/s and latency live. Rates
are measured from the first frame the consumer receives (process start-up is not counted)."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import time
from typing import Any, Dict, Iterator

HELP = "stream synthetic 1080p RGB frames between two processes and show live throughput and latency"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ._args import int_range, non_negative_float, positive_float, positive_int

    p.add_argument("--seconds", type=positive_float, default=5.0, help="how long to run, above 0 (default 5)")
    p.add_argument("--width", type=positive_int, default=1920, help="frame width in pixels (default 1920)")
    p.add_argument("--height", type=positive_int, default=1080, help="frame height in pixels (default 1080)")
    p.add_argument("--fps", type=non_negative_float, default=0.0, help="pace the producer (default 0: as fast as possible)")
    p.add_argument("--mode", choices=["lossless", "latest"], default="lossless", help="consumer's reader mode")
    p.add_argument("--slots", type=int_range(2, 64), default=4, help="frames in the stream's ring, 2 to 64 (default 4)")


def _frames(height: int, width: int, count: int = 8) -> list:
    import numpy as np

    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    out = []
    for k in range(count):
        phase = 32.0 * k
        xs, ys = np.broadcast_arrays(x, y)
        rgb = np.stack([(xs + phase) % 256, (ys + phase) % 256, ((xs + ys) / 2 + phase) % 256], axis=-1)
        out.append(rgb.astype(np.uint8))
    return out


def _producer(name: str, seconds: float, fps: float, ready: Any) -> None:
    import framebus

    with framebus.open(name) as stream:
        assert stream.shape is not None  # the demo creates a fixed-shape stream
        h, w, _ = stream.shape
        frames = _frames(h, w)
        ready.wait()
        period = 1.0 / fps if fps > 0 else 0.0
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            frame = frames[n % len(frames)]
            stream.write(frame, frame_id=n, timeout=5.0)
            n += 1
            if period:
                delay = start + n * period - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)


def _consumer(name: str, mode: str, stats: Any, ready: Any, stop: Any) -> None:
    import numpy as np

    import framebus

    with framebus.open(name, mode=mode) as stream:
        assert stream.shape is not None and stream.dtype is not None  # the demo creates a fixed-shape stream
        h, w, c = stream.shape
        checks = [f[0, :64].copy() for f in _frames(h, w)]
        out = np.empty(stream.shape, stream.dtype)
        ready.set()
        latencies: list = []
        received = bad = 0
        first_ns = last_ns = 0  # when the first and the newest frame arrived (time.time_ns)
        last_report = time.perf_counter()
        while not stop.is_set():
            try:
                pub = stream.read_new_publication(timeout=0.2, out=out)
            except TimeoutError:
                pub = None
            except framebus.StreamEndedError:  # the producer closed its handle: every frame was read
                pub = None
                stop.wait(0.05)
            now_ns = time.time_ns()
            if pub is not None:
                received += 1
                last_ns = now_ns
                first_ns = first_ns or now_ns
                latencies.append((now_ns - pub.timestamp_ns) / 1e3)
                if not np.array_equal(out[0, :64], checks[pub.frame_id % len(checks)]):
                    bad += 1
            if time.perf_counter() - last_report >= 0.25 or stop.is_set():
                stats.put({"received": received, "latencies": latencies, "corrupt": bad, "missed": stream.total_missed, "first_ns": first_ns, "last_ns": last_ns})
                latencies = []
                last_report = time.perf_counter()
        stats.put({"received": received, "latencies": latencies, "corrupt": bad, "missed": stream.total_missed, "first_ns": first_ns, "last_ns": last_ns, "done": True})


def run(args: argparse.Namespace) -> int:
    """Runs the demo; exit status 0, 1 when a frame came corrupt or none came, or 130/143
    when a signal stopped it (the stream and both processes are cleaned up either way)."""
    import sys
    import threading

    import numpy as np

    import framebus

    from ._signals import stop_on_signals_and_clean_up, stopped_by_signal, stopped_status

    # A signal sets ``halted`` and the loops stop at their next check. It is never raised as
    # KeyboardInterrupt: raised at a random point (an import's lock callback, a finalizer) it
    # can be swallowed, and the demo would then run on.
    halted = threading.Event()
    stop_on_signals_and_clean_up(halted)
    name = f"demo-{os.getpid()}"
    shape = (args.height, args.width, 3)
    frame_bytes = int(np.prod(shape))
    ctx = mp.get_context("spawn")
    stream = framebus.create(name, shape=shape, dtype=np.uint8, slots=args.slots)
    procs = []
    try:
        ready, stop, stats = ctx.Event(), ctx.Event(), ctx.Queue()
        consumer = ctx.Process(target=_consumer, args=(name, args.mode, stats, ready, stop), daemon=True)
        producer = ctx.Process(target=_producer, args=(name, args.seconds, args.fps, ready), daemon=True)
        procs = [consumer, producer]
        consumer.start()
        producer.start()
        summary = _display(args, stats, producer, stop, frame_bytes, shape, halted)
        if halted.is_set():
            stop.set()
            for p in procs:
                p.terminate()
    finally:
        stop_all = [p for p in procs if p.is_alive()]
        for p in stop_all:
            p.join(timeout=3)
            if p.is_alive():
                p.kill()
        stream.unlink()
    if stopped_by_signal():
        status = stopped_status()
        print("interrupted" if status == 130 else "terminated", file=sys.stderr)
        return status
    return 0 if summary.get("corrupt", 0) == 0 and summary.get("received", 0) > 0 else 1


def rate(received: int, first_ns: int, last_ns: int) -> float:
    """Frames per second from the first frame received to the last (``time.time_ns`` values):
    the ``received - 1`` intervals between them. Process start-up (spawning the producer and
    the consumer, opening the stream) happens before the first frame and is not counted."""
    if received < 2 or last_ns <= first_ns:
        return 0.0
    return (received - 1) / ((last_ns - first_ns) / 1e9)


def _percentiles(lat: list) -> Dict[str, float]:
    import numpy as np

    if not lat:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    a = np.asarray(lat)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def micros(value: float) -> str:
    """A latency in microseconds for the table; "no frames" while none has arrived (its
    percentiles are NaN then)."""
    return "no frames" if value != value else f"{value:.0f} µs"


def _display(args: argparse.Namespace, stats: Any, producer: Any, stop: Any, frame_bytes: int, shape: tuple, halted: Any) -> Dict[str, Any]:
    """Shows the consumer's figures live until the producer is done or ``halted`` is set (a
    signal); returns the final figures."""
    import queue

    received = corrupt = missed = 0
    first_ns = last_ns = 0
    all_lat: list = []
    window: list = []
    start = time.perf_counter()
    title = f"framebus demo: {shape[1]}x{shape[0]} RGB, {args.mode} reader, {args.slots} slots"

    def snapshot(final: bool = False) -> Dict[str, Any]:
        elapsed = max(time.perf_counter() - start, 1e-9)
        # From the first frame on: while running up to now, at the end up to the last frame.
        fps = rate(received, first_ns, last_ns if final else max(last_ns, time.time_ns()))
        pct = _percentiles(window[-2000:] or all_lat[-2000:])
        return {"elapsed": elapsed, "fps": fps, "gbps": fps * frame_bytes / 1e9, "received": received, "corrupt": corrupt, "missed": missed, **pct}

    def drain(block: float) -> bool:
        nonlocal received, corrupt, missed, window, first_ns, last_ns
        done = False
        try:
            while True:
                msg = stats.get(timeout=block)
                block = 0
                received = msg["received"]
                corrupt = msg["corrupt"]
                missed = msg["missed"]
                first_ns, last_ns = msg.get("first_ns", 0), msg.get("last_ns", 0)
                window = (window + msg["latencies"])[-4000:]
                all_lat.extend(msg["latencies"])
                done = done or msg.get("done", False)
        except queue.Empty:
            pass
        return done

    try:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
        from rich.table import Table
        from rich.console import Group
    except ImportError:
        Live = None  # type: ignore[assignment, misc]

    def table(s: Dict[str, Any]) -> Any:
        t = Table(title=title, expand=False)
        for col in ("frames", "frames/s", "GB/s", "latency p50", "latency p99", "missed", "corrupt"):
            t.add_column(col, justify="right")
        t.add_row(
            f"{s['received']}", f"{s['fps']:.0f}", f"{s['gbps']:.2f}", micros(s["p50"]), micros(s["p99"]), f"{s['missed']}", f"{s['corrupt']}"
        )
        return t

    if Live is not None:
        progress = Progress(TextColumn("streaming"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeRemainingColumn())
        task = progress.add_task("run", total=args.seconds)
        console = Console()
        # Live ends its last picture with a newline only on a terminal: to a pipe or a file
        # (and when interrupted) the line is ended here.
        with _ended_line(console), Live(Group(progress, table(snapshot())), refresh_per_second=8, console=console) as live:
            while producer.is_alive() and not halted.is_set():
                drain(0.25)
                progress.update(task, completed=min(time.perf_counter() - start, args.seconds))
                live.update(Group(progress, table(snapshot())))
            if halted.is_set():  # stopped by a signal: the figures as they stand
                return snapshot()
            stop.set()
            deadline = time.perf_counter() + 3
            while not drain(0.2) and time.perf_counter() < deadline:
                pass
            progress.update(task, completed=args.seconds)
            window = all_lat
            final = snapshot(final=True)
            live.update(Group(progress, table(final)))
    else:
        while producer.is_alive() and not halted.is_set():
            drain(0.5)
            s = snapshot()
            print(f"{s['elapsed']:5.1f}s  {s['fps']:7.0f} frames/s  {s['gbps']:5.2f} GB/s  p50 {micros(s['p50'])}  p99 {micros(s['p99'])}")
        if halted.is_set():
            return snapshot()
        stop.set()
        deadline = time.perf_counter() + 3
        while not drain(0.2) and time.perf_counter() < deadline:
            pass
        window = all_lat
        final = snapshot(final=True)
        print(f"total {final['received']} frames, {final['fps']:.0f} frames/s, {final['gbps']:.2f} GB/s, missed {final['missed']}, corrupt {final['corrupt']}")
    return final


@contextlib.contextmanager
def _ended_line(console: Any) -> Iterator[None]:
    """Ends the output's last line when the block ends (normally or not) if ``console`` is
    not a terminal: rich's Live leaves its last picture without a newline there."""
    try:
        yield
    finally:
        if not console.is_terminal:
            console.line()
