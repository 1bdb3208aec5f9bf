"""Every error a user can run into: the exception type (always a builtin a caller would catch),
a message that says what to do, and no side effect (nothing written, nothing left in /dev/shm).
Damaged segments are refused cleanly and never crash the interpreter."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import pwd
import re
import shutil
import stat
import struct
import subprocess

import numpy as np
import pytest

import framebus
from framebus import errors

import mp_targets
from conftest import CHILD_TIMEOUT, private_shm_wrapper, segment_path, shm_entries

BAD_NAMES = ["", ".x", ".hidden", "a/b", "/abs", "..", "../etc", "a\0b", "x" * 201, "a b", " a", "tab\t", "é", "a:b", "a*b"]

# Offsets of header fields in layout version 1 (crates/framebus/src/ring/layout.rs).
OFF_MAGIC, OFF_VERSION, OFF_READY = 0, 8, 12
OFF_SLOT_COUNT, OFF_FRAME_BYTES, OFF_SHAPE, OFF_DTYPE, OFF_CHECKSUM = 64, 72, 96, 168, 224
OFF_PUBLISHED = 256
#: Start of the payloads of the streams the fuzz tests make (3 slots, 64 reader entries).
OFF_PAYLOAD = 8192
# Version 2 (variable-shape streams) moved no header field.
layout_v1 = pytest.mark.skipif(framebus.LAYOUT_VERSION not in (1, 2), reason="header offsets are those of layout versions 1 and 2")


def poke(name: str, offset: int, data: bytes) -> None:
    fd = os.open(segment_path(name), os.O_RDWR)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def peek(name: str, offset: int, n: int) -> bytes:
    fd = os.open(segment_path(name), os.O_RDONLY)
    try:
        return os.pread(fd, n, offset)
    finally:
        os.close(fd)


# -- missing / duplicate ---------------------------------------------------------------------


def test_missing_name_is_file_not_found_pointing_to_create(name):
    for call in (lambda: framebus.open(name), lambda: framebus.unlink(name), lambda: framebus.stat(name)):
        with pytest.raises(FileNotFoundError) as info:
            call()
        assert isinstance(info.value, framebus.StreamNotFoundError)
        assert info.value.errno == errno.ENOENT
        assert name in str(info.value)
    with pytest.raises(FileNotFoundError, match=r"create\("):
        framebus.open(name)


def test_duplicate_name_is_file_exists(name):
    with framebus.create(name, shape=(2,)) as s:
        with pytest.raises(FileExistsError) as info:
            framebus.create(name, shape=(2,))
        assert info.value.errno == errno.EEXIST and name in str(info.value)
        with pytest.raises(FileExistsError):
            framebus.create(name, shape=(5,), dtype=np.int8)
        assert s.attached == 1
        s.unlink()


def test_exist_ok_reuses_the_same_spec(name):
    with framebus.create(name, shape=(2, 3), dtype=np.int16, slots=3) as s:
        s.write(np.ones((2, 3), np.int16), frame_id=4)
        with framebus.create(name, shape=(2, 3), dtype=np.int16, slots=3, exist_ok=True) as again:
            assert again.write_sequence == 1 and again.frame_id == 4
            np.testing.assert_array_equal(again.read(), np.ones((2, 3)))
            assert s.attached == 2
        s.unlink()


@pytest.mark.parametrize(
    "other",
    [dict(shape=(2, 4), dtype=np.int16, slots=3), dict(shape=(2, 3), dtype=np.uint16, slots=3), dict(shape=(2, 3), dtype=np.int16, slots=4), dict(shape=(3, 2), dtype=np.int16, slots=3)],
)
def test_exist_ok_refuses_a_different_spec(name, other):
    with framebus.create(name, shape=(2, 3), dtype=np.int16, slots=3) as s:
        s.write(np.ones((2, 3), np.int16))
        with pytest.raises(FileExistsError, match="spec"):
            framebus.create(name, exist_ok=True, **other)
        assert s.shape == (2, 3) and s.write_sequence == 1 and s.attached == 1
        s.unlink()


def test_exist_ok_replaces_a_stale_stream(name, spawn):
    child = spawn(
        f"""
        s = framebus.create({name!r}, shape=(4,), dtype=np.int32)
        s.write(np.arange(4, dtype=np.int32))
        say("created")
        """
    )
    child.expect("created")
    child.finish()
    assert framebus.stat(name).stale
    with framebus.create(name, shape=(7,), dtype=np.float64, exist_ok=True) as s:  # any spec
        assert s.shape == (7,) and s.write_sequence == 0
        assert not framebus.stat(name).stale
        s.unlink()


# -- closed handles --------------------------------------------------------------------------


def test_closed_handle_raises_runtime_error_saying_to_reopen(name):
    s = framebus.create(name, shape=(3,))
    s.close()
    calls = {
        "write": lambda: s.write(np.zeros(3, np.float32)),
        "read": lambda: s.read(),
        "read(out=)": lambda: s.read(out=np.zeros(3, np.float32)),
        "read_into": lambda: s.read_into(np.zeros(3, np.float32)),
        "read_new": lambda: s.read_new(timeout=1),
        "read_publication": lambda: s.read_publication(),
        "read_new_publication": lambda: s.read_new_publication(timeout=1),
        "acquire": lambda: s.acquire(timeout=1),
        "release": lambda: s.release(),
        "locked": lambda: s.locked(timeout=1).__enter__(),
        "clear": lambda: s.clear(),
        "attached": lambda: s.attached,
        "write_time": lambda: s.write_time,
        "write_sequence": lambda: s.write_sequence,
        "frame_id": lambda: s.frame_id,
        "missed": lambda: s.missed,
        "total_missed": lambda: s.total_missed,
    }
    for label, call in calls.items():
        with pytest.raises(RuntimeError, match="reopen") as info:
            call()
        assert isinstance(info.value, framebus.StreamClosedError), label
        assert "framebus.open" in str(info.value), label
    # What does not need the segment still works; closing again and unlinking are harmless.
    assert (s.name, s.shape, s.dtype, s.closed) == (name, (3,), np.dtype(np.float32), True)
    s.close()
    assert name in [s.name for s in framebus.list_streams()]
    framebus.unlink(name)


# -- wrong frames: ValueError and nothing written ---------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(4, np.float32),
        np.zeros((3, 1), np.float32),
        np.zeros((1, 3), np.float32),
        np.zeros((), np.float32),
        np.zeros(3, np.complex64),
        np.zeros(3, np.complex128),
        np.array(["a", "b", "c"]),
        np.zeros(3, "M8[s]"),
        [1.0, 2.0],
        [[1.0, 2.0, 3.0]],
    ],
    ids=["len4", "3x1", "1x3", "scalar", "complex64", "complex128", "str", "datetime", "list2", "list1x3"],
)
def test_wrong_shape_or_dtype_is_value_error_and_writes_nothing(name, bad):
    with framebus.create(name, shape=(3,), dtype=np.float32) as w, framebus.open(name) as r:
        w.write(np.array([1, 2, 3], np.float32), frame_id=1, meta=b"m")
        with pytest.raises(ValueError) as info:
            w.write(bad, frame_id=2, meta=b"n")
        assert "nothing was written" in str(info.value) or "shape" in str(info.value) or "dtype" in str(info.value)
        assert w.write_sequence == 1
        pub = r.read_publication()
        assert (pub.seq, pub.frame_id, pub.meta) == (1, 1, b"m")
        np.testing.assert_array_equal(pub.payload, [1, 2, 3])
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0)
        w.unlink()


def test_wrong_out_is_value_error_and_left_untouched(name):
    with framebus.create(name, shape=(3,), dtype=np.float32) as s:
        s.write(np.ones(3, np.float32))
        for out in (np.zeros(4, np.float32), np.zeros(3, np.float64), np.zeros(6, np.float32)[::2], np.zeros((3, 1), np.float32)):
            before = out.copy()
            with pytest.raises(ValueError, match="out"):
                s.read(out=out)
            with pytest.raises(ValueError):
                s.read_into(out)
            np.testing.assert_array_equal(out, before)
        ro = np.zeros(3, np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            s.read(out=ro)
        s.unlink()


def test_out_of_a_wrong_type_is_type_error(name):
    with framebus.create(name, shape=(3,), dtype=np.float32) as s:
        try:
            with pytest.raises(TypeError):
                s.read(out=[0.0, 0.0, 0.0])
        finally:
            s.unlink()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(shape=(0,)),
        dict(shape=(2, 0)),
        dict(shape=-1),
        dict(shape=()),
        dict(shape=(1,) * 9),
        dict(shape=(2,), size=7),
        dict(shape=(2,), dtype=np.float32, size=2),
        dict(shape=(2,), dtype=object),
        dict(shape=(2,), dtype=[("a", "i4")]),
        dict(shape=(2,), dtype="U4"),
        dict(shape=(2,), slots=1),
        dict(shape=(2,), slots=65),
        dict(shape=(2,), slots=0),
        dict(shape=(2,), permissions=0o1000),
        dict(shape=(2,), permissions=-1),
        dict(shape=(2,), max_readers=0),
        dict(shape=(2,), meta_capacity=(1 << 20) + 1),
        dict(shape=(1 << 62,), dtype=np.float64),
    ],
)
def test_invalid_create_arguments_are_value_errors_and_create_nothing(name, kwargs):
    with pytest.raises(ValueError):
        framebus.create(name, **kwargs)
    assert not os.path.exists(segment_path(name))


@pytest.mark.parametrize("bad", BAD_NAMES, ids=lambda n: repr(n)[:20])
def test_invalid_names_are_value_errors(bad):
    before = shm_entries()
    for call in (
        lambda: framebus.create(bad, shape=(2,)),
        lambda: framebus.open(bad),
        lambda: framebus.unlink(bad),
        lambda: framebus.stat(bad),
    ):
        with pytest.raises(ValueError, match="name"):
            call()
    assert shm_entries() == before


def test_names_at_the_limits_are_accepted(name):
    for n in (name + "." + "x" * (200 - len(name) - 1), name + ".a-b_c.D9", name + ".."):
        assert len(n) <= 200
        framebus.create(n, shape=(1,)).unlink()


@pytest.mark.parametrize(
    "call",
    [
        lambda: framebus.create(5, shape=(2,)),
        lambda: framebus.create(None, shape=(2,)),
        lambda: framebus.create(b"abc", shape=(2,)),
        lambda: framebus.open(5),
        lambda: framebus.unlink(None),
        lambda: framebus.create("t-type", shape="ab"),
        lambda: framebus.create("t-type", shape=(2.5,)),
        lambda: framebus.create("t-type", shape=True),
        lambda: framebus.create("t-type", shape=(2,), dtype="nonsense"),
        lambda: framebus.create("t-type", shape=(2,), slots=2.0),
        lambda: framebus.create("t-type", shape=(2,), slots=True),
        lambda: framebus.create("t-type", shape=(2,), permissions="0o600"),
        lambda: framebus.create("t-type", shape=(2,), size="8"),
    ],
    ids=range(13),
)
def test_wrong_argument_types_are_type_errors(call):
    before = shm_entries()
    with pytest.raises(TypeError):
        call()
    assert shm_entries() == before


def test_wrong_types_on_a_stream_are_type_errors(name):
    with framebus.create(name, shape=(2,), dtype=np.float32) as s:
        for call in (
            lambda: s.write(None),
            lambda: s.write(object()),
            lambda: s.write(np.zeros(2, np.float32), meta="text"),
            lambda: s.write(np.zeros(2, np.float32), meta=5),
            lambda: s.write(np.zeros(2, np.float32), frame_id="1"),
            lambda: s.write(np.zeros(2, np.float32), frame_id=1.5),
            lambda: s.read_new(timeout="1"),
            lambda: s.acquire(timeout="1"),
            lambda: framebus.open(name, mode=1),
        ):
            with pytest.raises(TypeError):
                call()
        assert s.write_sequence == 0
        with pytest.raises(ValueError, match="mode"):
            framebus.open(name, mode="fast")
        s.unlink()


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), float("-inf")])
def test_negative_or_nan_timeouts_are_value_errors(name, bad):
    with framebus.create(name, shape=(2,)) as s:
        for call in (
            lambda: s.read_new(timeout=bad),
            lambda: s.read_new_publication(timeout=bad),
            lambda: s.write(np.zeros(2, np.float32), timeout=bad),
            lambda: s.acquire(timeout=bad),
            lambda: s.locked(timeout=bad).__enter__(),
            lambda: s.clear(timeout=bad),
        ):
            with pytest.raises(ValueError, match="timeout"):
                call()
        assert s.write_sequence == 0 and not s.lock_held()
        s.unlink()


def test_infinite_and_zero_timeouts_are_accepted(name):
    with framebus.create(name, shape=(2,)) as s:
        s.write(np.ones(2, np.float32), timeout=float("inf"))
        s.write(np.ones(2, np.float32), timeout=0)
        s.acquire(timeout=float("inf"))
        s.release()
        s.acquire(timeout=0)
        s.release()
        with framebus.open(name) as r:
            s.write(np.ones(2, np.float32))
            r.read_new(timeout=float("inf"))
        s.unlink()


# -- permissions -----------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o777])
def test_permissions_are_exact_whatever_the_umask(name, umask):
    old = os.umask(umask)
    try:
        framebus.create(name, shape=(2,)).close()
        framebus.create(name + ".open", shape=(2,), permissions=0o644).close()
        framebus.create(name + ".none", shape=(2,), permissions=0o000).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(segment_path(name)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(segment_path(name + ".open")).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(segment_path(name + ".none")).st_mode) == 0o000
    assert framebus.stat(name).mode == 0o600
    for n in (name, name + ".open", name + ".none"):
        framebus.unlink(n)


@pytest.mark.parametrize("mode", [0o640, "lossless"])
def test_create_takes_permissions_not_mode(name, mode):
    """create()'s permission bits are permissions=; mode= (open()'s reader mode) is a TypeError
    that names permissions= and creates nothing."""
    with pytest.raises(TypeError, match=r"create\(\) takes permissions=0o[0-7]+ for the file permission bits .*mode= is open\(\)'s reader mode"):
        framebus.create(name, shape=(2,), mode=mode)
    assert not os.path.exists(segment_path(name))


def _other_user():
    """A uid other than ours to run a child as (root only): nobody, else a user made with useradd."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another user")
    try:
        return pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        pytest.skip("no second user and no useradd")
    try:
        return pwd.getpwnam("framebus-test").pw_uid, pwd.getpwnam("framebus-test").pw_gid
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "framebus-test"], check=True, capture_output=True)
        return pwd.getpwnam("framebus-test").pw_uid, pwd.getpwnam("framebus-test").pw_gid


