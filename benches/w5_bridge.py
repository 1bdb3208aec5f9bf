"""W5 over the network: 1080p RGB frames from one process to another over loopback TCP,
framebus bridge (latest and lossless) vs plain pyzmq PUB/SUB with copy=False, interleaved in one
run. Not a test: it prints a table (and writes JSON with --json).

    python benches/w5_bridge.py [--seconds 3] [--trials 2] [--fps 30,120,240,360] [--json FILE]
    python benches/w5_bridge.py --zenoh [--fps 0]    # the bridge's engines and raw zenoh-python
    python benches/w5_bridge.py --zenoh --systems "framebus lossless,framebus zenoh lossless,zenoh-python,zenoh-python defaults"

With --zenoh the systems are the bridge in lossless mode over its two engines, ZeroMQ
("framebus lossless") and Eclipse Zenoh ("framebus zenoh lossless"), and raw zenoh-python
("zenoh-python": the sender fills a frame buffer and puts its bytes, with the header as
attachment; the receiver takes each sample off the subscriber's queue as bytes and views it as an
ndarray), all on loopback TCP, peer to peer, scouting off. The raw sessions and puts are set up
as the engine's: Zenoh's shared-memory transport off, the engine's transmission queue, reliable,
congestion control BLOCK, express (Zenoh's defaults would put with congestion control DROP,
which loses frames, and on one host would carry them through shared memory, not TCP; that is
"zenoh-python defaults", run only when named in --systems). --zenoh-config FILE gives the
engine's sessions a Zenoh configuration file, e.g. one that turns the shared-memory transport on.

What each system does per frame, so the comparison is like for like:
- pyzmq: the sender fills a frame buffer (np.copyto from a template: what producing a frame
  costs) from a pool whose buffers ZeroMQ has released (tracked), sends [header, frame] with
  copy=False over PUB (SNDHWM = 4); the receiver (SUB, RCVHWM = 4) gets it with copy=False.
- framebus: the sender fills a loaned slot of a local stream (the same np.copyto), a publisher
  thread in the same process sends it zero-copy from the slot (the Zenoh engine: copied twice,
  zenoh-python takes only bytes); in the receiving process a subscriber thread writes it into a
  local stream (the Zenoh engine: after one copy out of Zenoh's sample) and the consumer takes a
  zero-copy view.
Latency: from the frame being ready at the sender (after the fill) to the consumer holding it as
an ndarray, on one clock (same host). Frames/s: frames the consumer got per second. Lost: frames
sent that the consumer never saw (PUB/SUB and latest mode drop; lossless slows the sender).
The paced rows send at each --fps rate: latency without queueing at video rates, and how much
of an offered rate each system delivers (its capacity, whatever the sender's own cost).

Full speed means something different per system, so read those rows with care: the pyzmq
sender waits for ZeroMQ to release its buffers (tracked sends), and a lossless framebus writer
waits for the remote reader (backpressure), but a latest-mode framebus writer never waits (that
is the mode's promise), so at full speed it spends a whole core producing frames that are then
replaced before they are sent; on a 2-core machine that is a core the bridge does not get.
Two more full-speed rows separate the transport from the producer:
- "framebus latest" at "pyzmq's rate": the writer offers exactly as many frames per second as
  the pyzmq sender managed in the same trial (its full-speed row), so both sides spend the same
  CPU producing frames and the difference is the link;
- "pyzmq tuned": the pyzmq receiver with the malloc setting the framebus subscriber makes itself
  (GLIBC_TUNABLES; see framebus/net/wire/heap.py), to show how much of the difference that is.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import socket
import statistics
import struct
import sys
import time
from typing import Any, Dict, List

SHAPE = (1080, 1920, 3)
HWM = 4
HEADER = struct.Struct("<QQB")  # seq, t_ns, measured
WARMUP_S = 0.5


def _templates(shape: tuple, n: int = 4) -> list:
    import numpy as np

    rng = np.random.default_rng(5)
    return [rng.integers(0, 255, size=shape, dtype=np.uint8) for _ in range(n)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pace(start: float, n: int, fps: float) -> None:
    if fps:
        delay = start + n / fps - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


# -- pyzmq PUB/SUB --------------------------------------------------------------------------------
def zmq_sender(shape: tuple, port: int, seconds: float, fps: float, go: Any, out: Any) -> None:
    import numpy as np
    import zmq

    frames = _templates(shape)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.bind(f"tcp://127.0.0.1:{port}")
    pool = [np.empty(shape, np.uint8) for _ in range(HWM + 2)]
    trackers: List[Any] = [None] * len(pool)
    out.put("ready")
    go.wait()
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) < start + WARMUP_S + seconds:
        i = n % len(pool)
        if trackers[i] is not None:
            trackers[i].wait()  # the buffer is still being sent: never overwrite it
        np.copyto(pool[i], frames[n % len(frames)])
        header = HEADER.pack(n, time.time_ns(), now >= start + WARMUP_S)
        trackers[i] = sock.send_multipart([header, pool[i]], copy=False, track=True)
        n += 1
        _pace(start, n, fps)
    out.put(("sent", n))
    sock.close(linger=1000)
    ctx.term()


def tuned_malloc_env(shape: tuple) -> str:
    """GLIBC_TUNABLES with the thresholds the framebus subscriber sets for these frames."""
    from framebus.net.wire import heap

    mmap_threshold = min(math.prod(shape) + heap.SLACK, heap.MMAP_THRESHOLD_MAX)
    return f"glibc.malloc.mmap_threshold={mmap_threshold}:glibc.malloc.trim_threshold={mmap_threshold * (HWM + 3)}"


def zmq_receiver(shape: tuple, port: int, stop: Any, out: Any) -> None:
    import numpy as np
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://127.0.0.1:{port}")
    out.put("ready")
    lat, times, seqs = [], [], []
    while not stop.is_set():
        if not sock.poll(100):
            continue
        header, payload = sock.recv_multipart(copy=False)
        seq, t_ns, measured = HEADER.unpack(header.bytes)
        arr = np.frombuffer(payload.buffer, np.uint8).reshape(shape)
        _ = int(arr[0, 0, 0])  # the consumer touches the frame
        if measured:
            lat.append((time.time_ns() - t_ns) / 1e6)
            times.append(time.perf_counter())
            seqs.append(seq)
    out.put(("got", lat, times, seqs))
    sock.close(linger=0)
    ctx.term()


# -- raw zenoh-python ----------------------------------------------------------------------------
# "zenoh-python" is set up as the Zenoh engine sets up its own sessions and puts its frames:
# Zenoh's shared-memory transport off and the same transmission queue (zenoh_wire.tune), reliable,
# congestion control BLOCK (what a user who may not lose a frame sets), express, and the same
# one-copy read of a received payload. "zenoh-python defaults" is zenoh-python as it comes:
# shared-memory transport on (on one host a large payload then goes through a file in /dev/shm,
# not over TCP), congestion control DROP (frames can be lost), payload read with to_bytes().
def _zenoh_session(defaults: bool, listen: str = "", connect: str = "") -> Any:
    import zenoh

    from framebus.net.zenoh import frames as zenoh_wire

    cfg = zenoh.Config()
    cfg.insert_json5("scouting/multicast/enabled", "false")
    if not defaults:
        zenoh_wire.tune(cfg)
    if listen:
        cfg.insert_json5("listen/endpoints", json.dumps([listen]))
    if connect:
        cfg.insert_json5("connect/endpoints", json.dumps([connect]))
    return zenoh.open(cfg)


def _unlink_zenoh_segments() -> None:
    """Zenoh removes its shared-memory files when the interpreter exits, which a
    multiprocessing child skips (os._exit): remove those this process maps."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if line.rstrip().endswith(".zenoh") and "/dev/shm/" in line}
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def zenoh_sender(shape: tuple, port: int, seconds: float, fps: float, go: Any, out: Any, defaults: bool = False) -> None:
    import numpy as np
    import zenoh

    frames = _templates(shape)
    session = _zenoh_session(defaults, listen=f"tcp/127.0.0.1:{port}")
    qos = {} if defaults else dict(congestion_control=zenoh.CongestionControl.BLOCK, reliability=zenoh.Reliability.RELIABLE, express=True)
    pub = session.declare_publisher("w5/raw", **qos)
    buf = np.empty(shape, np.uint8)
    while not pub.matching_status.matching:
        time.sleep(0.01)
    out.put("ready")
    go.wait()
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) < start + WARMUP_S + seconds:
        np.copyto(buf, frames[n % len(frames)])
        pub.put(buf.tobytes(), attachment=HEADER.pack(n, time.time_ns(), now >= start + WARMUP_S))
        n += 1
        _pace(start, n, fps)
    out.put(("sent", n))
    time.sleep(0.3)
    pub.undeclare()
    if defaults:
        _unlink_zenoh_segments()
    session.close()


