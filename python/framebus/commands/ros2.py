"""``framebus ros2``: a local stream as a ROS 2 image topic (rmw_zenoh), or a ROS 2 image topic
into a local stream, until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from ._args import int_range, positive_int, stream_name
from ._signals import stop_on_signals, stopped_status
from ._wait import add_wait_argument

HELP = "ROS 2 image topics over Zenoh (rmw_zenoh): publish NAME --topic T | subscribe TOPIC --stream NAME | router"

_EXAMPLES = """examples:
  framebus ros2 publish camera --topic /camera/image_raw --frame-id camera
  framebus ros2 subscribe /camera/image_raw --stream from_ros
  framebus ros2 publish camera --topic /camera/image_raw --connect tcp/robot:7447
  framebus ros2 publish camera --topic /camera/h264 --encode h264 --bitrate 4M

  framebus ros2 router --listen tcp/0.0.0.0:7447

By default both join the Zenoh network as ROS 2 nodes with rmw_zenoh do: through the router on
tcp/localhost:7447 (`ros2 run rmw_zenoh_cpp rmw_zenohd`, or without ROS `framebus ros2 router`).
Until a router or peer is reached, the
state says "waiting for a Zenoh router at ENDPOINT" and nothing is sent."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = _EXAMPLES
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    pub = sub.add_parser("publish", help="publish a local stream as a sensor_msgs/msg/Image topic")
    pub.add_argument("name", type=stream_name, help="local stream to publish")
    pub.add_argument("--topic", required=True, help="ROS 2 topic, e.g. /camera/image_raw")
    pub.add_argument("--frame-id", default="", help="header.frame_id of every image (default empty)")
    pub.add_argument("--bgr", action="store_true", help="3/4-channel frames are BGR(A): bgr8/bgra8 instead of rgb8/rgba8")
    pub.add_argument("--encode", choices=["h264"], default=None,
                     help="publish foxglove_msgs/msg/CompressedVideo (H.264, for Foxglove/Lichtblick) instead of Image; uint8 frames, needs framebus[video]")
    pub.add_argument("--bitrate", default=None, metavar="RATE", help="with --encode: bits per second, e.g. 8M or 800k (default 8M)")
    pub.add_argument("--gop", type=positive_int, default=None, help="with --encode: pictures between keyframes (default 30; a new subscription gets one at once)")
    pub.add_argument("--encoder", default=None, metavar="NAME", help="with --encode: auto (a hardware encoder that works here, else libx264; default) or an FFmpeg encoder")
    pub.add_argument("--drop-alpha", action="store_true", help="with --encode: take HxWx4 frames and send their first three channels")
    pub.add_argument("--best-effort", dest="qos", action="store_const", const="best_effort", default="reliable",
                     help="the same as --qos best_effort")
    add_wait_argument(pub)
    _common(pub)

    s = sub.add_parser("subscribe", help="write a sensor_msgs/msg/Image (or CompressedImage, or CompressedVideo: decoded) topic into a local stream")
    s.add_argument("topic", help="ROS 2 topic, e.g. /camera/image_raw")
    s.add_argument("--stream", dest="name", type=stream_name, required=True, help="local stream to write (created from the first image)")
    s.add_argument("--slots", type=int_range(2, 64), default=4, help="slots of the local stream (default 4)")
    s.add_argument("--capacity", type=positive_int, default=None, metavar="BYTES", help="variable-shape stream taking images of any size up to BYTES")
    s.add_argument("--keep", action="store_true", help="keep the local stream when stopping")
    _common(s)

    r = sub.add_parser("router", help="run a Zenoh router with rmw_zenoh's settings (what rmw_zenohd runs), until Ctrl-C / SIGTERM")
    r.add_argument("--listen", action="append", default=[], metavar="ENDPOINT", help="Zenoh endpoint to listen on (repeatable; default tcp/[::]:7447)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--domain", type=int_range(0, 232), default=0, help="ROS_DOMAIN_ID (default 0)")
    p.add_argument("--node", default=None, help="ROS node name to appear as (default framebus_<stream>)")
    p.add_argument("--namespace", default="", help="ROS namespace of that node (default none)")
    p.add_argument("--qos", choices=["reliable", "best_effort"], default="reliable", help="QoS reliability (default reliable)")
    p.add_argument("--durability", choices=["volatile", "transient_local"], default="volatile",
                   help="QoS durability (default volatile); transient_local: late subscriptions get the last DEPTH images")
    p.add_argument("--depth", type=positive_int, default=10, help="QoS history depth, keep-last (default 10)")
    p.add_argument("--listen", action="append", default=[], metavar="ENDPOINT", help="Zenoh endpoint to listen on, e.g. tcp/0.0.0.0:7448 (repeatable)")
    p.add_argument("--connect", action="append", default=[], metavar="ENDPOINT", help="Zenoh router or peer, e.g. tcp/HOST:7447 (repeatable; default tcp/localhost:7447)")
    p.add_argument("--no-scouting", dest="scouting", action="store_false", default=None, help="turn Zenoh multicast scouting off")
    p.add_argument("--scouting", dest="scouting", action="store_true", help="turn Zenoh multicast scouting on")
    p.add_argument("--zenoh-config", metavar="FILE", help="a Zenoh configuration file (JSON5), used as it is")
    p.add_argument("--zenoh-mode", choices=["peer", "client"], default=None, help="Zenoh session mode (default peer)")
    p.add_argument("--quiet", action="store_true", help="print only state changes")