def test_another_user_gets_permission_error_naming_the_path(name, spawn):
    uid, gid = _other_user()
    with framebus.create(name, shape=(2,)) as s:
        s.write(np.ones(2, np.float32))
        # The child imports framebus as root, then drops to the other user and tries to open.
        child = spawn(
            f"""
            os.setgid({gid})
            os.setuid({uid})
            for call in (lambda: framebus.open({name!r}), lambda: framebus.create({name!r}, shape=(2,), exist_ok=True)):
                try:
                    call()
                    say("opened")
                except PermissionError as e:
                    say("PermissionError", type(e).__name__, e.errno, str(e))
                except BaseException as e:
                    say("other", type(e).__name__, str(e))
            try:
                framebus.unlink({name!r})
                say("unlinked")
            except PermissionError:
                say("PermissionError")
            """
        )
        for _ in range(2):
            got = child.line()
            assert got.startswith("PermissionError StreamPermissionError 13 "), got
            assert segment_path(name) in got
        assert child.line() == "PermissionError"  # /dev/shm is sticky: nor can it unlink it
        child.finish()
        assert name in [s.name for s in framebus.list_streams()]
        assert s.read().tolist() == [1, 1]
        s.unlink()


# -- /dev/shm too small ----------------------------------------------------------------------


def test_dev_shm_too_small_is_a_clear_error_not_sigbus(name, spawn):
    vfs = os.statvfs("/dev/shm")
    total = vfs.f_blocks * vfs.f_frsize
    if total == 0:
        pytest.skip("/dev/shm has no size limit here")
    frame_bytes = max(1 << 40, 2 * total)
    child = spawn(
        f"""
        try:
            framebus.create({name!r}, shape=({frame_bytes},), dtype=np.uint8)
            say("created")
        except framebus.InsufficientSpaceError as e:
            say("ENOSPC", isinstance(e, OSError), e.errno, "/dev/shm" in str(e))
        except ValueError as e:
            say("ValueError", str(e))
        say("alive")
        """
    )
    got = child.line()
    assert got == f"ENOSPC True {errno.ENOSPC} True" or got.startswith("ValueError"), got
    child.expect("alive")
    child.finish()
    assert not os.path.exists(segment_path(name))


