"""``framebus hz NAME``: the rate a stream is written at, like ``ros2 topic hz``: every
``--every`` seconds the average rate and the min/max/standard deviation of the intervals
between frames (from the writer's own timestamps). It watches as a latest-mode handle tagged
"monitor": it never holds the writer back and pins nothing. It stops (exit status 1) when the
stream is unlinked or replaced by a new stream of the same name, and says which."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ._args import non_negative_int, positive_float, positive_int, stream_name
from ._wait import add_wait_argument, wait_for_stream

HELP = "print the rate a stream is written at (average, min/max/std of intervals), until Ctrl-C"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", type=stream_name, help="stream to watch")
    p.add_argument("--every", type=positive_float, default=1.0, metavar="S", help="seconds between reports (default 1)")
    p.add_argument("--window", type=positive_int, default=1000, metavar="N", help="intervals the statistics cover (default 1000)")
    p.add_argument("--count", type=non_negative_int, default=0, metavar="K", help="stop after K reports (default: until Ctrl-C)")
    add_wait_argument(p)


def run(args: argparse.Namespace) -> int:
    from ._segment import identity

    import framebus

    wait_for_stream(args.name, args.wait)
    path = framebus.stat(args.name).path
    while True:  # the segment this handle maps: the same file before and after the open
        before = identity(path)
        s = framebus.open(args.name)
        if identity(path) == before:
            break
        s.close()
    s.set_role("monitor", "hz")
    intervals: list = []
    last = (s.write_sequence, s.write_time)
    reports = 0
    next_report = time.monotonic() + args.every
    fresh = False  # a frame arrived since the last report
    try:
        while not args.count or reports < args.count:
            try:
                seq = s.wait_after(last[0], timeout=max(0.0, next_report - time.monotonic()))
            except TimeoutError:
                seq = None
            except framebus.StreamEndedError:
                print(f"stream {args.name!r} ended")
                return 0
            if seq is not None:
                t = s.write_time
                if last[0] and seq > last[0] and t > last[1]:
                    per = (t - last[1]) / (seq - last[0])
                    intervals.extend([per] * min(seq - last[0], args.window))
                    del intervals[: max(0, len(intervals) - args.window)]
                last = (seq, t)
                fresh = True
            if time.monotonic() >= next_report:
                now = identity(path)
                if now != before:
                    what = "was unlinked" if now is None else "was replaced by a new stream of the same name"
                    print(f"framebus hz: stream {args.name!r} {what}; run hz again to watch {'it' if now is None else 'the new one'}", file=sys.stderr)
                    return 1
                reports += 1
                next_report += args.every
                if not fresh or not intervals:
                    print("no new frames")
                    sys.stdout.flush()
                    continue
                fresh = False
                mean = statistics.fmean(intervals)
                std = statistics.pstdev(intervals)
                print(f"average rate: {1 / mean:.3f} Hz\n\tmin: {min(intervals) * 1e3:.3f} ms max: {max(intervals) * 1e3:.3f} ms std dev: {std * 1e3:.3f} ms window: {len(intervals)}")
                sys.stdout.flush()
    finally:
        s.close()
    return 0
