"""The ZeroMQ engine's transports: the publisher's ROUTER and the subscriber's DEALER, behind
the transport contract (``framebus.net.engine.contract``).

The only module of the bridge (with ``sockets``) that imports pyzmq; the engine registry
imports it when a bridge on this engine is started, so the Zenoh engine runs without pyzmq.
What this engine gives the shared ends: the sockets and their options, CURVE, ZeroMQ's errors
as framebus exceptions, and zero-copy sends from the source's slots (a ``zmq.Frame`` over the
slot, which stays pinned until ZeroMQ has sent it).
"""

from __future__ import annotations

import collections
from typing import Any, Deque, List, Optional, Sequence, Tuple

try:
    import zmq
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("the ZeroMQ engine of framebus.net needs pyzmq: pip install 'framebus[net]'") from _exc

from ..link import SLICE_S
from .options import ZmqPublishOptions, ZmqSubscribeOptions
from .sockets import check_endpoint, curve_client, curve_server, zmq_error


class _Router:
    """The publisher's ROUTER socket (a ``PublisherChannel``)."""

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
    """The subscriber's DEALER socket (a ``SubscriberChannel``)."""

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


class ZmqPublishing:
    """A ZeroMQ publisher's transport (a ``PublishTransport``): binds a ROUTER, with CURVE when
    the options say so, and sends frames zero-copy from their slots."""

    name = "zmq"

    def __init__(self, options: ZmqPublishOptions = ZmqPublishOptions()) -> None:
        self.options = options
        self.copy_threshold = options.copy_threshold
        self._mode = "latest"
        #: Trackers of the zero-copy sends in flight (latest mode), oldest first.
        self._pins: Deque[Any] = collections.deque()

    def check_endpoint(self, endpoint: Any) -> str:
        return check_endpoint(endpoint, bind=True)

    def open(self, endpoint: str, mode: str) -> Tuple[_Router, str]:
        self._mode = mode
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        router = _Router(ctx, sock, None)
        try:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
            sock.setsockopt(zmq.SNDHWM, 1000)
            sock.setsockopt(zmq.RCVHWM, 1000)
            sock.setsockopt(zmq.LINGER, 200)
            if self.options.curve_certificate is not None:
                router._auth = curve_server(ctx, sock, self.options.curve_certificate, self.options.curve_location)
            try:
                sock.bind(endpoint)
            except zmq.ZMQError as exc:
                raise zmq_error(exc, endpoint, "bind") from None
        except BaseException:
            router.close()
            raise
        return router, sock.getsockopt_string(zmq.LAST_ENDPOINT) or endpoint

    def close(self) -> None:
        self._pins.clear()

    def state(self, state: str) -> str:
        return state

    def reach_note(self, frames: int) -> str:
        return ""

    def raw_payload(self, arr: Any, frame: Any, pin_cap: int) -> Tuple[Any, bool]:
        """Zero-copy from the slot (a zmq.Frame holding the array) unless the frame is small
        or, in latest mode, too many slots are pinned already (then copied)."""
        if frame is None:
            return zmq.Frame(arr, copy=False), False  # our own copy already (no views): no pin
        nbytes = arr.nbytes
        if nbytes < self.copy_threshold or not self._pin_budget(pin_cap):
            return arr.tobytes(), nbytes >= self.copy_threshold
        payload = zmq.Frame(arr, copy=False, track=self._mode == "latest")
        if self._mode == "latest":
            self._pins.append(payload.tracker)
        return payload, False

    def pins_full(self, frame_bytes: int, pin_cap: int) -> bool:
        """Latest mode, zero-copy frames: when every slot we may pin is still being sent,
        waits (up to SLICE_S) for the oldest send to finish rather than copy the next frame;
        a frame that is not taken now is replaced by a newer one, so waiting costs nothing."""
        if frame_bytes < self.copy_threshold or self._pin_budget(pin_cap):
            return False
        try:
            self._pins[0].wait(SLICE_S)
        except zmq.NotDone:
            return True
        return False

    def _pin_budget(self, pin_cap: int) -> bool:
        if self._mode == "lossless":
            return True  # bounded by the window, which is below the slot count
        while self._pins and self._pins[0].done:
            self._pins.popleft()
        return len(self._pins) < pin_cap


class ZmqSubscribing:
    """A ZeroMQ subscriber's transport (a ``SubscribeTransport``): connects a DEALER, with
    CURVE when the options say so."""

    name = "zmq"

    def __init__(self, options: ZmqSubscribeOptions = ZmqSubscribeOptions()) -> None:
        self.options = options

    def check_endpoint(self, endpoint: Any) -> str:
        return check_endpoint(endpoint, bind=False)

    def open(self, endpoint: str, identity: bytes) -> _Dealer:
        ctx = zmq.Context()
        dealer = _Dealer(ctx, ctx.socket(zmq.DEALER))
        sock = dealer._sock
        try:
            sock.setsockopt(zmq.IDENTITY, identity)
            sock.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing for a connection that is not up
            sock.setsockopt(zmq.RCVHWM, 1000)
            sock.setsockopt(zmq.SNDHWM, 1000)
            sock.setsockopt(zmq.LINGER, 200)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            if self.options.curve_server_certificate is not None:
                curve_client(sock, self.options.curve_certificate, self.options.curve_server_certificate)
            try:
                sock.connect(endpoint)
            except zmq.ZMQError as exc:
                raise zmq_error(exc, endpoint, "connect to") from None
        except BaseException:
            dealer.close()
            raise
        return dealer

    def close(self) -> None:
        pass

    def state(self, state: str) -> str:
        return state

    def reach_note(self, frames: int) -> str:
        return ""

    def no_answer(self, endpoint: str, timeout: Optional[float]) -> str:
        waited = "no time" if timeout is None else f"{timeout:g}"
        return (
            f"no framebus publisher answered at {endpoint} within {waited} s: check the address and port, "
            "that `framebus bridge publish` runs there, firewalls, and (with CURVE) that both sides use matching keys"
        )


__all__ = ["ZmqPublishing", "ZmqSubscribing"]