def test_full_dev_shm_is_a_clear_error_and_existing_streams_keep_working(spawn):
    """In a private 16 MiB /dev/shm: a stream that does not fit any more fails at create() with
    InsufficientSpaceError and leaves nothing behind; the streams already there keep working
    (no SIGBUS, because they were fully allocated when created)."""
    wrap = private_shm_wrapper("16m")
    if wrap is None:
        pytest.skip("needs root and unshare for a private /dev/shm")
    child = spawn(
        """
        a = framebus.create("fill-a", shape=(5 << 20,), dtype=np.uint8, slots=2)
        try:
            framebus.create("fill-b", shape=(5 << 20,), dtype=np.uint8, slots=2)
            say("created")
        except framebus.InsufficientSpaceError as e:
            say("ENOSPC", e.errno, "fill-b" in str(e), "/dev/shm" in str(e))
        say("left", sorted(os.listdir("/dev/shm")))
        a.write(np.full(5 << 20, 7, np.uint8))
        say("read", int(a.read()[-1]))
        """,
        wrap=wrap,
    )
    assert child.line() == f"ENOSPC {errno.ENOSPC} True True"
    assert child.line() == "left ['framebus.fill-a']"
    assert child.line() == "read 7"
    child.finish()


# -- damaged segments ------------------------------------------------------------------------


