"""What the encoded-bridge tests of both engines share (tests/test_video.py,
tests/test_video_zenoh.py): 320x240 moving test pictures whose content is a function of their
frame_id, a paced writer and a reader of decoded pictures (waits and stream names come from
bridge_helpers).
Needs no bridge engine itself."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import framebus
from bridge_helpers import BOUND, names, wait_until  # noqa: F401 (re-exported for the video tests)

H, W = 240, 320
#: Mean absolute difference (0-255) under which a decoded picture counts as its source: x264 at
#: 2 Mbit/s stays near 1-3 on this pattern; a picture decoded from missing data is tens off.
CLOSE = 12.0
_yy, _xx = np.mgrid[0:H, 0:W]


def picture(i: int) -> np.ndarray:
    a = np.empty((H, W, 3), np.uint8)
    a[..., 0] = (_xx + 5 * i) & 255
    a[..., 1] = (_yy + 3 * i) & 255
    a[..., 2] = ((_xx // 16 + _yy // 16 + i // 4) % 2) * 200
    return a


def error(arr: np.ndarray, i: int) -> float:
    return float(np.abs(arr.astype(np.int16) - picture(i)).mean())






class Writer:
    """Writes picture(i) with frame_id=i at about ``fps`` until stopped (or ``count`` frames)."""

    def __init__(self, stream, fps=60.0, count=None):
        self.stream, self.period, self.count = stream, 1.0 / fps, count
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        i = 1
        while not self._stop.is_set() and (self.count is None or i <= self.count):
            self.stream.write(picture(i), frame_id=i, timeout=BOUND)
            self.written = i
            i += 1
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()
        self._thread.join(BOUND)


def read_pictures(name, n, timeout=BOUND):
    """The next ``n`` (frame_id, array) of local stream ``name`` (opened when it appears)."""
    wait_until(lambda: os.path.exists(f"/dev/shm/framebus.{name}"), f"local stream {name}", timeout)
    out = []
    with framebus.open(name) as r:
        while len(out) < n:
            with r.wait_view(timeout) as f:
                out.append((f.frame_id, np.array(f)))
    return out


@pytest.fixture
def source(names):
    src = framebus.create(names("src"), shape=(H, W, 3), dtype=np.uint8, slots=4)
    yield src
    src.unlink()
