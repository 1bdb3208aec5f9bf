"""The publishing end: follows a local stream and sends its frames to subscribers.

One class for every engine and every payload: it is given a transport (an engine's
``PublishTransport``, see ``framebus.net.engine.contract``: it opens the channel, and says how
it carries a raw frame's bytes) and a payload (``RawFrames``, or an encoded one from
``framebus.net.video``: what the publisher reads and how a frame goes on the wire), and
imports neither engine.

Socket pattern (ZeroMQ's names): ROUTER (bound here) to one DEALER per subscriber, with credit-based flow
control. A subscriber announces a window (HELLO); each frame sent uses one credit and each ACK
(the frame is in the subscriber's stream) returns it. So nothing queues without bound anywhere,
and:

- lossless: the next frame is taken from the source (a lossless reader) only when every known
  subscriber has a credit, which is what stops the source's writer when the slowest subscriber
  falls behind: backpressure from the remote stream to the local writer. Frames sent and not
  acknowledged are kept (pinned in their slots, or as the compressed bytes) and sent again if the
  subscriber reconnects under the same identity;
- latest: the source is read by a latest-mode reader whenever some subscriber has a credit; a
  subscriber without one misses that frame (counted), and the next frame it gets is the newest.

PUB/SUB cannot do the lossless half (a PUB drops at its high-water mark and never blocks) and
PUSH/PULL deals each frame to one puller instead of all subscribers; ROUTER/DEALER with credits
gives fan-out and backpressure, with ZeroMQ's own high-water marks as a second bound.
"""

from __future__ import annotations

import collections
import os
import secrets
import socket as _socket
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from ... import _stream
from ...errors import StreamEndedError, StreamNotFoundError
from ...info import stat as _stat
from ..engine import PublishTransport, registry
from ..link import SLICE_S, TICK_S, Bridge
from ..wire import ProtocolError, codec, protocol as P
from .options import PublishOptions
from .payload import PublisherPayload, RawFrames

#: Use zero-copy views when the stream offers them (tests turn this off to cover the fallback).
USE_VIEWS = True


def _wire_array(src: Any, frame: Any) -> Any:
    """What goes on the wire for a view: the array, or for a variable-shape stream the frame as
    stored (its table, then its arrays), zero-copy."""
    return frame._raw if src.variable else frame.array


class _Peer:
    """A subscriber as the publisher sees it."""

    __slots__ = ("identity", "name", "window", "inflight", "last_heard", "last_sent", "last_sent_seq", "dropped", "unreachable", "told_end")

    def __init__(self, identity: bytes, name: str, window: int, now: float) -> None:
        self.identity = identity
        self.name = name
        self.window = window
        #: (source_id, seq, header, payload) of frames sent and not acknowledged; payload kept
        #: only in lossless mode (to send again after a reconnect), else None.
        self.inflight: Deque[Tuple[int, int, bytes, Any]] = collections.deque()
        self.last_heard = now
        self.last_sent = now
        self.last_sent_seq = 0
        self.dropped = 0
        self.unreachable = False
        #: Whether this subscriber was sent END for the source's current end.
        self.told_end = False

    def ready(self) -> bool:
        return not self.unreachable and len(self.inflight) < self.window

    def ack(self, source_id: int, seq: int) -> None:
        """Frames arrive in order, so an acknowledgement covers every frame sent before the
        acknowledged one (including frames of a source segment that was replaced since)."""
        upto = -1
        for i, entry in enumerate(self.inflight):
            if entry[0] == source_id and entry[1] <= seq:
                upto = i
        for _ in range(upto + 1):
            self.inflight.popleft()