def _make(name):
    s = framebus.create(name, shape=(4, 4), dtype=np.uint16, slots=3)
    s.write(np.ones((4, 4), np.uint16))
    s.close()


@layout_v1
@pytest.mark.parametrize(
    "offset,data,exc",
    [
        (OFF_MAGIC, b"XRAMEBUS", framebus.CorruptStreamError),
        (OFF_MAGIC, b"\0" * 8, framebus.CorruptStreamError),
        (OFF_VERSION, struct.pack("<I", 99), framebus.IncompatibleStreamError),
        (OFF_VERSION, struct.pack("<I", 0), framebus.IncompatibleStreamError),
        (OFF_READY, b"\xde\xad\xbe\xef", framebus.CorruptStreamError),
        (OFF_SLOT_COUNT, struct.pack("<I", 4), framebus.CorruptStreamError),
        (OFF_SLOT_COUNT, struct.pack("<I", 0xFFFFFFFF), framebus.CorruptStreamError),
        (OFF_FRAME_BYTES, struct.pack("<Q", 1 << 60), framebus.CorruptStreamError),
        (OFF_FRAME_BYTES + 1, b"\x01", framebus.CorruptStreamError),
        (OFF_SHAPE, struct.pack("<Q", 5), framebus.CorruptStreamError),
        (OFF_DTYPE, b"<f4", framebus.CorruptStreamError),
        (OFF_CHECKSUM, b"\x00" * 8, framebus.CorruptStreamError),
    ],
    ids=["magic", "magic0", "version99", "version0", "ready", "slots", "slotsmax", "framebytes", "geometrybyte", "shape", "dtype", "checksum"],
)
def test_damaged_header_is_refused(name, offset, data, exc):
    _make(name)
    poke(name, offset, data)
    with pytest.raises(exc) as info:
        framebus.open(name)
    assert isinstance(info.value, ValueError)
    assert name in str(info.value) and segment_path(name) in str(info.value)
    if exc is framebus.IncompatibleStreamError:
        assert "version" in str(info.value)
    with pytest.raises(ValueError):
        framebus.create(name, shape=(4, 4), dtype=np.uint16, slots=3, exist_ok=True)  # its creator (us) is alive
    st = framebus.stat(name)
    assert st.problem and not st.stale
    assert name in [s.name for s in framebus.list_streams()]
    framebus.unlink(name)


