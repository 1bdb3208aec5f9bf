"""Variable-shape streams (issue #15): frames that carry their own shape and dtype, several
named arrays per frame, byte payloads; hostile input refused with nothing written; damaged
frame tables refused as CorruptStreamError; an old layout version refused."""

from __future__ import annotations

import gc
import os
import struct

import numpy as np
import pytest

import framebus
from framebus.errors import CorruptStreamError, InvalidArgumentError, StreamClosedError


@pytest.fixture
def pair(name):
    w = framebus.create(name, capacity=1 << 20)
    r = framebus.open(name)
    yield w, r
    r.close()
    w.unlink()


def test_capacity_and_geometry(name):
    with framebus.create(name, capacity="64KiB") as w:
        assert w.variable and w.capacity == 65536 and w.size == 65536
        assert w.shape is None and w.dtype is None
        assert "capacity=65536" in repr(w)
        w.unlink()
    for bad, exc in [("lots", ValueError), (-1, ValueError), (0, ValueError), (1.5, TypeError), ("0MiB", ValueError)]:
        with pytest.raises(exc):
            framebus.create(name, capacity=bad)
    with pytest.raises(ValueError, match="either shape= or capacity="):
        framebus.create(name, shape=(2,), capacity=100)
    with pytest.raises(TypeError, match="needs shape= .* or capacity="):
        framebus.create(name)
    with pytest.raises(ValueError, match="size="):
        framebus.create(name, capacity=100, size=100)
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(7, dtype=">i2"),
        np.array(3.5, np.float64),
        np.zeros((0, 4), np.float32),
        np.ones((2, 3, 4, 1, 1, 1, 1, 2), np.complex64),
        np.array([True, False]),
        np.arange(24, dtype=np.uint16).reshape(4, 6)[:, ::2],  # not contiguous: copied
        [[1, 2], [3, 4]],
    ],
)
def test_any_array_round_trips(pair, value):
    w, r = pair
    w.write(value)
    expected = np.asarray(value)
    got = r.read()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    with r.view() as f:
        assert f.shape == expected.shape and f.dtype == expected.dtype and f.names is None
        assert not f.array.flags.writeable
        np.testing.assert_array_equal(f.array, expected)
    pub = r.read_publication()
    assert pub.shape == expected.shape and pub.dtype == expected.dtype and pub.names is None


def test_dict_frames_are_one_atomic_unit(pair):
    w, r = pair
    image = np.random.default_rng(1).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    boxes = np.random.default_rng(2).random((5, 4), dtype=np.float32)
    w.write({"image": image, "boxes": boxes, "tag": b"cam0"}, frame_id=9, meta=b"m")
    got = r.read_new(timeout=5)
    assert list(got) == ["image", "boxes", "tag"]
    np.testing.assert_array_equal(got["image"], image)
    np.testing.assert_array_equal(got["boxes"], boxes)
    assert got["tag"] == b"cam0"  # written as bytes, read back as bytes
    with r.view() as f:
        assert f.names == ("image", "boxes", "tag") and f.shape is None and f.dtype is None and f.frame_id == 9
        arrays = f.arrays
        assert arrays["boxes"].base is not None and not arrays["boxes"].flags.writeable
        assert arrays["image"].ctypes.data % 4096 == 0  # the first array is page aligned
        assert all(a.ctypes.data % 64 == 0 for a in arrays.values())
        np.testing.assert_array_equal(arrays["boxes"], boxes)
        with pytest.raises(ValueError, match="several arrays"):
            f.array
        for export in (np.asarray, memoryview):
            with pytest.raises(ValueError, match="several arrays"):
                export(f)
    out = {"image": np.empty_like(image), "boxes": np.empty_like(boxes), "tag": np.empty(4, np.uint8)}
    assert r.read(out=out) is out
    np.testing.assert_array_equal(out["boxes"], boxes)
    pub = r.read_publication()
    assert pub.names == ("image", "boxes", "tag") and pub.meta == b"m"


def test_byte_payloads(pair):
    w, r = pair
    for value in (b"\x00\x01packet", bytearray(b"xyz"), memoryview(b"abcdef")[1:4], memoryview(np.arange(3, dtype=np.int32)), b""):
        w.write(value, codec="h264")
        got = r.read_new(timeout=5)
        assert isinstance(got, bytes) and got == bytes(memoryview(value).cast("B"))
        with r.view() as f:
            assert f.is_bytes and f.codec == "h264" and f.dtype == np.uint8
            assert bytes(memoryview(f)) == got and bytes(f.array) == got
    w.write(b"raw")
    with r.view() as f:
        assert f.codec is None
    with pytest.raises(ValueError, match="codec"):
        w.write(b"x", codec="not a codec!")


