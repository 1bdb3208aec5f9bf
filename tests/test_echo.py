"""``framebus echo`` on every kind of frame (issue #15 x #17): one array, several named arrays,
a byte payload with its codec, dict values written as bytes, and strict JSON for every dtype
(complex, NaN, float16, bool, uint64)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import framebus


def echo(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "framebus", "echo", name, *args], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "160"})


def strict(line: str):
    def refuse(value: str):
        raise AssertionError(f"not strict JSON: {value}")

    return json.loads(line, parse_constant=refuse)


def test_echo_shows_every_array_of_a_dict_frame(name):
    with framebus.create(name, capacity="1MiB") as w:
        w.write({"image": np.full((2, 3), 7, np.uint8), "boxes": np.arange(8, dtype=np.float32).reshape(2, 4), "raw": b"\x01\x02"})
        p = echo(name)
        assert p.returncode == 0, p.stderr
        assert "arrays: 3" in p.stdout
        assert "image: shape: (2, 3)  dtype: uint8  min: 7  max: 7" in p.stdout
        assert "boxes: shape: (2, 4)  dtype: float32" in p.stdout
        assert "raw: bytes: 2  head: 01 02" in p.stdout
        p = echo(name, "--json")
        assert p.returncode == 0, p.stderr
        d = strict(p.stdout)
        assert d["kind"] == "arrays" and d["shape"] is None
        assert [a["name"] for a in d["arrays"]] == ["image", "boxes", "raw"]
        assert d["arrays"][1] == {"name": "boxes", "kind": "array", "shape": [2, 4], "dtype": "float32", "min": 0.0, "max": 7.0, "mean": 3.5, "first": [float(i) for i in range(8)]}
        assert d["arrays"][2] == {"name": "raw", "kind": "bytes", "length": 2, "codec": None, "head": "01 02"}
        w.unlink()


def test_echo_shows_a_byte_payload_as_bytes_with_its_codec(name):
    with framebus.create(name, capacity="1MiB") as w:
        w.write(bytes(range(40)), codec="h264")
        p = echo(name)
        assert p.returncode == 0, p.stderr
        assert "bytes: 40 (codec h264)  head: 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f" in p.stdout
        assert "dtype" not in p.stdout
        d = strict(echo(name, "--json").stdout)
        assert (d["kind"], d["length"], d["codec"], d["head"]) == ("bytes", 40, "h264", bytes(range(16)).hex(" "))
        w.unlink()


@pytest.mark.parametrize(
    "value, first",
    [
        (np.array([1 + 2j, -3j], np.complex64), [[1.0, 2.0], [0.0, -3.0]]),
        (np.array([np.nan, np.inf, -np.inf, 1.5]), ["nan", "inf", "-inf", 1.5]),
        (np.array([0.5, 2], np.float16), [0.5, 2.0]),
        (np.array([True, False]), [True, False]),
        (np.array([2**64 - 1], np.uint64), [2**64 - 1]),
        (np.zeros((0, 3), np.int16), []),
    ],
    ids=["complex", "nan-inf", "float16", "bool", "uint64", "empty"],
)
def test_echo_json_is_strict_for_every_dtype(name, value, first):
    with framebus.create(name, capacity="1MiB") as w:
        w.write(value)
        p = echo(name, "--json")
        assert p.returncode == 0, p.stderr
        d = strict(p.stdout)
        assert d["kind"] == "array" and d["dtype"] == str(value.dtype) and d["shape"] == list(value.shape)
        assert d["first"] == first
        if value.dtype.kind == "f":
            assert d["max"] in ("nan", 2.0)  # NaN propagates; shown as a string, never a bare NaN
        w.unlink()


def test_echo_decodes_the_header_of_an_encoded_bridges_packet(name):
    from framebus.media.codec import PacketHeader, pack_header

    header = pack_header(PacketHeader(key=True, channels=3, width=320, height=240, session=77, index=5))
    with framebus.create(name + ".h264", capacity="1MiB", meta_capacity=256) as w:
        w.write(bytes(range(40)), codec="h264", meta=header + b"from the camera")
        p = echo(name + ".h264")
        assert p.returncode == 0, p.stderr
        assert "packet: h264 keyframe, 320x240x3, encoder run 77, packet 5" in p.stdout
        assert "meta: 'from the camera'" in p.stdout  # the source frame's own metadata, no header bytes
        assert "FBV1" not in p.stdout and "\\x" not in p.stdout
        d = strict(echo(name + ".h264", "--json").stdout)
        assert d["packet"] == {"codec": "h264", "keyframe": True, "width": 320, "height": 240, "channels": 3, "session": 77, "index": 5}
        assert d["meta"] == "from the camera" and d["length"] == 40
        w.write(b"\x00\x01", codec="h264", meta=pack_header(PacketHeader(False, 3, 320, 240, 77, 6)))
        p = echo(name + ".h264")
        assert "packet: h264 delta frame, 320x240x3, encoder run 77, packet 6" in p.stdout and "meta: ''" in p.stdout
        w.write(b"\x00\x01", codec="h264", meta=b"plain")  # a byte payload without the header
        d = strict(echo(name + ".h264", "--json").stdout)
        assert d["packet"] is None and d["meta"] == "plain"
        w.unlink()
