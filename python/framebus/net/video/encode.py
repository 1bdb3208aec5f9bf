"""The publishing half of an encoded bridge.

:class:`EncoderStage` reads a raw stream as any reader does (latest mode: a slow encoder skips
pictures; lossless: it holds the raw writer back; a device stream without a CPU mirror is
downloaded, see ``framebus._host_read``) and writes one packet per picture into the
packet stream ``NAME.CODEC`` (a variable-shape stream of byte frames with ``codec=``; each
packet keeps the picture's timestamp, frame_id and metadata, behind a small header, see
``video.PacketHeader``). :class:`EncodedFrames` is the publisher's payload for it: the
publisher (over any engine's transport) reads that packet stream, and the keyframe gate makes
each subscriber start with a keyframe, forced for it when it joins.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from typing import Any, Dict, Optional, Tuple

from ... import _stream
from ..._host_read import host_view, host_wait_view, open_for_host
from ...media import codec as video
from ...errors import InvalidArgumentError, StreamEndedError, StreamExistsError, StreamNotFoundError, StreamTimeoutError
from ...info import stat as _stat
from ..link import SLICE_S, TICK_S
from ..wire import BridgeError


def packet_stream_name(name: str, codec: str) -> str:
    """The packet stream of raw stream ``name`` encoded with ``codec``."""
    return f"{name}.{codec}"


class EncoderStage:
    """Raw stream -> packet stream, on its own thread. The constructor checks the source and
    creates the packet stream (raising for bad input); ``start()``/``stop()`` run the thread."""

    #: Slots of the packet stream.
    SLOTS = 8

    def __init__(self, source: str, settings: video.VideoSettings, mode: str) -> None:
        self.source = source
        self.settings = settings
        self.mode = mode
        src = open_for_host(source, mode=mode)  # a device stream: its CPU mirror, else downloaded
        try:
            self.height, self.width, self.channels = _geometry(source, src, settings.drop_alpha)
            self.encoder_name = video.pick_encoder(settings)
            self.packet_name = packet_stream_name(source, settings.codec)
            # Room for a packet: half a raw picture, and (for rate-capped encoders, whose
            # buffer holds 1/8 s) at most one second of the bitrate: small rings are quick to
            # create on each side, which a joining subscriber waits for.
            capacity = src.size // 2 if settings.codec == "mjpeg" else min(src.size // 2, settings.bitrate // 8)
            capacity = max(256 * 1024, capacity)
            try:
                self._out = _stream.create(self.packet_name, capacity=capacity, slots=self.SLOTS, meta_capacity=src.meta_capacity + video.HEADER_BYTES)
            except StreamExistsError:
                if _stat(self.packet_name).creator_alive:
                    raise StreamExistsError(
                        17, f"stream {source!r} is already encoded as {settings.codec} by another publisher (its packet stream "
                        f"{self.packet_name!r} exists): subscribe to that publisher, or stop it first"
                    ) from None
                _stream.unlink(self.packet_name)  # left by a publisher that died: ours now
                self._out = _stream.create(self.packet_name, capacity=capacity, slots=self.SLOTS, meta_capacity=src.meta_capacity + video.HEADER_BYTES)
        except BaseException:
            src.close()
            raise
        self._src_path = _stat(source).path
        self._src_ino = os.stat(self._src_path).st_ino
        self._next_check = 0.0
        src.set_role("bridge out", f"{self.encoder_name} -> {self.packet_name}")
        self._src = src
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"framebus-encode-{source}", daemon=True)
        self._want_key = False
        self._last_forced = -video.KEY_MIN_INTERVAL
        self._enc: Optional[video.PictureEncoder] = None
        self._session = 0
        self._index = 0
        self.error: Optional[BaseException] = None
        #: Pictures encoded, keyframes among them (forced ones counted apart), packet bytes.
        self.pictures = self.keyframes = self.forced_keyframes = self.packet_bytes = 0
        #: Bits per second the encoder put out (over about the last second).
        self.bits_per_s = 0.0
        self._label_at = 0.0
        self._label_bytes = 0

    # -- the thread --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self._src.close()
        try:
            self._out.unlink()
        except Exception:  # noqa: BLE001 - already removed
            self._out.close()

    def request_keyframe(self) -> None:
        """Asks for a keyframe soon (at most one forced every KEY_MIN_INTERVAL s). Any thread."""
        self._want_key = True

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the publisher
            self.error = exc

    def _run(self) -> None:
        # Latest mode: the picture written before we attached is encoded first (a still source
        # is sent too); lossless mode starts with the frames written after.
        current = self.mode == "latest" and self._src.write_sequence > 0
        while not self._stop.is_set():
            src = self._src
            try:
                frame = host_view(src, timeout=0) if current else host_wait_view(src, SLICE_S)
                current = False
            except TimeoutError:
                current = self._follow()
                continue
            except StreamEndedError:
                self._end()
                current = self._follow()
                continue
            with frame:
                now = time.monotonic()
                # The limit counts forced keyframes only: a joiner right after one of the
                # encoder's own (every gop pictures) does not wait for the limit.
                force = self._enc is None or (self._want_key and now - self._last_forced >= video.KEY_MIN_INTERVAL)
                if self._enc is None:
                    self._enc = video.PictureEncoder(self.encoder_name, self.settings, self.width, self.height, self.channels)
                    self._session, self._index = secrets.randbits(32), 0
                packets = self._enc.encode(frame.array, frame.timestamp_ns, force)
                ts, fid, meta = frame.timestamp_ns, frame.frame_id, bytes(frame.meta)
            if force:
                self._want_key = False
                self._last_forced = now
                self.forced_keyframes += 1
            self.pictures += 1
            if now >= self._label_at + 1.0:
                self._label(now)
            for data, key in packets:
                if key:
                    self.keyframes += 1
                self._put(data, key, ts, fid, meta)

    def _label(self, now: float) -> None:
        """What ``framebus top`` shows on this handle's row: encoder, bitrate, keyframe interval."""
        dt = now - self._label_at
        if self._label_at and dt > 0:
            self.bits_per_s = (self.packet_bytes - self._label_bytes) * 8 / dt
        self._label_at, self._label_bytes = now, self.packet_bytes
        self._src.set_role("bridge out", f"{self.encoder_name} {self.bits_per_s / 1e6:.2f} Mbit/s, gop {self.settings.gop}")

    def _follow(self) -> bool:
        """Follows a source that was removed and created again (a restarted producer): opens
        the new one, and starts a new encoder run (a keyframe first) when its pictures come,
        at their size. Checked about every TICK_S while no picture comes. Whether the new
        source has a picture to encode at once."""
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + TICK_S
        try:
            ino = os.stat(self._src_path).st_ino
        except FileNotFoundError:
            return False
        if ino == self._src_ino:
            return False
        try:
            src = open_for_host(self.source, mode=self.mode)
        except (FileNotFoundError, StreamNotFoundError):
            return False
        try:
            geometry = _geometry(self.source, src, self.settings.drop_alpha)
        except InvalidArgumentError:
            src.close()
            raise
        if self._enc is not None:
            for data, key in self._enc.flush():
                self._put(data, key, 0, 0, b"")
            self._enc = None
        self._src.close()
        src.set_role("bridge out", f"{self.encoder_name} -> {self.packet_name}")
        self._src, self._src_ino = src, ino
        self.height, self.width, self.channels = geometry
        return self.mode == "latest" and src.write_sequence > 0

    def _put(self, data: bytes, key: bool, ts: int, fid: int, meta: bytes) -> None:
        # 4-channel pictures (only with drop_alpha) are sent as colour: the decoder makes 3.
        sent = 3 if self.channels == 4 else self.channels
        header = video.pack_header(video.PacketHeader(key, sent, self.width, self.height, self._session, self._index))
        if len(data) > self._out.size:
            raise BridgeError(f"a {len(data)}-byte packet does not fit the packet stream ({self._out.size} bytes); lower the bitrate")
        self._index += 1
        self.packet_bytes += len(data)
        while not self._stop.is_set():
            try:
                self._out.write(data, codec=self.settings.codec, frame_id=fid, meta=header + meta, timestamp_ns=ts, timeout=TICK_S)
                return
            except StreamTimeoutError:
                continue  # lossless: the bridge holds us back

    def _end(self) -> None:
        """The raw writer ended its stream: flush the encoder, end the packet stream; the next
        picture (a restarted producer) starts a new encoder run with a keyframe."""
        if self._enc is not None:
            for data, key in self._enc.flush():
                self._put(data, key, 0, 0, b"")
            self._enc = None
            self._out.end()
        self._stop.wait(SLICE_S)

    def info(self) -> Dict[str, Any]:
        """What ``framebus ls``/``top`` show of the encoder."""
        return {
            "codec": self.settings.codec, "encoder": self.encoder_name, "bitrate": self.settings.bitrate, "gop": self.settings.gop,
            "pictures": self.pictures, "keyframes": self.keyframes, "forced_keyframes": self.forced_keyframes,
            "bits_per_s": round(self.bits_per_s),
        }