class Publisher(Bridge):
    """Publishes a local stream over any engine; see ``framebus.net.publish``.

    ``Publisher(name, endpoint, options)`` makes it with the transport of the engine that
    ``options.engine_options`` belong to (default: ZeroMQ) and, with ``options.encode``, an
    encoded payload; ``transport=`` and ``payload=`` give them instead. Start it with
    ``framebus.net.publish`` (or ``_start()``)."""

    role = "publish"

    def __init__(self, stream_name: str, endpoint: str, options: PublishOptions = PublishOptions(), *,
                 transport: Optional[PublishTransport] = None, payload: Optional[PublisherPayload] = None) -> None:
        if not isinstance(stream_name, str):
            raise TypeError(f"stream_name must be a str, got {stream_name!r}")
        if not isinstance(options, PublishOptions):
            raise TypeError(f"options must be a framebus.net.PublishOptions, got {type(options).__name__}")
        if transport is None:
            chosen = registry.owner(options.engine_options) or registry.engine(None)
            transport = chosen.transport("publish", options.engine_options)
        #: The engine's transport (see ``framebus.net.engine.contract``).
        self.carrier: PublishTransport = transport
        endpoint = transport.check_endpoint(endpoint)
        if payload is None:
            payload = RawFrames(stream_name, options) if options.encode is None else _encoded(stream_name, options)
        #: What this publisher sends: raw frames, or encoded video (``framebus.net.video``).
        self.payload: PublisherPayload = payload
        #: The stream the user asked to publish (an encoded publisher reads its packet stream).
        self.raw_stream = stream_name
        self.options = options
        self.hwm = options.hwm
        self.heartbeat_ivl = options.heartbeat_ivl
        self.peer_timeout = options.peer_timeout
        try:
            self.compress = codec.parse(options.compress)
            super().__init__(payload.stream, endpoint, options.mode, options.status)
        except BaseException:
            payload.stop()
            raise
        self._sock: Any = None  # the transport's channel once set up
        self._src: Any = None
        self._src_path = ""
        self._src_ino = 0
        self._peers: Dict[bytes, _Peer] = {}
        self._packer = P.FramePacker()
        self._compressor = codec.Compressor(self.compress[1]) if self.compress else None
        self.epoch = secrets.randbits(63) or 1
        self.dropped_by_gone_peers = 0
        self.bad_messages = 0
        #: Large frames copied because too many slots were pinned already (latest mode).
        self.copied = 0
        self.source_missed = 0
        #: Whether the source's writer ended the stream (and has not written since), and the
        #: source sequence of the last frame before that end.
        self.source_ended = False
        self._end_seq = 0

    # -- the engine and the payload --------------------------------------------------------
    @property
    def engine(self) -> str:
        """The engine's name ("zmq", "zenoh")."""
        return self.carrier.name

    @property
    def encoder(self) -> Any:
        """An encoded publisher's encoder stage (``encoder_name``, ``pictures``, ``keyframes``,
        ``forced_keyframes``, ``bits_per_s``); None for raw frames."""
        return getattr(self.payload, "encoder", None)

    def reach_note(self) -> str:
        """A clause for the line printed when the publisher stops: with Zenoh, that its session
        never reached a router or peer; else ""."""
        return self.carrier.reach_note(self.frames)

    def _shown_state(self) -> str:
        return self.carrier.state(self.state)

    def _pins_full(self) -> bool:
        """Whether to wait before taking the next frame: latest mode, frames sent from their
        slots, and every slot the transport may pin still being sent."""
        if self.mode != "latest" or not self._views or self._compressor is not None or not self._pin_cap:
            return False
        return self.carrier.pins_full(self._src.size, self._pin_cap)

    # -- set-up and tear-down ----------------------------------------------------------------
    def _setup(self) -> None:
        self.payload.start()
        self._open_source()
        self._sock, self.endpoint = self.carrier.open(self.endpoint, str(self.mode))
        self.state = "waiting for subscribers"
        self._tick_rates(time.monotonic())

    def _cleanup(self) -> None:
        sock = self._sock
        try:
            if sock is not None:
                for peer in list(self._peers.values()):
                    self._send(peer, [P.prefix(P.BYE)])
                self._peers.clear()
                self._sock = None
                sock.close()
        finally:
            try:
                self.carrier.close()
                if self._src is not None:
                    self._src.close()
                    self._src = None
            finally:
                self.payload.stop()

    def _peer_count(self) -> int:
        return len(self._peers)

    # -- the source stream -----------------------------------------------------------------
    def _open_source(self) -> None:
        """Opens the source and remembers which segment it is (to notice a replacement)."""
        for _ in range(5):
            path = _stat(self.stream_name).path
            ino = os.stat(path).st_ino
            src = _stream.open(self.stream_name, mode=str(self.mode), device="cpu")  # a device stream: its CPU mirror
            try:
                if os.stat(path).st_ino == ino:
                    break
            except FileNotFoundError:
                pass
            src.close()
        else:
            raise StreamNotFoundError(2, f"stream {self.stream_name!r} keeps being replaced; cannot follow it")
        src.set_role("bridge out", f"-> {self.endpoint}")
        self._src, self._src_path, self._src_ino = src, path, ino
        self.source_ended = False
        for peer in self._peers.values():
            peer.last_sent_seq = 0  # sequence numbers start again in a new segment
            peer.told_end = False
        self._refresh = True  # send the newest frame at once (it was written before we attached)
        self._spec = P.spec_of(src)
        # A variable-shape frame is sent as it is stored (table first): through a view.
        self._views = (USE_VIEWS or src.variable) and hasattr(src, "wait_view")
        # Latest mode keeps at most slots-2 slots pinned by in-flight sends so the source's
        # writer always has a free slot; beyond that, frames are copied (engines that send
        # from the slot).
        self._pin_cap = max(0, src.slots - 2)

    def _check_source(self) -> None:
        """Follows a source that was removed or replaced (another spec): switches to the new
        segment once the old one is drained (lossless) or at once (latest)."""
        try:
            ino: Optional[int] = os.stat(self._src_path).st_ino if self._src_path else None
        except FileNotFoundError:
            ino = None
        if self._src is not None:
            if ino == self._src_ino:
                return
            if self.mode == "lossless" and self._src.write_sequence > self._src.last_seq:
                return  # frames of the old segment still to send
            if self._src.ended:
                self._end_source()  # its writer ended it (closed it): say so before the next segment's frames
            self.source_missed += self._src.total_missed
            self._src.close()
            self._src = None
            self.state = "waiting for source"
        try:
            self._open_source()
        except StreamNotFoundError:
            return
        self.spec_changes += 1
        self.state = "running" if self._peers else "waiting for subscribers"

    def _take(self) -> Optional[Tuple[int, int, int, bytes, Any, int, int]]:
        """Waits briefly for the next source frame: (seq, timestamp_ns, frame_id, meta,
        payload, flags, nbytes), or None. The payload is what ``_payload`` made of it (compressed
        bytes, the payload's packet, or the transport's ``raw_payload``)."""
        src = self._src
        if self._refresh:
            # The newest frame as it is now (without consuming it): the frame written before
            # this reader attached, or the current frame for a subscriber that just joined.
            self._refresh = False
            if self._views and src.write_sequence > 0:
                try:
                    frame = src.view(timeout=0)
                except TimeoutError:
                    return None
                except StreamEndedError:
                    self._end_source()
                    return None
                # Lossless: only the frame the reader saw at open; a newer one comes in order
                # through wait_view (sending it now would skip the frames before it).
                if self.mode == "latest" or frame.seq == src.last_seq:
                    return self._payload(frame.seq, frame.timestamp_ns, frame.frame_id, frame.meta, _wire_array(src, frame), frame)
                frame.release()
        try:
            if not self._views:
                pub = src.read_new_publication(timeout=SLICE_S)
                return self._payload(pub.seq, pub.timestamp_ns, pub.frame_id, pub.meta, pub.payload, None)
            frame = src.wait_view(timeout=SLICE_S)
        except TimeoutError:
            return None
        except StreamEndedError:  # every frame before the end was taken
            self._end_source()
            return None
        return self._payload(frame.seq, frame.timestamp_ns, frame.frame_id, frame.meta, _wire_array(src, frame), frame)

    def _payload(self, seq: int, ts: int, fid: int, meta: bytes, arr: Any, frame: Any) -> Tuple[int, int, int, bytes, Any, int, int]:
        packed = self.payload.pack(frame)
        if packed is not None:
            frame.release()
            return seq, ts, fid, meta, packed, P.F_PACKET, len(packed)
        nbytes = arr.nbytes
        flags = 0
        if self._compressor is not None:
            payload: Any = self._compressor.compress(arr)
            flags = P.F_ZSTD
        else:
            payload, copied = self.carrier.raw_payload(arr, frame, self._pin_cap)
            self.copied += copied
        if frame is not None:
            frame.release()  # a payload that holds the array keeps the slot pinned
        return seq, ts, fid, meta, payload, flags, nbytes

    # -- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= self._next_tick:
                self._tick(now)
            self._serve(0)
            if self._src is None:
                self._serve(SLICE_S)
                continue
            ready = [p for p in self._peers.values() if p.ready()]
            blocked = not ready if self.mode == "latest" else (not self._peers or len(ready) < len(self._peers))
            if blocked:
                self._serve(SLICE_S)
                continue
            if self._pins_full():
                continue
            got = self._take()
            if got is None:
                if self.source_ended:
                    self._serve(SLICE_S)  # nothing to take until the source's writer writes again
                continue
            self._serve(0)
            seq = got[0]
            if self.source_ended and seq > self._end_seq:
                self._restart_source()
            self._publish(got, [p for p in self._peers.values() if p.ready() and p.last_sent_seq < seq])

    def _publish(self, got: Tuple[int, int, int, bytes, Any, int, int], peers: List[_Peer]) -> None:
        peers = [p for p in peers if self.payload.admit(p.identity, got[3])]
        if not peers:
            return
        seq, ts, fid, meta, payload, flags, nbytes = got
        src = self._src
        header = self._packer.pack(
            flags=flags, source_id=self._src_ino, seq=seq, timestamp_ns=ts, frame_id=fid, nbytes=nbytes,
            slots=src.slots, meta_capacity=src.meta_capacity, spec=self._spec, meta=meta,
        )
        wire = len(payload) if isinstance(payload, bytes) else nbytes
        keep = self.mode == "lossless"
        sent = False
        self.last_seq = seq
        for peer in peers:
            if peer.last_sent_seq and seq > peer.last_sent_seq + 1:
                peer.dropped += seq - peer.last_sent_seq - 1
                self.dropped = self.dropped_by_gone_peers + sum(p.dropped for p in self._peers.values())
            peer.last_sent_seq = seq
            peer.inflight.append((self._src_ino, seq, header, payload if keep else None))
            if self._send(peer, [header, payload]):
                self.wire_bytes += wire
                sent = True
        if sent:
            self.frames += 1
            self.bytes += nbytes
            self.state = "running"

    # -- the end of the source ---------------------------------------------------------------
    def _end_source(self) -> None:
        """The source's writer ended the stream and every frame before the end was taken: tell
        every subscriber not told yet (END follows the last frame on each connection). Called
        again while the source stays ended, for subscribers that joined or came back since."""
        if not self.source_ended:
            self._end_seq = self._src.last_seq
            self.state = "source ended"
            self.source_ended = True
        for peer in self._peers.values():
            if not peer.told_end and not peer.unreachable and self._send(peer, [P.pack_end(self._src_ino, self._end_seq)]):
                peer.told_end = True

    def _restart_source(self) -> None:
        """A frame written after the end (a restarted producer): bridged as usual; the next end
        is told again."""
        self.source_ended = False
        for peer in self._peers.values():
            peer.told_end = False

    def _send(self, peer: _Peer, parts: List[Any]) -> bool:
        """Sends to one peer without blocking; a peer that is gone is marked (lossless: kept
        for a reconnect until peer_timeout) or forgotten (latest)."""
        if not self._sock.send(peer.identity, parts):
            if self.mode == "lossless":
                peer.unreachable = True
            else:
                self._forget(peer)
            return False
        peer.last_sent = time.monotonic()
        return True

    def _forget(self, peer: _Peer) -> None:
        if self._peers.pop(peer.identity, None) is not None:
            self.dropped_by_gone_peers += peer.dropped
            peer.inflight.clear()
        self.payload.left(peer.identity)
        if not self._peers and self.state == "running":
            self.state = "waiting for subscribers"

    def _tick(self, now: float) -> None:
        self.payload.check()
        self._next_tick = now + min(TICK_S, self.heartbeat_ivl / 2)
        self._check_source()
        for peer in list(self._peers.values()):
            if now - peer.last_heard > self.peer_timeout:
                self._forget(peer)
            elif now - peer.last_sent >= self.heartbeat_ivl:
                self._send(peer, [P.pack_u64(P.HEARTBEAT, self.epoch)])
        self.dropped = self.dropped_by_gone_peers + sum(p.dropped for p in self._peers.values())
        if now - self._rate_at >= TICK_S:
            self._tick_rates(now)

    # -- control messages ------------------------------------------------------------------
    def _serve(self, timeout: float) -> None:
        """Handles the subscribers' messages: waits up to ``timeout`` s for the first."""
        sock = self._sock
        if timeout and not sock.poll(int(timeout * 1000)):
            return
        for _ in range(1000):
            parts = sock.recv()
            if parts is None:
                return
            if len(parts) == 2:
                try:
                    self._handle(parts[0], parts[1])
                except ProtocolError:
                    self.bad_messages += 1  # not a framebus peer, or a damaged message: ignored

    def _handle(self, identity: bytes, msg: bytes) -> None:
        version, kind, _ = P.peek(msg)
        if version != P.VERSION:
            self._send(_Peer(identity, "", 0, 0.0), [P.pack_refuse(f"the publisher speaks framebus bridge protocol {P.VERSION}, the subscriber {version}; install the same framebus version on both ends", P.REFUSE_VERSION)])
            return
        now = time.monotonic()
        peer = self._peers.get(identity)
        if kind == P.HELLO:
            self._hello(identity, P.unpack_json(msg), now)
        elif peer is None:
            if kind != P.BYE:
                self._send(_Peer(identity, "", 0, 0.0), [P.prefix(P.RESET)])
        elif kind == P.ACK:
            peer.last_heard = now
            peer.ack(*P.unpack_ack(msg))
        elif kind == P.HEARTBEAT:
            peer.last_heard = now
        elif kind == P.BYE:
            self._forget(peer)

    def _hello(self, identity: bytes, body: Dict[str, Any], now: float) -> None:
        self._greet(identity, body, now)
        if identity in self._peers:
            self.payload.joined(identity)

    def _greet(self, identity: bytes, body: Dict[str, Any], now: float) -> None:
        """Answers a HELLO: REFUSE, or WELCOME (then, lossless, what was not acknowledged)."""
        want = body.get("mode")
        if want not in (None, self.mode):
            self._send(_Peer(identity, "", 0, 0.0), [P.pack_refuse(f"the publisher of {self.stream_name!r} runs in {self.mode} mode; the subscriber asked for {want} mode", P.REFUSE_MODE)])
            return
        window = body.get("window")
        window = min(window if isinstance(window, int) and window > 0 else 1, self.hwm)
        if self.mode == "lossless" and self._src is not None:
            window = min(window, max(1, self._src.slots - 1))  # pins held until acknowledged
        peer = self._peers.get(identity)
        if peer is None:
            peer = self._peers[identity] = _Peer(identity, str(body.get("name", "")), window, now)
            self._refresh = self.mode == "latest"  # a newcomer gets the current frame at once
        else:
            self.reconnects += 1
        # A (re)connected subscriber is told about an end again (after what is sent again).
        peer.window, peer.last_heard, peer.unreachable, peer.told_end = window, now, False, False
        src = self._src
        spec = None if src is None else {"dtype": self._spec[0], "shape": list(self._spec[1]), "slots": src.slots, "meta_capacity": src.meta_capacity}
        welcome = {
            "epoch": self.epoch, "mode": self.mode, "window": window, "stream": self.stream_name,
            "spec": spec, "compress": self.compress[0] if self.compress else None, "host": _socket.gethostname(),
            **self.payload.welcome(),
        }
        if not self._send(peer, [P.pack_json(P.WELCOME, welcome)]):
            return
        if self.mode == "latest":
            peer.inflight.clear()
            return
        # Lossless: send again what the subscriber has not acknowledged (and did not report).
        sid, last = body.get("source_id"), body.get("last_seq")
        if isinstance(sid, int) and isinstance(last, int):
            peer.ack(sid, last)
        for _, _, header, payload in list(peer.inflight):
            flagged = header[:6] + (int.from_bytes(header[6:8], "little") | P.F_RESENT).to_bytes(2, "little") + header[8:]
            if self._send(peer, [flagged, payload]):
                self.resent += 1

    # -- what the status record and repr show --------------------------------------------------
    def _record(self) -> Dict[str, Any]:
        record = super()._record()
        record["stream"] = self.raw_stream
        return self.payload.record(record)

    def __repr__(self) -> str:
        return f"<framebus.net.Publisher {self.raw_stream!r} {self.endpoint} {self.mode} {self.payload.describe()}{self.state}>"


def _encoded(stream_name: str, options: PublishOptions) -> PublisherPayload:
    """The encoded payload for ``options.encode`` (PyAV is imported when it starts encoding)."""
    from ..video import EncodedFrames

    return EncodedFrames(stream_name, options)
