"""OpenFilter filters for tests/test_openfilter.py (imported by the pipeline's child processes).

Every image carries its CRC-32 (and the sender's generation) in the frame's data; every stage
that looks at an image checks it, so a frame torn, replaced or stale fails the test wherever it
is seen. Stages write one JSON line per frame to the file named in their config."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

import numpy as np
from openfilter.filter_runtime import Filter, Frame

import framebus.integrations.openfilter as fb_openfilter


def image(shape: tuple, i: int, generation: int = 1) -> np.ndarray:
    """A frame whose every byte depends on (i, generation)."""
    rng = np.random.default_rng(i * 1000 + generation)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def crc(a: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(a))


class Source(Filter):
    """Sends ``frames`` frames; topics and shapes from config ``topics`` ({topic: shape})."""

    def setup(self, config: Any) -> None:
        self.i = 0
        self.topics = {t: tuple(s) for t, s in config.topics.items()}
        self.generation = int(config.get("generation", 1))
        self.interval = float(config.get("interval", 0.02))

    def process(self, frames: Any) -> Any:
        if self.i >= int(self.config.frames):
            time.sleep(0.05)
            return None
        time.sleep(self.interval)
        out = {}
        for k, (topic, shape) in enumerate(self.topics.items()):
            img = image(shape, self.i * 10 + k, self.generation)
            out[topic] = Frame(img, {"i": self.i, "crc": crc(img), "gen": self.generation}, "RGB")
        self.i += 1
        return out


def lines(path: Any) -> list:
    """The JSON records a stage wrote to ``path`` so far."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wait_until(condition: Any, timeout: float = 60.0) -> bool:
    """Polls ``condition()`` every 50 ms; whether it became true within ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _write(path: str, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


class Sink(Filter):
    """Checks every topic's image against its CRC and records it."""

    def process(self, frames: Any) -> None:
        for topic, frame in frames.items():
            if not frame.has_image:
                continue
            _write(
                self.config.results,
                {
                    "topic": topic,
                    "i": frame.data["i"],
                    "gen": frame.data["gen"],
                    "ok": crc(frame.image) == frame.data["crc"],
                    "shape": list(frame.image.shape),
                    "stats": fb_openfilter.stats(),
                },
            )


class Keeper(Filter):
    """Keeps every frame it receives and, on each one, re-checks all the frames kept so far."""

    def setup(self, config: Any) -> None:
        self.kept: list = []

    def process(self, frames: Any) -> None:
        frame = frames["main"]
        self.kept.append((frame.image, frame.data["crc"]))
        intact = all(crc(img) == c for img, c in self.kept)
        _write(self.config.results, {"i": frame.data["i"], "kept": len(self.kept), "ok": intact, "stats": fb_openfilter.stats()})
