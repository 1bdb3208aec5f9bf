"""What a late joiner waits for, checked by order of events rather than by time: a subscriber
started in the background (as ``framebus bridge subscribe`` starts one) says HELLO again as soon
as its connection is up, not at its next tick (every 0.5 s); and a joiner right after one of
the encoder's own keyframes gets the keyframe forced for it at once (the rate limit counts
forced keyframes only)."""

from __future__ import annotations

import threading

import pytest

from framebus.net.ends import SubscribeOptions, Subscriber
from framebus.net.wire import protocol as P

from bridge_helpers import BOUND, names, wait_until  # noqa: F401


class _Transport:
    """A transport whose first HELLO cannot be queued (the connection is still being made)."""

    def __init__(self, sub: "_Sub") -> None:
        self.sub = sub
        self.hellos: list = []  # ticks done when each HELLO was offered
        self._idle = threading.Event()

    def poll(self, timeout_ms: int) -> bool:
        self._idle.wait(timeout_ms / 1000)
        return False

    def recv(self):
        return None

    def send(self, msg: bytes) -> bool:
        if P.peek(msg)[1] == P.HELLO:
            self.hellos.append(self.sub.ticks)
            return len(self.hellos) > 1
        return True

    def close(self) -> None:
        pass


class _Sub(Subscriber):
    engine = "fake"

    def __init__(self, *args, **kwargs) -> None:
        self.ticks = 0
        super().__init__(*args, **kwargs)
        self.transport = _Transport(self)

    def _check_endpoint(self, endpoint):
        return endpoint

    def _open_transport(self):
        return self.transport

    def _tick(self, now: float) -> None:
        self.ticks += 1
        super()._tick(now)


def test_a_hello_that_could_not_be_queued_is_retried_before_the_next_tick(names):
    sub = _Sub("fake://publisher", names("local"), SubscribeOptions(timeout=None, status=False))
    sub._start()
    try:
        wait_until(lambda: len(sub.transport.hellos) >= 2, "a second HELLO")
    finally:
        sub.stop()
    # the first HELLO at the first tick, the retry before the second tick
    assert sub.transport.hellos[:2] == [1, 1], sub.transport.hellos


def test_a_joiner_right_after_a_natural_keyframe_gets_a_forced_one_at_once(names, monkeypatch):
    """With keyframes of the encoder's own every 3 pictures, the old rule (no forced keyframe
    within KEY_MIN_INTERVAL of any keyframe) never forced one; forced keyframes are limited
    among themselves only."""
    pytest.importorskip("av")
    import numpy as np

    import framebus
    from framebus.media import codec as video
    from framebus.net.video import encode

    monkeypatch.setattr(video, "KEY_MIN_INTERVAL", 0.3)
    src = framebus.create(names("src"), shape=(64, 64, 3), dtype=np.uint8)
    stage = encode.EncoderStage(src.name, video.VideoSettings.of("h264", "1M", 3), "latest")
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            src.write(np.full((64, 64, 3), i % 256, np.uint8), frame_id=i)
            stop.wait(0.01)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    stage.start()
    try:
        wait_until(lambda: stage.pictures >= 3 and stage.keyframes >= 2, "keyframes of the encoder's own")
        assert stage.forced_keyframes == 1  # the first picture's
        threading.Event().wait(video.KEY_MIN_INTERVAL)  # past the limit since that forced one
        stage.request_keyframe()
        wait_until(lambda: stage.forced_keyframes == 2 or stage.error is not None, "the forced keyframe")
        assert stage.error is None
    finally:
        stop.set()
        writer.join(BOUND)
        stage.stop()
        src.unlink()
