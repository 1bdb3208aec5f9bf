"""From a camera to ROS 2 across machines: camera -> inference -> H.264 over Zenoh -> the far
machine decodes into a local stream -> a ROS 2 Image topic (and a recording).

On one machine (everything over loopback; a ROS 2 node stand-in prints what arrives):

    python examples/camera_to_ros2.py --seconds 10 --record /tmp/camera.mp4

Across two machines:

    # the camera machine: camera, inference, the H.264 sender listening on port 7450
    python examples/camera_to_ros2.py --role camera --listen tcp/0.0.0.0:7450
    # the far machine: receive, decode, publish /camera/image_raw to ROS 2 (and record)
    python examples/camera_to_ros2.py --role far --connect tcp/CAMERA-HOST:7450 --record camera.mp4

On the far machine, ROS 2 nodes see /camera/image_raw through their Zenoh router on
tcp/localhost:7447 (`ros2 run rmw_zenoh_cpp rmw_zenohd`; see docs/ros2.md). With
``--role all``, this script listens on that port itself and its ROS node stand-in (framebus's
own ROS 2 subscriber) connects to it.

Needs framebus[video,zenoh] (PyAV, eclipse-zenoh, rosbags); ``--record`` needs FFmpeg.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import time

import numpy as np

import framebus
import framebus.net
import framebus.ros2

KEY = "camera/inferred"  # the Zenoh key the video travels under
TOPIC = "/camera/image_raw"


def camera(name: str, width: int, height: int, fps: float, stop) -> None:
    """A camera stand-in: a moving bar, one frame every 1/fps s. The frame's timestamp_ns is
    the capture time: every later stage keeps it (ROS 2 gets it as header.stamp)."""
    stream = framebus.create(name, shape=(height, width, 3), dtype=np.uint8, slots=4)
    n = 0
    t0 = time.monotonic()
    while not stop.is_set():
        time.sleep(max(0.0, t0 + n / fps - time.monotonic()))
        frame = np.full((height, width, 3), 40, np.uint8)
        x = (n * 8) % (width - 32)
        frame[:, x : x + 32] = (255, 200, 0)
        stream.write(frame, frame_id=n, timestamp_ns=time.time_ns())
        n += 1
    stream.end()


def inference(src: str, out: str, stop) -> None:
    """An inference stand-in: reads each new camera frame (zero-copy view), "detects" the bar
    and writes the picture on, keeping the capture stamp and frame number, with the result in
    the frame's metadata (JSON; the bridge carries it to the far machine)."""
    reader = framebus.open(src, timeout=30)
    writer = None
    while not stop.is_set():
        try:
            frame = reader.wait_view(0.5)
        except (TimeoutError, framebus.StreamEndedError):
            continue
        with frame:
            picture = np.asarray(frame)
            column = int(picture[0, :, 0].argmax())  # the "model": where the bar is
            if writer is None:
                writer = framebus.create(out, shape=picture.shape, dtype=np.uint8, slots=4)
            meta = json.dumps({"bar_x": column, "inference_ns": time.time_ns()})
            writer.write(picture, frame_id=frame.frame_id, timestamp_ns=frame.timestamp_ns, meta=meta.encode())


def send(stream: str, listen: str):
    """The camera machine's end: encode ``stream`` as H.264 and offer it under KEY over Zenoh."""
    return framebus.net.publish(stream, KEY, engine="zenoh", encode="h264", bitrate="8M", gop=30, listen=[listen], scouting=False)


def receive(decoded: str, connect: str, ros_listen: str):
    """The far machine's end: decode the video into the local stream ``decoded`` and publish
    that stream as a ROS 2 Image topic. ``ros_listen`` (e.g. tcp/127.0.0.1:7447): listen for
    ROS nodes directly; None: join the local Zenoh router as ROS 2 nodes do."""
    sub = framebus.net.subscribe(KEY, decoded, engine="zenoh", connect=[connect], scouting=False)
    framebus.open(decoded, timeout=60).close()  # the stream is created at the first keyframe
    ros = framebus.ros2.publish(decoded, TOPIC, frame_id="camera", listen=[ros_listen] if ros_listen else [], scouting=False)
    return sub, ros


