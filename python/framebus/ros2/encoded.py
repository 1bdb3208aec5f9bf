"""A stream published as an H.264 ROS 2 topic (``foxglove_msgs/msg/CompressedVideo``, see
``video.py``): :class:`VideoPublisher`, the ROS end of ``framebus ros2 publish --encode h264``.

The pictures are encoded by the encoded bridge's encoder stage (``framebus.net.video``: it
checks the source, picks the encoder, keeps the keyframe interval and forces a keyframe when
asked, at most one every ``KEY_MIN_INTERVAL`` s) into its packet stream ``NAME.h264``; this end
reads that stream in order and puts each packet, one access unit, as one message. Keyframes:
every ``gop`` pictures, and one forced whenever a new subscription to the topic appears (its
liveliliness token), so a viewer that joins starts within a picture or so; messages after a
missed packet are held back until the next keyframe, so what is sent always decodes.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .. import _stream
from ..errors import InvalidArgumentError, StreamEndedError
from ..media import codec
from ..net.link import SLICE_S
from ..net.video import EncoderStage
from . import rmw
from .node import VIDEO, ImagePublisher
from .qos import declare_publisher
from .video import FORMATS, ParameterSets, pack_video

#: The gate's one peer: the topic (a Zenoh publisher reaches every subscription at once).
_TOPIC = "topic"


class VideoPublisher(ImagePublisher):
    """Publishes a local stream as a ROS 2 CompressedVideo topic; see ``framebus.ros2.publish``
    (``encode=``). ``settings``: the encoder's (``framebus.media.codec.VideoSettings``)."""

    ros_type = VIDEO

    def __init__(self, stream: str, topic: str, *, settings: codec.VideoSettings, **options: Any) -> None:
        if settings.codec not in FORMATS:
            raise InvalidArgumentError(f"a ROS 2 video topic carries {', '.join(FORMATS)}; encode={settings.codec!r} is not one")
        if options.get("bgr"):
            raise InvalidArgumentError("bgr= does not apply to an encoded topic: the encoder takes RGB frames (convert them, or publish raw Images)")
        self.settings = settings
        self.encoder: Optional[EncoderStage] = None
        self._sets = ParameterSets()
        self._gate = codec.KeyframeGate(self._want_keyframe)
        self._joins: Any = None
        #: Subscriptions that appeared on the topic (each asked for a keyframe).
        self.joined = 0
        super().__init__(stream, topic, **options)

    @property
    def held(self) -> int:
        """Packets held back until a keyframe (after a missed one, or while nobody was reached)."""
        return int(self._gate.held)

    def _want_keyframe(self) -> None:
        if self.encoder is not None:
            self.encoder.request_keyframe()

    def _label(self) -> str:
        return f"-> ros2 {self.topic} ({self.settings.codec})"

    def _setup(self) -> None:
        # The encoder stage checks the source (uint8, even sizes, 1/3/4 channels) and raises
        # before anything is declared; it creates the packet stream that is read here.
        enc = self.encoder = EncoderStage(self.stream_name, self.settings, "latest")
        try:
            src = self._src = _stream.open(enc.packet_name, mode="lossless", device="cpu")
            src.set_role("bridge out", self._label())
            self._label_shown = self._label()
            self._open_session()
            self._pub = declare_publisher(self._zsession, self.key, self.qos)
            self._declare_tokens()
            self._joins = self._zsession.liveliness().declare_subscriber(f"{rmw.ADMIN_SPACE}/{self.domain}/**", self._on_token)
            enc.start()
        except BaseException:
            self.encoder = None
            enc.stop()
            raise
        self.state = "running"
        self._tick(time.monotonic())

    def _on_token(self, sample: Any) -> None:
        """A new subscription to this topic: the next picture is a keyframe (Zenoh thread)."""
        import zenoh

        if sample.kind != zenoh.SampleKind.PUT:
            return
        try:
            tok = rmw.parse_token(str(sample.key_expr))
        except ValueError:
            return
        # Any type: a framebus subscriber announces sensor_msgs/msg/Image until its first message.
        if tok.kind == "MS" and tok.topic == self.topic:
            self.joined += 1
            self._want_keyframe()

    def _loop(self) -> None:
        src, reach, enc = self._src, self._reach, self.encoder
        assert reach is not None and enc is not None  # _setup made them
        fmt = FORMATS[self.settings.codec]
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= self._next_tick:
                self._tick(now)
            if enc.error is not None:
                raise enc.error
            try:
                frame = src.wait_view(timeout=SLICE_S)
            except TimeoutError:
                continue
            except StreamEndedError:  # the raw writer ended its stream: wait for it to write again
                self.state = "source ended"
                self._stop.wait(SLICE_S)
                continue
            with frame:
                data, meta, ts = bytes(memoryview(frame)), bytes(frame.meta), frame.timestamp_ns
            h = codec.unpack_header(meta)
            if not data or h is None:
                continue  # an encoder run's flush marker
            if not reach.now() and not self.matched:  # nobody to send to: the next one sent is a keyframe
                self._gate.left(_TOPIC)
                self._unsent()
                continue
            if not self._gate.admit(_TOPIC, h):
                self._unsent()
                continue
            msg = pack_video(self._sets.complete(data, h.key), ts, self.frame_id, fmt)
            self.sequence += 1
            self._pub.put(msg, attachment=rmw.pack_attachment(self.sequence, time.time_ns(), self.gid))
            self.state = "running"
            self.frames += 1
            self.bytes += h.width * h.height * h.channels
            self.wire_bytes += len(msg)
            self.last_seq = h.index + 1

    def _cleanup(self) -> None:
        if self._joins is not None:
            self._joins.undeclare()
            self._joins = None
        super()._cleanup()
        enc, self.encoder = self.encoder, None
        if enc is not None:
            enc.stop()