def _geometry(name: str, src: Any, drop_alpha: bool) -> Tuple[int, int, int]:
    """(height, width, channels) of the pictures of stream ``src``; InvalidArgumentError for a
    stream an encoder cannot take (4 channels without ``drop_alpha``: no codec here has an
    alpha plane, so the alpha channel would be lost without a word)."""
    shape = tuple(src.shape or ())
    if src.variable or src.dtype is None or str(src.dtype) != "uint8" or len(shape) not in (2, 3):
        raise InvalidArgumentError(
            f"stream {name!r} holds {'variable-shape frames' if src.variable else f'frames of shape {src.shape} dtype {src.dtype}'}; "
            "an encoded bridge takes uint8 images of shape (height, width), (height, width, 3) or (height, width, 4)"
        )
    height, width = shape[:2]
    channels = 1 if len(shape) == 2 else shape[2]
    if channels not in video.PIXEL_FORMATS or height % 2 or width % 2:
        raise InvalidArgumentError(f"stream {name!r} has frames of shape {src.shape}; an encoded bridge takes even widths and heights and 1, 3 or 4 channels")
    if channels == 4 and not drop_alpha:
        raise InvalidArgumentError(
            f"stream {name!r} has 4-channel frames (shape {src.shape}), and video codecs have no alpha plane: an encoded bridge "
            "would lose the 4th channel. Pass drop_alpha=True (framebus bridge publish --drop-alpha) to send the first three "
            "channels only (the subscriber's stream then has shape (height, width, 3)), or publish without encode= to carry all four"
        )
    return height, width, channels


