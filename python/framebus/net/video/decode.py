"""The subscribing half of an encoded bridge.

Any engine's subscriber writes the publisher's packets into a local packet stream
``LOCAL.CODEC``; :class:`DecoderStage` reads that stream in order (as a lossless reader: a
slow decoder holds the subscriber back, and the publisher then skips it to the next keyframe) and writes each decoded picture into the raw stream ``LOCAL`` with the source frame's
timestamp, frame_id and metadata, so local readers see an ordinary stream of the source's
shape and dtype. It decodes only from a keyframe on and only unbroken runs of packets: a
packet that was missed (the ring moved on, the publisher skipped it, a reconnect) makes it skip
to the next keyframe, counting what it skipped, so no picture is ever decoded from missing
references. :class:`DecodedFrames` is the subscriber's payload for it, over any engine's
transport: it starts a decoder stage when the publisher's WELCOME says it sends encoded packets
and hands it a reader of each packet stream the subscriber creates.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ... import _stream
from ...media import codec as video
from ...errors import StreamEndedError, StreamTimeoutError
from ..link import SLICE_S, TICK_S, BridgeStats, local_stream
from ..wire import ProtocolError, SpecMismatchError
from .encode import packet_stream_name


class DecoderStage:
    """Packet stream -> raw stream, on its own thread."""

    def __init__(self, packet_name: str, raw_name: str, codec: str, *, slots: Optional[int] = None, expect_shape: Any = None) -> None:
        self.packet_name = packet_name
        self.raw_name = raw_name
        self.codec = codec
        self.slots = slots
        self.expect_shape = expect_shape
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"framebus-decode-{raw_name}", daemon=True)
        self._dec: Optional[video.PictureDecoder] = None
        self._geometry: Optional[Tuple[int, int, int]] = None
        self._last: Optional[Tuple[int, int]] = None
        self._raw: Any = None
        self._owned = False
        self._meta_capacity = 256
        self._lock = threading.Lock()
        self._wake = threading.Event()  # a handle was attached, or stop()
        self._pending: Any = None
        self.error: Optional[BaseException] = None
        #: Pictures decoded into the raw stream; packets skipped (missed references, waiting
        #: for a keyframe, undecodable); whether the first picture came from a keyframe.
        self.pictures = self.skipped = 0
        self.first_from_keyframe: Optional[bool] = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, unlink: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)
        raw, self._raw = self._raw, None
        if raw is not None:
            if unlink and self._owned:
                try:
                    raw.unlink()
                    return
                except Exception:  # noqa: BLE001 - already gone
                    pass
            raw.close()

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the subscriber
            self.error = exc

    def attach(self, handle: Any) -> None:
        """Hands over a lossless reader of the packet stream, opened before its first packet is
        written (by the subscriber, whenever it creates that stream); replaces the one before."""
        with self._lock:
            self._pending = handle
        self._wake.set()

    def _run(self) -> None:
        pk: Any = None
        try:
            while not self._stop.is_set():
                with self._lock:
                    handle, self._pending = self._pending, None
                if handle is not None:
                    if pk is not None:
                        pk.close()
                    pk = handle
                    self._meta_capacity = max(16, pk.meta_capacity - video.HEADER_BYTES)
                if pk is None:
                    self._wake.wait(SLICE_S)
                    self._wake.clear()
                    continue
                try:
                    frame = pk.wait_view(SLICE_S)
                except StreamEndedError:
                    if self._raw is not None and not self._raw.ended:
                        self._raw.end()
                    self._stop.wait(SLICE_S)
                    continue
                except TimeoutError:
                    continue
                with frame:
                    data, meta, ts, fid = bytes(memoryview(frame)), bytes(frame.meta), frame.timestamp_ns, frame.frame_id
                self._packet(data, meta, ts, fid)
        finally:
            if pk is not None:
                pk.close()
            with self._lock:
                if self._pending is not None:
                    self._pending.close()
                    self._pending = None

    def _packet(self, data: bytes, meta: bytes, ts: int, fid: int) -> None:
        h = video.unpack_header(meta)
        if h is None or not data:
            self.skipped += 1
            return
        if not h.key and self._last != (h.session, h.index - 1):
            self._last = None  # broken run: wait for the next keyframe
            self.skipped += 1
            return
        geometry = (h.width, h.height, h.channels)
        if self._dec is None or (h.key and geometry != self._geometry):
            self._dec, self._geometry = video.PictureDecoder(self.codec), geometry
        try:
            pictures = self._dec.decode(data, h.channels)
        except ValueError:
            self._last = None
            self.skipped += 1
            return
        self._last = (h.session, h.index)
        for array in pictures:
            if self.first_from_keyframe is None:
                self.first_from_keyframe = h.key
            self._write(array, ts, fid, meta[video.HEADER_BYTES:])

    def _write(self, array: Any, ts: int, fid: int, meta: bytes) -> None:
        raw = self._raw
        if raw is None or raw.shape != array.shape:
            raw = self._open_raw(array.shape)
        while not self._stop.is_set():
            try:
                raw.write(array, frame_id=fid, meta=meta, timestamp_ns=ts, timeout=TICK_S)
                self.pictures += 1
                return
            except StreamTimeoutError:
                continue  # local lossless readers hold us back

    def _open_raw(self, shape: Tuple[int, ...]) -> Any:
        if self.expect_shape is not None and tuple(shape) != tuple(self.expect_shape):
            raise SpecMismatchError(f"the publisher's pictures have shape {tuple(shape)}; this subscriber expects {tuple(self.expect_shape)}")
        if self._raw is not None:
            self.stop_raw()
        # The same rule as for a raw bridge's local stream: a stream left by a subscriber that
        # died (readers still attached) is taken over, not replaced, so its readers go on.
        raw, owned = local_stream(self.raw_name, tuple(shape), np.dtype(np.uint8), self.slots or 4, self._meta_capacity)
        raw.set_role("bridge in", f"decoded {self.codec}")
        self._raw, self._owned = raw, owned
        return raw

    def stop_raw(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            if self._owned:
                raw.unlink()
            else:
                raw.close()


class DecodedFrames:
    """A subscriber's payload that decodes an encoded publisher's packets into ``raw_stream``
    (a ``SubscriberPayload``, see ``framebus.net.ends``); from a raw publisher, frames go
    through as they are. ``slots``/``keep``/``expect_shape``/``expect_dtype`` are the
    subscriber's options, which then apply to the decoded pictures."""

    def __init__(self, raw_stream: str, *, slots: Optional[int] = None, keep: bool = False, expect_shape: Any = None, expect_dtype: Any = None) -> None:
        self.raw_stream = raw_stream
        self.slots = slots
        self.keep = keep
        self.expect_shape = expect_shape
        self.expect_dtype = expect_dtype
        self.decoder: Optional[DecoderStage] = None

    def welcome(self, body: Dict[str, Any], endpoint: str) -> Optional[str]:
        info = body.get("video")
        if not isinstance(info, dict) or self.decoder is not None:
            return None
        codec = info.get("codec")
        if codec not in video.CODECS:
            raise ProtocolError(f"the publisher at {endpoint} sends {codec!r} packets, which this framebus cannot decode")
        video._av()  # ImportError with the install command, before anything is created
        if self.expect_dtype is not None and str(self.expect_dtype) != "uint8":
            raise SpecMismatchError(f"the publisher at {endpoint} sends {codec} video (uint8 pictures); this subscriber expects dtype {self.expect_dtype}")
        self.decoder = DecoderStage(packet_stream_name(self.raw_stream, codec), self.raw_stream, codec, slots=self.slots, expect_shape=self.expect_shape)
        self.decoder.start()
        return self.decoder.packet_name

    def stream_made(self, name: str) -> None:
        if self.decoder is not None:
            # The decoder reads every packet in order (lossless): a slow decoder holds the
            # subscriber back, so the publisher skips it to the next keyframe.
            self.decoder.attach(_stream.open(name, mode="lossless"))

    def check(self) -> None:
        if self.decoder is not None and self.decoder.error is not None:
            raise self.decoder.error

    def stop(self) -> None:
        if self.decoder is not None:
            self.decoder.stop(unlink=not self.keep)

    def stats(self, s: BridgeStats) -> BridgeStats:
        if self.decoder is None:
            return s
        return dataclasses.replace(s, stream=self.raw_stream, dropped=s.dropped + self.decoder.skipped)

    def record(self, record: Dict[str, Any]) -> Dict[str, Any]:
        if self.decoder is not None:
            record["stream"] = self.raw_stream
            record["video"] = {"codec": self.decoder.codec, "pictures": self.decoder.pictures, "skipped": self.decoder.skipped}
        return record
