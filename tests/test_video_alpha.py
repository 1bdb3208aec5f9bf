"""Encoded bridges and 4-channel images: no codec here has an alpha plane, so an RGBA stream is
refused at publish() (before anything is created or sent) unless ``drop_alpha=True`` /
``--drop-alpha`` asks for the colour channels only; then the subscriber's stream has 3
channels, never a 4th one filled with 255."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import framebus

pytest.importorskip("zmq")
pytest.importorskip("av")
net = pytest.importorskip("framebus.net")

from video_helpers import BOUND, CLOSE, H, W, names, picture, wait_until  # noqa: E402,F401


def rgba(i: int) -> np.ndarray:
    a = np.empty((H, W, 4), np.uint8)
    a[..., :3] = picture(i)
    a[..., 3] = 200
    return a


@pytest.fixture
def rgba_source(names):
    src = framebus.create(names("rgba"), shape=(H, W, 4), dtype=np.uint8, slots=4)
    yield src
    src.unlink()


def test_rgba_is_refused_at_publish_with_what_to_do(rgba_source):
    with pytest.raises(ValueError, match=r"no alpha plane.*drop_alpha=True.*--drop-alpha.*without encode="):
        net.publish(rgba_source.name, "tcp://127.0.0.1:*", encode="h264")
    # refused before anything was made: no packet stream
    assert not os.path.exists(f"/dev/shm/framebus.{rgba_source.name}.h264")


def test_drop_alpha_sends_colour_only(names, rgba_source):
    pub = net.publish(rgba_source.name, "tcp://127.0.0.1:*", encode="h264", bitrate="2M", drop_alpha=True)
    local = names("dec")
    sub = net.subscribe(pub.endpoint, local)
    try:
        i = 0
        while sub.decoder is None or sub.decoder.pictures < 3:
            i += 1
            rgba_source.write(rgba(i), frame_id=i, timeout=BOUND)
            assert i < 3000, "no picture decoded"
            sub.join(0.01)
        with framebus.open(local) as r:
            assert r.shape == (H, W, 3)
            with r.view() as f:
                assert float(np.abs(np.asarray(f).astype(np.int16) - picture(f.frame_id)).mean()) < CLOSE
    finally:
        sub.stop()
        pub.stop()


def test_drop_alpha_applies_only_to_an_encoded_bridge(rgba_source):
    with pytest.raises(ValueError, match="drop_alpha apply to an encoded bridge"):
        net.publish(rgba_source.name, "tcp://127.0.0.1:*", drop_alpha=True)
    with pytest.raises(TypeError, match="drop_alpha must be True or False"):
        net.publish(rgba_source.name, "tcp://127.0.0.1:*", encode="h264", drop_alpha="yes")


def test_cli_refuses_rgba_and_names_drop_alpha(rgba_source):
    run = subprocess.run(
        [sys.executable, "-m", "framebus", "bridge", "publish", rgba_source.name, "tcp://127.0.0.1:*", "--encode", "h264", "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "--drop-alpha" in run.stderr and "alpha" in run.stderr, run.stderr
    assert not os.path.exists(f"/dev/shm/framebus.{rgba_source.name}.h264")