def test_read_out_must_fit(pair):
    w, r = pair
    w.write(np.ones((3, 4), np.float32))
    out = np.empty((3, 4), np.float32)
    assert r.read(out=out) is out and r.read_into(out) is out
    for bad in (np.empty((4, 3), np.float32), np.empty((3, 4), np.float64), np.empty((3, 4), np.float32)[:, :2]):
        with pytest.raises(InvalidArgumentError, match=r"holds \"\": shape \[3, 4\] dtype float32"):
            r.read(out=bad)
    w.write(np.ones(3, np.uint8))
    with pytest.raises(ValueError, match="read-only"):
        r.read(out=np.ones(3, np.uint8)[:].view().setflags(write=False) or _readonly(3))


def _readonly(n):
    a = np.ones(n, np.uint8)
    a.flags.writeable = False
    return a


def test_loans_of_any_layout(pair):
    w, r = pair
    with w.loan(shape=(2, 3), dtype=np.float64, frame_id=4) as a:
        assert a.flags.writeable and a.shape == (2, 3)
        a[:] = 2.5
    np.testing.assert_array_equal(r.read(), np.full((2, 3), 2.5))
    with w.loan(nbytes=5, codec="mjpeg") as b:
        b[:] = np.frombuffer(b"JFIF!", np.uint8)
    assert r.read() == b"JFIF!"
    with w.loan(arrays={"image": ((4, 6, 3), np.uint8), "boxes": ((3, 4), np.float32)}) as d:
        d["image"][:] = 7
        d["boxes"][:] = np.arange(12).reshape(3, 4)
    got = r.read()
    assert (got["image"] == 7).all() and got["boxes"][2, 3] == 11
    loan = w.loan(arrays={"a": (0, "u1"), "b": (2, "u1")})
    with pytest.raises(ValueError, match="several named arrays|loan.arrays"):
        loan.array
    assert list(loan.arrays) == ["a", "b"]
    loan.abort()
    loan = w.loan(arrays={"only": (3, "u1")})
    assert loan.array.shape == (3,) and list(loan.arrays) == ["only"]
    loan.abort()
    assert r.read()["boxes"][2, 3] == 11
    for kwargs, exc in [
        ({}, ValueError),
        ({"shape": (2,)}, ValueError),
        ({"shape": 2, "nbytes": 2}, ValueError),
        ({"nbytes": 2, "dtype": "u1"}, ValueError),
        ({"shape": (2,), "dtype": object}, TypeError),
        ({"arrays": {"a": 3}}, TypeError),
        ({"arrays": {1: ((1,), "u1")}}, TypeError),
        ({"nbytes": (1 << 20) + 1}, ValueError),
        ({"shape": (2**40, 2**40), "dtype": "f4"}, ValueError),
        ({"shape": (2**62, 2**62, 4), "dtype": "f4"}, ValueError),
        ({"shape": (-1,), "dtype": "f4"}, ValueError),
        ({"shape": (1,) * 9, "dtype": "f4"}, ValueError),
    ]:
        with pytest.raises(exc):
            w.loan(**kwargs)
    # Nothing was claimed by a refused loan: a write goes through.
    w.write(np.ones(2, np.int8))
    np.testing.assert_array_equal(r.read(), [1, 1])


def test_loaned_dict_outliving_its_loan_keeps_the_slot(name):
    with framebus.create(name, capacity=4096, slots=3) as w:
        with w.loan(arrays={"a": ((8,), np.uint8), "b": ((2,), np.float32)}) as d:
            d["a"][:] = 5
        kept = d["a"]
        assert not kept.flags.writeable
        for i in range(6):
            w.write(np.full(8, i, np.uint8), timeout=5)
        assert (kept == 5).all()
        del d, kept
        gc.collect()
        w.unlink()


