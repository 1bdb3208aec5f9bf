"""``framebus bridge``: publish a local stream over ZeroMQ, or subscribe a remote one into a
local stream, showing the link's state and rates until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from ._args import int_range, positive_float, positive_int, stream_name
from ._signals import stop_on_signals_and_clean_up, stopped_status
from ._wait import add_wait_argument

HELP = "bridge streams across machines over ZeroMQ or Zenoh: publish NAME ENDPOINT | subscribe ENDPOINT NAME | keys DIR"

_EXAMPLES = """examples:
  framebus bridge publish camera tcp://*:5555
  framebus bridge subscribe tcp://camera-box:5555 camera
  framebus bridge keys ./keys --name server     # CURVE key pair: server.key + server.key_secret
  framebus bridge publish camera framebus/camera --engine zenoh --listen tcp/0.0.0.0:7447
  framebus bridge subscribe framebus/camera camera --engine zenoh --connect tcp/camera-box:7447

Plain TCP is neither encrypted nor authenticated: use it only on a trusted network, or use CURVE
(--curve-certificate / --curve-location / --curve-server-certificate)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = _EXAMPLES
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    pub = sub.add_parser("publish", help="send a local stream's frames to subscribers")
    pub.add_argument("name", type=stream_name, help="local stream to publish")
    pub.add_argument("endpoint", help="where to listen: tcp://*:5555, tcp://IP:PORT, ipc:///path")
    pub.add_argument("--mode", choices=["latest", "lossless"], default=_default("publish", "mode"), help="latest: newest frame wins (default); lossless: backpressure, nothing dropped")
    pub.add_argument("--compress", default=None, metavar="zstd[:LEVEL]", help="compress each frame (needs framebus[zstd])")
    pub.add_argument("--encode", choices=["h264", "hevc", "av1", "mjpeg"], default=None, help="send encoded video instead of raw frames (uint8 images; needs framebus[video]; see docs/video.md)")
    pub.add_argument("--bitrate", default=None, metavar="RATE", help="with --encode: bits per second, e.g. 8M or 800k (default 8M)")
    pub.add_argument("--gop", type=positive_int, default=None, help="with --encode: frames between keyframes (default 30)")
    pub.add_argument("--encoder", default=None, metavar="NAME", help="with --encode: auto (a hardware encoder that works here, else software; default) or an FFmpeg encoder such as libx264, h264_nvenc")
    pub.add_argument("--drop-alpha", action="store_true", help="with --encode: take HxWx4 images and send their first three channels only (video codecs have no alpha plane; without this a 4-channel stream is refused)")
    pub.add_argument("--curve-certificate", metavar="FILE", help="this end's secret certificate (.key_secret): turns CURVE encryption on")
    pub.add_argument("--curve-location", metavar="DIR", help="directory of the public certificates of the subscribers allowed in")
    add_wait_argument(pub)
    _common(pub, "publish")

    s = sub.add_parser("subscribe", help="receive a remote stream into a local stream")
    s.add_argument("endpoint", help="the publisher: tcp://HOST:PORT or ipc:///path")
    s.add_argument("name", type=stream_name, help="local stream to write (created from the publisher's spec)")
    s.add_argument("--mode", choices=["latest", "lossless"], default=None, help="insist on the publisher running in this mode")
    s.add_argument("--slots", type=int_range(2, 64), default=None, help="slots of the local stream (default: the publisher's)")
    s.add_argument("--timeout", type=positive_float, default=_default("subscribe", "timeout"), help="seconds to wait for the publisher's first answer (default %(default)g)")
    s.add_argument("--keep", action="store_true", help="keep the local stream when stopping")
    s.add_argument("--packets", action="store_true", help="from an encoded publisher: keep its packets (a byte stream for framebus record or another bridge) instead of decoding them")
    s.add_argument("--curve-server-certificate", metavar="FILE", help="the publisher's public certificate (.key): turns CURVE on")
    s.add_argument("--curve-certificate", metavar="FILE", help="this end's secret certificate (.key_secret)")
    _common(s, "subscribe")

    k = sub.add_parser("keys", help="create a CURVE key pair (NAME.key public, NAME.key_secret private)")
    k.add_argument("directory", help="where to write the two files")
    k.add_argument("--name", default="framebus", help="file name stem (default: framebus)")


def _default(end: str, field: str) -> Any:
    """The default of one end's option, from the one place the options are declared."""
    from ..net import PublishOptions, SubscribeOptions

    return (PublishOptions if end == "publish" else SubscribeOptions).default(field)