def zenoh_receiver(shape: tuple, port: int, stop: Any, out: Any, defaults: bool = False) -> None:
    import numpy as np

    from framebus.net.zenoh import frames as zenoh_wire

    read = (lambda z: z.to_bytes()) if defaults else zenoh_wire.frame_bytes
    session = _zenoh_session(defaults, connect=f"tcp/127.0.0.1:{port}")
    sub = session.declare_subscriber("w5/raw")
    out.put("ready")
    lat, times, seqs = [], [], []
    while not stop.is_set():
        sample = sub.try_recv()
        if sample is None:
            time.sleep(0.0005)
            continue
        seq, t_ns, measured = HEADER.unpack(sample.attachment.to_bytes())
        arr = np.frombuffer(read(sample.payload), np.uint8).reshape(shape)
        _ = int(arr[0, 0, 0])
        if measured:
            lat.append((time.time_ns() - t_ns) / 1e6)
            times.append(time.perf_counter())
            seqs.append(seq)
    out.put(("got", lat, times, seqs))
    sub.undeclare()
    if defaults:
        _unlink_zenoh_segments()
    session.close()


# -- framebus bridge ------------------------------------------------------------------------------
def _engine(engine: str, port: int, end: str) -> Any:
    if engine != "zenoh":
        return {}
    where = {"listen": [f"tcp/127.0.0.1:{port}"]} if end == "publish" else {"connect": [f"tcp/127.0.0.1:{port}"]}
    if os.environ.get("W5_ZENOH_CONFIG"):  # --zenoh-config, handed to the spawned processes
        where["zenoh_config"] = os.environ["W5_ZENOH_CONFIG"]
    return dict(engine="zenoh", scouting=False, **where)