class EncodedFrames:
    """An encoded publisher's payload (a ``PublisherPayload``, see ``framebus.net.ends``): the
    encoder stage before the packet stream, the keyframe gate on each subscriber's join, leave
    and packets, packets sent without their frame table (F_PACKET), and the codec in the
    WELCOME. ``options`` is the publisher's ``PublishOptions`` (``encode`` and its settings);
    the constructor creates the packet stream (raising for bad input). See
    ``framebus.net.publish(encode=)``."""

    def __init__(self, stream_name: str, options: Any) -> None:
        settings = video.VideoSettings.of(options.encode, options.bitrate, options.gop, options.encoder, options.drop_alpha)
        if options.compress is not None:
            raise InvalidArgumentError("compress= does not apply to an encoded bridge (its packets are compressed already); leave it out")
        self.encoder = EncoderStage(stream_name, settings, options.mode)
        self.stream = self.encoder.packet_name
        self.gate = video.KeyframeGate(self.encoder.request_keyframe)
        self._stopped = False

    def start(self) -> None:
        self.encoder.start()

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.encoder.stop()

    def check(self) -> None:
        if self.encoder.error is not None:
            raise self.encoder.error

    def pack(self, frame: Any) -> Optional[bytes]:
        """A packet travels alone (flag F_PACKET), without its frame table (4 KiB, as much as
        a whole packet at low bitrates); the subscriber writes it with the WELCOME's codec."""
        if frame is None or not frame.is_bytes:
            return None
        return bytes(memoryview(frame))

    def admit(self, identity: bytes, meta: bytes) -> bool:
        return bool(self.gate.admit(identity, video.unpack_header(meta)))

    def joined(self, identity: bytes) -> None:
        self.gate.joined(identity)

    def left(self, identity: bytes) -> None:
        self.gate.left(identity)

    def welcome(self) -> Dict[str, Any]:
        return {"video": {"codec": self.encoder.settings.codec, "encoder": self.encoder.encoder_name}}

    def record(self, record: Dict[str, Any]) -> Dict[str, Any]:
        record["video"] = self.encoder.info()
        return record

    def describe(self) -> str:
        return f"{self.encoder.encoder_name} "
