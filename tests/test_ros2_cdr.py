"""ros2/cdr.py, the one CDR reader for ROS 2 messages, agrees with rosbags (the project's library
for ROS 2 message definitions) on sensor_msgs/msg/Image (read and write) and
sensor_msgs/msg/CompressedImage (read), and gives the pixel bytes as a view of the message."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("zenoh", reason="framebus.ros2 needs eclipse-zenoh (pip install 'framebus[zenoh]')")
pytest.importorskip("rosbags", reason="rosbags is not installed (pip install 'framebus[zenoh]')")

from rosbags.typesys import Stores, get_typestore  # noqa: E402

from framebus.ros2 import cdr, compressed, image as I  # noqa: E402

TS = get_typestore(Stores.ROS2_JAZZY)
IMAGE, COMPRESSED = "sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"


def header(stamp_ns: int, frame_id: str):
    Hdr, T = TS.types["std_msgs/msg/Header"], TS.types["builtin_interfaces/msg/Time"]
    return Hdr(stamp=T(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000), frame_id=frame_id)


# frame_id lengths 0..4 move every later field across the 4-byte alignment
@pytest.mark.parametrize("frame_id", ["", "c", "ca", "cam", "camera_optical_frame", "kamera_ü"])
@pytest.mark.parametrize("shape,dtype,encoding", [((3, 5, 3), np.uint8, "rgb8"), ((4, 6), np.uint8, "mono8"), ((2, 3), np.dtype("<u2"), "mono16"), ((2, 2, 3), np.uint8, "bgr8")])
def test_image_both_directions_agree_with_rosbags(frame_id, shape, dtype, encoding):
    arr = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    stamp = 1_700_000_000_123_456_789
    ours = I.pack_image(arr, stamp, frame_id, encoding)
    theirs = TS.deserialize_cdr(ours, IMAGE)
    assert (theirs.header.stamp.sec, theirs.header.stamp.nanosec, theirs.header.frame_id) == (stamp // 10**9, stamp % 10**9, frame_id)
    assert (theirs.height, theirs.width, theirs.encoding, theirs.is_bigendian, theirs.step) == (shape[0], shape[1], encoding, 0, arr.strides[0])
    assert bytes(theirs.data) == arr.tobytes()
    assert bytes(TS.serialize_cdr(theirs, IMAGE)) == ours
    back = I.unpack_image(bytes(TS.serialize_cdr(theirs, IMAGE)))
    assert (back.stamp_ns, back.frame_id, back.encoding) == (stamp, frame_id, encoding)
    assert back.data.dtype == arr.dtype and np.array_equal(back.data, arr)


@pytest.mark.parametrize("frame_id", ["", "c", "ca", "cam", "kamera_ü"])
@pytest.mark.parametrize("fmt", ["", "p", "jpeg", "rgb8; jpeg compressed bgr8"])
def test_compressed_image_read_agrees_with_rosbags(frame_id, fmt):
    payload = np.arange(37, dtype=np.uint8)
    msg = TS.types[COMPRESSED](header=header(5_000_000_007, frame_id), format=fmt, data=payload)
    data = bytes(TS.serialize_cdr(msg, COMPRESSED))
    got = compressed.unpack_compressed(data)
    assert (got.stamp_ns, got.frame_id, got.format) == (5_000_000_007, frame_id, fmt)
    assert np.array_equal(got.data, payload)
    with pytest.raises(ValueError, match="truncated|bytes follow"):
        compressed.unpack_compressed(data[:-1])


def test_the_pixels_are_a_view_of_the_message():
    arr = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    data = bytearray(I.pack_image(arr, 1, "cam", "rgb8"))
    img = I.unpack_image(data)
    data[-1] ^= 0xFF
    assert img.data[-1, -1, -1] == arr[-1, -1, -1] ^ 0xFF


def test_a_message_that_is_not_little_endian_cdr_is_refused():
    with pytest.raises(ValueError, match="little-endian CDR"):
        cdr.Reader(b"\x00\x00\x00\x00rest", IMAGE)
    with pytest.raises(ValueError, match="little-endian CDR"):
        compressed.unpack_compressed(b"\x00")