def fb_sender(shape: tuple, port: int, seconds: float, fps: float, mode: str, go: Any, out: Any, engine: str = "zmq") -> None:
    import numpy as np

    import framebus
    import framebus.net as net

    frames = _templates(shape)
    name = f"w5net-src-{os.getpid()}"
    src = framebus.create(name, shape=shape, dtype=np.uint8, slots=HWM + 2)
    endpoint = "w5/bridge" if engine == "zenoh" else f"tcp://127.0.0.1:{port}"
    pub = net.publish(name, endpoint, mode=mode, hwm=HWM, status=False, **_engine(engine, port, "publish"))
    out.put("ready")
    go.wait()
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) < start + WARMUP_S + seconds:
        measured = b"1" if now >= start + WARMUP_S else b"0"
        with src.loan(timeout=30, frame_id=n, meta=measured) as a:
            np.copyto(a, frames[n % len(frames)])
        n += 1
        _pace(start, n, fps)
    out.put(("sent", n))
    out.put(("pub", pub.stats.dropped))
    time.sleep(0.3)
    pub.stop()
    src.unlink()


def fb_receiver(shape: tuple, port: int, mode: str, stop: Any, out: Any, engine: str = "zmq") -> None:
    import framebus
    import framebus.net as net

    name = f"w5net-dst-{os.getpid()}"
    endpoint = "w5/bridge" if engine == "zenoh" else f"tcp://127.0.0.1:{port}"
    sub = net.subscribe(endpoint, name, timeout=30, hwm=HWM, slots=HWM + 2, status=False, **_engine(engine, port, "subscribe"))
    dst = framebus.open(name, mode=mode)
    out.put("ready")
    lat, times, seqs = [], [], []
    while not stop.is_set():
        try:
            f = dst.wait_view(timeout=0.1)
        except TimeoutError:
            continue
        _ = int(f.array[0, 0, 0])  # the consumer touches the frame
        if f.meta == b"1":
            lat.append((time.time_ns() - f.timestamp_ns) / 1e6)
            times.append(time.perf_counter())
            seqs.append(f.frame_id)
        f.release()
    out.put(("got", lat, times, seqs))
    dst.close()
    sub.stop()


