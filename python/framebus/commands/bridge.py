"""``framebus bridge``: publish a local stream over ZeroMQ, or subscribe a remote one into a
local stream, showing the link's state and rates until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from ._args import stream_name
from ._signals import stop_on_signals

HELP = "bridge streams across machines over ZeroMQ: publish NAME ENDPOINT | subscribe ENDPOINT NAME | keys DIR"

_EXAMPLES = """examples:
  framebus bridge publish camera tcp://*:5555
  framebus bridge subscribe tcp://camera-box:5555 camera
  framebus bridge keys ./keys --name server     # CURVE key pair: server.key + server.key_secret

Plain TCP is neither encrypted nor authenticated: use it only on a trusted network, or use CURVE
(--curve-certificate / --curve-location / --curve-server-certificate)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = _EXAMPLES
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    pub = sub.add_parser("publish", help="send a local stream's frames to subscribers")
    pub.add_argument("name", type=stream_name, help="local stream to publish")
    pub.add_argument("endpoint", help="where to listen: tcp://*:5555, tcp://IP:PORT, ipc:///path")
    pub.add_argument("--mode", choices=["latest", "lossless"], default="latest", help="latest: newest frame wins (default); lossless: backpressure, nothing dropped")
    pub.add_argument("--compress", default=None, metavar="zstd[:LEVEL]", help="compress each frame (needs framebus[zstd])")
    pub.add_argument("--curve-certificate", metavar="FILE", help="this end's secret certificate (.key_secret): turns CURVE encryption on")
    pub.add_argument("--curve-location", metavar="DIR", help="directory of the public certificates of the subscribers allowed in")
    _common(pub)

    s = sub.add_parser("subscribe", help="receive a remote stream into a local stream")
    s.add_argument("endpoint", help="the publisher: tcp://HOST:PORT or ipc:///path")
    s.add_argument("name", type=stream_name, help="local stream to write (created from the publisher's spec)")
    s.add_argument("--mode", choices=["latest", "lossless"], default=None, help="insist on the publisher running in this mode")
    s.add_argument("--slots", type=int, default=None, help="slots of the local stream (default: the publisher's)")
    s.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the publisher's first answer (default 10)")
    s.add_argument("--keep", action="store_true", help="keep the local stream when stopping")
    s.add_argument("--curve-server-certificate", metavar="FILE", help="the publisher's public certificate (.key): turns CURVE on")
    s.add_argument("--curve-certificate", metavar="FILE", help="this end's secret certificate (.key_secret)")
    _common(s)

    k = sub.add_parser("keys", help="create a CURVE key pair (NAME.key public, NAME.key_secret private)")
    k.add_argument("directory", help="where to write the two files")
    k.add_argument("--name", default="framebus", help="file name stem (default: framebus)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hwm", type=int, default=4, help="frames in flight per subscriber (default 4)")
    p.add_argument("--heartbeat-ivl", type=float, default=1.0, help="seconds between heartbeats on an idle link (default 1)")
    p.add_argument("--peer-timeout", type=float, default=10.0, help="seconds of silence after which the other end counts as gone (default 10)")
    p.add_argument("--quiet", action="store_true", help="print only state changes, no live table")


def run(args: argparse.Namespace) -> int:
    if args.action == "keys":
        from ..net import create_certificates

        public, secret = create_certificates(args.directory, args.name)
        print(f"public key (give to the other side): {public}\nsecret key (keep private):           {secret}")
        return 0
    from .. import net
    from ..errors import FramebusError

    stop = threading.Event()
    stop_on_signals(stop)  # a clean stop: BYE to the other end, local stream removed
    common = dict(hwm=args.hwm, heartbeat_ivl=args.heartbeat_ivl, peer_timeout=args.peer_timeout)
    try:
        if args.action == "publish":
            bridge: Any = net.publish(
                args.name, args.endpoint, mode=args.mode, compress=args.compress,
                curve_certificate=args.curve_certificate, curve_location=args.curve_location, **common,
            )
        else:
            bridge = net.subscribe(
                args.endpoint, args.name, mode=args.mode, slots=args.slots, timeout=args.timeout, keep=args.keep,
                curve_certificate=args.curve_certificate, curve_server_certificate=args.curve_server_certificate, **common,
            )
    except (FramebusError, OSError, ValueError, TypeError, ImportError) as exc:
        from ..cli import error_text

        print(f"framebus bridge {args.action}: {error_text(exc)}", file=sys.stderr)
        return 1
    what = f"{args.name} -> {bridge.endpoint}" if args.action == "publish" else f"{bridge.endpoint} -> {args.name}"
    print(f"framebus bridge {args.action}: {what} ({bridge.mode or 'publisher'} mode); Ctrl-C to stop", flush=True)
    _watch(bridge, stop, quiet=args.quiet or not sys.stdout.isatty())
    try:
        bridge.stop()
    except Exception as exc:  # noqa: BLE001 - the bridge's own error, reported to the user
        print(f"framebus bridge {args.action} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    s = bridge.stats
    print(f"stopped: {s.frames} frames, {s.bytes / 1e6:.1f} MB, {s.dropped} dropped, {s.reconnects} reconnects", flush=True)
    return 0


def _row(s: Any) -> list:
    return [s.state, str(s.peers), str(s.frames), f"{s.fps:.1f}", f"{s.bytes_per_s / 1e6:.1f}", str(s.dropped), str(s.last_seq)]


def _watch(bridge: Any, stop: threading.Event, *, quiet: bool) -> None:
    """Shows the bridge's state until it stops or ``stop`` is set: a live rich table, or one
    line per change."""
    cols = ["state", "peers", "frames", "fps", "MB/s", "dropped", "source seq"]
    try:
        from rich.live import Live
        from rich.table import Table
    except ImportError:
        quiet = True
    if quiet:
        last = None
        while bridge.running and not stop.wait(0.25):
            state = bridge.stats.state
            if state != last:
                print(f"state: {state}", flush=True)
                last = state
        return

    def table() -> Any:
        t = Table(title=f"framebus bridge {bridge.role} {bridge.stream_name} {bridge.endpoint}")
        for c in cols:
            t.add_column(c, justify="left" if c == "state" else "right")
        t.add_row(*_row(bridge.stats))
        return t

    with Live(table(), refresh_per_second=2, transient=False) as live:
        while bridge.running and not stop.wait(0.5):
            live.update(table())
