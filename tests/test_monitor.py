"""framebus.monitor and ``top --json`` (issue #17): handles that write a stream (a bridge
subscriber, ``framebus play``) are writers, not readers lagging by the whole sequence, and
``--json`` applies ``--filter`` and ``--sort`` as the table does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import framebus
from framebus.monitor import WRITING_ROLES, document


def top_json(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "framebus", "top", "--json", "--interval", "0.05", *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def played_and_lagging(name: str):
    """``<name>.played``: 6 frames written through a handle tagged "play" (as ``framebus play``
    tags its own); ``<name>.lagging``: a lossless reader 2 frames behind."""
    player = framebus.create(f"{name}.played", shape=(4,), dtype=np.uint8)
    player.set_role("play", "clip.mp4")
    for i in range(6):
        player.write(np.full(4, i, np.uint8))
    lagging = framebus.create(f"{name}.lagging", shape=(4,), dtype=np.uint8, slots=8)
    reader = framebus.open(f"{name}.lagging", mode="lossless")
    for i in range(2):
        lagging.write(np.full(4, i, np.uint8))
    return [player, reader, lagging]


def test_handles_that_write_have_no_lag(name):
    handles = played_and_lagging(name)
    try:
        assert {"writer", "bridge in", "play"} == WRITING_ROLES
        info = framebus.stat(f"{name}.played")
        (play,) = [r for r in info.readers if r["role"] == "play"]
        assert play["consumed"] == 0 and info.writer["latest_seq"] == 6  # what used to be shown as a lag of 6
        (s,) = document([f"{name}.played"], interval=0.01)["streams"]
        (r,) = s["readers"]
        assert r["role"] == "play" and r["writes"] and r["lag_frames"] == 0 and r["label"] == "clip.mp4"
        doc = top_json("--sort", "lag", "--filter", name)
        assert [x["name"] for x in doc["streams"]] == [f"{name}.lagging", f"{name}.played"]
        (behind,) = [r for r in doc["streams"][0]["readers"] if r["mode"] == "lossless"]
        assert behind["lag_frames"] == 2 and not behind["writes"]
    finally:
        for h in handles:
            h.close()
        for suffix in ("played", "lagging"):
            framebus.unlink(f"{name}.{suffix}")


def test_top_json_applies_filter_and_sort(name):
    handles = played_and_lagging(name)
    try:
        doc = top_json("--filter", f"{name}.pl")
        assert [x["name"] for x in doc["streams"]] == [f"{name}.played"]
        doc = top_json("--sort", "name", "--filter", name)
        assert [x["name"] for x in doc["streams"]] == [f"{name}.lagging", f"{name}.played"]
        doc = top_json("--filter", f"{name}.nothing")
        assert doc["streams"] == []
        doc = top_json("--sort", "write_fps", f"{name}.played", f"{name}.lagging")
        assert sorted(x["name"] for x in doc["streams"]) == [f"{name}.lagging", f"{name}.played"]
    finally:
        for h in handles:
            h.close()
        for suffix in ("played", "lagging"):
            framebus.unlink(f"{name}.{suffix}")


def test_top_interval_must_be_a_positive_number():
    for bad in ("-1", "0", "nan", "inf"):
        p = subprocess.run([sys.executable, "-m", "framebus", "top", "--once", "--interval", bad], capture_output=True, text=True, timeout=60, env={**os.environ})
        assert p.returncode == 2, (bad, p.stderr)
        assert p.stderr.startswith("usage: framebus top") and f"argument --interval: must be a positive number, got {bad}" in p.stderr


def test_document_names_dtypes_as_numpy_does(name):
    """framebus.monitor.document() (the Python API behind top --json) says "uint8", as ls does."""
    with framebus.create(name, shape=(4,), dtype=np.uint8, auto_unlink=True) as w:
        w.write(np.zeros(4, np.uint8))
        (s,) = document([name], interval=0.01)["streams"]
        assert s["dtype"] == "uint8"