# -- driver --------------------------------------------------------------------------------------
def run_once(system: str, seconds: float, fps: float, shape: tuple = SHAPE, load: str = "") -> Dict[str, Any]:
    ctx = mp.get_context("spawn")
    q_send, q_recv = ctx.Queue(), ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    port = _free_port()
    raw_zenoh = system.startswith("zenoh-python")
    zmq_run = system.startswith("pyzmq") or raw_zenoh
    if raw_zenoh:
        defaults = system.endswith("defaults")
        sender = ctx.Process(target=zenoh_sender, args=(shape, port, seconds, fps, go, q_send, defaults))
        receiver = ctx.Process(target=zenoh_receiver, args=(shape, port, stop, q_recv, defaults))
    elif zmq_run:
        sender = ctx.Process(target=zmq_sender, args=(shape, port, seconds, fps, go, q_send))
        receiver = ctx.Process(target=zmq_receiver, args=(shape, port, stop, q_recv))
    else:
        mode = system.split()[-1]
        engine = "zenoh" if "zenoh" in system else "zmq"
        sender = ctx.Process(target=fb_sender, args=(shape, port, seconds, fps, mode, go, q_send, engine))
        receiver = ctx.Process(target=fb_receiver, args=(shape, port, mode, stop, q_recv, engine))
    if raw_zenoh:  # the receiver connects to the sender's listener first
        receiver.start()
        sender.start()
        assert q_recv.get(timeout=60) == "ready"
        assert q_send.get(timeout=60) == "ready"
        return _finish(system, seconds, fps, load, q_send, q_recv, go, stop, sender, receiver, zmq_run)
    sender.start()
    assert q_send.get(timeout=60) == "ready"
    if system == "pyzmq tuned":
        saved = dict(os.environ)
        os.environ["GLIBC_TUNABLES"] = tuned_malloc_env(shape)  # read by the new process's loader
        try:
            receiver.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
    else:
        receiver.start()
    assert q_recv.get(timeout=60) == "ready"
    return _finish(system, seconds, fps, load, q_send, q_recv, go, stop, sender, receiver, zmq_run)