def run(args: argparse.Namespace) -> int:
    if args.action == "router":
        from ._ros2_router import run_router

        return run_router(args)
    try:
        from .. import ros2
    except ImportError as exc:
        print(f"framebus ros2 {args.action}: {exc}", file=sys.stderr)
        return 1
    from ..errors import FramebusError
    from ._wait import wait_for_stream
    from ..net.link import stop_bridge, watch_bridge

    zenoh = dict(connect=args.connect, listen=args.listen, scouting=args.scouting, zenoh_config=args.zenoh_config, zenoh_mode=args.zenoh_mode)
    stop = threading.Event()
    try:
        if args.action == "publish":
            wait_for_stream(args.name, args.wait)
            stop_on_signals(stop)
            node: Any = ros2.publish(
                args.name, args.topic, frame_id=args.frame_id, domain=args.domain, bgr=args.bgr, node=args.node,
                namespace=args.namespace, depth=args.depth, best_effort=args.qos == "best_effort", durability=args.durability,
                encode=args.encode, bitrate=args.bitrate, gop=args.gop, encoder=args.encoder, drop_alpha=args.drop_alpha, **zenoh,
            )
            what = f"{args.name} -> {node.topic} ({node.key})"
        else:
            stop_on_signals(stop)
            node = ros2.subscribe(
                args.topic, args.name, domain=args.domain, slots=args.slots, capacity=args.capacity, keep=args.keep,
                node=args.node, namespace=args.namespace, depth=args.depth, best_effort=args.qos == "best_effort",
                durability=args.durability, **zenoh,
            )
            what = f"{node.topic} -> {args.name}"
    except (FramebusError, OSError, ValueError, TypeError, ImportError) as exc:
        from ..cli import error_text

        print(f"framebus ros2 {args.action}: {error_text(exc)}", file=sys.stderr)
        return 1
    print(f"framebus ros2 {args.action}: {what}; Ctrl-C to stop", flush=True)
    watch_bridge(node, stop, quiet=args.quiet or not sys.stdout.isatty(), title="framebus ros2")
    if stop_bridge(node, f"ros2 {args.action}"):
        return 1
    s = node.stats
    print(f"stopped: {s.frames} frames, {s.bytes / 1e6:.1f} MB, {s.dropped} dropped{node.reach_note()}", flush=True)
    return stopped_status()
