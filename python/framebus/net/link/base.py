"""What both ends of a bridge share: the worker thread, start-up hand-shake with the caller,
stop/join/context manager, counters, rates and the status record."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ...errors import InvalidArgumentError
from .status import StatusFile

#: How often a bridge refreshes its rates and status record (seconds).
TICK_S = 0.5
#: Longest a worker waits in one call before it checks for stop() (seconds).
SLICE_S = 0.05


@dataclass(frozen=True)
class BridgeStats:
    """A snapshot of one bridge's counters (``bridge.stats``).

    ``frames``: frames sent (publisher: taken from the source and sent to at least one
    subscriber) or written into the local stream (subscriber). ``bytes``: payload bytes of
    those frames, uncompressed; ``wire_bytes``: bytes put on / taken off the wire (after
    compression, all subscribers together). ``dropped``: frames a subscriber never got
    (publisher: summed over its subscribers; subscriber: gaps in the source sequence).
    ``fps`` and ``bytes_per_s`` are rates over the last half second or so. ``last_seq`` is the
    source sequence number of the newest frame handled. ``error`` says why a failed bridge stopped.
    """

    role: str
    stream: str
    endpoint: str
    mode: Optional[str]
    state: str
    peers: int
    frames: int
    bytes: int
    wire_bytes: int
    dropped: int
    duplicates: int
    resent: int
    reconnects: int
    spec_changes: int
    last_seq: int
    fps: float
    bytes_per_s: float
    error: Optional[str]


def positive(name: str, value: Any, *, integer: bool = False, allow_none: bool = False) -> Any:
    """``value`` if it is a positive number (an int when ``integer``), else TypeError/ValueError."""
    if value is None and allow_none:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be a positive {'integer' if integer else 'number'}, got {value!r}")
    if not value > 0:
        raise InvalidArgumentError(f"{name} must be positive, got {value!r}")
    return value


class Bridge:
    """Base of ``Publisher`` and ``Subscriber``: runs ``_setup`` then ``_loop`` on a daemon
    thread; ``_cleanup`` always runs last on that thread."""

    role = "bridge"

    def __init__(self, stream: str, endpoint: str, mode: Optional[str], status: bool) -> None:
        self.stream_name = stream
        self.endpoint = endpoint
        self.mode = mode
        self.state = "starting"
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._startup_error: Optional[BaseException] = None
        self._status = StatusFile(self.role) if status else None
        self._thread = threading.Thread(target=self._main, name=f"framebus-{self.role}-{stream}", daemon=True)
        # counters (written by the worker thread only)
        self.frames = self.bytes = self.wire_bytes = 0
        self.dropped = self.duplicates = self.resent = self.reconnects = self.spec_changes = 0
        self.last_seq = 0
        self._rate_at = time.monotonic()
        self._rate_frames = self._rate_bytes = 0
        self.fps = self.bytes_per_s = 0.0
        self._next_tick = 0.0

    # -- overridden by the two ends --------------------------------------------------------
    def _setup(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        raise NotImplementedError

    def _cleanup(self) -> None:
        raise NotImplementedError

    def _peer_count(self) -> int:
        return 0

    def _shown_state(self) -> str:
        """The state ``stats`` reports (an end whose transport can tell it reaches nobody says
        so instead)."""
        return self.state

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self) -> None:
        self._thread.start()
        # The worker sets _ready once set-up is done or failed; set-up bounds its own waits.
        while not self._ready.wait(0.1):
            if not self._thread.is_alive():
                break
        if self._startup_error is not None:
            self._thread.join()
            raise self._startup_error

    def _main(self) -> None:
        try:
            self._setup()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of publish()/subscribe()
            self._startup_error = exc
            self.state = "failed"
            self._finish()
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop()
            self.state = "stopped"
        except BaseException as exc:  # noqa: BLE001 - kept for join()/stop() to re-raise
            self.error = exc
            self.state = "failed"
        finally:
            self._finish()

    def _finish(self) -> None:
        try:
            self._cleanup()
        finally:
            if self._status is not None:
                self._status.remove()

    def stop(self, timeout: Optional[float] = 10.0) -> None:
        """Stops the bridge: tells the other end (BYE), closes the socket and the local stream
        handle, removes the status record, and waits up to ``timeout`` seconds for the thread.
        Idempotent. Raises the error that had stopped the bridge, if any (see ``error``), and
        TimeoutError if the thread did not finish in time."""
        self._stop.set()
        self.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the {self.role} bridge of {self.stream_name!r} did not stop within {timeout} s")

    def join(self, timeout: Optional[float] = None) -> None:
        """Waits until the bridge stops (after ``stop()``, or a fatal error), at most
        ``timeout`` seconds. Raises the error that stopped it, if any."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self.error is not None and not self._thread.is_alive():
            raise self.error

    @property
    def running(self) -> bool:
        """Whether the bridge thread is alive."""
        return self._thread.is_alive()

    def __enter__(self) -> "Bridge":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            self.stop()
        except Exception:
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        return f"<framebus.net.{type(self).__name__} {self.stream_name!r} {self.endpoint} {self.mode or 'any'} {self.state}>"

    # -- counters ----------------------------------------------------------------------------
    @property
    def stats(self) -> BridgeStats:
        """A snapshot of the counters (see :class:`BridgeStats`); cheap, thread-safe."""
        err = None if self.error is None else f"{type(self.error).__name__}: {self.error}"
        return BridgeStats(
            self.role, self.stream_name, self.endpoint, self.mode, self._shown_state(), self._peer_count(),
            self.frames, self.bytes, self.wire_bytes, self.dropped, self.duplicates, self.resent,
            self.reconnects, self.spec_changes, self.last_seq, self.fps, self.bytes_per_s, err,
        )

    def _tick_rates(self, now: float) -> None:
        """Refreshes fps/bytes_per_s and the status record (about every TICK_S)."""
        dt = now - self._rate_at
        if dt > 0:
            self.fps = (self.frames - self._rate_frames) / dt
            self.bytes_per_s = (self.wire_bytes - self._rate_bytes) / dt
        self._rate_at, self._rate_frames, self._rate_bytes = now, self.frames, self.wire_bytes
        if self._status is not None:
            self._status.update(self._record())

    def _record(self) -> Dict[str, Any]:
        s = self.stats
        return {
            "stream": s.stream, "endpoint": s.endpoint, "mode": s.mode, "state": s.state, "peers": s.peers,
            "frames": s.frames, "bytes": s.bytes, "wire_bytes": s.wire_bytes, "dropped": s.dropped,
            "fps": round(s.fps, 2), "bytes_per_s": round(s.bytes_per_s, 1), "last_seq": s.last_seq,
        }