def _finish(system: str, seconds: float, fps: float, load: str, q_send: Any, q_recv: Any, go: Any, stop: Any, sender: Any, receiver: Any, zmq_run: bool) -> Dict[str, Any]:
    go.set()
    _, sent = q_send.get(timeout=seconds + 120)
    pub_dropped = q_send.get(timeout=30)[1] if not zmq_run else None
    time.sleep(0.5)  # let the last frames arrive
    stop.set()
    _, lat, times, seqs = q_recv.get(timeout=60)
    sender.join(60)
    receiver.join(60)
    fps_got = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    span = (seqs[-1] - seqs[0] + 1) if seqs else 0
    lost = span - len(set(seqs)) if seqs else 0
    lat.sort()
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")  # noqa: E731
    return {
        "system": system, "load": load or (f"paced {fps:g}/s" if fps else "full speed"), "fps_target": fps,
        "sent": sent, "sent_fps": sent / (WARMUP_S + seconds), "received": len(times), "fps": fps_got,
        "lost": lost, "lost_pct": 100.0 * lost / span if span else 0.0, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        "publisher_dropped": pub_dropped,
    }


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run (default 3)")
    ap.add_argument("--trials", type=int, default=2, help="interleaved rounds (default 2)")
    ap.add_argument("--fps", default="30,120,240,360", help="comma-separated rates of the paced runs (0: none)")
    ap.add_argument("--json", help="write every run to this file")
    ap.add_argument("--shape", default="1080x1920x3", help="frame shape HxWxC, uint8 (default 1080x1920x3)")
    ap.add_argument("--zenoh", action="store_true", help="compare the bridge's engines (lossless) with raw zenoh-python instead")
    ap.add_argument("--systems", help="comma-separated systems to run instead of the comparison's own (with --zenoh, "
                    "'zenoh-python defaults' is one more: zenoh-python as it comes, see the module's notes)")
    ap.add_argument("--zenoh-config", help="a Zenoh configuration file for the Zenoh engine's sessions (used as it is, as by `--zenoh-config`)")
    args = ap.parse_args(argv)
    if args.zenoh_config:
        os.environ["W5_ZENOH_CONFIG"] = os.path.abspath(args.zenoh_config)
    shape = tuple(int(d) for d in args.shape.split("x"))
    paced_systems = ["pyzmq", "framebus latest", "framebus lossless"]
    full_systems = ["pyzmq", "pyzmq tuned", "framebus latest", "framebus lossless"]
    if args.zenoh:
        paced_systems = full_systems = ["framebus lossless", "framebus zenoh lossless", "zenoh-python"]
    if args.systems:
        known = set(paced_systems) | set(full_systems) | ({"zenoh-python defaults"} if args.zenoh else set())
        paced_systems = full_systems = [x.strip() for x in args.systems.split(",")]
        unknown = [x for x in full_systems if x not in known]
        if unknown:
            ap.error(f"unknown systems {unknown}; choose from {sorted(known)}")
    runs: List[Dict[str, Any]] = []
    rates = [0.0] + sorted({float(r) for r in str(args.fps).split(",") if float(r) > 0})

    def record(r: Dict[str, Any], trial: int) -> None:
        r["trial"] = trial
        runs.append(r)
        print(f"  trial {trial} {r['system']:18} {r['load']:>16}: {r['fps']:7.1f} frames/s  lost {r['lost']:5d}  "
              f"p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms", flush=True)

    for trial in range(args.trials):
        for paced in rates:
            pyzmq_rate = 0.0
            for system in full_systems if not paced else paced_systems:
                r = run_once(system, args.seconds, paced, shape)
                record(r, trial)
                if system == "pyzmq" and not paced:
                    pyzmq_rate = r["sent_fps"]
            if pyzmq_rate:
                # The latest-mode writer offering what the pyzmq sender offered in this trial.
                record(run_once("framebus latest", args.seconds, pyzmq_rate, shape, load="pyzmq's rate"), trial)
    _table(runs, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0],
                       "argv": sys.argv, "runs": runs}, f, indent=2)
    return 0


def _table(runs: List[Dict[str, Any]], args: Any) -> None:
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    rows = []
    mb = 1e-6 * math.prod(int(d) for d in args.shape.split("x"))  # MB per frame
    loads = sorted({(r["fps_target"] if r["load"] != "pyzmq's rate" else 0.0, r["load"] == "pyzmq's rate", r["load"]) for r in runs})
    for _, matched, load in loads:
        ref_system = "framebus lossless" if args.zenoh else "pyzmq"
        ref = [r for r in runs if r["system"] == ref_system and r["load"] == ("full speed" if matched else load)]
        base, base_p50 = med([r["fps"] for r in ref]), med([r["p50_ms"] for r in ref])
        for s in dict.fromkeys(r["system"] for r in runs if r["load"] == load):
            rs = [r for r in runs if r["system"] == s and r["load"] == load]
            fps = med([r["fps"] for r in rs])
            p50 = med([r["p50_ms"] for r in rs])
            shown = f"{load} ({med([r['fps_target'] for r in rs]):.0f}/s)" if matched else load
            rows.append([
                s, shown, f"{fps:.1f}", f"{fps * mb:.0f}",
                f"{med([r['lost_pct'] for r in rs]):.1f}", f"{p50:.2f}", f"{med([r['p99_ms'] for r in rs]):.2f}",
                f"{fps / base:.2f}" if base else "", f"{p50 / base_p50:.2f}" if base_p50 else "",
            ])
    vs = "ZeroMQ bridge" if args.zenoh else "pyzmq"
    cols = ["system", "load", "frames/s", "MB/s", "lost %", "p50 ms", "p99 ms", f"fps vs {vs}", f"p50 vs {vs}"]
    title = f"W5 bridge{' engines' if args.zenoh else ''}: {args.shape} uint8 over loopback TCP, median of {args.trials} interleaved trials, {args.seconds:g} s each ({os.cpu_count()} CPUs)"
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print(" | ".join(cols))
        for r in rows:
            print(" | ".join(r))
        return
    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c in ("system", "load") else "right")
    for r in rows:
        t.add_row(*r)
    Console(width=max(120, Console().width)).print(t)


if __name__ == "__main__":
    sys.exit(main())