@pytest.mark.parametrize("delta", [-4096, 4096])
def test_resized_segment_is_refused(name, delta):
    _make(name)
    size = os.stat(segment_path(name)).st_size
    os.truncate(segment_path(name), size + delta)
    with pytest.raises(framebus.CorruptStreamError, match="bytes"):
        framebus.open(name)
    framebus.unlink(name)


def test_foreign_file_is_refused(name):
    rng = np.random.default_rng(1)
    data = rng.integers(1, 256, 8192, dtype=np.uint8).tobytes()
    with open(segment_path(name), "wb") as f:
        f.write(data)
    with pytest.raises(ValueError):
        framebus.open(name)
    assert framebus.stat(name).problem
    framebus.unlink(name)


def test_uninitialised_segment_is_not_ready(name):
    """A segment whose creator died before marking it ready: open waits briefly, then refuses."""
    with open(segment_path(name), "wb") as f:
        f.write(b"\0" * 8192)
    with pytest.raises(TimeoutError) as info:
        framebus.open(name)
    assert isinstance(info.value, framebus.StreamNotReadyError)
    assert "gc" in str(info.value) or "unlink" in str(info.value)
    framebus.unlink(name)


def test_damaged_segment_of_a_dead_creator_is_replaced_by_exist_ok(name, spawn):
    child = spawn(f"framebus.create({name!r}, shape=(2,)).close()\nsay('done')")
    child.expect("done")
    child.finish()
    poke(name, OFF_MAGIC, b"garbage!")
    with pytest.raises(ValueError):
        framebus.open(name)
    with framebus.create(name, shape=(3,), exist_ok=True) as s:
        assert s.shape == (3,)
        s.unlink()