def record(decoded: str, path: str) -> subprocess.Popen:
    """``framebus record`` of the H.264 packets as they arrived: the subscriber keeps them in
    the packet stream ``DECODED.h264`` (its decoder reads it too), and the recorder remuxes them
    into the file without encoding again, at a few percent of a core."""
    return subprocess.Popen([sys.executable, "-m", "framebus", "record", f"{decoded}.h264", path, "--wait", "60", "--quiet"])


def ros_node(connect: str, local: str, seconds: float) -> list:
    """A ROS 2 node stand-in: framebus's ROS 2 subscriber writes TOPIC into ``local``; each
    image's age (now - header.stamp, the capture time) is taken as it arrives."""
    sub = framebus.ros2.subscribe(TOPIC, local, connect=[connect], scouting=False)
    ages = []
    try:
        with framebus.open(local, timeout=60) as reader:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    with reader.wait_view(0.5) as image:
                        ages.append((time.time_ns() - image.timestamp_ns) / 1e6)
                except (TimeoutError, framebus.StreamEndedError):
                    continue
    finally:
        sub.stop()
    return ages


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=["all", "camera", "far"], default="all")
    p.add_argument("--listen", default="tcp/127.0.0.1:7450", help="camera: where the video is offered")
    p.add_argument("--connect", default="tcp/127.0.0.1:7450", help="far: the camera machine's --listen")
    p.add_argument("--ros-listen", default=None, help="far: listen for ROS nodes here instead of joining the local router")
    p.add_argument("--size", default="1920x1080")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: Ctrl-C)")
    p.add_argument("--record", metavar="FILE", help="far: also record the video (its H.264 packets, not re-encoded)")
    p.add_argument("--prefix", default="", help="prefix of the local stream names (cam, inferred, decoded, from_ros)")
    args = p.parse_args()
    names = {n: args.prefix + n for n in ("cam", "inferred", "decoded", "from_ros")}
    width, height = (int(v) for v in args.size.split("x"))
    seconds = args.seconds or float("inf")
    ros_listen = args.ros_listen or ("tcp/127.0.0.1:7447" if args.role == "all" else None)
    stop = mp.get_context("spawn").Event()
    children, bridges, recorder = [], [], None
    try:
        if args.role in ("all", "camera"):
            ctx = mp.get_context("spawn")
            children = [ctx.Process(target=camera, args=(names["cam"], width, height, args.fps, stop)),
                        ctx.Process(target=inference, args=(names["cam"], names["inferred"], stop))]
            for c in children:
                c.start()
            framebus.open(names["inferred"], timeout=60).close()  # inference is writing
            bridges.append(send(names["inferred"], args.listen))
        if args.role in ("all", "far"):
            bridges += receive(names["decoded"], args.connect, ros_listen)
            if args.record:
                recorder = record(names["decoded"], args.record)
        if args.role == "all":
            ages = ros_node(ros_listen, names["from_ros"], min(seconds, 3600))
            if ages:
                print(f"ROS node: {len(ages)} images, age at receipt p50 {np.percentile(ages, 50):.1f} ms, p99 {np.percentile(ages, 99):.1f} ms")
            else:
                print("ROS node: no image arrived")
        else:
            print(f"running as {args.role}; Ctrl-C stops")
            time.sleep(seconds)
    except KeyboardInterrupt:
        pass
    finally:
        if recorder is not None:
            recorder.send_signal(2)  # SIGINT: the recorder finishes the file
            recorder.wait(30)
        for b in reversed(bridges):
            b.stop()
        stop.set()
        for c in children:
            c.join(10)
        for name in (names["cam"], names["inferred"]) if args.role != "far" else ():
            try:
                framebus.unlink(name)
            except FileNotFoundError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
