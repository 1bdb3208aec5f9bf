"""The subscribing end: receives frames from a publisher into a local stream.

One class for every engine and every payload, importing neither engine: it is given a
transport (an engine's ``SubscribeTransport``, see ``framebus.net.engine.contract``) and a
payload (``RawReceiving``, or the decoding one of ``framebus.net.video``, which turns an
encoded publisher's packets into pictures).

Over ZeroMQ, a DEALER socket connects to the publisher's ROUTER and says HELLO with its window; the
publisher answers WELCOME (mode and spec) and then sends frames, at most ``window`` ahead of
the ACKs this end sends: in lossless mode once the frame is in the local stream, in latest mode
as soon as it has arrived (so the next frame is already on its way while this one is stored;
of the frames waiting in ZeroMQ's queue only the newest is stored, the rest count as dropped).
The local stream is created from the publisher's spec and re-created when that spec changes.
Frames go straight from ZeroMQ's receive buffer into a slot (one copy, by write(); compressed
frames are decompressed into a loaned slot) and keep the source's sequence number, timestamp,
frame_id and metadata. When the publisher goes quiet for ``peer_timeout`` this end keeps saying HELLO until a
publisher (the same or a restarted one) answers. When the source's writer ends its stream (``end()``,
or closing its handle), the publisher sends END after the last frame and this end ends the local
stream, so its readers get every frame and then StreamEndedError; the next frame (a restarted
producer) starts it again.
"""

from __future__ import annotations

import secrets
import socket as _socket
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ... import _native
from ..._convert import normalize_dtype, normalize_shape
from ...errors import InvalidArgumentError, InvalidFrameError, StreamTimeoutError
from ..engine import SubscribeTransport, registry
from ..link import SLICE_S, TICK_S, Bridge, BridgeStats, local_stream
from ..wire import PeerTimeoutError, ProtocolError, SpecMismatchError, codec, heap, protocol as P
from .options import SubscribeOptions
from .payload import RawReceiving, SubscriberPayload

#: Decompress straight into a loaned slot (tests turn this off to cover the other path).
USE_LOANS = True

#: Seconds before a HELLO that could not be queued is tried again (doubling up to SLICE_S): a
#: subscriber started just now says HELLO before its connection is up, and the answer to the
#: retry is what a late joiner waits for.
HELLO_RETRY_S = 0.002


