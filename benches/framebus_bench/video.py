"""W11: video across a bridge on loopback, 1080p at 30 frames/s from a moving test pattern.

Ways to get the same pictures to another process over the network stack: framebus's bridge
sending H.264 (libx264, the default low-latency settings) on its ZeroMQ engine and on its Zenoh
engine (when eclipse-zenoh is installed; peer to peer on loopback, scouting off), framebus's
bridge sending raw frames, and what a user would pick instead: FFmpeg encoding the same pictures (libx264 at the
same bitrate, its usual low-latency flags) into MPEG-TS over UDP, and over SRT, decoded by a
second FFmpeg.

Every picture carries its number as a row of black/white blocks (survives the encoder); the
writer notes when it hands each picture over, the reader (after decoding) when it has it:
the difference is the glass-to-glass latency. Processes: the writer, the sending side (the
publisher, or the sending FFmpeg), the receiving side (the subscriber with its decoder, or the
receiving FFmpeg), and the reader (this process). CPU is each side's process CPU time over the
measuring window, in % of one core. The bitrate is what the sending side put on the wire
(framebus: the subscriber's received bytes; FFmpeg: the muxer's output). The late joiner's
time to first picture is from ``subscribe()`` (or the receiving FFmpeg's start) to its first
decoded picture, while the stream runs.
"""

from __future__ import annotations

import importlib.util
import os
import select
import subprocess
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .harness import Context, get, guarded, mp_context, start, stop, summarize
from .records import Column, Metric, Row, SuiteResult, compute_ratios

FPS = 30
BITRATE = "8M"
GOP = 30
BITS = 16

COLUMNS = [
    Column("latency", "latency p50 ms", "{:.1f}", "p50"),
    Column("latency", "p99 ms", "{:.1f}", "p99"),
    Column("mbps", "Mbit/s", "{:.2f}", "extra"),
    Column("cpu_send", "send CPU %", "{:.0f}", "extra"),
    Column("cpu_recv", "receive CPU %", "{:.0f}", "extra"),
    Column("first_ms", "late joiner first picture ms", "{:.0f}", "extra"),
    Column("received", "pictures received %", "{:.0f}", "extra"),
]