_FUZZ = """
import random, struct, warnings
warnings.simplefilter("ignore")
rng = random.Random({seed})
name = {name!r}
path = "/dev/shm/framebus." + name
lo, hi, iterations = {lo}, {hi}, {iterations}
skip = {skip}
outcomes = {{}}

def attempt(label, call):
    try:
        call()
        key = label + ":ok"
    except (ValueError, OSError, RuntimeError, TypeError) as e:  # TimeoutError is an OSError
        key = label + ":" + type(e).__name__
    outcomes[key] = outcomes.get(key, 0) + 1

for i in range(iterations):
    w = framebus.create(name, shape=(3, 5), dtype=np.int32, slots=3, meta_capacity=32)
    for k in range(rng.randrange(0, 5)):
        w.write(np.full((3, 5), k, np.int32), frame_id=k, meta=bytes([k]))
    r = framebus.open(name, mode=rng.choice(["latest", "lossless"]))
    with open(path, "r+b") as f:
        for _ in range(rng.randrange(1, 13)):
            # Half of the damage goes to the header's own words, the rest anywhere in range.
            off = rng.randrange(lo, min(hi, lo + 192)) if rng.random() < 0.5 else rng.randrange(lo, hi)
            n = rng.choice([1, 1, 4, 8])
            if off + n > hi or any(off < b and a < off + n for a, b in skip):
                continue
            f.seek(off)
            f.write(bytes([rng.randrange(256)]) * n)
    say("corrupted", i)
    attempt("open", lambda: framebus.open(name).close())
    attempt("write", lambda: w.write(np.ones((3, 5), np.int32), timeout=0.02))
    attempt("read", lambda: r.read())
    attempt("read_publication", lambda: r.read_publication())
    attempt("read_new", lambda: r.read_new(timeout=0.01))
    attempt("clear", lambda: w.clear(timeout=0.02))
    attempt("acquire", lambda: (w.acquire(timeout=0.02), w.release()))
    attempt("props", lambda: (r.attached, r.write_time, r.frame_id, r.write_sequence))
    attempt("stat", lambda: framebus.stat(name))
    attempt("list", lambda: framebus.list_streams())
    say("survived", i)
    r.close()
    w.close()
    framebus.unlink(name)
say("outcomes", sorted(outcomes.items()))
"""


def _fuzz(name, spawn, *, seed, lo, hi, iterations, skip=()):
    child = spawn(_FUZZ.format(seed=seed, name=name, lo=lo, hi=hi, iterations=iterations, skip=list(skip)))
    for i in range(iterations):
        child.expect(f"corrupted {i}", timeout=CHILD_TIMEOUT)
        got = child.line(timeout=20)
        assert got == f"survived {i}", f"iteration {i}: {got!r}; stderr:\n{child.stderr}"
    outcomes = child.line()
    child.finish()
    assert "PanicException" not in child.stderr and "panicked" not in child.stderr, child.stderr
    return outcomes