class Subscriber(Bridge):
    """Receives a remote stream into a local one over any engine; see ``framebus.net.subscribe``.

    ``Subscriber(endpoint, local_name, options)`` makes it with the transport of the engine
    that ``options.engine_options`` belong to (default: ZeroMQ), decoding an encoded
    publisher's packets unless ``options.packets``; ``transport=`` and ``payload=`` give them
    instead. Start it with ``framebus.net.subscribe`` (or ``_start()``)."""

    role = "subscribe"

    def __init__(self, endpoint: str, local_name: str, options: SubscribeOptions = SubscribeOptions(), *,
                 transport: Optional[SubscribeTransport] = None, payload: Optional[SubscriberPayload] = None) -> None:
        if not isinstance(local_name, str):
            raise TypeError(f"local_name must be a str, got {local_name!r}")
        if not isinstance(options, SubscribeOptions):
            raise TypeError(f"options must be a framebus.net.SubscribeOptions, got {type(options).__name__}")
        if transport is None:
            chosen = registry.owner(options.engine_options) or registry.engine(None)
            transport = chosen.transport("subscribe", options.engine_options)
        #: The engine's transport (see ``framebus.net.engine.contract``).
        self.carrier: SubscribeTransport = transport
        self.options = options
        self.hwm = options.hwm
        self.expect_shape = None if options.shape is None else normalize_shape(options.shape)
        self.expect_dtype = None if options.dtype is None else normalize_dtype(options.dtype)
        self.slots = options.slots
        self.timeout = options.timeout
        self.heartbeat_ivl = options.heartbeat_ivl
        self.peer_timeout = options.peer_timeout
        self.identity = options.identity or f"{_socket.gethostname()}/{local_name}".encode()[:255]
        self.keep = bool(options.keep)
        self.tune_malloc = bool(options.tune_malloc)
        #: Whether glibc keeps ZeroMQ's receive buffers for this stream's frames in the heap.
        self.heap_reserved = False
        super().__init__(local_name, self._check_endpoint(endpoint), options.mode, options.status)
        #: The local stream the user asked for (a decoding subscriber writes packets elsewhere).
        self.raw_stream = local_name
        if payload is None:
            payload = RawReceiving() if options.packets else _decoding(local_name, options, self.expect_shape, self.expect_dtype)
        #: What this subscriber does with what it receives (``framebus.net.video`` decodes).
        self.payload: SubscriberPayload = payload
        self.requested_mode = options.mode
        self._sock: Any = None  # the engine's transport once set up (see the module's docstring)
        self._stream: Any = None
        self._owned = False
        self._decompressor: Optional[codec.Decompressor] = None
        self.epoch: Any = 0
        self.connected = False
        self.publisher_host = ""
        self._source_id = 0
        #: Added to the source's sequence numbers when the local stream is already past them (a
        #: restarted source numbers from 1 again; a kept local stream has frames of an earlier run).
        self.seq_offset = 0
        self._offset_key: Any = None
        #: Latest mode: the newest frame of the batch being received, stored after the batch.
        self._newest: Optional[Tuple[P.FrameHeader, Any]] = None
        self._heard = 0.0
        self._said = 0.0
        self._hello_at = 0.0
        self._hello_retry = HELLO_RETRY_S
        self._session = secrets.token_hex(8)
        #: Whether the publisher said its source was ended (and no frame came since).
        self.source_ended = False
        #: Latest mode: store only the newest of the frames waiting (False for encoded packets,
        #: where each one is needed; set from the publisher's WELCOME).
        self.coalesce = True
        #: The codec of the packets an encoded publisher sends (from its WELCOME), else None.
        self.packet_codec: Optional[str] = None

    # -- the engine and the payload --------------------------------------------------------
    @property
    def engine(self) -> str:
        """The engine's name ("zmq", "zenoh")."""
        return self.carrier.name

    @property
    def decoder(self) -> Any:
        """The decoder stage once an encoded publisher's packets are being decoded
        (``pictures``, ``skipped``, ``first_from_keyframe``), else None."""
        return self.payload.decoder

    def reach_note(self) -> str:
        """A clause for the line printed when the subscriber stops: with Zenoh, that its session
        never reached a router or peer; else ""."""
        return self.carrier.reach_note(self.frames)

    def no_answer(self, timeout: Optional[float] = None) -> str:
        """Why no publisher answered within ``timeout`` seconds (default: the subscriber's own
        ``timeout``), and what to check."""
        return self.carrier.no_answer(self.endpoint, self.timeout if timeout is None else timeout)

    def _shown_state(self) -> str:
        return self.carrier.state(self.state)

    def _check_endpoint(self, endpoint: Any) -> str:
        """``endpoint`` if the transport can connect to it, else EndpointError."""
        return self.carrier.check_endpoint(endpoint)

    def _open_transport(self) -> Any:
        """Opens the transport's channel to the publisher."""
        return self.carrier.open(self.endpoint, self.identity)

    @property
    def stats(self) -> BridgeStats:
        """A snapshot of the counters (see :class:`BridgeStats`); for decoded video ``dropped``
        also counts the packets the decoder skipped (waiting for a keyframe after a missed
        packet)."""
        return self.payload.stats(super().stats)

    def _record(self) -> Dict[str, Any]:
        return self.payload.record(super()._record())

    # -- set-up and tear-down ----------------------------------------------------------------
    def _setup(self) -> None:
        self._sock = self._open_transport()
        self.state = "connecting"
        if self.timeout is None:
            return
        deadline = time.monotonic() + self.timeout
        while not self.connected:
            now = time.monotonic()
            if now >= deadline:
                raise PeerTimeoutError(self.no_answer())
            self._maybe_hello(now)
            self._receive(min(self._until_hello(), deadline - now), until_connected=True)

    def _cleanup(self) -> None:
        try:
            self.payload.stop()
        finally:
            sock = self._sock
            try:
                if sock is not None:
                    if self.connected:
                        self._say(P.prefix(P.BYE))
                    self._sock = None
                    sock.close()
            finally:
                self.carrier.close()
            self._drop_stream(unlink=self._owned and not self.keep)

    def _peer_count(self) -> int:
        return int(self.connected)

    # -- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= self._next_tick:
                self._tick(now)
            elif not self.connected:
                # HELLO keeps its own schedule while no publisher has answered (not the tick's,
                # every TICK_S): a HELLO the transport could not queue yet is retried at once.
                self._maybe_hello(now)
            self._receive(SLICE_S if self.connected else self._until_hello())

    def _tick(self, now: float) -> None:
        self.payload.check()
        self._next_tick = now + min(TICK_S, self.heartbeat_ivl / 2)
        if self.connected and now - self._heard > self.peer_timeout:
            self.connected = False
            self.state = "reconnecting"
        self._maybe_hello(now)
        if self.connected and now - self._said >= self.heartbeat_ivl:
            self._say(P.prefix(P.HEARTBEAT))
        if now - self._rate_at >= TICK_S:
            self._tick_rates(now)

    def _until_hello(self) -> float:
        """Seconds to wait for a message before the next HELLO is due (at most SLICE_S)."""
        return min(SLICE_S, max(0.0, self._hello_at - time.monotonic()))

    def _maybe_hello(self, now: float) -> None:
        """Says HELLO while no publisher has answered: at once, then every heartbeat_ivl. One
        the transport could not queue (the connection is still being made) is tried again
        after HELLO_RETRY_S, doubling up to SLICE_S."""
        if self.connected or now < self._hello_at:
            return
        body = {
            "window": self.hwm, "mode": self.requested_mode, "last_seq": self.last_seq, "source_id": self._source_id,
            "name": self.stream_name, "host": _socket.gethostname(), "session": self._session,
        }
        # A HELLO that could not be queued (no connection yet) is retried soon.
        if self._say(P.pack_json(P.HELLO, body)):
            self._hello_at, self._hello_retry = now + self.heartbeat_ivl, HELLO_RETRY_S
        else:
            self._hello_at, self._hello_retry = now + self._hello_retry, min(SLICE_S, 2 * self._hello_retry)

    def _say(self, msg: bytes) -> bool:
        if not self._sock.send(msg):
            return False
        self._said = time.monotonic()
        return True

    def _receive(self, timeout: float, *, until_connected: bool = False) -> None:
        """Waits up to ``timeout`` s for a message and handles what has arrived (only up to
        the WELCOME when ``until_connected``: frames are left for the loop, so subscribe()
        returns before any local backpressure can hold it)."""
        sock = self._sock
        if not sock.poll(max(0, int(timeout * 1000))):
            return
        self._newest = None
        try:
            for _ in range(64):
                parts = sock.recv()
                if parts is None:
                    return
                self._heard = time.monotonic()
                self._handle(parts)
                if self._stop.is_set() or (until_connected and self.connected):
                    return
        finally:
            # Latest mode: of the frames that were waiting, only the newest is stored.
            newest, self._newest = self._newest, None
            if newest is not None and not self._stop.is_set():
                self._accept(*newest)

    def _handle(self, parts: Any) -> None:
        first = parts[0].buffer
        version, kind, _ = P.peek(first)
        if kind == P.REFUSE:
            code, reason = P.unpack_refuse(first)
            raise (SpecMismatchError if code == P.REFUSE_MODE else ProtocolError)(f"the publisher at {self.endpoint} refused this subscriber: {reason}")
        if version != P.VERSION:
            raise ProtocolError(f"the publisher at {self.endpoint} speaks framebus bridge protocol {version}, this end {P.VERSION}; install the same framebus version on both ends")
        if kind == P.FRAME:
            if len(parts) != 2:
                raise ProtocolError(f"a frame message from {self.endpoint} has {len(parts)} parts, expected 2")
            if self.connected:
                self._frame(P.unpack_frame(first), parts[1])
        elif self._newest is not None:
            # A control message after frames of a batch: store the newest frame first.
            newest, self._newest = self._newest, None
            self._accept(*newest)
            self._handle(parts)
            return
        elif kind == P.WELCOME:
            self._welcome(P.unpack_json(first))
        elif kind == P.END:
            if self.connected:
                self._end(*P.unpack_end(first))
        elif kind == P.RESET:
            self.connected = False
            self._hello_at = 0.0
            self._maybe_hello(time.monotonic())
        elif kind == P.BYE:
            self.connected = False
            self.state = "publisher stopped; waiting for it to return"
            self._hello_at = time.monotonic() + self.heartbeat_ivl

    def _welcome(self, body: Dict[str, Any]) -> None:
        packets = self.payload.welcome(body, self.endpoint)
        if packets is not None:
            # The payload decodes: the packets go into its stream, and what was asked of the
            # frames (shape, dtype, keep) applies to its pictures.
            self.stream_name = packets
            self.expect_shape = self.expect_dtype = None
            self.keep = False
        mode = body.get("mode")
        if mode not in ("latest", "lossless"):
            raise ProtocolError(f"the publisher at {self.endpoint} announced an unknown mode {mode!r}")
        if self.requested_mode not in (None, mode):
            raise SpecMismatchError(f"the publisher at {self.endpoint} runs in {mode} mode; this subscriber asked for {self.requested_mode}")
        epoch = body.get("epoch")
        if self.epoch and epoch != self.epoch:
            self.reconnects += 1
        self.epoch, self.mode, self.connected = epoch, mode, True
        video = body.get("video")
        self.coalesce = not video
        named = video.get("codec") if isinstance(video, dict) else None
        self.packet_codec = named if isinstance(named, str) else None
        self.publisher_host = str(body.get("host", ""))
        if body.get("compress") == "zstd" and self._decompressor is None:
            self._decompressor = codec.Decompressor()
        spec = body.get("spec")
        if isinstance(spec, dict):
            self._ensure_stream((str(spec["dtype"]), tuple(int(d) for d in spec["shape"])), int(spec["slots"]), int(spec["meta_capacity"]))
        self.state = "running" if self._stream is not None else "waiting for the publisher's source"

    def _end(self, source_id: int, seq: int) -> None:
        """The source was ended after its frame ``seq``: every frame before END is stored (they
        come first on the connection), so end the local stream; its readers get each frame they
        have not read, then StreamEndedError."""
        self.source_ended = True
        if self._stream is not None:
            self._stream.end()
            self.state = "source ended"

    # -- frames ------------------------------------------------------------------------------
    def _frame(self, h: P.FrameHeader, payload: Any) -> None:
        if h.source_id == self._source_id and h.seq <= self.last_seq:
            self.duplicates += 1  # sent again after a reconnect, and already written
            self._say(P.pack_ack(h.source_id, h.seq))
            return
        if self.mode == "latest":
            # Acknowledged on arrival: the publisher sends the next frame while this one is
            # stored. A newer frame arriving in the same batch replaces it (see _receive),
            # unless each frame is needed (encoded packets: coalesce is False).
            self._say(P.pack_ack(h.source_id, h.seq))
            if self.coalesce:
                self._newest = (h, payload)
                return
        self._accept(h, payload)

    def _accept(self, h: P.FrameHeader, payload: Any) -> None:
        """Stores one frame in the local stream and does the bookkeeping (lossless: then acks)."""
        self._ensure_stream(h.spec, h.slots, h.meta_capacity)
        s = self._stream
        if s.variable:
            if not 0 < h.nbytes <= s.size + _native.FRAME_TABLE_BYTES:
                raise ProtocolError(f"frame {h.seq} from {self.endpoint} carries {h.nbytes} bytes; a frame of capacity {s.size} holds at most {s.size + _native.FRAME_TABLE_BYTES}")
        elif h.nbytes != s.size:
            raise ProtocolError(f"frame {h.seq} from {self.endpoint} carries {h.nbytes} bytes; its spec {h.spec} takes {s.size}")
        data = payload.buffer
        if not h.flags & P.F_ZSTD and len(data) != h.nbytes:
            raise ProtocolError(f"frame {h.seq} from {self.endpoint} has a {len(data)}-byte payload, expected {h.nbytes}")
        if not self._store(h, data):
            return
        if h.source_id == self._source_id and self.last_seq and h.seq > self.last_seq + 1:
            self.dropped += h.seq - self.last_seq - 1
        self._source_id, self.last_seq = h.source_id, h.seq
        if self.source_ended:  # a frame after the end: the write cleared the local end too
            self.source_ended = False
            self.state = "running"
        self.frames += 1
        self.bytes += h.nbytes
        self.wire_bytes += len(data)
        if self.mode != "latest":
            self._say(P.pack_ack(h.source_id, h.seq))

    def _local_seq(self, h: P.FrameHeader) -> int:
        """The sequence number the frame gets here: the source's own, shifted (for the rest of
        that source's frames) when the local stream is already past it."""
        s = self._stream
        key = (h.source_id, id(s))
        if key != self._offset_key:
            self._offset_key, self.seq_offset = key, 0
        seq = h.seq + self.seq_offset
        newest = s.write_sequence
        if seq <= newest:
            self.seq_offset = newest + 1 - h.seq
            seq = newest + 1
        return seq

    def _store(self, h: P.FrameHeader, data: memoryview) -> bool:
        """Writes one frame into the local stream, waiting (with heartbeats) while local
        lossless readers hold it back. False if stopped meanwhile."""
        s = self._stream
        while not self._stop.is_set():
            seq = self._local_seq(h)
            try:
                if USE_LOANS and h.flags & P.F_ZSTD and not s.variable:
                    loan = s.loan(TICK_S, frame_id=h.frame_id, meta=h.meta, timestamp_ns=h.timestamp_ns, seq=seq)
                    with loan as arr:
                        self._decompress(data, arr.reshape(-1).view(np.uint8).data)
                else:
                    self._write(s, h, data, seq)
                return True
            except InvalidArgumentError:
                if s.write_sequence < seq:
                    raise
                continue  # another writer of the local stream took that number: take the next
            except StreamTimeoutError:
                now = time.monotonic()
                self._heard = now  # we are not reading; do not count that as the publisher's silence
                if now - self._said >= self.heartbeat_ivl:
                    self._say(P.prefix(P.HEARTBEAT))
        return False

    def _decompress(self, data: memoryview, out: memoryview) -> None:
        if self._decompressor is None:
            self._decompressor = codec.Decompressor()
        try:
            self._decompressor.decompress_into(data, out)
        except ValueError as exc:
            raise ProtocolError(f"frame from {self.endpoint}: {exc}") from None

    def _write(self, s: Any, h: P.FrameHeader, data: memoryview, seq: int) -> None:
        """One copy through write(), straight from the transport's buffer (GIL released, streaming
        stores for large frames: faster than filling a loan with NumPy)."""
        if s.variable:
            if h.flags & P.F_PACKET:  # an encoded packet without its table
                s.write(data, codec=self.packet_codec, frame_id=h.frame_id, meta=h.meta, timeout=TICK_S, timestamp_ns=h.timestamp_ns, seq=seq)
                return
            raw: Any = data
            if h.flags & P.F_ZSTD:
                raw = bytearray(h.nbytes)
                self._decompress(data, memoryview(raw))
            try:
                s._write_raw(raw, frame_id=h.frame_id, meta=h.meta, timeout=TICK_S, timestamp_ns=h.timestamp_ns, seq=seq)
            except InvalidFrameError as exc:
                raise ProtocolError(f"frame {h.seq} from {self.endpoint}: {exc}") from None
            return
        if h.flags & P.F_ZSTD:
            buf = np.empty(s.shape, s.dtype)
            self._decompress(data, buf.reshape(-1).view(np.uint8).data)
        else:
            buf = np.frombuffer(data, s.dtype).reshape(s.shape)
        s.write(buf, frame_id=h.frame_id, meta=h.meta, timeout=TICK_S, timestamp_ns=h.timestamp_ns, seq=seq)

    # -- the local stream --------------------------------------------------------------------
    def _ensure_stream(self, spec: Tuple[str, Tuple[int, ...]], slots: int, meta_capacity: int) -> None:
        """Makes the local stream match ``spec``: keeps it, creates it, or replaces it (only a
        stream this bridge owns). SpecMismatchError when the spec is not what was asked for."""
        s = self._stream
        if s is not None and P.spec_of(s) == spec and s.meta_capacity >= meta_capacity:
            return
        dtype, shape = spec
        variable = dtype == P.VARIABLE
        try:
            dt = np.dtype(np.uint8 if variable else dtype)
        except TypeError:
            raise ProtocolError(f"the publisher at {self.endpoint} sent an unknown dtype {dtype!r}") from None
        if variable and (len(shape) != 1 or shape[0] <= 0):
            raise ProtocolError(f"the publisher at {self.endpoint} sent a variable-shape spec of capacity {shape}")
        if variable and (self.expect_shape is not None or self.expect_dtype is not None):
            raise SpecMismatchError(
                f"the publisher at {self.endpoint} sends a variable-shape stream (each frame has its own shape and dtype, "
                f"capacity {shape[0]} bytes); this subscriber expects shape {self.expect_shape or 'any'} and dtype {self.expect_dtype or 'any'}"
            )
        if (self.expect_shape is not None and tuple(shape) != self.expect_shape) or (self.expect_dtype is not None and dt != self.expect_dtype):
            raise SpecMismatchError(
                f"the publisher at {self.endpoint} sends frames of shape {tuple(shape)} and dtype {dt}; "
                f"this subscriber expects shape {self.expect_shape or 'any'} and dtype {self.expect_dtype or 'any'}"
            )
        if s is not None:
            if not self._owned:
                raise SpecMismatchError(
                    f"the publisher's frames changed to shape {tuple(shape)} dtype {dt}, but the local stream {self.stream_name!r} "
                    f"(shape {s.shape}, dtype {s.dtype}) was not created by this bridge, so it is not replaced"
                )
            self._drop_stream(unlink=True)
            self.spec_changes += 1
        self._stream, self._owned = self._make_stream(shape, dt, self.slots or max(2, slots), meta_capacity, variable)
        self._stream.set_role("bridge in", f"<- {self.endpoint}")
        self.payload.stream_made(self.stream_name)
        if self.tune_malloc:
            # Frames in flight (the window) plus the one being stored and the one arriving.
            self.heap_reserved = heap.reserve(self._stream.size, self.hwm + 2)
        self.state = "running"

    def _make_stream(self, shape: Tuple[int, ...], dt: np.dtype, slots: int, meta_capacity: int, variable: bool = False) -> Tuple[Any, bool]:
        return local_stream(self.stream_name, shape, dt, slots, meta_capacity, variable)

    def _drop_stream(self, *, unlink: bool) -> None:
        s, self._stream = self._stream, None
        if s is None:
            return
        if unlink:
            try:
                s.unlink()
            except Exception:  # noqa: BLE001 - already gone or replaced: nothing to remove
                s.close()
        else:
            s.close()



def _decoding(local_name: str, options: SubscribeOptions, shape: Any, dtype: Any) -> SubscriberPayload:
    """The payload that decodes an encoded publisher's packets into ``local_name`` (and lets a
    raw publisher's frames through); PyAV is imported when a WELCOME says there is video."""
    from ..video import DecodedFrames

    return DecodedFrames(local_name, slots=options.slots, keep=options.keep, expect_shape=shape, expect_dtype=dtype)