def _block(width: int) -> int:
    return max(4, (width // (BITS + 8)) // 2 * 2)


def _bases(height: int, width: int, n: int = FPS) -> List[np.ndarray]:
    """``n`` pictures of a moving pattern: drifting gradients, a checkerboard, a moving box."""
    yy, xx = np.mgrid[0:height, 0:width]
    out = []
    for k in range(n):
        a = np.empty((height, width, 3), np.uint8)
        a[..., 0] = (xx * 256 // width + 8 * k) & 255
        a[..., 1] = (yy * 256 // height + 5 * k) & 255
        a[..., 2] = ((xx // 32 + yy // 32 + k // 6) % 2) * 180
        s = height // 6
        x0 = (k * width // n) % (width - s)
        a[height // 2 : height // 2 + s, x0 : x0 + s] = 255
        out.append(a)
    return out


def _stamp(a: np.ndarray, number: int) -> None:
    b = _block(a.shape[1])
    for i in range(BITS):
        a[0:b, i * b : (i + 1) * b] = 255 if number >> i & 1 else 0


def _number(a: Any) -> int:
    b = _block(a.shape[1])
    q = b // 4
    row = np.asarray(a[q : b - q, :, 1])
    return sum(1 << i for i in range(BITS) if row[:, i * b + q : (i + 1) * b - q].mean() > 128)


def _cpu_s(pid: int) -> float:
    """CPU time (user + system, all threads) of process ``pid`` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@guarded
def _writer(results: Any, target: Any, shape: Any, count: int, times: Any, go: Any, ffmpeg_cmd: Any) -> None:
    """Writes ``count`` numbered pictures at FPS into stream ``target`` (or an FFmpeg's stdin)."""
    import framebus

    height, width = shape
    bases = _bases(height, width)
    proc = stream = None
    if ffmpeg_cmd:
        proc = subprocess.Popen(ffmpeg_cmd, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        results.put({"pid": proc.pid})
    else:
        stream = framebus.create(target, shape=(height, width, 3), dtype=np.uint8, slots=4)
        results.put({"pid": os.getpid()})
    try:
        go.wait(120)
        period = 1.0 / FPS
        t0 = time.monotonic()
        for k in range(count):
            delay = t0 + k * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            frame = bases[k % len(bases)].copy()
            _stamp(frame, k)
            times[k] = time.monotonic()
            if proc is not None:
                assert proc.stdin is not None
                proc.stdin.write(frame.data)
            elif stream is not None:
                stream.write(frame, frame_id=k)
    finally:
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
        if stream is not None:
            stream.end()
            results.put({"done": True})
            time.sleep(1.0)
            stream.unlink()


def _engine_fields(engine: str, port: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The keywords of publish() and subscribe() for ``engine`` (Zenoh: the publisher listens
    on ``port``, the subscribers connect, no scouting)."""
    if engine != "zenoh":
        return {}, {}
    return (
        dict(engine="zenoh", listen=[f"tcp/127.0.0.1:{port}"], scouting=False),
        dict(engine="zenoh", connect=[f"tcp/127.0.0.1:{port}"], scouting=False),
    )


@guarded
def _publisher(results: Any, source: str, encode: Optional[str], wait_s: float, done: Any, engine: str = "zmq", port: int = 0) -> None:
    import framebus.net as net

    deadline = time.monotonic() + 60
    while not os.path.exists(f"/dev/shm/framebus.{source}") and time.monotonic() < deadline:
        time.sleep(0.01)
    fields: Dict[str, Any] = dict(encode=encode, bitrate=BITRATE, gop=GOP) if encode else {}
    link, _ = _engine_fields(engine, port)
    endpoint = f"framebus-bench/{source}" if engine == "zenoh" else "tcp://127.0.0.1:*"
    pub = net.publish(source, endpoint, **fields, **link)
    results.put({"endpoint": pub.endpoint, "pid": os.getpid(), "encoder": getattr(getattr(pub, "encoder", None), "encoder_name", "")})
    done.wait(wait_s)
    pub.stop()


@guarded
def _subscriber(results: Any, endpoint: str, local: str, wire: Any, wait_s: float, done: Any, engine: str = "zmq", port: int = 0) -> None:
    import framebus.net as net

    _, link = _engine_fields(engine, port)
    sub = net.subscribe(endpoint, local, **link)
    results.put({"pid": os.getpid()})
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not done.is_set():
        wire.value = float(sub.stats.wire_bytes)
        time.sleep(0.05)
    sub.stop()


def _read_stream(local: str, times: Any, count: int, window: Any, latencies: List[float], stop_at: float) -> int:
    """Reads the decoded stream until the end or ``stop_at``; latencies (ms) of the pictures
    written inside ``window``; returns how many pictures arrived in it."""
    import framebus

    while not os.path.exists(f"/dev/shm/framebus.{local}"):
        if time.monotonic() > stop_at:
            return 0
        time.sleep(0.005)
    got = 0
    with framebus.open(local) as r:
        while time.monotonic() < stop_at:
            try:
                f = r.wait_view(0.5)
            except TimeoutError:
                continue
            except framebus.StreamEndedError:
                break
            with f:
                now = time.monotonic()
                k = _number(f)
            if 0 <= k < count and window[0] <= times[k] < window[1]:
                latencies.append((now - times[k]) * 1000)
                got += 1
    return got


def _ffmpeg() -> str:
    from framebus.ffmpeg import find_ffmpeg

    return find_ffmpeg(None)


def _ffmpeg_cmds(ffmpeg: str, shape: Any, transport: str, port: int, progress: str) -> Any:
    height, width = shape
    send = [
        ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", str(FPS), "-i", "-",
        "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-b:v", BITRATE, "-maxrate", BITRATE, "-bufsize", "1M",
        "-g", str(GOP), "-bf", "0", "-flush_packets", "1", "-muxdelay", "0", "-muxpreload", "0",
        "-progress", progress, "-stats_period", "0.25", "-f", "mpegts",
    ]
    recv = [ffmpeg, "-hide_banner", "-loglevel", "error", "-fflags", "nobuffer", "-flags", "low_delay", "-probesize", "65536", "-analyzeduration", "0", "-f", "mpegts"]
    if transport == "udp":
        send.append(f"udp://127.0.0.1:{port}?pkt_size=1316")
        recv += ["-i", f"udp://127.0.0.1:{port}?overrun_nonfatal=1&fifo_size=1000000"]
    else:
        send.append(f"srt://127.0.0.1:{port}?mode=caller&latency=20000&pkt_size=1316")
        recv += ["-i", f"srt://127.0.0.1:{port}?mode=listener&latency=20000"]
    recv += ["-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"]  # no repeated pictures
    return send, recv


def _progress_bytes(path: str) -> float:
    try:
        with open(path) as f:
            sizes = [line.split("=", 1)[1] for line in f if line.startswith("total_size=")]
        return float(sizes[-1]) if sizes and sizes[-1].strip().isdigit() else float("nan")
    except OSError:
        return float("nan")


def _read_pipe(proc: Any, shape: Any, times: Any, count: int, window: Any, latencies: List[float], stop_at: float, first: Optional[List[float]] = None) -> int:
    height, width = shape
    size = height * width * 3
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    fd = proc.stdout.fileno()
    while time.monotonic() < stop_at:
        n = 0
        while n < size:
            if not select.select([fd], [], [], max(0.0, stop_at - time.monotonic()))[0]:
                return got  # nothing more in time
            r = os.readv(fd, [view[n:]])
            if not r:
                return got
            n += r
        now = time.monotonic()
        if first is not None and not first:
            first.append(now)
        k = _number(np.frombuffer(buf, np.uint8).reshape(height, width, 3))
        if 0 <= k < count and window[0] <= times[k] < window[1]:
            latencies.append((now - times[k]) * 1000)
            got += 1
    return got


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _row(case: str, variant: str, family: str, role: str, lat: List[float], extra: Dict[str, Any]) -> Row:
    s = summarize(lat) if lat else {"p50": float("nan"), "p99": float("nan"), "min": float("nan"), "max": float("nan")}
    return Row(
        case=case, variant=variant, family=family, role=role, primary="latency",
        metrics={"latency": Metric(s["p50"], "ms", False, p50=s["p50"], p99=s["p99"], lo=s["min"], hi=s["max"])},
        extra=extra,
    )


def _run_bridge(ctx: Context, shape: Any, encode: Optional[str], warm: float, measure: float, joins: int, engine: str = "zmq") -> Dict[str, Any]:
    import framebus.net as net

    port = _free_port() if engine == "zenoh" else 0
    _, link = _engine_fields(engine, port)
    mpc = mp_context()
    count = int((warm + measure + joins * 1.2 + 4) * FPS)
    times = mpc.Array("d", count, lock=False)
    wire = mpc.Value("d", 0.0, lock=False)
    go, done = mpc.Event(), mpc.Event()
    source, local = ctx.name("w11-src"), ctx.name("w11-dec")
    total = warm + measure + joins * 1.2 + 20
    qw, qp, qs = mpc.Queue(), mpc.Queue(), mpc.Queue()
    procs = [start(_writer, qw, source, shape, count, times, go, None)]
    try:
        writer_pid = get(qw, 60, "writer")["pid"]
        procs.append(start(_publisher, qp, source, encode, total, done, engine, port))
        pub = get(qp, 60, "publisher")
        procs.append(start(_subscriber, qs, pub["endpoint"], local, wire, total, done, engine, port))
        sub_pid = get(qs, 60, "subscriber")["pid"]
        go.set()
        t_go = time.monotonic()
        window = (t_go + warm, t_go + warm + measure)
        lat: List[float] = []
        import threading

        marks: Dict[str, float] = {}

        def mark() -> None:
            time.sleep(max(0.0, window[0] - time.monotonic()))
            marks.update(w0=wire.value, p0=_cpu_s(pub["pid"]), s0=_cpu_s(sub_pid), t0=time.monotonic())
            time.sleep(max(0.0, window[1] - time.monotonic()))
            marks.update(w1=wire.value, p1=_cpu_s(pub["pid"]), s1=_cpu_s(sub_pid), t1=time.monotonic())

        th = threading.Thread(target=mark, daemon=True)
        th.start()
        got = _read_stream(local, times, count, window, lat, window[1] + min(1.0, measure / 2))
        th.join(measure + warm + 5)
        dt = marks["t1"] - marks["t0"]
        # late joiners, one after another, while the stream runs
        firsts = []
        for j in range(joins):
            name = ctx.name(f"w11-join{j}")
            t0 = time.monotonic()
            sub = net.subscribe(pub["endpoint"], name, **link)
            try:
                while time.monotonic() - t0 < 10:
                    decoder = getattr(sub, "decoder", None)
                    pictures = decoder.pictures if decoder is not None else (sub.frames if not encode else 0)
                    if pictures:
                        firsts.append((time.monotonic() - t0) * 1000)
                        break
                    time.sleep(0.001)
            finally:
                sub.stop()
            time.sleep(0.6 if j + 1 < joins else 0)
        del writer_pid
        return {
            "lat": lat, "mbps": (marks["w1"] - marks["w0"]) * 8 / dt / 1e6,
            "cpu_send": 100 * (marks["p1"] - marks["p0"]) / dt, "cpu_recv": 100 * (marks["s1"] - marks["s0"]) / dt,
            "first_ms": float(np.median(firsts)) if firsts else float("nan"), "first_all_ms": firsts,
            "received": 100.0 * got / (measure * FPS), "encoder": pub.get("encoder", ""),
        }
    finally:
        go.set()
        done.set()
        stop(procs[1:], timeout=15)
        procs[0].kill()  # the writer: its pictures are no longer read
        stop(procs[:1], timeout=5)


def _run_ffmpeg(ctx: Context, shape: Any, transport: str, warm: float, measure: float, joins: int) -> Dict[str, Any]:
    mpc = mp_context()
    ffmpeg = _ffmpeg()
    count = int((warm + measure + joins * 3 + 4) * FPS)
    times = mpc.Array("d", count, lock=False)
    go = mpc.Event()
    port = _free_port()
    progress = f"/tmp/{ctx.name('w11-progress')}"
    send, recv = _ffmpeg_cmds(ffmpeg, shape, transport, port, progress)
    receiver = subprocess.Popen(recv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    qw = mpc.Queue()
    time.sleep(0.5)  # the listener is up before the caller starts
    procs = [start(_writer, qw, None, shape, count, times, go, send)]
    try:
        sender_pid = get(qw, 60, "FFmpeg sender")["pid"]
        go.set()
        t_go = time.monotonic()
        window = (t_go + warm, t_go + warm + measure)
        marks: Dict[str, float] = {}
        import threading

        def mark() -> None:
            time.sleep(max(0.0, window[0] - time.monotonic()))
            marks.update(b0=_progress_bytes(progress), p0=_cpu_s(sender_pid), s0=_cpu_s(receiver.pid), t0=time.monotonic())
            time.sleep(max(0.0, window[1] - time.monotonic()))
            marks.update(b1=_progress_bytes(progress), p1=_cpu_s(sender_pid), s1=_cpu_s(receiver.pid), t1=time.monotonic())

        th = threading.Thread(target=mark, daemon=True)
        th.start()
        lat: List[float] = []
        got = _read_pipe(receiver, shape, times, count, window, lat, window[1] + 1.0)
        th.join(measure + warm + 5)
        receiver.kill()
        receiver.wait()
        dt = marks["t1"] - marks["t0"]
        firsts = []
        if transport == "udp":  # a second receiver joining the running UDP stream
            for _ in range(joins):
                t0 = time.monotonic()
                late = subprocess.Popen(recv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
                first: List[float] = []
                try:
                    _read_pipe(late, shape, times, count, (0, 0), [], t0 + 3 + measure / 4, first)
                finally:
                    late.kill()
                    late.wait()
                if first:
                    firsts.append((first[0] - t0) * 1000)
                time.sleep(0.3)
        return {
            "lat": lat, "mbps": (marks["b1"] - marks["b0"]) * 8 / dt / 1e6,
            "cpu_send": 100 * (marks["p1"] - marks["p0"]) / dt, "cpu_recv": 100 * (marks["s1"] - marks["s0"]) / dt,
            "first_ms": float(np.median(firsts)) if firsts else float("nan"), "first_all_ms": firsts,
            "received": 100.0 * got / (measure * FPS),
        }
    finally:
        go.set()
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
        stop(procs, timeout=30)
        try:
            os.unlink(progress)
        except OSError:
            pass


def run(ctx: Context) -> SuiteResult:
    """W11: the variants one after another on the same pictures."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W11"
    shape = cfg.pick((1080, 1920), (1080, 1920), (240, 320))
    warm, measure, joins = cfg.pick(3.0, 2.0, 0.5), cfg.pick(20.0, 8.0, 1.0), cfg.pick(5, 3, 1)
    case = f"{shape[1]}x{shape[0]} RGB, {FPS} frames/s"
    suite = SuiteResult(
        sid,
        f"W11 video over a bridge on loopback, {case}",
        "Glass-to-glass latency (writer hands the picture over -> reader has it decoded), bitrate, CPU per side, late joiner's first picture.",
        columns=COLUMNS,
    )
    variants = [
        ("framebus bridge, H.264 " + BITRATE, "framebus", "framebus", lambda: _run_bridge(ctx, shape, "h264", warm, measure, joins)),
        ("framebus bridge, raw", "framebus", "framebus", lambda: _run_bridge(ctx, shape, None, warm, measure, joins)),
        (f"FFmpeg -> UDP MPEG-TS -> FFmpeg, libx264 {BITRATE}", "ffmpeg", "peer", lambda: _run_ffmpeg(ctx, shape, "udp", warm, measure, joins)),
        (f"FFmpeg -> SRT (latency 20 ms) -> FFmpeg, libx264 {BITRATE}", "ffmpeg", "peer", lambda: _run_ffmpeg(ctx, shape, "srt", warm, measure, joins)),
    ]
    if cfg.smoke:
        variants = variants[:3]  # the smoke run proves the suite works: one FFmpeg pipeline is enough
    elif importlib.util.find_spec("zenoh") is not None:
        zenoh_row = ("framebus bridge, H.264 " + BITRATE + ", Zenoh engine", "framebus", "framebus", lambda: _run_bridge(ctx, shape, "h264", warm, measure, joins, "zenoh"))
        variants.insert(1, zenoh_row)
    ctx.reporter.start(sid, len(variants))
    for label, family, role, fn in variants:
        res = ctx.attempt(sid, case, label, fn)
        if res is None:
            continue
        lat = res.pop("lat")
        suite.rows.append(_row(case, label, family, role, lat, res))
        ctx.reporter.step(f"{sid} {label}")
    compute_ratios(suite)
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
