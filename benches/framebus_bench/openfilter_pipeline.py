"""An OpenFilter pipeline, source -> filter -> filter -> sink, four processes started by
OpenFilter's own runner, over one of three transports:

- ``zmq``: OpenFilter as shipped, raw images in its ZeroMQ messages (``outputs_jpg=False``);
- ``openfilter-shm``: OpenFilter's shared-memory slots (``OPENFILTER_SHM_ENABLE=1``);
- ``framebus``: the same filters with :func:`framebus.integrations.openfilter.enable`.

The source is a video made on the fly by FFmpeg (``testsrc2`` from imageio-ffmpeg's binary,
a numpy pattern where FFmpeg is missing): a few distinct frames decoded once at start-up, each
with its CRC-32, then sent in turn, paced so that the pipeline is idle when a frame leaves (hop
latency without queueing). Each stage stamps ``time.perf_counter_ns()`` (system-wide) into the
frame's data when its ``process()`` receives the frame and just before it returns it; hop *k* is
the time from stage *k* returning the frame to stage *k+1* holding it, which is everything the
transport and OpenFilter's messaging add. The sink checks every frame's CRC-32 (a frame torn or
replaced in transit fails it).

Each hop is also split in three (``breakdown_ms``), from two more stamps: when OpenFilter hands the
frame to the transport's encoder (``MQ.frames2topicmsgs``, the call every transport replaces) and
when the receiver's decoder (``MQ.topicmsgs2frames``) has returned it. *before*: OpenFilter's own
work in the sending process after ``process()`` returned (its request bookkeeping, metrics);
*transport*: encoding, OpenFilter's ZeroMQ messages and receive loop, and decoding (where the
transports differ); *after*:
OpenFilter's own work in the receiving process before it calls ``process()``.

Run ``python -m framebus_bench.openfilter_pipeline --help`` (or examples/openfilter_pipeline.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any, Dict, List, Optional

import numpy as np

RESOLUTIONS = {"1080p": (1080, 1920), "2160p": (2160, 3840), "tiny": (16, 16)}
#: ``tiny`` (16x16) measures OpenFilter's own cost per message, which no transport can remove.
TRANSPORTS = ("framebus", "openfilter-shm", "zmq")
#: Distinct frames decoded at start-up and sent in turn.
DISTINCT = 6
#: Frames sent first and not counted (first touch of every process's buffers).
WARMUP = 2
#: Default spacing of frames, seconds: long enough for the slowest transport to be idle.
INTERVALS = {"1080p": 0.12, "2160p": 0.3, "tiny": 0.05}
STAGES = ("source", "filter 1", "filter 2", "sink")
#: The three parts of a hop (``breakdown_ms``): OpenFilter's own work before the transport gets
#: the frame, the transport (encode, messages, decode), OpenFilter's work before ``process()``.
BREAKDOWN = ("before", "transport", "after")


def make_video(height: int, width: int, count: int) -> "tuple[np.ndarray, str]":
    """``count`` RGB frames of a test video, from FFmpeg's testsrc2 when imageio-ffmpeg is
    installed (else a numpy pattern); returns (frames, what made them)."""
    try:
        import imageio_ffmpeg

        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        exe = None
    if exe is not None:
        cmd = [exe, "-v", "error", "-f", "lavfi", "-i", f"testsrc2=size={width}x{height}:rate=30"]
        cmd += ["-frames:v", str(count), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
        out = subprocess.run(cmd, capture_output=True, check=True).stdout
        return np.frombuffer(out, np.uint8).reshape(count, height, width, 3).copy(), "ffmpeg testsrc2"
    ramp = np.arange(width, dtype=np.uint8)[None, :, None]
    frames = np.stack([np.broadcast_to(ramp + i * 40, (height, width, 3)) for i in range(count)])
    return frames.astype(np.uint8), "numpy pattern (imageio-ffmpeg not installed)"


def _filters() -> Dict[str, Any]:
    """The four Filter classes (defined here so that importing this module needs no OpenFilter)."""
    from openfilter.filter_runtime import Filter, Frame

    class Source(Filter):
        def setup(self, config: Any) -> None:
            h, w = RESOLUTIONS[config.resolution]
            self.video, _ = make_video(h, w, DISTINCT)
            self.crcs = [zlib.crc32(f) for f in self.video]
            self.total = int(config.frames) + WARMUP
            self.interval = float(config.interval)
            self.sent = 0
            self.next_at = time.perf_counter() + 0.5

        def process(self, frames: Any) -> Any:
            if self.sent >= self.total:
                time.sleep(0.05)
                return None
            delay = self.next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.next_at = time.perf_counter() + self.interval
            k = self.sent % DISTINCT
            i, self.sent = self.sent, self.sent + 1
            data = {"i": i, "crc": self.crcs[k], "warm": i < WARMUP, "t": [0, time.perf_counter_ns()]}
            return {"main": Frame(self.video[k], data, "RGB")}

    class Pass(Filter):
        """A filter that looks at the image (its mean over a sparse grid) and passes it on."""

        def process(self, frames: Any) -> Any:
            t_in = time.perf_counter_ns()
            frame = frames["main"]
            level = float(frame.image[::64, ::64].mean())
            data = dict(frame.data)
            data["t"] = data["t"] + [_stamps["decoded"], t_in]
            data.setdefault("levels", []).append(level)
            data["t"].append(time.perf_counter_ns())
            return {"main": Frame(frame.image, data, frame.format)}

    class Sink(Filter):
        def setup(self, config: Any) -> None:
            self.out = open(config.results, "a", buffering=1)

        def process(self, frames: Any) -> None:
            t_in = time.perf_counter_ns()
            frame = frames["main"]
            ok = zlib.crc32(frame.image) == frame.data["crc"] and frame.image.shape[:2] == tuple(RESOLUTIONS[self.config.resolution])
            record = {"i": frame.data["i"], "warm": frame.data["warm"], "t": frame.data["t"] + [_stamps["decoded"], t_in], "ok": bool(ok)}
            self.out.write(json.dumps(record) + "\n")
            return None

        def shutdown(self) -> None:
            self.out.close()

    return {"Source": Source, "Pass": Pass, "Sink": Sink}


#: This process's last decode stamp (``perf_counter_ns`` when ``MQ.topicmsgs2frames`` returned).
_stamps = {"decoded": 0}


def _stamp_transport_calls() -> None:
    """Wraps OpenFilter's encoder and decoder (after any transport patched them) so each frame
    records when the transport got it and when the receiver had decoded it (``breakdown_ms``)."""
    from openfilter.filter_runtime.mq import MQ

    encode, decode = MQ.frames2topicmsgs, MQ.topicmsgs2frames

    def stamped_encode(frames: Any, *args: Any, **kwargs: Any) -> Any:
        now = time.perf_counter_ns()
        for topic, frame in frames.items():
            t = frame.data.get("t") if not topic.startswith("_") and isinstance(frame.data, dict) else None
            if isinstance(t, list):
                t.append(now)
        return encode(frames, *args, **kwargs)

    def stamped_decode(*args: Any, **kwargs: Any) -> Any:
        frames = decode(*args, **kwargs)
        _stamps["decoded"] = time.perf_counter_ns()
        return frames

    MQ.frames2topicmsgs = staticmethod(stamped_encode)
    MQ.topicmsgs2frames = staticmethod(stamped_decode)


def _quiet_openfilter() -> None:
    # OpenFilter reports usage over the network, logs at INFO and writes logs/ into the working
    # directory by default; a benchmark does none of these.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("SCARF_NO_ANALYTICS", "true")
    os.environ.setdefault("LOG_LEVEL", "warning")
    os.environ.setdefault("LOG_PATH", "false")
    # At start-up every filter warns that the files its container images carry (VERSION,
    # RESOURCE_BUNDLE_VERSION, VERSION_SHA, models.toml) are not in the working directory: 16
    # lines about OpenFilter's packaging, none about the pipeline. Only OpenFilter's loggers are
    # raised to ERROR (the filter processes fork from this one and inherit it); framebus's keep
    # theirs.
    logging.getLogger("openfilter").setLevel(logging.ERROR)


def run_one(transport: str, resolution: str, frames: int, interval: Optional[float] = None, timeout: float = 120.0) -> Dict[str, Any]:
    """Runs the pipeline over ``transport`` in this process's children; returns the summary
    (see ``--json``). Changes this process's environment and OpenFilter patches: run it in a
    fresh process (``main`` does) when comparing transports."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}, got {resolution!r}")
    if frames < 1:
        raise ValueError(f"frames must be at least 1, got {frames}")
    _quiet_openfilter()
    os.environ.pop("OPENFILTER_SHM_ENABLE", None)
    if transport == "openfilter-shm":
        os.environ["OPENFILTER_SHM_ENABLE"] = "1"
    elif transport == "framebus":
        import framebus.integrations.openfilter as fb_openfilter

        fb_openfilter.enable()
    from openfilter.filter_runtime import Filter

    _stamp_transport_calls()
    classes = _filters()
    interval = INTERVALS[resolution] if interval is None else interval
    work = tempfile.mkdtemp(prefix="fb-ofp-")
    results = os.path.join(work, "results.jsonl")
    addr = [f"ipc://{work}/hop{k}" for k in range(3)]
    common = {"outputs_jpg": False, "resolution": resolution}
    stages = [
        (classes["Source"], dict(common, id="source", outputs=addr[0], frames=frames, interval=interval)),
        (classes["Pass"], dict(common, id="filter1", sources=addr[0], outputs=addr[1])),
        (classes["Pass"], dict(common, id="filter2", sources=addr[1], outputs=addr[2])),
        (classes["Sink"], dict(common, id="sink", sources=addr[2], results=results)),
    ]
    expected = frames + WARMUP
    started = time.perf_counter()
    runner = Filter.Runner(stages, exit_time=10, sig_stop=False)
    try:
        while time.perf_counter() - started < timeout:
            if runner.step(0.1, stop=False):
                break
            if os.path.exists(results) and _count_lines(results) >= expected:
                break
    finally:
        runner.stop()
    records = _read(results)
    return summarize(records, transport, resolution, frames)


