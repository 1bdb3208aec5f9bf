"""The ZeroMQ engine of the bridge: ``Publisher`` / ``Subscriber`` over a ROUTER/DEALER pair.

The only module of the bridge (with ``sockets``) that imports pyzmq; ``framebus.net`` imports
it when a bridge on this engine is started, so the Zenoh engine runs without pyzmq. What this
engine adds to the shared ends: the sockets and their options, CURVE, ZeroMQ's errors as
framebus exceptions, and zero-copy sends from the source's slots (a ``zmq.Frame`` over the
slot, which stays pinned until ZeroMQ has sent it).
"""

from __future__ import annotations

import collections
from typing import Any, Deque, List, Optional, Sequence

try:
    import zmq
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("the ZeroMQ engine of framebus.net needs pyzmq: pip install 'framebus[net]'") from _exc

from .base import SLICE_S
from .decode import VideoSubscribing
from .encode import VideoPublishing
from .options import PublishOptions, SubscribeOptions
from .publisher import Publisher
from .sockets import check_endpoint, curve_client, curve_server, zmq_error


class _Router:
    """The publisher's ROUTER socket, with the calls ``Publisher`` makes."""

    def __init__(self, ctx: Any, sock: Any, auth: Any) -> None:
        self._ctx, self._sock, self._auth = ctx, sock, auth

    def poll(self, timeout_ms: int) -> bool:
        return bool(self._sock.poll(timeout_ms, zmq.POLLIN))

    def recv(self) -> Optional[List[bytes]]:
        try:
            return self._sock.recv_multipart(flags=zmq.NOBLOCK)
        except zmq.Again:
            return None

    def send(self, identity: bytes, parts: Sequence[Any]) -> bool:
        try:
            self._sock.send_multipart([identity, *parts], flags=zmq.NOBLOCK, copy=False)
        except zmq.ZMQError as exc:
            if exc.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                raise
            return False
        return True

    def close(self) -> None:
        try:
            self._sock.close()
            if self._auth is not None:
                self._auth.stop()
        finally:
            self._ctx.term()


class _Dealer:
    """The subscriber's DEALER socket, with the calls ``Subscriber`` makes."""

    def __init__(self, ctx: Any, sock: Any) -> None:
        self._ctx, self._sock = ctx, sock

    def poll(self, timeout_ms: int) -> bool:
        return bool(self._sock.poll(timeout_ms, zmq.POLLIN))

    def recv(self) -> Optional[List[Any]]:
        try:
            return self._sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None

    def send(self, msg: bytes) -> bool:
        try:
            self._sock.send(msg, flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            self._ctx.term()


class ZmqPublisher(Publisher):
    """Publishes a local stream over ZeroMQ; see ``framebus.net.publish``."""

    engine = "zmq"

    def __init__(self, stream_name: str, endpoint: str, options: PublishOptions = PublishOptions()) -> None:
        self._curve = (options.curve_certificate, options.curve_location)
        #: Trackers of the zero-copy sends in flight (latest mode), oldest first.
        self._pins: Deque[Any] = collections.deque()
        super().__init__(stream_name, endpoint, options)

    def _check_endpoint(self, endpoint: Any) -> str:
        return check_endpoint(endpoint, bind=True)

    def _open_transport(self) -> _Router:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        router = _Router(ctx, sock, None)
        try:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
            sock.setsockopt(zmq.SNDHWM, 1000)
            sock.setsockopt(zmq.RCVHWM, 1000)
            sock.setsockopt(zmq.LINGER, 200)
            if self._curve[0] is not None:
                router._auth = curve_server(ctx, sock, *self._curve)
            try:
                sock.bind(self.endpoint)
            except zmq.ZMQError as exc:
                raise zmq_error(exc, self.endpoint, "bind") from None
        except BaseException:
            router.close()
            raise
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT) or self.endpoint
        return router

    def _close_transport(self) -> None:
        self._pins.clear()

    def _raw_payload(self, arr: Any, frame: Any) -> Any:
        """Zero-copy from the slot (a zmq.Frame holding the array) unless the frame is small
        or, in latest mode, too many slots are pinned already (then copied)."""
        if frame is None:
            return zmq.Frame(arr, copy=False)  # our own copy already (no views): no pin
        nbytes = arr.nbytes
        if nbytes < self.copy_threshold or not self._pin_budget():
            self.copied += nbytes >= self.copy_threshold
            return arr.tobytes()
        payload = zmq.Frame(arr, copy=False, track=self.mode == "latest")
        if self.mode == "latest":
            self._pins.append(payload.tracker)
        return payload

    def _pins_full(self) -> bool:
        """Latest mode, zero-copy frames: when every slot we may pin is still being sent,
        waits (up to SLICE_S) for the oldest send to finish rather than copy the next frame;
        a frame that is not taken now is replaced by a newer one, so waiting costs nothing."""
        if self.mode != "latest" or not self._views or self._compressor is not None or not self._pin_cap:
            return False
        if self._src.size < self.copy_threshold or self._pin_budget():
            return False
        try:
            self._pins[0].wait(SLICE_S)
        except zmq.NotDone:
            return True
        return False

    def _pin_budget(self) -> bool:
        if self.mode == "lossless":
            return True  # bounded by the window, which is below the slot count
        while self._pins and self._pins[0].done:
            self._pins.popleft()
        return len(self._pins) < self._pin_cap


class ZmqVideoPublisher(VideoPublishing, ZmqPublisher):
    """Encodes the local stream and publishes its packets over ZeroMQ; see
    ``framebus.net.publish(encode=)``."""


class ZmqSubscriber(VideoSubscribing):
    """Receives a stream published over ZeroMQ (decoding an encoded publisher's packets); see
    ``framebus.net.subscribe``."""

    engine = "zmq"

    def __init__(self, endpoint: str, local_name: str, options: SubscribeOptions = SubscribeOptions()) -> None:
        self._curve = (options.curve_certificate, options.curve_server_certificate)
        super().__init__(endpoint, local_name, options)

    def _check_endpoint(self, endpoint: Any) -> str:
        return check_endpoint(endpoint, bind=False)

    def _open_transport(self) -> _Dealer:
        ctx = zmq.Context()
        dealer = _Dealer(ctx, ctx.socket(zmq.DEALER))
        sock = dealer._sock
        try:
            sock.setsockopt(zmq.IDENTITY, self.identity)
            sock.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing for a connection that is not up
            sock.setsockopt(zmq.RCVHWM, 1000)
            sock.setsockopt(zmq.SNDHWM, 1000)
            sock.setsockopt(zmq.LINGER, 200)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            if self._curve[1] is not None:
                curve_client(sock, *self._curve)
            try:
                sock.connect(self.endpoint)
            except zmq.ZMQError as exc:
                raise zmq_error(exc, self.endpoint, "connect to") from None
        except BaseException:
            dealer.close()
            raise
        return dealer

    def _no_answer(self) -> str:
        return (
            f"no framebus publisher answered at {self.endpoint} within {self.timeout} s: check the address and port, "
            "that `framebus bridge publish` runs there, firewalls, and (with CURVE) that both sides use matching keys"
        )


__all__ = ["ZmqPublisher", "ZmqSubscriber", "ZmqVideoPublisher"]
