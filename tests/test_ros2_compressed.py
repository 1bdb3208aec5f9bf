"""ROS 2 sensor_msgs/msg/CompressedImage decoded in process by PyAV (framebus.media.image, read
from CDR by ros2/cdr.py): PNG exactly, JPEG within a tolerance, mono8/mono16/rgb8 outputs as
the message's format says, and clear errors for what is not a whole JPEG/PNG."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("zenoh", reason="framebus.ros2 needs eclipse-zenoh (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")
av = pytest.importorskip("av", reason="PyAV is not installed (pip install 'framebus[video]')")

from rosbags.typesys import Stores, get_typestore  # noqa: E402

from framebus.media.image import decode_still, kind_of  # noqa: E402
from framebus.ros2 import compressed  # noqa: E402

TS = get_typestore(Stores.ROS2_JAZZY)


def encode(arr: np.ndarray, codec: str) -> bytes:
    """``arr`` as one PNG (``png``) or JPEG (``mjpeg``) image, encoded by PyAV."""
    fmt = {np.dtype(np.uint8): "gray" if arr.ndim == 2 else "rgb24", np.dtype("<u2"): "gray16le"}[arr.dtype]
    ctx = av.CodecContext.create(codec, "w")
    ctx.width, ctx.height = arr.shape[1], arr.shape[0]
    ctx.pix_fmt = ("gray16be" if fmt == "gray16le" else fmt) if codec == "png" else "yuvj420p"
    ctx.time_base = Fraction(1, 1)
    return b"".join(bytes(p) for p in ctx.encode(av.VideoFrame.from_ndarray(arr, format=fmt)) + ctx.encode(None))


def message(payload: bytes, fmt: str, stamp=(12, 34), frame_id="cam") -> bytes:
    """A CDR CompressedImage made by rosbags (the message definition's own serializer)."""
    C, Hdr, T = TS.types["sensor_msgs/msg/CompressedImage"], TS.types["std_msgs/msg/Header"], TS.types["builtin_interfaces/msg/Time"]
    msg = C(header=Hdr(stamp=T(sec=stamp[0], nanosec=stamp[1]), frame_id=frame_id), format=fmt, data=np.frombuffer(payload, np.uint8))
    return bytes(TS.serialize_cdr(msg, "sensor_msgs/msg/CompressedImage"))


def noise(shape, dtype=np.uint8, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(0, int(info.max) + 1, shape, dtype=dtype)


@pytest.mark.parametrize(
    "shape,dtype,fmt,encoding",
    [
        ((48, 64, 3), np.uint8, "rgb8; png compressed rgb8", "rgb8"),
        ((48, 64, 3), np.uint8, "bgr8; png compressed bgr8", "rgb8"),
        ((47, 63, 3), np.uint8, "png", "rgb8"),
        ((48, 64), np.uint8, "mono8; png compressed mono8", "mono8"),
        ((48, 64), np.dtype("<u2"), "mono16; png compressed mono16", "mono16"),
    ],
)
def test_a_png_compressed_image_decodes_to_the_exact_pixels(shape, dtype, fmt, encoding):
    arr = noise(shape, dtype)
    out = compressed.decode(message(encode(arr, "png"), fmt))
    assert out.encoding == encoding and out.stamp_ns == 12_000_000_034 and out.frame_id == "cam"
    assert out.data.dtype == arr.dtype and np.array_equal(out.data, arr)


def test_two_unrelated_pngs_in_a_row_each_decode_exactly():
    """FFmpeg's PNG decoder keeps state between pictures: a decoder reused for a second image
    gives wrong pixels, so each image gets its own."""
    a, b = noise((32, 40, 3), seed=1), noise((32, 40, 3), seed=2)
    assert np.array_equal(compressed.decode(message(encode(a, "png"), "png")).data, a)
    assert np.array_equal(compressed.decode(message(encode(b, "png"), "png")).data, b)


@pytest.mark.parametrize("shape,fmt,encoding", [((48, 64, 3), "rgb8; jpeg compressed rgb8", "rgb8"), ((48, 64, 3), "bgr8; jpeg compressed bgr8", "rgb8"), ((48, 64), "mono8; jpeg compressed mono8", "mono8")])
def test_a_jpeg_compressed_image_decodes_within_a_tolerance(shape, fmt, encoding):
    y, x = np.mgrid[0:shape[0], 0:shape[1]]
    arr = np.stack([x * 4, y * 5, (x + y) * 2], -1).astype(np.uint8) if len(shape) == 3 else (x * 4).astype(np.uint8)
    out = compressed.decode(message(encode(arr, "mjpeg"), fmt))
    assert out.encoding == encoding and out.data.shape == arr.shape and out.data.dtype == np.uint8
    diff = np.abs(out.data.astype(int) - arr)
    assert diff.mean() < 4 and diff.max() <= 32


def test_the_kind_comes_from_the_bytes_not_the_format():
    arr = noise((16, 16, 3))
    assert kind_of(encode(arr, "png")) == "png" and kind_of(encode(arr, "mjpeg")) == "jpeg" and kind_of(b"GIF89a") is None
    # a format that names JPEG for PNG bytes still decodes (exactly)
    assert np.array_equal(compressed.decode(message(encode(arr, "png"), "rgb8; jpeg compressed rgb8")).data, arr)


def test_what_is_not_a_whole_jpeg_or_png_is_a_value_error():
    png = encode(noise((32, 32, 3)), "png")
    with pytest.raises(ValueError, match="neither PNG nor JPEG"):
        compressed.decode(message(b"GIF89a....", "gif"))
    with pytest.raises(ValueError, match="PNG image could not be decoded"):
        decode_still(png[: len(png) // 2])
    with pytest.raises(ValueError, match="pix_fmt"):
        decode_still(png, "yuv420p")
    with pytest.raises(ValueError, match="truncated"):
        compressed.decode(message(png, "png")[:30])


def test_without_pyav_the_error_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_av(mod, *args, **kwargs):
        if mod == "av":
            raise ImportError("not installed")
        return real_import(mod, *args, **kwargs)

    png = message(encode(noise((8, 8, 3)), "png"), "png")
    monkeypatch.setattr(builtins, "__import__", no_av)
    with pytest.raises(ImportError, match=r"pip install 'framebus\[video\]'"):
        compressed.decode(png)
