"""W12: from a camera to ROS 2 across machines, end to end, on one machine.

The chain (every stage its own process; the far side in a network namespace joined by a veth
pair, so the video crosses a real link with its own network stack):

    source (1080p30)  -> stream SRC   (a device stream when torch sees a GPU)
    inference         -> stream INF   (reads SRC, stand-in model, host picture out)
    framebus bridge publish INF --engine zenoh --encode h264          (this side)
    ---- veth link into the namespace ----
    framebus bridge subscribe ... DEC --engine zenoh                  (far side: decoded stream)
    framebus ros2 publish DEC --topic /w12/image                      (far side)
    ROS 2 node: framebus ros2 subscribe into ROSIN, or the hiroz peer (far side)
    framebus record DEC.h264 out.mp4   (far side: the subscriber's H.264 packets, remuxed, not re-encoded)

The source stamp (the frame's timestamp_ns, ns since the Unix epoch) rides every hop: as
timestamp_ns, frame_id and metadata through framebus's stages and the bridge, as header.stamp
through ROS 2. Stage times are taken on the same host clock (``time.time_ns()``): the inference
stage's write time (in the frame's metadata), this process's reader on DEC, the ROS node's
receipt (this process's reader on ROSIN, or the hiroz peer's printed receipt time). The
recorder's latency is its lag behind DEC.h264 as ``framebus top --json`` reports it.

Frames lost are counted from the source's numbers and stamps; frames counted as lost are what
framebus's own counters say (the inference reader's missed, each bridge's and ROS node's
``dropped``, the recorder's missed): a frame lost that no counter shows is "uncounted".
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import netns
from .chain_stages import gpu_available, inference, source
from .video import _number
from .harness import Context, get, mp_context, start, stop, summarize
from .records import Column, Metric, Row, SuiteResult

FPS = 30
BITRATE = "8M"
GOP = 30
TOPIC = "/w12/image"
ROS_PORT = 7447
ROS_ENDPOINT = f"tcp/127.0.0.1:{ROS_PORT}"  # the far side's own loopback: where ROS 2 nodes look for their router by default

COLUMNS = [
    Column("latency", "latency p50 ms", "{:.1f}", "p50"),
    Column("latency", "p99 ms", "{:.1f}", "p99"),
    Column("frames", "frames", "{:.0f}", "extra"),
    Column("lost", "lost", "{:.0f}", "extra"),
    Column("counted", "counted by framebus", "{:.0f}", "extra"),
]


def missing() -> Optional[str]:
    """Why the chain cannot run here (a missing package, no namespace), or None."""
    for module, what in (("av", "PyAV (framebus[video])"), ("zenoh", "eclipse-zenoh (framebus[zenoh])"), ("rosbags", "rosbags (framebus[zenoh])")):
        if importlib.util.find_spec(module) is None:
            return f"needs {what}"
    return netns.unavailable()


def find_hiroz(given: str) -> Optional[str]:
    """The hiroz ROS 2 peer binary: ``hiroz:PATH`` as given, else one built under
    where scripts/build-ros2-peer.sh puts it (``FRAMEBUS_ROS2_PEER``, else its target folder), else None (framebus's own subscriber is used)."""
    if given.startswith("hiroz:"):
        path = given.split(":", 1)[1]
        if not os.access(path, os.X_OK):
            raise FileNotFoundError(f"--ros-node {given}: {path} is not an executable file")
        return path
    if given:
        return None
    # Where scripts/build-ros2-peer.sh builds it (scripts/test.sh exports FRAMEBUS_ROS2_PEER).
    target = os.environ.get("FRAMEBUS_PEER_TARGET") or os.path.join(os.path.expanduser("~"), ".cache", "framebus", "ros2-peer")
    for path in (os.environ.get("FRAMEBUS_ROS2_PEER", ""), os.path.join(target, "debug", "ros2-peer")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _cli(*args: str) -> List[str]:
    return [sys.executable, "-m", "framebus", *args]


class _Proc:
    """A CLI stage: its command, output in a log file, stopped with SIGINT (a clean stop)."""

    def __init__(self, label: str, cmd: List[str], logdir: str, stdout: Any = None) -> None:
        self.label = label
        self.log = os.path.join(logdir, re.sub(r"\W", "_", label) + ".log")
        with open(self.log, "w") as f:
            self.proc = subprocess.Popen(cmd, stdout=stdout or f, stderr=f, text=True)

    def stop(self, timeout: float = 15.0) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with open(self.log) as f:
            return f.read()


def _stopped(text: str) -> Tuple[int, int]:
    """(frames, dropped) from a bridge's or ROS node's last line ``stopped: N frames, ... D dropped``."""
    m = re.search(r"stopped: (\d+) frames, .*?(\d+) dropped", text)
    return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)


def _hiroz_stamp(line: str) -> Optional[Tuple[int, int]]:
    """(stamp ns, receipt ns) from one JSON line of the hiroz peer; the receipt is its own
    when it prints one (``recv_ns``/``received_ns``/``receipt_ns``), else now."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict):
        return None
    stamp: Any = msg.get("stamp_ns", msg.get("stamp"))
    if isinstance(msg.get("stamp_sec"), int):  # the test peer's lines: header.stamp as two fields
        stamp = {"sec": msg["stamp_sec"], "nanosec": msg.get("stamp_nanosec", 0)}
    if isinstance(stamp, dict):
        stamp = int(stamp.get("sec", 0)) * 1_000_000_000 + int(stamp.get("nanosec", stamp.get("nanosecs", 0)) or 0)
    if not isinstance(stamp, int):
        return None
    recv = next((msg[k] for k in ("recv_ns", "received_ns", "receipt_ns") if isinstance(msg.get(k), int)), None)
    return stamp, recv if recv is not None else time.time_ns()


class _Probe(threading.Thread):
    """A reader of one stream in this process: the receipt time of every frame it sees, by
    frame_id (``by="id"``) or by timestamp_ns (``by="stamp"``), with the frame's metadata."""

    def __init__(self, name: str, by: str, halt: threading.Event) -> None:
        super().__init__(daemon=True)
        self.name_, self.by, self.halt = name, by, halt
        self.seen: Dict[int, Tuple[int, bytes]] = {}
        self.missed = 0
        self.error: Optional[str] = None

    def run(self) -> None:
        import framebus

        try:
            r = framebus.open(self.name_, timeout=120)
        except Exception as exc:  # noqa: BLE001 - reported with the results
            self.error = f"{type(exc).__name__}: {exc}"
            return
        try:
            while not self.halt.is_set():
                try:
                    f = r.wait_view(0.25)
                except TimeoutError:
                    continue
                except framebus.StreamEndedError:
                    continue
                except Exception:  # noqa: BLE001 - the stream went away at the end
                    break
                now = time.time_ns()
                with f:
                    key = f.frame_id if self.by == "id" else f.timestamp_ns
                    self.seen.setdefault(key, (now, f.meta if self.by == "id" else b""))
            self.missed = int(r.total_missed)
        finally:
            r.close()


def _top_json() -> Dict[str, Any]:
    out = subprocess.run(_cli("top", "--json", "--interval", "0.5"), capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else {"streams": []}


def _ls_json() -> List[Dict[str, Any]]:
    out = subprocess.run(_cli("ls", "--json"), capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else []


def _file_numbers(path: str) -> List[int]:
    """The source numbers stamped in the pictures of the recorded file, in file order (empty
    when there is no readable file)."""
    import av

    try:
        with av.open(path) as c:
            return [_number(f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    except (OSError, av.error.FFmpegError):  # type: ignore[attr-defined]
        return []


def run_chain(ctx: Context, shape: Tuple[int, int], warm: float, measure: float, ros_node: str = "") -> Dict[str, Any]:
    """Runs the chain once: ``warm`` seconds after the first image reached the ROS node, then
    ``measure`` seconds measured. Returns the stage latencies (ms samples), counts, counters,
    what ``framebus top``/``ls`` showed, and which ROS node was used."""
    hiroz = find_hiroz(ros_node)
    gpu = gpu_available()
    names = {k: ctx.name(f"w12-{k}") for k in ("src", "inf", "dec", "rosin")}
    names["pkt"] = names["dec"] + ".h264"  # the subscriber's packet stream, which its decoder reads
    mpc = mp_context()
    go, halt_src, halt_inf = mpc.Event(), mpc.Event(), mpc.Event()
    qs, qi = mpc.Queue(), mpc.Queue()
    halt = threading.Event()
    procs: List[Any] = []
    stages: Dict[str, _Proc] = {}
    ros_seen: Dict[int, int] = {}
    logdir = tempfile.mkdtemp(prefix=ctx.name("w12-logs"))
    video = os.path.join(logdir, "w12.mp4")
    with netns.Netns() as ns:
        port = _free_port(ns.host_ip)
        key = f"framebus-bench/{names['inf']}"
        far = ns.prefix()
        try:
            procs.append(start(source, qs, names["src"], shape, FPS, go, halt_src, halt_inf, "cuda:0" if gpu else None))
            get(qs, 60, "source")
            procs.append(start(inference, qi, names["src"], names["inf"], halt_inf, "cuda:0" if gpu else None))
            stages["publish"] = _Proc("publish", _cli(
                "bridge", "publish", names["inf"], key, "--engine", "zenoh", "--encode", "h264", "--bitrate", BITRATE, "--gop", str(GOP),
                "--listen", f"tcp/{ns.host_ip}:{port}", "--no-scouting", "--wait", "60", "--quiet"), logdir)
            stages["subscribe"] = _Proc("subscribe", far + _cli(
                "bridge", "subscribe", key, names["dec"], "--engine", "zenoh", "--connect", f"tcp/{ns.host_ip}:{port}", "--no-scouting",
                "--timeout", "60", "--quiet"), logdir)
            stages["ros2 publish"] = _Proc("ros2_publish", far + _cli(
                "ros2", "publish", names["dec"], "--topic", TOPIC, "--frame-id", "camera", "--listen", f"tcp/127.0.0.1:{ROS_PORT}",
                "--no-scouting", "--wait", "90", "--quiet"), logdir)
            if hiroz:
                stages["ros node"] = _Proc("ros_node", far + [hiroz, "sub", "--connect", ROS_ENDPOINT, "--timeout", "86400", "--topic", TOPIC], logdir, stdout=subprocess.PIPE)
                out = stages["ros node"].proc.stdout
                assert out is not None  # started with stdout=PIPE

                def lines() -> None:
                    for line in out:
                        got = _hiroz_stamp(line)
                        if got:
                            ros_seen.setdefault(got[0], got[1])

                threading.Thread(target=lines, daemon=True).start()
                rosin = None
            else:
                stages["ros node"] = _Proc("ros_node", far + _cli(
                    "ros2", "subscribe", TOPIC, "--stream", names["rosin"], "--no-scouting", "--quiet"), logdir)
                rosin = _Probe(names["rosin"], "stamp", halt)
            # The recording keeps the H.264 packets as they came: the subscriber's own packet
            # stream (DEC.h264, the one its decoder reads), remuxed into the file; no second
            # encoder competes for the CPU.
            stages["record"] = _Proc("record", far + _cli("record", names["pkt"], video, "--wait", "90", "--quiet"), logdir)
            dec = _Probe(names["dec"], "id", halt)
            inf = _Probe(names["inf"], "id", halt)
            dec.start()
            inf.start()
            if rosin is not None:
                rosin.start()
            go.set()
            deadline = time.monotonic() + 120
            while not (rosin.seen if rosin is not None else ros_seen):
                dead = [s.label for s in stages.values() if s.proc.poll() is not None]
                if dead or time.monotonic() > deadline:
                    why = f"{', '.join(dead)} exited" if dead else "no image reached the ROS node within 120 s"
                    raise RuntimeError(f"{why}; logs: " + " | ".join(f"{s.label}: {s.stop(1)[-300:]}" for s in stages.values()))
                time.sleep(0.1)
            time.sleep(warm)
            pids = {"source": procs[0].pid, "inference": procs[1].pid, **{k: s.proc.pid for k, s in stages.items()}, "probes": os.getpid()}
            w0, cpu0 = time.time_ns(), _cpu(pids)
            end = time.monotonic() + measure
            # framebus top and ls once each in the middle, top again near the end (each is a
            # Python start-up's worth of CPU, so no more than that)
            time.sleep(measure / 2)
            tops = [_top_json()]
            listing = _ls_json()
            time.sleep(max(0.0, end - time.monotonic() - 1.0))
            tops.append(_top_json())
            time.sleep(max(0.0, end - time.monotonic()))
            w1, cpu1 = time.time_ns(), _cpu(pids)
            cpu = {k: round(100 * (cpu1[k] - cpu0[k]) / ((w1 - w0) / 1e9)) for k in pids if k in cpu0 and k in cpu1}
            halt_src.set()
            _drained(lambda: len(rosin.seen) if rosin is not None else len(ros_seen))
            tops.append(_top_json())  # the handles' final missed counts, before they close
        finally:
            halt_src.set()
            halt.set()
            halt_inf.set()
            texts = {k: s.stop() for k, s in reversed(list(stages.items()))}
            stop(procs, timeout=10)
    src_report = _drain(qs)
    inf_report = _drain(qi)
    if rosin is not None:
        rosin.join(5)
        ros_seen.update({k: v[0] for k, v in rosin.seen.items()})
    dec.join(5)
    inf.join(5)
    recorded = int(m.group(1)) if (m := re.search(r"recorded (\d+) (?:frames|packets)", texts.get("record", ""))) else 0
    in_file = _file_numbers(video)
    shutil.rmtree(logdir, ignore_errors=True)
    res = _results(names, inf, dec, rosin, ros_seen, w0, w1, tops, listing, texts, src_report, inf_report, recorded, in_file, hiroz, gpu)
    res["cpu_percent"] = cpu
    return res


def _descendants(pid: int) -> List[int]:
    """``pid`` and every process it started (e.g. the recorder's FFmpeg), from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def _cpu(pids: Dict[str, int]) -> Dict[str, float]:
    """CPU seconds (user + system, all threads) used so far by each live process and the
    processes it started (a stage's FFmpeg counts as the stage's)."""
    out: Dict[str, float] = {}
    for k, pid in pids.items():
        for p in _descendants(pid) if k != "probes" else [pid]:
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[k] = out.get(k, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
    return out


def _drained(count: Any, quiet_s: float = 1.0, limit_s: float = 15.0) -> None:
    """Waits until the last frames have drained through the chain: ``count()`` (images at the
    ROS node) unchanged for ``quiet_s``, at most ``limit_s``."""
    deadline = time.monotonic() + limit_s
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()


def _drain(q: Any) -> Dict[str, Any]:
    got: Dict[str, Any] = {}
    while True:
        try:
            got.update(q.get(timeout=1))
        except Exception:  # noqa: BLE001 - queue.Empty: nothing more
            return got


def _results(
    names: Dict[str, str], inf_probe: _Probe, dec: _Probe, rosin: Optional[_Probe], ros_seen: Dict[int, int], w0: int, w1: int, tops: List[Dict[str, Any]],
    listing: List[Dict[str, Any]], texts: Dict[str, str], src: Dict[str, Any], inf: Dict[str, Any], recorded: int, in_file: List[int],
    hiroz: Optional[str], gpu: bool,
) -> Dict[str, Any]:
    lat: Dict[str, List[float]] = {"src_inf": [], "inf_dec": [], "dec_ros": [], "glass": []}
    window_ids: List[int] = []
    dec_by_stamp: Dict[int, int] = {}
    for fid, (t_dec, meta) in dec.seen.items():
        m = json.loads(meta or b"{}")
        stamp, t_inf = int(m.get("src_ns", 0)), int(m.get("inf_ns", 0))
        dec_by_stamp[stamp] = t_dec
        if w0 <= stamp < w1:
            window_ids.append(fid)
            lat["src_inf"].append((t_inf - stamp) / 1e6)
            lat["inf_dec"].append((t_dec - t_inf) / 1e6)
    for stamp, t_ros in ros_seen.items():
        if w0 <= stamp < w1:
            lat["glass"].append((t_ros - stamp) / 1e6)
            if stamp in dec_by_stamp:
                lat["dec_ros"].append((t_ros - dec_by_stamp[stamp]) / 1e6)
    # Frames lost, hop by hop, from the source's numbers: every frame written since the first
    # one that reached the ROS node (the chain is whole from then on) should reach each stage.
    first_ros = min(ros_seen) if ros_seen else 0
    stamp_to_id = {int(json.loads(meta or b"{}").get("src_ns", 0)): fid for fid, (_, meta) in dec.seen.items()}
    written = int(src.get("written", 0))
    k0 = stamp_to_id.get(first_ros, written)
    # ... up to the last one that reached it: later ones were still on their way when the
    # stages stopped (reported apart as in flight, not as lost)
    k1 = max((stamp_to_id[st] for st in ros_seen if st in stamp_to_id), default=k0 - 1)
    wanted = set(range(k0, k1 + 1))
    # A frame seen further down was at the earlier stages too, even where a (latest-mode)
    # measuring reader of this process missed it.
    at_ros = {stamp_to_id.get(st, -1) for st in ros_seen if st >= first_ros}
    at_dec = wanted & (set(dec.seen) | at_ros)
    at_inf = wanted & (set(inf_probe.seen) | set(inf.get("ids", ())) | at_dec)
    reached = len(wanted & at_ros) + sum(1 for st in ros_seen if st >= first_ros and st not in stamp_to_id)
    lost = {"source -> inference": len(wanted - at_inf), "inference -> decoded": len(at_inf - at_dec),
            "decoded -> ROS node": max(0, len(at_dec) - len(at_dec & at_ros)), "end to end": max(0, len(wanted) - reached)}
    pub_frames, pub_dropped = _stopped(texts.get("publish", ""))
    sub_frames, sub_dropped = _stopped(texts.get("subscribe", ""))
    rpub_frames, rpub_dropped = _stopped(texts.get("ros2 publish", ""))
    node_frames, node_dropped = _stopped(texts.get("ros node", "")) if rosin is not None else (len(ros_seen), 0)
    handles = _handles(names, tops[-1] if tops else {})
    # framebus's counters, hop by hop. A bridge's publisher counts the gaps in the source
    # numbers it sends (which are its reader's missed frames, as framebus top shows them), its
    # subscriber the gaps it receives plus the packets its decoder skipped: the same frames
    # seen from three places, so the largest of the three is the hop's count. The same for
    # ros2 publish (its dropped are its reader's missed).
    counters = {
        "source -> inference": {"inference reader missed": int(inf.get("missed", 0))},
        "inference -> decoded": {"bridge dropped": max(handles.get("inf/bridge out", 0), pub_dropped, sub_dropped, 0)},
        "decoded -> ROS node": {"ros2 publish dropped": max(handles.get("dec/bridge out", 0), rpub_dropped, 0),
                                "ros node dropped": max(node_dropped, 0), "ros node reader missed (this process)": rosin.missed if rosin is not None else 0},
    }
    counted = {k: sum(v.values()) for k, v in counters.items()}
    counted["end to end"] = sum(counted.values())
    record_lag: List[float] = []
    for doc in tops[:-1]:  # the samples inside the window
        for st in doc.get("streams", []):
            if st.get("name") == names["pkt"]:
                record_lag += [float(r["lag_ms"]) for r in st.get("readers", []) if r.get("role") == "record" and r.get("lag_ms") is not None]
    record_missed = handles.get("pkt/record", 0)
    shown = _shown(names, tops[0] if tops else {}, listing)
    if hiroz:  # the hiroz node is a ROS 2 process, not a framebus stream: nothing of it to show
        shown.pop("ros node stream", None)
    mine = set(names.values())
    last_top = [{k: v for k, v in st.items() if k in ("name", "frames_written", "write_fps", "readers")} for st in (tops[-1] if tops else {}).get("streams", []) if st.get("name") in mine]
    return {
        "lat": lat, "written": written, "expected": len(wanted), "in_flight_at_stop": max(0, written - 1 - k1), "at_ros": reached, "lost": lost, "counted": counted,
        "uncounted": {k: max(0, lost[k] - counted[k]) for k in lost}, "counters": counters, "frames": {"inference": inf.get("frames", 0), "publish": pub_frames,
        "subscribe": sub_frames, "ros2 publish": rpub_frames, "ros node": node_frames, "recorded": recorded, "in file": len(in_file)},
        "record": {"lag_ms": record_lag, "missed": record_missed, "received": sub_frames, "recorded": recorded, "in_file": len(in_file),
                   "lost_in_window": len(at_dec - set(in_file)), "in_file_in_window": len(wanted & set(in_file))},
        "probe_missed": {"inf": inf_probe.missed, "dec": dec.missed, "rosin": rosin.missed if rosin is not None else 0}, "shown": shown,
        "ros_node": f"hiroz ({hiroz})" if hiroz else "framebus ros2 subscribe", "inference": "torch on cuda:0 (device stream)" if gpu else "NumPy (host stream)",
        "missing": {"inference -> decoded": sorted(at_inf - at_dec)[:60], "decoded -> ROS node": sorted(at_dec - at_ros)[:60]},
        "window_frames": len(window_ids), "top": last_top, "errors": [e for e in (inf_probe.error, dec.error, rosin.error if rosin else None) if e],
    }


def _handles(names: Dict[str, str], top: Dict[str, Any]) -> Dict[str, int]:
    """Missed frames of the stages' handles in a ``framebus top --json`` document, by
    ``"<inf|dec|...>/<role>"``."""
    short = {v: k for k, v in names.items()}
    out: Dict[str, int] = {}
    for st in top.get("streams", []):
        if st.get("name") in short:
            for r in st.get("readers", []):
                key = f"{short[st['name']]}/{r.get('role')}"
                out[key] = out.get(key, 0) + int(r.get("missed") or 0)
    return out


def _shown(names: Dict[str, str], top: Dict[str, Any], listing: List[Dict[str, Any]]) -> Dict[str, bool]:
    """Which stages ``framebus top --json`` (streams) and ``framebus ls --json`` (bridges) showed."""
    streams = {s.get("name") for s in top.get("streams", [])}
    bridges = {e.get("name"): " ".join(e.get("bridges") or []) for e in listing}
    readers = {s.get("name"): s.get("readers", []) for s in top.get("streams", [])}
    return {
        "source stream": names["src"] in streams,
        "inference stream": names["inf"] in streams,
        "bridge publish": bool(bridges.get(names["inf"])),
        "decoded stream": names["dec"] in streams,
        "bridge subscribe": bool(bridges.get(names["dec"])),
        "ros2 publish": any("ros2" in b or "rmw" in b or "/w12" in b for b in [bridges.get(names["dec"], "")]),
        "recorder": any(r.get("role") == "record" or "record" in str(r.get("label", "")) for r in readers.get(names["pkt"], [])),
        "ros node stream": names["rosin"] in streams,
    }


def _row(case: str, label: str, samples: List[float], extra: Dict[str, Any]) -> Row:
    s = summarize(samples)
    return Row(
        case=case, variant=label, family="framebus", role="framebus", primary="latency",
        metrics={"latency": Metric(s["p50"], "ms", False, p50=s["p50"], p99=s["p99"], lo=s["min"], hi=s["max"])},
        extra=extra, samples={"latency_ms": [float(x) for x in samples[:1000]]},
    )


def run(ctx: Context) -> SuiteResult:
    """W12: the chain once (twice in a full run), a row per stage and glass-to-glass."""
    t_start = time.perf_counter()
    cfg = ctx.config
    sid = "W12"
    shape = cfg.pick((1080, 1920), (1080, 1920), (240, 320))
    warm, measure = cfg.pick(3.0, 2.0, 0.5), cfg.pick(20.0, 10.0, 2.0)
    case = f"{shape[1]}x{shape[0]} RGB, {FPS} frames/s"
    suite = SuiteResult(
        sid,
        f"W12 camera -> inference -> H.264 over Zenoh across a network namespace -> ROS 2 node and recorder, {case}",
        "Per-stage latency on one clock, glass-to-glass (source stamp -> ROS node receipt), frames lost and counted as lost by framebus.",
        columns=COLUMNS,
    )
    ctx.reporter.start(sid, 1)
    why = missing()
    if why:
        ctx.note(sid, f"W12 skipped: {why}")
        suite.seconds = time.perf_counter() - t_start
        return suite
    try:
        res = run_chain(ctx, shape, warm, measure, getattr(cfg, "ros_node", ""))
    except OSError as exc:  # the namespace could not be made (e.g. in a container without the right)
        ctx.note(sid, f"W12 skipped: cannot build the network namespace ({exc})")
        suite.seconds = time.perf_counter() - t_start
        return suite
    lat = res.pop("lat")
    common = {"ros_node": res["ros_node"], "inference": res["inference"]}
    fr = res["frames"]
    fr, lost, counted = res["frames"], res["lost"], res["counted"]

    def hop(key: str) -> Dict[str, Any]:
        return {"lost": lost[key], "counted": counted[key]}

    rec = res["record"]
    suite.rows = [
        _row(case, "source -> inference (written to INF)", lat["src_inf"], {"frames": fr["inference"], **hop("source -> inference"), **common}),
        _row(case, "inference -> decoded stream, far side (H.264, Zenoh, veth)", lat["inf_dec"], {"frames": fr["subscribe"], **hop("inference -> decoded")}),
        _row(case, f"decoded -> ROS node receipt ({res['ros_node']})", lat["dec_ros"], {"frames": fr["ros node"], **hop("decoded -> ROS node")}),
        _row(case, "record (H.264 packets remuxed; recorder's lag behind them, framebus top)", rec["lag_ms"], {
            "frames": rec["recorded"], "lost": rec["lost_in_window"], "counted": rec["missed"]}),
        _row(case, "glass to glass: source stamp -> ROS node receipt", lat["glass"], {"frames": res["at_ros"], **hop("end to end"), **common}),
    ]
    suite.rows[-1].extra["details"] = res
    notes = [f"ROS node: {res['ros_node']}; inference: {res['inference']}",
             f"lost from the first to the last image at the ROS node: {lost['end to end']} of {res['expected']} ({res['in_flight_at_stop']} in flight at the stop), counted by framebus: {counted['end to end']}; "
             "by hop (lost/counted): " + ", ".join(f"{k} {lost[k]}/{counted[k]}" for k in res["counters"]) + "; "
             f"uncounted: {sum(v for k, v in res['uncounted'].items() if k != 'end to end')}",
             "CPU % of one core over the window: " + ", ".join(f"{k} {v}" for k, v in res["cpu_percent"].items()),
             "shown in framebus top/ls: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in res["shown"].items())]
    for n in notes:
        ctx.note(sid, n)
    ctx.reporter.step(f"{sid} chain")
    suite.notes = ctx.notes.get(sid, [])
    suite.seconds = time.perf_counter() - t_start
    return suite
