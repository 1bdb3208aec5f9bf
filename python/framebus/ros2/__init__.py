"""framebus streams as ROS 2 image topics, over Zenoh, as ROS 2's rmw_zenoh middleware carries
them (Jazzy and later; no ROS installation needed on the framebus side).

>>> pub = framebus.ros2.publish("camera", "/camera/image_raw", frame_id="camera")  # doctest: +SKIP
>>> sub = framebus.ros2.subscribe("/camera/image_raw", "from_ros")                 # doctest: +SKIP

(Skipped as a doctest: it needs a Zenoh router or ROS 2 peers.)

``publish`` makes a stream's frames a ``sensor_msgs/msg/Image`` topic: the encoding follows the
frames' shape and dtype (mono8, mono16, rgb8 or bgr8, rgba8 or bgra8, rgb16, 32FC1, ...), each
message carries rmw_zenoh's attachment (sequence number, source timestamp, publisher GID), and
liveliness tokens make ``ros2 topic list`` / ``ros2 topic info`` / ``ros2 node list`` see it.
With ``encode="h264"`` it is a ``foxglove_msgs/msg/CompressedVideo`` topic instead (H.264,
what Foxglove and Lichtblick play). ``subscribe`` writes a topic's images (Image,
CompressedImage or CompressedVideo) into a local stream created from the first image.
Both run on a background thread and return an object with ``stop()``, ``join()``, ``stats`` and
``error`` that is also a context manager; ``framebus ros2 publish|subscribe`` runs them from the
command line. By default they join the Zenoh network as ROS 2 nodes do: peer mode, through the
router on ``tcp/localhost:7447``, without multicast scouting. See docs/ros2.md.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

try:
    import zenoh  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("framebus.ros2 needs eclipse-zenoh and rosbags: pip install 'framebus[zenoh]'") from _exc

from ..errors import InvalidArgumentError
from ..net.zenoh import ZenohLink
from ..media.codec import VideoSettings
from .encoded import VideoPublisher
from .node import ImagePublisher, ImageSubscriber
from . import image, rmw, video

__all__ = ["ImagePublisher", "ImageSubscriber", "VideoPublisher", "ZenohLink", "image", "publish", "rmw", "subscribe", "video"]


def _link(connect: Sequence[str], listen: Sequence[str], scouting: Optional[bool], zenoh_config: Any, zenoh_mode: Optional[str]) -> Optional[ZenohLink]:
    if not connect and not listen and zenoh_config is None and scouting is None and zenoh_mode is None:
        return None
    return ZenohLink(zenoh_config=zenoh_config, listen=tuple(listen), connect=tuple(connect), scouting=scouting, zenoh_mode=zenoh_mode)


def publish(
    stream_name: str, topic: str, *, frame_id: str = "", domain: int = 0, bgr: bool = False, connect: Sequence[str] = (),
    listen: Sequence[str] = (), scouting: Optional[bool] = None, zenoh_config: Any = None, zenoh_mode: Optional[str] = None,
    node: Optional[str] = None, namespace: str = "", depth: int = 10, best_effort: bool = False, durability: str = "volatile",
    status: bool = True, encode: Optional[str] = None, bitrate: Any = None, gop: Optional[int] = None, encoder: Optional[str] = None,
    drop_alpha: bool = False,
) -> ImagePublisher:
    """Starts publishing the local stream ``stream_name`` (fixed shape (H, W) or (H, W, C), or
    variable shape) as the ROS 2 topic ``topic`` of type ``sensor_msgs/msg/Image`` in ROS domain
    ``domain``; returns the running :class:`ImagePublisher`.

    The newest frame wins (a frame written while the previous one is being sent is skipped,
    counted in ``stats.dropped``, as is one made while the session reaches no router or peer
    after frames went out). Each frame is copied once, into the message. The header's
    stamp is the frame's ``timestamp_ns``, its ``frame_id`` is ``frame_id``. ``bgr``: 3 and 4
    channel uint8/uint16 frames are announced as bgr8/bgra8 (bgr16/bgra16) instead of RGB.
    ``connect`` / ``listen`` (Zenoh endpoints), ``scouting``, ``zenoh_mode`` and
    ``zenoh_config`` (a Zenoh configuration file) say how to join the Zenoh network (default:
    the local router, as ROS 2 nodes do). ``node``/``namespace``: the ROS node this publisher
    appears as (default ``framebus_<stream>``). ``depth``/``best_effort``/``durability``
    ("volatile" or "transient_local"): the QoS (reliable, volatile, keep-last 10 by default);
    transient local keeps the last ``depth`` images for subscriptions that join later. A
    subscription that ROS 2 would refuse to match with it (reliable, or transient local, when
    this publisher is not) is named in ``stats.state``.

    ``encode="h264"``: the topic is a ``foxglove_msgs/msg/CompressedVideo`` one instead (what
    Foxglove and Lichtblick play), each message one H.264 access unit (Annex B) encoded in this
    process by PyAV (``framebus[video]``), keyframes with their SPS/PPS every ``gop`` pictures
    (default 30) and whenever a subscription appears; returns a :class:`VideoPublisher`.
    ``bitrate`` ("8M", "800k" or bits/s; default 8M), ``encoder`` ("auto": a hardware encoder
    that works here, else libx264) and ``drop_alpha`` (take (H, W, 4) frames, send three
    channels) are those of ``framebus.net.publish``. The stream must hold uint8 frames (H, W),
    (H, W, 3) or (H, W, 4) of even height and width (else ValueError, before anything is
    published).

    Raises StreamNotFoundError (FileNotFoundError) if the stream does not exist, ValueError for
    a topic name ROS rejects, an unknown durability or frames that are not an image, BridgeError when the Zenoh session
    cannot open. Later errors stop it and are raised by ``join()``/``stop()``.
    """
    options: Any = dict(
        frame_id=frame_id, domain=domain, bgr=bgr, link=_link(connect, listen, scouting, zenoh_config, zenoh_mode),
        node=node, namespace=namespace, depth=depth, best_effort=best_effort, durability=durability, status=status,
    )
    if encode is not None:
        settings = VideoSettings.of(encode, bitrate, gop, encoder, drop_alpha)
        pub: ImagePublisher = VideoPublisher(stream_name, topic, settings=settings, **options)
    elif (bitrate, gop, encoder, drop_alpha) != (None, None, None, False):
        raise InvalidArgumentError("bitrate=, gop=, encoder= and drop_alpha= go with encode='h264'; pass encode= or leave them out")
    else:
        pub = ImagePublisher(stream_name, topic, **options)
    pub._start()
    return pub


def subscribe(
    topic: str, stream_name: str, *, domain: int = 0, connect: Sequence[str] = (), listen: Sequence[str] = (),
    scouting: Optional[bool] = None, zenoh_config: Any = None, zenoh_mode: Optional[str] = None, slots: int = 4,
    capacity: Optional[int] = None, keep: bool = False, node: Optional[str] = None, namespace: str = "", depth: int = 10,
    best_effort: bool = False, durability: str = "volatile", status: bool = True,
) -> ImageSubscriber:
    """Subscribes to the ROS 2 ``sensor_msgs/msg/Image`` topic ``topic`` (or a
    ``sensor_msgs/msg/CompressedImage`` one, JPEG/PNG decoded in process by PyAV into RGB or mono
    frames, or a ``foxglove_msgs/msg/CompressedVideo`` one, H.264 decoded by PyAV into (H, W, 3)
    rgb8 frames from its first keyframe on) and writes its images into the local stream ``stream_name``, created from the first image (shape (H, W) or
    (H, W, C) and dtype from its encoding; ``slots`` slots) or, with ``capacity`` (bytes), as a
    variable-shape stream that takes images of any size up to it. Returns the running
    :class:`ImageSubscriber`.

    Each raw image is copied once, from the received message into its slot; its header stamp
    becomes the frame's ``timestamp_ns``, the publisher's sequence number its ``frame_id``, and
    ``{"frame_id": ..., "encoding": ...}`` (JSON) its metadata. When images arrive faster than
    the local stream takes them, the newest wins (``stats.dropped`` counts the rest, and gaps in
    the publishers' sequence numbers). An image whose shape or dtype differs from the fixed
    stream's stops the subscriber with SpecMismatchError (use ``capacity``). The stream is
    removed on ``stop()`` unless ``keep`` or it existed before. The Zenoh and QoS keywords are
    those of :func:`publish` (a transient local subscription first gets the images the
    publishers kept); a publisher that ROS 2 would refuse to match with this subscription
    (best effort, or volatile, when it requests more) is named in ``stats.state``.
    ``stats.peers`` is how many publishers the topic has now, by their liveliness tokens (a
    restarted publisher counts once).
    """
    sub = ImageSubscriber(
        topic, stream_name, domain=domain, link=_link(connect, listen, scouting, zenoh_config, zenoh_mode), slots=slots,
        capacity=capacity, keep=keep, node=node, namespace=namespace, depth=depth, best_effort=best_effort, durability=durability,
        status=status,
    )
    sub._start()
    return sub