def _common(p: argparse.ArgumentParser, end: str) -> None:
    p.add_argument("--hwm", type=positive_int, default=_default(end, "hwm"), help="frames in flight per link (default %(default)s)")
    p.add_argument("--heartbeat-ivl", type=positive_float, default=_default(end, "heartbeat_ivl"), help="seconds between heartbeats on an idle link (default %(default)s)")
    p.add_argument("--peer-timeout", type=positive_float, default=_default(end, "peer_timeout"), help="seconds of silence after which the other end counts as gone (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="print only state changes, no live table")
    add_engine_arguments(p)


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """--engine and the Zenoh options (docs/zenoh.md)."""
    from ..net.engine import registry

    g = p.add_argument_group("engine", "zmq (default): ENDPOINT is tcp://... or ipc://...; zenoh: ENDPOINT is a Zenoh key such as framebus/camera")
    g.add_argument("--engine", choices=registry.names(), default=registry.DEFAULT, help="transport (default: %(default)s; zenoh needs framebus[zenoh])")
    g.add_argument("--listen", action="append", default=[], metavar="ENDPOINT", help="zenoh: listen on this Zenoh endpoint, e.g. tcp/0.0.0.0:7447 (repeatable)")
    g.add_argument("--connect", action="append", default=[], metavar="ENDPOINT", help="zenoh: connect to a peer or router, e.g. tcp/HOST:7447 (repeatable)")
    g.add_argument("--no-scouting", dest="scouting", action="store_false", default=None, help="zenoh: turn multicast scouting off")
    g.add_argument("--zenoh-config", metavar="FILE", help="zenoh: a Zenoh configuration file (JSON5), used as it is")
    g.add_argument("--zenoh-mode", choices=["peer", "client"], default=None, help="zenoh: session mode (default: the configuration's, peer)")


def engine_fields(args: argparse.Namespace) -> dict:
    """The keywords of framebus.net.publish/subscribe for the chosen engine: ``engine``, and the
    Zenoh options given (framebus.net routes them to the engine's options, and refuses those of
    another engine with a ValueError naming it)."""
    given = dict(listen=args.listen, connect=args.connect, scouting=args.scouting, zenoh_config=args.zenoh_config, zenoh_mode=args.zenoh_mode)
    return dict(engine=args.engine, **{k: v for k, v in given.items() if v is not None and v != []})


def run(args: argparse.Namespace) -> int:
    from ..net.engine import registry

    # `keys` makes ZeroMQ CURVE certificates; the other actions need their engine's package.
    chosen = registry.engine(getattr(args, "engine", None) if args.action != "keys" else "zmq")
    missing = chosen.missing()
    if missing is not None:
        others = ", ".join(f"--engine {n}" for n in registry.names() if registry.engine(n).missing() is None)
        print(f"framebus bridge {args.action}: {missing}" + (f" (or use {others})" if others else ""), file=sys.stderr)
        return 1
    if args.action == "keys":
        from ..net import create_certificates

        public, secret = create_certificates(args.directory, args.name)
        print(f"public key (give to the other side): {public}\nsecret key (keep private):           {secret}")
        return 0
    from .. import net
    from ..errors import FramebusError
    from ..net.link import stop_bridge, watch_bridge
    from ._wait import wait_for_stream

    stop = threading.Event()
    try:
        if args.action == "publish":
            wait_for_stream(args.name, args.wait)  # Ctrl-C here: KeyboardInterrupt, exit 130
            # Any number of signals: a clean stop (BYE to the other end, the packet stream of
            # --encode removed); none interrupts the clean-up, whose waits are bounded.
            stop_on_signals_and_clean_up(stop)
            bridge: Any = net.publish(args.name, args.endpoint, net.PublishOptions(
                mode=args.mode, compress=args.compress, curve_certificate=args.curve_certificate,
                curve_location=args.curve_location, hwm=args.hwm, heartbeat_ivl=args.heartbeat_ivl, peer_timeout=args.peer_timeout,
                encode=args.encode, bitrate=args.bitrate, gop=args.gop, encoder=args.encoder, drop_alpha=args.drop_alpha,
            ), **engine_fields(args))
        else:
            stop_on_signals_and_clean_up(stop)  # a clean stop: BYE to the other end, local streams removed
            # timeout=None: connect in the background; this thread waits for the publisher's
            # answer itself, so that Ctrl-C stops the wait at once.
            bridge = net.subscribe(args.endpoint, args.name, net.SubscribeOptions(
                mode=args.mode, slots=args.slots, timeout=None, keep=args.keep, curve_certificate=args.curve_certificate,
                curve_server_certificate=args.curve_server_certificate, hwm=args.hwm, heartbeat_ivl=args.heartbeat_ivl,
                peer_timeout=args.peer_timeout, packets=args.packets,
            ), **engine_fields(args))
            if not _connected(bridge, args.timeout, stop):
                failed = stop_bridge(bridge, f"bridge {args.action}")
                if stop.is_set():
                    print(f"framebus bridge {args.action}: stopped while waiting for the publisher at {args.endpoint}", file=sys.stderr)
                    return stopped_status()
                if failed:
                    return 1
                print(f"framebus bridge {args.action}: {bridge.no_answer(args.timeout)}", file=sys.stderr)
                return 1
    except (FramebusError, OSError, ValueError, TypeError, ImportError) as exc:
        from ..cli import error_text

        print(f"framebus bridge {args.action}: {error_text(exc)}", file=sys.stderr)
        return 1
    what = f"{args.name} -> {bridge.endpoint}" if args.action == "publish" else f"{bridge.endpoint} -> {args.name}"
    print(f"framebus bridge {args.action}: {what} ({bridge.mode or 'publisher'} mode); Ctrl-C to stop", flush=True)
    watch_bridge(bridge, stop, quiet=args.quiet or not sys.stdout.isatty())
    if stop_bridge(bridge, f"bridge {args.action}"):
        return 1
    s = bridge.stats
    note = bridge.reach_note()  # Zenoh: whether any router or peer was reached
    print(f"stopped: {s.frames} frames, {s.bytes / 1e6:.1f} MB, {s.dropped} dropped, {s.reconnects} reconnects{note}", flush=True)
    return stopped_status()


def _connected(bridge: Any, timeout: float, stop: threading.Event) -> bool:
    """Waits until a subscriber has its publisher's answer; False after ``timeout`` seconds,
    once ``stop`` is set, or when the bridge stopped (its error is raised by stop())."""
    deadline = time.monotonic() + timeout
    while not bridge.connected:
        if not bridge.running or time.monotonic() >= deadline or stop.wait(0.05):
            return False
    return True