def _count_lines(path: str) -> int:
    with open(path) as f:
        return sum(1 for _ in f)


def _read(path: str) -> List[Dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(records: List[Dict[str, Any]], transport: str, resolution: str, frames: int) -> Dict[str, Any]:
    """The ``--json`` summary of the sink's records."""
    measured = [r for r in records if not r["warm"]]
    # t: [unused, then per hop: sender out, encoder in, decoder out, receiver in; the receiver's
    # own "out" starts the next hop] = [0, out0, enc0, dec0, in1, out1, enc1, dec1, in2, ...]
    hops: List[List[float]] = [[], [], []]
    parts: List[List[List[float]]] = [[[], [], []] for _ in range(3)]
    for r in measured:
        t = r["t"]
        if len(t) != 13:
            raise RuntimeError(f"frame {r['i']} carries {len(t)} time stamps, not 13: a stage ran without the stamping wrappers (they reach the filters by fork)")
        for k in range(3):
            out, enc, dec, rin = t[1 + 4 * k : 5 + 4 * k]
            hops[k].append((rin - out) / 1e6)
            for j, (a, b) in enumerate(((out, enc), (enc, dec), (dec, rin))):
                parts[k][j].append((b - a) / 1e6)
    per_hop = [statistics.median(h) if h else None for h in hops]
    p95 = [float(np.percentile(h, 95)) if h else None for h in hops]
    breakdown = [{name: statistics.median(p) if p else None for name, p in zip(BREAKDOWN, hop)} for hop in parts]
    return {
        "transport": transport,
        "resolution": resolution,
        "frames": len(measured),
        "sent": frames,
        "torn": sum(1 for r in measured if not r["ok"]),
        "per_hop_ms": per_hop,
        "per_hop_p95_ms": p95,
        "breakdown_ms": breakdown,
        "hop_ms_samples": [x for h in hops for x in h],
        "hops": [f"{a} -> {b}" for a, b in zip(STAGES, STAGES[1:])],
    }


def run_isolated(transport: str, resolution: str, frames: int, interval: Optional[float] = None, timeout: float = 180.0) -> Dict[str, Any]:
    """``run_one`` in a fresh interpreter (so transports do not share patches or environment)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, "-m", "framebus_bench.openfilter_pipeline", "--transport", transport, "--resolution", resolution]
    cmd += ["--frames", str(frames), "--json", out, "--quiet"]
    if interval is not None:
        cmd += ["--interval", str(interval)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"OpenFilter pipeline over {transport} failed (exit {proc.returncode}): " + " | ".join(tail))
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def _table(results: List[Dict[str, Any]]) -> str:
    lines = [f"{'transport':<16} {'res':<6} {'frames':>6} {'torn':>5}  " + "  ".join(f"hop {k + 1} ms" for k in range(3))]
    for r in results:
        hops = "  ".join(f"{h:>8.3f}" if h is not None else f"{'-':>8}" for h in r["per_hop_ms"])
        lines.append(f"{r['transport']:<16} {r['resolution']:<6} {r['frames']:>6} {r['torn']:>5}  {hops}")
    lines += ["", "each hop split: OpenFilter before the transport / the transport / OpenFilter after it, ms"]
    lines.append(f"{'transport':<16} {'res':<6}  " + "  ".join(f"{f'hop {k + 1}':^23}" for k in range(3)))
    for r in results:
        cells = []
        for part in r.get("breakdown_ms") or []:
            cells.append(" / ".join(f"{part[name]:.3f}" if part[name] is not None else "-" for name in BREAKDOWN))
        lines.append(f"{r['transport']:<16} {r['resolution']:<6}  " + "  ".join(f"{c:^23}" for c in cells))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="openfilter_pipeline",
        description="An OpenFilter pipeline (source -> filter -> filter -> sink, separate processes) over framebus, "
        "OpenFilter's shared memory or OpenFilter's ZeroMQ; prints the per-hop latency and checks every frame's CRC.",
        epilog="Exit status: 0 when every frame arrived intact, 1 when a frame was torn or lost or a run failed, 2 for bad arguments.",
    )
    p.add_argument("--transport", choices=TRANSPORTS + ("all",), default="all", help="transport (all: each in turn, in fresh processes)")
    p.add_argument("--resolution", choices=tuple(RESOLUTIONS) + ("all",), default="1080p", help="1080p or 2160p RGB; all: both; tiny: 16x16, OpenFilter's own cost per message")
    p.add_argument("--frames", type=int, default=30, help="frames measured (after %d warm-up frames)" % WARMUP)
    p.add_argument("--interval", type=float, default=None, help="seconds between frames (default: 0.12 at 1080p, 0.3 at 2160p)")
    p.add_argument("--json", metavar="FILE", help="write the results here (one object, or a list for several runs)")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    args = p.parse_args(argv)
    if args.frames < 1:
        p.error("--frames must be at least 1")
    if args.interval is not None and not 0 <= args.interval <= 60:
        p.error("--interval must be between 0 and 60 seconds")
    transports = TRANSPORTS if args.transport == "all" else (args.transport,)
    resolutions = ("1080p", "2160p") if args.resolution == "all" else (args.resolution,)
    results = []
    for res in resolutions:
        for t in transports:
            try:
                if len(transports) * len(resolutions) == 1:
                    results.append(run_one(t, res, args.frames, args.interval))
                else:
                    results.append(run_isolated(t, res, args.frames, args.interval))
            except (RuntimeError, OSError, subprocess.SubprocessError, ImportError) as e:
                print(f"openfilter_pipeline: {e}", file=sys.stderr)
                return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results[0] if len(results) == 1 else results, f, indent=1)
    if not args.quiet:
        print(_table(results))
    bad = any(r["torn"] or r["frames"] < r["sent"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