@pytest.mark.parametrize(
    ("value", "exc", "text"),
    [
        (np.zeros((1 << 20) + 1, np.uint8), ValueError, "capacity of 1048576"),
        (np.zeros((600, 600), np.float64), ValueError, "capacity of 1048576"),
        (np.array([object(), 1]), TypeError, "bool, integer, float or complex"),
        (np.array(["text"]), TypeError, "bool, integer, float or complex"),
        (np.zeros(2, dtype=[("x", "f4")]), TypeError, "bool, integer, float or complex"),
        (np.zeros(2, dtype="M8[s]"), TypeError, "bool, integer, float or complex"),
        ({f"a{i}": np.ones(1) for i in range(32)}, ValueError, "at most 31 arrays"),
        ({"n" * 33: np.ones(1)}, ValueError, "at most 32 bytes"),
        ({"\u00e9" * 17: np.ones(1)}, ValueError, "at most 32 bytes"),
        ({"a\0b": np.ones(1)}, ValueError, "NUL"),
        ({3: np.ones(1)}, TypeError, "names must be str"),
        ({}, ValueError, "at least one array"),
        (object(), TypeError, None),
        ({"a": [object()]}, TypeError, None),
    ],
)
def test_hostile_writes_are_refused_and_the_previous_frame_stays(pair, value, exc, text):
    w, r = pair
    w.write({"keep": np.arange(3)}, frame_id=1)
    with pytest.raises(exc, match=text):
        w.write(value)
    assert w.write_sequence == 1
    with r.view() as f:
        assert f.seq == 1 and f.names == ("keep",)
    w.write(np.ones(1, np.uint8))  # the stream still takes frames (no claim was left open)
    assert w.write_sequence == 2


def test_fixed_shape_streams_refuse_per_frame_arguments(name):
    with framebus.create(name, shape=(2, 2), dtype=np.float32) as w:
        assert not w.variable and w.capacity is None
        with pytest.raises(ValueError, match="variable-shape"):
            w.write(np.ones((2, 2), np.float32), codec="h264")
        for kwargs in ({"nbytes": 4}, {"arrays": {"a": ((1,), "u1")}}, {"shape": (3, 3)}, {"dtype": np.int8}):
            with pytest.raises(ValueError):
                w.loan(**kwargs)
        with w.loan(shape=(2, 2), dtype=np.float32) as a:
            a[:] = 1
        with w.view() as f:
            assert f.shape == (2, 2) and f.dtype == np.float32 and f.names is None and not f.is_bytes
            assert list(f.arrays) == [""]
        w.unlink()


def test_empty_stream_and_clear(pair):
    w, r = pair
    for call in (r.read, r.read_publication):
        with pytest.raises(framebus.StreamEmptyError, match="has no frame yet"):
            call()
    w.clear()
    assert r.read() == b""


def test_frames_iterator_and_asyncio(pair):
    import asyncio

    w, r = pair
    w.write({"a": np.arange(2)})
    frames = r.frames(timeout=0.2)
    f = next(frames)
    assert f.names == ("a",)
    frames.close()

    async def main():
        w.write(np.arange(5, dtype=np.int64))
        return await r.read_new_async(timeout=5)

    np.testing.assert_array_equal(asyncio.run(main()), np.arange(5))


def _slot_table_offset(name: str, reader) -> int:
    """File offset of the newest frame's table (from the header's geometry)."""
    with open(f"/dev/shm/framebus.{name}", "rb") as fh:
        head = fh.read(448)
    slot_stride, = struct.unpack_from("<Q", head, 80)
    payload_offset, = struct.unpack_from("<Q", head, 216)
    published, = struct.unpack_from("<Q", head, 256)
    return payload_offset + (published & 0xFF) * slot_stride


@pytest.mark.parametrize(
    ("offset", "data"),
    [
        (0, b"XXXX"),  # magic
        (4, struct.pack("<I", 999)),  # count
        (16, struct.pack("<Q", 1 << 40)),  # frame end past the slot
        (128 + 32, b"|O8\0"),  # object dtype
        (128 + 32, b"<U4\0"),  # text dtype
        (128 + 40, struct.pack("<I", 77)),  # ndim
        (128 + 48, struct.pack("<Q", 8)),  # offset inside the table
        (128 + 56, struct.pack("<Q", 12345)),  # nbytes disagrees with the shape
        (128 + 64, struct.pack("<Q", 1 << 62)),  # shape product overflows
        (128, b"\xff\xfe"),  # name not UTF-8
    ],
)
def test_damaged_frame_tables_are_corrupt_never_misread(pair, name, offset, data):
    w, r = pair
    w.write({"image": np.ones((4, 4), np.uint8)})
    at = _slot_table_offset(name, r)
    with open(f"/dev/shm/framebus.{name}", "r+b") as fh:
        fh.seek(at + offset)
        fh.write(data)
    for op in (r.read, r.view, r.read_publication):
        with pytest.raises(CorruptStreamError, match="frame 1"):
            op()
    w.write(np.ones(2, np.uint8))  # a new frame is readable again
    np.testing.assert_array_equal(r.read(), [1, 1])