@layout_v1
def test_random_header_corruption_is_refused_without_crashing(name, spawn):
    """Random bytes in the identity and geometry part of the header (before any handle opens)."""
    # Not the ready word: a zero there makes open wait 2 s (tested on its own above).
    _fuzz(name, spawn, seed=1234, lo=0, hi=OFF_PUBLISHED, iterations=40, skip=[(OFF_READY, OFF_READY + 4)])


@layout_v1
def test_random_control_word_corruption_never_crashes_or_hangs(name, spawn):
    """Random bytes in the live control words (lock, wait words, counters, reader table, slot
    descriptors, the `published` word) while handles are attached: every call returns or raises
    a Python error."""
    _fuzz(name, spawn, seed=99, lo=OFF_PUBLISHED, hi=OFF_PAYLOAD, iterations=60)


@layout_v1
def test_published_sequence_without_a_slot_does_not_hang(name, spawn):
    child = spawn(
        f"""
        import struct
        w = framebus.create({name!r}, shape=(4,), dtype=np.int32)
        w.write(np.arange(4, dtype=np.int32))
        r = framebus.open({name!r})
        with open("/dev/shm/framebus." + {name!r}, "r+b") as f:
            f.seek({OFF_PUBLISHED})
            f.write(struct.pack("<Q", (7 << 8) | 0))
        say("corrupted")
        try:
            r.read()
            say("read ok")
        except ValueError as e:
            say("refused", type(e).__name__)
        """
    )
    child.expect("corrupted")
    try:
        got = child.line(timeout=5)  # generous: the answer takes microseconds
    finally:
        child.kill()
        framebus.unlink(name)
    assert got in ("read ok", "refused CorruptStreamError"), got


@layout_v1
def test_published_slot_out_of_range_is_refused_by_write(name, spawn):
    child = spawn(
        f"""
        import struct
        w = framebus.create({name!r}, shape=(4,), dtype=np.int32)
        w.write(np.arange(4, dtype=np.int32))
        with open("/dev/shm/framebus." + {name!r}, "r+b") as f:
            f.seek({OFF_PUBLISHED})
            f.write(struct.pack("<Q", (1 << 8) | 200))
        for call in (w.read, lambda: w.write(np.zeros(4, np.int32), timeout=1), lambda: w.write(np.zeros(4, np.int32), frame_id=3, timeout=1)):
            try:
                call()
                say("ok")
            except BaseException as e:
                say(type(e).__name__)
        """
    )
    got = [child.line() for _ in range(3)]
    child.finish()
    framebus.unlink(name)
    assert "PanicException" not in got, got
    assert "panicked" not in child.stderr, child.stderr


# -- Python's resource tracker ---------------------------------------------------------------


