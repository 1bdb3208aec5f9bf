"""The two ends between framebus streams and ROS 2 ``sensor_msgs/msg/Image`` topics carried by
rmw_zenoh: ``ImagePublisher`` (a stream's frames become a topic) and ``ImageSubscriber`` (a topic's
images land in a stream). Each runs on a background thread (the lifecycle, counters and
``framebus ls`` record of the bridge, ``framebus.net``), holds one Zenoh session and declares the
liveliness tokens that make ``ros2 node list`` / ``ros2 topic list`` / ``ros2 topic info`` see it.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from typing import Any, Optional, Tuple

import numpy as np

from .._host_read import host_wait_view, open_for_host
from ..errors import InvalidArgumentError, StreamEndedError, StreamTimeoutError
from ..net.link import SLICE_S, TICK_S, Bridge, BridgeStats, local_stream
from ..net.wire import SpecMismatchError
from ..net.zenoh import Inbox, Reach, ZenohLink, frames
from . import image as I
from . import rmw
from .qos import Qos, QosWatch, declare_publisher, declare_subscriber

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
VIDEO = "foxglove_msgs/msg/CompressedVideo"

#: A link that reaches a local rmw_zenoh router, as ROS 2 nodes do by default.
ROUTER = "tcp/localhost:7447"


def default_link(link: Optional[ZenohLink]) -> ZenohLink:
    """``link``, or one like rmw_zenoh's default session: peer mode, connect to the router on
    localhost:7447, multicast scouting off."""
    if link is None or (not link.connect and not link.listen and link.zenoh_config is None):
        return ZenohLink(
            zenoh_config=None if link is None else link.zenoh_config,
            connect=(ROUTER,), scouting=False if link is None or link.scouting is None else link.scouting,
            zenoh_mode=None if link is None else link.zenoh_mode,
        )
    return link


def _node_name(text: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in text).strip("_") or "framebus"
    return out if out[0].isalpha() else "fb_" + out


class _RosEnd(Bridge):
    """What both ROS ends share: the session, the node token and the entity token, and the state
    shown while the session reaches no Zenoh router or peer."""

    kind = "MP"
    #: The ROS message type of the topic this end declares (its key and tokens).
    ros_type = IMAGE
    _reach: Optional[Reach] = None
    _role_tag = "bridge out"

    def __init__(self, stream: str, topic: str, domain: int, link: Optional[ZenohLink], node: Optional[str], namespace: str,
                 qos: Qos, status: bool) -> None:
        self.topic = rmw.check_topic(topic)
        self.domain = rmw.check_domain(domain)
        self.link = default_link(link)
        self.node = _node_name(node or f"framebus_{stream}")
        self.namespace = namespace
        self.qos = qos
        self.depth = qos.depth
        self.reliability = rmw.RELIABLE if qos.reliable else rmw.BEST_EFFORT
        self._qos_watch: Optional[QosWatch] = None
        self.type_hash = rmw.type_hash(self.ros_type)
        self.key = rmw.topic_key(self.domain, self.topic, self.ros_type, self.type_hash)
        self.gid = secrets.token_bytes(rmw.GID_SIZE)
        self.tokens: list = []
        self._zsession: Any = None
        self._label_shown = ""
        super().__init__(stream, f"ros2:{self.topic}", None, status)

    @property
    def stats(self) -> BridgeStats:
        """The counters (see BridgeStats); ``state`` is "waiting for a Zenoh router at ENDPOINT"
        (or for a peer) while the session reaches no Zenoh router or peer."""
        s = super().stats
        s = s if self._reach is None else dataclasses.replace(s, state=self._reach.state(s.state))
        note = "" if self._qos_watch is None else self._qos_watch.note()
        return dataclasses.replace(s, state=f"{s.state}; {note}") if note else s

    def reach_note(self) -> str:
        """Empty once the session reached a Zenoh router or peer; else a clause saying that it
        never did and where it looked (for the line printed when the end stops)."""
        return "" if self._reach is None or self.frames else self._reach.note()

    def _open_session(self) -> None:
        cfg = self.link.config()
        self._reach = Reach(cfg)
        self._zsession = self.link.open(cfg)
        self._reach.attach(self._zsession)

    def _handle(self) -> Any:
        """The local stream handle that monitors show for this end (None while there is none)."""
        return None

    def _label(self) -> str:
        return ""

    def _show_label(self) -> None:
        """Tags the local handle for ``framebus top``: the waiting text (in the 48 bytes the core
        keeps of a label) while the session reaches nobody, else what the end does."""
        handle = self._handle()
        if handle is None:
            return
        reach = self._reach
        label = reach.label if reach is not None and not reach.now() else self._label()
        if label != self._label_shown:
            handle.set_role(self._role_tag, label)
            self._label_shown = label

    def _declare_tokens(self) -> None:
        zid = str(self._zsession.zid())
        self._qos_watch = QosWatch(self._zsession, self.domain, self.topic, self.kind, self.qos)
        name = rmw.node_token(self.domain, zid, 0, self.namespace, self.node)
        self.tokens = [(name, self._zsession.liveliness().declare_token(name))]
        self._declare_entity()

    def _declare_entity(self) -> None:
        name = rmw.entity_token(
            self.kind, self.domain, str(self._zsession.zid()), 0, 1, self.namespace, self.node, self.topic, self.ros_type, self.type_hash,
            self.qos.token(),
        )
        self.tokens.append((name, self._zsession.liveliness().declare_token(name)))

    def _retype(self, ros_type: str) -> None:
        """The topic turned out to be of ``ros_type``: the entity token says so from now on
        (``ros2 topic info`` then counts this end with the topic's publishers' type)."""
        self.ros_type, self.type_hash = ros_type, rmw.type_hash(ros_type)
        self.tokens.pop()[1].undeclare()
        self._declare_entity()

    def _close_session(self) -> None:
        for _, token in self.tokens:
            token.undeclare()
        self.tokens = []
        if self._qos_watch is not None:
            self._qos_watch.close()
        if self._reach is not None:
            self._reach.attach(None)
        if self._zsession is not None:
            self._zsession.close()
            self._zsession = None

    def _tick(self, now: float) -> None:
        self._next_tick = now + TICK_S
        self._show_label()
        self._tick_rates(now)


class ImagePublisher(_RosEnd):
    """Publishes a local stream as a ROS 2 Image topic; see ``framebus.ros2.publish``."""

    role = "publish"  # as the bridges' (framebus ls shows "-> ros2:/topic")
    kind = "MP"
    _role_tag = "bridge out"

    def __init__(self, stream: str, topic: str, *, frame_id: str = "", domain: int = 0, bgr: bool = False, link: Optional[ZenohLink] = None,
                 node: Optional[str] = None, namespace: str = "", depth: int = 10, best_effort: bool = False, durability: str = "volatile",
                 status: bool = True) -> None:
        if not isinstance(frame_id, str):
            raise TypeError(f"frame_id must be a str, got {frame_id!r}")
        self.frame_id = frame_id
        self.bgr = bool(bgr)
        self.sequence = 0
        self._src: Any = None
        self._pub: Any = None
        self._encoding: Optional[str] = None
        qos = Qos("best_effort" if best_effort else "reliable", durability, depth)
        super().__init__(stream, topic, domain, link, node, namespace, qos, status)

    @property
    def matched(self) -> bool:
        """Whether some Zenoh subscriber (a ROS 2 subscription) matches the topic now."""
        pub = self._pub
        status = getattr(pub, "matching_status", None)  # an advanced (transient local) publisher has none
        return status is not None and bool(status.matching)

    def _peer_count(self) -> int:
        return int(self.matched)

    def _unsent(self) -> None:
        """A frame not sent: the session reaches no router or peer (or, for video, the topic
        waits for a keyframe after that). Once frames went out, the subscriptions miss it:
        counted in ``dropped`` (the gap while a router restarts or a subscriber is away)."""
        if self.frames:
            self.dropped += 1

    def _handle(self) -> Any:
        return self._src

    def _label(self) -> str:
        return f"-> ros2 {self.topic}"

    def _setup(self) -> None:
        src = self._src = open_for_host(self.stream_name)  # a device stream: its CPU mirror, else downloaded
        if not src.variable:
            self._encoding = I.encoding_of(tuple(src.shape or ()), np.dtype(src.dtype), bgr=self.bgr)  # bad shapes fail here
        src.set_role("bridge out", f"-> ros2 {self.topic}")
        self._label_shown = self._label()
        self._open_session()
        self._pub = declare_publisher(self._zsession, self.key, self.qos)
        self._declare_tokens()
        self.state = "running"
        self._tick(time.monotonic())

    def _loop(self) -> None:
        src, reach = self._src, self._reach
        assert reach is not None  # _setup made it
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= self._next_tick:
                self._tick(now)
            try:
                frame = host_wait_view(src, SLICE_S)
            except TimeoutError:
                continue
            except StreamEndedError:  # the writer ended the stream: wait for it to write again
                self.state = "source ended"
                self._stop.wait(SLICE_S)
                continue
            if not reach.now() and not self.matched:  # the message would go nowhere: not sent
                self.last_seq = frame.seq
                frame.release()
                self._unsent()
                continue
            try:
                arr = frame.array
                encoding = self._encoding or I.encoding_of(arr.shape, arr.dtype, bgr=self.bgr)
                msg = I.pack_image(arr, frame.timestamp_ns, self.frame_id, encoding)  # the one copy of the pixels
                seq, nbytes = frame.seq, arr.nbytes
                del arr  # the view pins the slot
            finally:
                frame.release()
            self.sequence += 1
            self._pub.put(msg, attachment=rmw.pack_attachment(self.sequence, time.time_ns(), self.gid))
            if self.last_seq and seq > self.last_seq + 1:
                self.dropped += seq - self.last_seq - 1
            self.last_seq = seq
            self.state = "running"
            self.frames += 1
            self.bytes += nbytes
            self.wire_bytes += len(msg)

    def _cleanup(self) -> None:
        if self._pub is not None:
            self._pub.undeclare()
            self._pub = None
        self._close_session()
        if self._src is not None:
            self._src.close()
            self._src = None


class ImageSubscriber(_RosEnd):
    """Writes a ROS 2 Image topic into a local stream; see ``framebus.ros2.subscribe``."""

    role = "subscribe"
    kind = "MS"
    _role_tag = "bridge in"

    def __init__(self, topic: str, stream: str, *, domain: int = 0, link: Optional[ZenohLink] = None, slots: int = 4,
                 capacity: Optional[int] = None, keep: bool = False, node: Optional[str] = None, namespace: str = "",
                 depth: int = 10, best_effort: bool = False, durability: str = "volatile", status: bool = True) -> None:
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0):
            raise InvalidArgumentError(f"capacity must be a positive number of bytes, got {capacity!r}")
        self.slots = slots
        self.capacity = capacity
        self.keep = bool(keep)
        self._sub: Any = None
        self._inbox = Inbox()
        self._dst: Any = None
        self._owned = False
        self.publishers: set = set()
        #: Messages of another type on the topic's name, ignored.
        self.bad_messages = 0
        #: The decoder of a CompressedVideo topic (made at its first message).
        self.video: Any = None
        self._last_ros_seq: dict = {}
        self._last_gid: Optional[bytes] = None
        qos = Qos("best_effort" if best_effort else "reliable", durability, depth)
        super().__init__(stream, topic, domain, link, node, namespace, qos, status)

    def _peer_count(self) -> int:
        """The topic's publishers now, by their liveliness tokens (one that stopped or was
        restarted counts once); the publishers heard from, for publishers without tokens."""
        watch = self._qos_watch
        live = watch.count() if watch is not None else None
        return live if live is not None else len(self.publishers)

    def _handle(self) -> Any:
        return self._dst

    def _label(self) -> str:
        return f"<- ros2 {self.topic}"

    def _setup(self) -> None:
        self._open_session()
        # Image or CompressedImage, any type hash (the two last chunks of the key).
        wildcard = self.key.rsplit("/", 2)[0] + "/*/*"
        self._sub = declare_subscriber(self._zsession, wildcard, self.qos, self._inbox.put)
        self._declare_tokens()
        self.state = "waiting for the topic's first image"
        self._tick(time.monotonic())

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= self._next_tick:
                self._tick(now)
            if not self._inbox.poll(int(SLICE_S * 1000)):
                continue
            sample = None
            while True:  # newest wins: of the images waiting, only the last is written
                try:
                    newer = self._inbox.pop()
                except IndexError:  # nothing more waiting
                    break
                if sample is not None:
                    self._accept(sample, write=False)
                sample = newer
            self._accept(sample)

    def _sequence(self, sample: Any) -> Tuple[Optional[int], bool, bool]:
        """The publisher's sequence number of a sample (None without a valid attachment),
        whether samples of that publisher were missed before it (counted in ``dropped``), and
        whether the sample before it came from another publisher (a video decoder then waits
        for this one's keyframe: its pictures refer to its own run's, not the other's)."""
        if sample.attachment is None:
            return None, False, False
        try:
            seq, _, gid = rmw.unpack_attachment(sample.attachment.to_bytes())
        except ValueError:
            return None, False, False
        last = self._last_ros_seq.get(gid)
        gap = last is not None and seq > last + 1
        if last is not None and gap:
            self.dropped += seq - last - 1
        self._last_ros_seq[gid] = seq
        self.publishers.add(gid)
        other, self._last_gid = self._last_gid is not None and gid != self._last_gid, gid
        return seq, gap, other

    def _accept(self, sample: Any, write: bool = True) -> None:
        """Reads one sample and (``write``) writes its image; else (an older one of several
        waiting) counts it dropped, after decoding it when it is video (its successors refer
        to it)."""
        dds_type = str(sample.key_expr).rsplit("/", 2)[1]
        kind = {rmw.dds_type_name(t): t for t in (IMAGE, COMPRESSED, VIDEO)}.get(dds_type)
        if kind is None:
            self.bad_messages += 1  # another type on this topic name: not ours to read
            return
        if kind != self.ros_type and not self.frames:  # the first messages tell the topic's type
            self._retype(kind)
        seq, gap, other = self._sequence(sample)
        if not write and kind != VIDEO:
            self.dropped += 1
            return
        data = frames.frame_bytes(sample.payload)  # one copy, fragments or not
        if kind == VIDEO:
            if self.video is None:
                from .video import VideoDecoder

                self.video = VideoDecoder()
            skipped = self.video.skipped
            img: Any = self.video.decode(data, gap or other)
            self.dropped += self.video.skipped - skipped
            if img is None or not write:
                self.dropped += img is not None
                return
        elif kind == COMPRESSED:
            from .compressed import decode

            img = decode(data)
        else:
            img = I.unpack_image(data)
        self._ensure(img.data.astype(img.data.dtype.newbyteorder("="), copy=False) if img.data.dtype.byteorder == ">" else img.data)
        meta = json.dumps({"frame_id": img.frame_id, "encoding": img.encoding}).encode()[: self._dst.meta_capacity]
        arr = img.data
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("="))  # big-endian pixels: swapped (a copy)
        elif not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)  # padded rows
        while not self._stop.is_set():
            try:
                self._dst.write(arr, frame_id=seq, meta=meta, timestamp_ns=img.stamp_ns or None, timeout=TICK_S)
                break
            except StreamTimeoutError:
                continue
        self.frames += 1
        self.bytes += img.data.nbytes
        self.wire_bytes += len(data)
        self.last_seq = seq or self.frames
        self.state = "running"

    def _ensure(self, arr: np.ndarray) -> None:
        dst = self._dst
        if dst is not None:
            if dst.variable:
                if arr.nbytes > dst.size:
                    raise SpecMismatchError(f"an image of {arr.nbytes} bytes on {self.topic} does not fit the local stream's capacity of {dst.size} bytes: raise --capacity")
                return
            if tuple(dst.shape) == arr.shape and dst.dtype == arr.dtype:
                return
            raise SpecMismatchError(
                f"the images on {self.topic} changed from shape {tuple(dst.shape)} {dst.dtype} to {arr.shape} {arr.dtype}; "
                "a fixed-shape stream cannot follow: subscribe with capacity=BYTES (--capacity) for a variable-shape stream"
            )
        # The bridges' rule: a stream of another live process is written into if its spec fits,
        # one left by an end that died is taken over, else SpecMismatchError.
        if self.capacity is not None:
            self._dst, self._owned = local_stream(self.stream_name, (self.capacity,), np.dtype(np.uint8), self.slots, variable=True)
        else:
            self._dst, self._owned = local_stream(self.stream_name, arr.shape, arr.dtype.newbyteorder("="), self.slots)
        self._dst.set_role("bridge in", self._label())
        self._label_shown = self._label()

    def _cleanup(self) -> None:
        if self._sub is not None:
            self._sub.undeclare()
            self._sub = None
        self._close_session()
        dst, self._dst = self._dst, None
        if dst is not None:
            if self._owned and not self.keep:
                try:
                    dst.unlink()
                except Exception:  # noqa: BLE001 - already gone
                    dst.close()
            else:
                dst.close()