def test_a_reader_refuses_another_layout_version(name):
    with framebus.create(name, capacity=4096) as w:
        with open(f"/dev/shm/framebus.{name}", "r+b") as fh:
            fh.seek(8)
            fh.write(struct.pack("<I", 1))
        with pytest.raises(framebus.IncompatibleStreamError, match="layout version 1, this framebus understands version 2"):
            framebus.open(name)
        w.unlink()
    assert framebus.LAYOUT_VERSION == 2


def test_views_outlive_close(pair):
    w, r = pair
    w.write({"a": np.arange(4)})
    f = r.view()
    arrays = f.arrays
    f.release()
    r.close()
    np.testing.assert_array_equal(arrays["a"], np.arange(4))
    with pytest.raises(StreamClosedError):
        r.read()
    r2 = framebus.open(w.name)
    r2.close()


def test_ls_and_stat_show_capacity(pair, name):
    from framebus.commands.ls import rows

    w, r = pair
    info = framebus.stat(name)
    assert info.variable and info.capacity == 1 << 20 and info.shape is None and info.dtype is None
    row = next(x for x in rows() if x["name"] == name)
    assert row["shape"] == "any, 1.0 MiB/frame" and row["dtype"] == "any"
    assert framebus.gc(dry_run=True) is not None


def test_shape_product_overflow_names_the_limit(pair):
    w, r = pair
    with pytest.raises(ValueError, match="overflows"):
        w.loan(shape=(2**62, 2**62, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="overflows"):
        w.loan(arrays={"a": ((2**40, 2**40, 2**40), np.uint8)})
    w.write(np.ones(1, np.uint8))
    assert w.write_sequence == 1


def test_exist_ok_and_pickling(name):
    import pickle

    with framebus.create(name, capacity=4096) as w:
        again = framebus.create(name, capacity=4096, exist_ok=True)
        assert again.variable and again.capacity == 4096
        again.close()
        with pytest.raises(FileExistsError, match="existing variable shape, capacity 4096 bytes per frame"):
            framebus.create(name, capacity=8192, exist_ok=True)
        with pytest.raises(FileExistsError, match="variable shape"):
            framebus.create(name, shape=(4096,), dtype=np.uint8, exist_ok=True)
        w.write({"a": np.arange(3)})
        other = pickle.loads(pickle.dumps(w))
        assert other.variable and list(other.read()) == ["a"]
        other.close()
        w.unlink()


def test_pyshmem_api_refuses_a_variable_stream(pair, name):
    from framebus import pyshmem

    with pytest.raises(ValueError, match="variable-shape frames .* framebus.open"):
        pyshmem.open(name)
    again = framebus.open(name)
    assert again.variable  # the native API opens it
    again.close()


def test_capacity_zero_or_negative_says_it_must_be_positive(name):
    for bad in ("0", "0MiB", "-3", 0, -3):
        with pytest.raises(InvalidArgumentError, match="must be a positive number of bytes"):
            framebus.create(name, capacity=bad)
    for bad in ("lots", "inf", "nan", "3 parsecs"):
        with pytest.raises(InvalidArgumentError, match="is not a size"):
            framebus.create(name, capacity=bad)
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


def test_unlink_after_close_says_how_to_unlink_by_name(name):
    w = framebus.create(name, capacity="64KiB")
    w.close()
    with pytest.raises(StreamClosedError, match=rf"framebus\.unlink\('{name}'\)"):
        w.unlink()
    assert os.path.exists(f"/dev/shm/framebus.{name}")  # nothing happened to the stream
    framebus.unlink(name)


@pytest.mark.parametrize("value", [np.zeros(3), {"a": b"abc"}, {"image": np.zeros((2, 2), np.uint8)}], ids=["array", "dict-of-bytes", "dict"])
def test_codec_is_only_for_a_byte_payload(pair, value):
    w, _ = pair
    with pytest.raises(ValueError, match="codec"):
        w.write(value, codec="h264")


def test_a_dict_value_written_as_bytes_reads_back_as_bytes(pair):
    w, r = pair
    w.write({"a": b"abc", "b": np.ones(2)})
    assert r.read()["a"] == b"abc"