def test_resource_tracker_never_touches_streams(name):
    """A stream created in a multiprocessing child outlives it: Python's resource_tracker does not
    unlink it (nor warn about it) when the child exits."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    p = ctx.Process(target=mp_targets.create_and_exit, args=(name, results))
    p.start()
    try:
        assert results.get(timeout=CHILD_TIMEOUT) == ("done",)
    finally:
        p.join(CHILD_TIMEOUT)
        results.close()
        results.join_thread()
    assert p.exitcode == 0
    assert os.path.exists(segment_path(name))
    with framebus.open(name) as r:
        pub = r.read_publication()
        assert pub.frame_id == 5 and pub.payload.tolist() == [0, 1, 2, 3]
    st = framebus.stat(name)
    assert not st.creator_alive and st.stale
    framebus.unlink(name)


def test_stream_outlives_its_creator_process(name, spawn):
    child = spawn(
        f"""
        s = framebus.create({name!r}, shape=(2,), dtype=np.int64)
        s.write(np.array([11, 22]), frame_id=3)
        say("created")
        hear()
        """
    )
    child.expect("created")
    child.kill()
    with framebus.open(name) as r:
        assert r.read().tolist() == [11, 22] and r.frame_id == 3
        r.unlink()


def test_every_error_kind_of_the_bindings_exists_in_framebus_errors():
    """The bindings name each exception class once (errors.rs ErrorKind); each must exist in
    framebus.errors, be exported, and subclass the root (warnings: RuntimeWarning)."""
    from framebus import _native, errors

    assert len(_native.ERROR_KINDS) == len(set(_native.ERROR_KINDS)) > 15
    # The core's "no frame yet" has a class of its own (it escaped as a bare RuntimeError).
    assert "StreamEmptyError" in _native.ERROR_KINDS and issubclass(errors.StreamEmptyError, RuntimeError)
    for name in _native.ERROR_KINDS:
        cls = getattr(errors, name)
        assert name in errors.__all__
        if name.endswith("Warning"):
            assert issubclass(cls, RuntimeWarning), name
        else:
            assert issubclass(cls, framebus.FramebusError), name


def test_the_keyword_constructor_leaves_every_check_to_the_core():
    """framebus.create passes keywords to the native constructor, and the core's messages come
    through unchanged: ranges from the core's one table, types named by argument."""
    from framebus import _native

    name = f"errors-kw-{os.getpid()}"
    assert _native.COUNT_LIMITS == {"slots": (2, 64), "meta_capacity": (0, 1 << 20), "max_readers": (1, 4096), "permissions": (0, 0o777)}
    for kwargs, text in [
        ({"slots": -1}, "slots must be between 2 and 64, got -1"),
        ({"slots": 2**70}, f"slots must be between 2 and 64, got {2**70}"),
        ({"max_readers": 0}, "max_readers must be between 1 and 4096, got 0"),
        ({"meta_capacity": (1 << 20) + 1}, "meta_capacity must be between 0 and 1048576"),
        ({"permissions": 0o1000}, "permissions must be file permission bits between 0o0 and 0o777 (such as 0o600), got 0o1000"),
    ]:
        with pytest.raises(framebus.InvalidArgumentError, match=re.escape(text)):
            framebus.create(name, shape=(4,), dtype=np.uint8, **kwargs)
    with pytest.raises(TypeError, match="slots must be an int, got str"):
        framebus.create(name, shape=(4,), dtype=np.uint8, slots="4")
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


def test_a_spec_mismatch_carries_both_specs():
    name = f"errors-mismatch-{os.getpid()}"
    with framebus.create(name, shape=(4, 3), dtype=np.uint8, auto_unlink=True):
        with pytest.raises(framebus.StreamExistsError) as info:
            framebus.create(name, shape=(4,), dtype=np.float32, exist_ok=True)
        assert info.value.existing_spec == "dtype uint8 shape (4, 3), slots 4, meta_capacity 256"
        assert info.value.requested_spec == "dtype float32 shape (4,), slots 4, meta_capacity 256"
        assert info.value.errno == errno.EEXIST


def test_exceptions_carry_the_stream_and_path():
    """What a caller may act on rides on the exception (the CLI words its hints from these
    attributes, never from the message text)."""
    from framebus.cli import error_text

    name = f"errors-fields-{os.getpid()}"
    with pytest.raises(framebus.StreamNotFoundError) as info:
        framebus.open(name)
    assert (info.value.stream, info.value.path) == (name, f"/dev/shm/framebus.{name}")
    assert error_text(info.value).startswith(f'stream "{name}" does not exist') and "framebus ls" in error_text(info.value)
    with open(f"/dev/shm/framebus.{name}", "wb") as f:
        f.write(b"\0" * 8192)
    try:
        with pytest.raises(framebus.FramebusError) as info:
            framebus.open(name)
        assert info.value.stream == name
    finally:
        os.unlink(f"/dev/shm/framebus.{name}")


def test_a_raw_frame_with_a_bad_table_is_an_invalid_frame_error():
    """A frame given whole whose table is junk has a class of its own (the bridge turns it into
    a ProtocolError by class, not by message); it is still a ValueError."""
    name = f"errors-rawframe-{os.getpid()}"
    with framebus.create(name, capacity=1 << 16, auto_unlink=True) as w:
        with pytest.raises(framebus.InvalidFrameError) as info:
            w._write_raw(b"\xff" * 8192)
        assert isinstance(info.value, ValueError) and "table is invalid" in str(info.value)
        assert w.write_sequence == 0
