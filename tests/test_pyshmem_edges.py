"""framebus.pyshmem beside the real pyshmem 1.4.0, call by call, on edge cases pyshmem's own
tests do not cover.

Each test runs once per module (the ``m`` fixture: the installed ``pyshmem``, skipped when it
is not there or not 1.4.0, and ``framebus.pyshmem``) and asserts one outcome for both: the
return value, the exception type and, where a program could match it, the message. Where
framebus.pyshmem differs on purpose the test asserts the framebus behaviour that
docs/pyshmem.md lists, and says which item.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import framebus.pyshmem as fbshm

try:
    import importlib.metadata

    import pyshmem as real_pyshmem

    _REAL_SKIP = None if importlib.metadata.version("pyshmem") == "1.4.0" else "the installed pyshmem is not 1.4.0"
except ImportError:
    real_pyshmem = None
    _REAL_SKIP = "pyshmem 1.4.0 is not installed (pip install pyshmem==1.4.0)"

F32 = np.float32
FRAME = np.arange(6, dtype=F32).reshape(2, 3)
U64 = 2**64


@pytest.fixture(params=["pyshmem", "framebus.pyshmem"])
def m(request: pytest.FixtureRequest) -> Any:
    """The module under test: the real pyshmem or framebus.pyshmem."""
    if request.param == "pyshmem":
        if _REAL_SKIP:
            pytest.skip(_REAL_SKIP)
        return real_pyshmem
    return fbshm


@pytest.fixture
def sname(m: Any, name: str) -> Iterator[str]:
    """A unique stream name, unlinked through the module under test afterwards (pyshmem's
    segments are not framebus's, so the ``name`` fixture alone would not remove them)."""
    yield name
    for n in (name, name + ".b"):
        m.unlink(n)


def is_real(m: Any) -> bool:
    return m is real_pyshmem


def fails(exc_type: type, message: str, call: Callable[[], Any]) -> None:
    """``call()`` raises ``exc_type`` (or a subclass) with exactly ``message``."""
    with pytest.raises(exc_type) as info:
        call()
    assert str(info.value) == message


def closed_msg(name: str, operation: str) -> str:
    return f"cannot {operation} closed shared memory {name!r}; reopen it with pyshmem.open({name!r})"


def make(m: Any, name: str, **kw: Any) -> Any:
    kw.setdefault("shape", (2, 3))
    kw.setdefault("dtype", F32)
    return m.create(name, **kw)


# -- create / open / stat / unlink arguments ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (dict(shape=()), ValueError, "shape must contain at least one dimension"),
        (dict(shape=(0,)), ValueError, "shape dimensions must be positive"),
        (dict(shape=(2, -1)), ValueError, "shape dimensions must be positive"),
        (dict(shape=(1,) * 20), ValueError, "shape has too many dimensions for metadata storage"),
        (dict(shape=(2,), dtype=object), ValueError, "unsupported dtype: object"),
        (dict(shape=(2,), dtype=">f4"), ValueError, "unsupported dtype: >f4"),
        (dict(shape=(2,), dtype="U4"), ValueError, "unsupported dtype: <U4"),
        (dict(shape=(2, 3), size=25), ValueError, "size does not match shape and dtype: expected 24, got 25"),
        (dict(shape=(2, 3), size=25.5), ValueError, "size does not match shape and dtype: expected 24, got 25.5"),
        (dict(shape=(2, 3), size="25"), ValueError, "size does not match shape and dtype: expected 24, got 25"),
    ],
)
def test_create_refuses_what_pyshmem_refuses(m: Any, sname: str, kwargs: dict, exc: type, message: str) -> None:
    fails(exc, message, lambda: m.create(sname, **kwargs))
    assert sname not in m.list_streams()


@pytest.mark.parametrize(
    "kwargs, shape, dtype, size",
    [
        (dict(shape=(2.7, True)), (2, 1), "float32", 8),
        (dict(shape=[np.int64(3)], dtype=None), (3,), "float64", 24),
        (dict(shape=(2, 3), size="24"), (2, 3), "float32", 24),
        (dict(shape=(2, 3), size=12.0, dtype="f2"), (2, 3), "float16", 12),
        (dict(shape=(1,) * 8, dtype=np.bool_), (1,) * 8, "bool", 1),
    ],
)
def test_create_normalises_like_pyshmem(m: Any, sname: str, kwargs: dict, shape: tuple, dtype: str, size: int) -> None:
    shm = m.create(sname, **kwargs)
    try:
        assert (shm.shape, str(shm.dtype), shm.size, type(shm.shape)) == (shape, dtype, size, tuple)
    finally:
        shm.close()


def test_nine_to_nineteen_dimensions(m: Any, sname: str) -> None:
    """docs/pyshmem.md, "Dimensions and frame size": framebus frames have at most 8 dimensions."""
    if is_real(m):
        shm = m.create(sname, shape=(1,) * 9)
        assert shm.shape == (1,) * 9
        shm.close()
    else:
        with pytest.raises(ValueError, match="1 to 8 dimensions"):
            m.create(sname, shape=(1,) * 9)


def test_frame_too_large(m: Any, sname: str) -> None:
    """docs/pyshmem.md, "Dimensions and frame size": pyshmem fails in the OS call
    (OverflowError); framebus refuses the size first with a ValueError."""
    with pytest.raises(OverflowError if is_real(m) else ValueError):
        m.create(sname, shape=(2**62, 2**62))


@pytest.mark.parametrize("bad", ["", "   ", 5, None, b"x"])
@pytest.mark.parametrize("call", ["create", "open", "stat", "unlink", "unlink_quiet"])
def test_name_must_be_a_non_empty_string(m: Any, call: str, bad: Any) -> None:
    fn = getattr(m, call)
    fails(ValueError, "name must be a non-empty string", (lambda: fn(bad, shape=(2,))) if call == "create" else (lambda: fn(bad)))


def test_missing_name(m: Any, sname: str) -> None:
    message = f"shared memory {sname!r} does not exist; create it with pyshmem.create({sname!r}, ...) first"
    fails(FileNotFoundError, message, lambda: m.open(sname))
    fails(FileNotFoundError, message, lambda: m.stat(sname))
    assert m.unlink(sname) is None and m.unlink_quiet(sname) is None
    assert sname not in m.list_streams()


@pytest.mark.parametrize("device", ["cuda:0", 0, "cpu", True, False])
def test_open_ignores_gpu_device_for_a_cpu_stream(m: Any, sname: str, device: Any) -> None:
    shm = make(m, sname)
    try:
        reader = m.open(sname, gpu_device=device)
        assert (reader.gpu_device, reader.gpu_enabled) == (None, False)
        reader.close()
    finally:
        shm.close()


def test_bad_frame_id_raises_what_int_raises(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        fails(ValueError, "invalid literal for int() with base 10: 'abc'", lambda: shm.write(FRAME, frame_id="abc"))
        fails(TypeError, "int() argument must be a string, a bytes-like object or a real number, not 'list'", lambda: shm.write(FRAME, frame_id=[1]))
        assert shm.count == 0
    finally:
        shm.close()


def test_create_existing_name(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        fails(FileExistsError, f"shared memory {sname!r} already exists; use pyshmem.open({sname!r}) to attach to it", lambda: make(m, sname))
    finally:
        shm.close()


def test_fresh_handles_and_stat(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        assert (shm.owner, shm.readonly, shm.gpu_device, shm.gpu_enabled, shm.cpu_mirror) == (True, False, None, False, True)
        assert (shm.count, shm.last_read_count, shm.missed_writes, shm.total_missed_writes) == (0, 0, 0, 0)
        assert (shm.write_time, shm.write_sequence, shm.frame_id, shm.age, shm.is_stale(1.0)) == (0.0, 0, 0, float("inf"), True)
        assert len(shm.instance_id) == 32 and shm.producer_alive()
        assert repr(shm) == f"SharedMemory(name={sname!r}, shape=(2, 3), dtype='float32', gpu_device=None)"
        reader = m.open(sname, readonly=1)
        assert (reader.owner, reader.readonly, reader.instance_id) == (False, True, shm.instance_id)
        reader.close()
        st = m.stat(sname)
        assert {k: st[k] for k in ("name", "shape", "dtype", "size", "gpu_enabled", "gpu_device", "cpu_mirror", "count", "write_sequence", "write_time")} == {
            "name": sname, "shape": [2, 3], "dtype": "float32", "size": 24, "gpu_enabled": False, "gpu_device": None,
            "cpu_mirror": True, "count": 0, "write_sequence": 0, "write_time": 0.0,
        }  # fmt: skip
        assert st["instance_id"] == shm.instance_id and st["creator_alive"] is True
        shm.write(FRAME)
        shm.clear()
        st = m.stat(sname)
        assert (st["count"], st["write_sequence"], st["write_time"] > 0) == (2, 4, True)
    finally:
        shm.close()


def test_public_names_match() -> None:
    if _REAL_SKIP:
        pytest.skip(_REAL_SKIP)

    def public(obj: Any) -> set:
        return {n for n in dir(obj) if not n.startswith("_")}

    assert public(fbshm.SharedMemory) == public(real_pyshmem.SharedMemory)
    assert sorted(fbshm.__all__) == sorted(real_pyshmem.__all__)
    assert [f.name for f in dataclasses.fields(fbshm.Publication)] == [f.name for f in dataclasses.fields(real_pyshmem.Publication)]


#: framebus additions (keyword-only, with defaults that keep pyshmem's behaviour).
_EXTRA_PARAMETERS = {"create": {"slots"}, "purge": {"include_live"}}


def _parameters(fn: Any) -> list:
    import inspect

    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if not p.name.startswith("_")]


def test_signatures_match() -> None:
    """Every public function and SharedMemory method takes pyshmem's parameters, with its
    kinds and defaults (framebus adds only the keyword-only ``slots`` and ``include_live``)."""
    if _REAL_SKIP:
        pytest.skip(_REAL_SKIP)
    pairs = [(n, getattr(real_pyshmem, n), getattr(fbshm, n)) for n in real_pyshmem.__all__ if n != "GPU_SUPPORTED_DTYPES"]
    pairs += [
        (f"SharedMemory.{n}", getattr(real_pyshmem.SharedMemory, n), getattr(fbshm.SharedMemory, n))
        for n in dir(real_pyshmem.SharedMemory)
        if (not n.startswith("_") or n in ("__dlpack__", "__dlpack_device__")) and callable(getattr(real_pyshmem.SharedMemory, n))
    ]
    checked = 0
    for label, theirs, ours in pairs:
        if isinstance(theirs, type) or not callable(theirs):
            continue
        extra = _EXTRA_PARAMETERS.get(label, set())
        assert [p for p in _parameters(ours) if p[0] not in extra] == _parameters(theirs), label
        checked += 1
    assert checked >= 35


def test_publication_is_a_frozen_dataclass(m: Any) -> None:
    p = m.Publication(payload=1, count=2, frame_id=3, write_time=4.0, missed_publications=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.count = 3  # type: ignore[misc]
    assert p == m.Publication(1, 2, 3, 4.0, 5)
    assert repr(p) == "Publication(payload=1, count=2, frame_id=3, write_time=4.0, missed_publications=5)"
    assert issubclass(m.InconsistentStreamError, RuntimeError) and issubclass(m.StaleStreamError, RuntimeError)
    assert m.__version__ == "1.4.0"


# -- frame ids -------------------------------------------------------------------------------


def _write_with(shm: Any, how: str, frame_id: Any) -> None:
    if how == "write":
        shm.write(FRAME, frame_id=frame_id)
    elif how == "write_locked":
        with shm.locked():
            shm.write_locked(FRAME, frame_id=frame_id)
    elif how == "write_view":
        with shm.write_view(frame_id=frame_id) as view:
            view[...] = FRAME
        del view
    else:
        with shm.locked(), shm.write_view_locked(frame_id=frame_id) as view:
            view[...] = FRAME
        del view


@pytest.mark.parametrize("how", ["write", "write_locked", "write_view", "write_view_locked"])
@pytest.mark.parametrize(
    "frame_id, stored",
    [
        (0, 0),
        (-1, U64 - 1),
        (2**63, 2**63),
        (U64 - 1, U64 - 1),
        (U64, 0),
        (U64 + 5, 5),
        (-(2**63) - 1, 2**63 - 1),
        (np.int64(-3), U64 - 3),
        (np.uint64(U64 - 1), U64 - 1),
        ("5", 5),
        (1.9, 1),
        (True, 1),
    ],
)
def test_frame_id_is_taken_modulo_2_64(m: Any, sname: str, how: str, frame_id: Any, stored: int) -> None:
    shm = make(m, sname)
    try:
        _write_with(shm, how, frame_id)
        assert shm.frame_id == stored
        assert shm.read_publication().frame_id == stored
        assert shm.count == 1
    finally:
        shm.close()


def test_frame_id_stays_through_writes_without_one_and_clear(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        shm.write(np.ones((2, 3)), frame_id=7)
        before = shm.write_time
        shm.write(FRAME)
        _write_with(shm, "write_view", None)
        shm.clear()
        publication = shm.read_publication()
        assert (shm.frame_id, publication.frame_id, publication.count, shm.count) == (7, 7, 4, 4)
        assert publication.payload.tolist() == np.zeros((2, 3)).tolist()
        assert shm.write_time >= before and shm.write_sequence == 8
    finally:
        shm.close()


# -- writes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.ones((2, 3), np.float64), [[1.0] * 3] * 2),
        ([[1, 2, 3], [4, 5, 6]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
        (np.asfortranarray(FRAME), FRAME.tolist()),
        (np.ones((2, 6), F32)[:, ::2] * 2, [[2.0] * 3] * 2),
    ],
)
def test_write_converts_like_np_asarray(m: Any, sname: str, value: Any, expected: list) -> None:
    shm = make(m, sname)
    try:
        shm.write(value)
        assert shm.read().tolist() == expected
    finally:
        shm.close()


@pytest.mark.parametrize(
    "value, exc, message",
    [
        (5, ValueError, "expected shape (2, 3), got ()"),
        (np.ones((3, 2)), ValueError, "expected shape (2, 3), got (3, 2)"),
        (np.ones((1, 2, 3)), ValueError, "expected shape (2, 3), got (1, 2, 3)"),
        (np.ones(6), ValueError, "expected shape (2, 3), got (6,)"),
        ([[1, 2, 3]], ValueError, "expected shape (2, 3), got (1, 3)"),
        (None, ValueError, "expected shape (2, 3), got ()"),
        ("abc", ValueError, "could not convert string to float: 'abc'"),
    ],
)
def test_write_refuses_other_shapes(m: Any, sname: str, value: Any, exc: type, message: str) -> None:
    shm = make(m, sname)
    try:
        fails(exc, message, lambda: shm.write(value))
        assert shm.count == 0
    finally:
        shm.close()


def test_write_wraps_and_truncates_like_numpy(m: Any, sname: str) -> None:
    shm = make(m, sname, shape=(3,), dtype=np.uint8)
    flags = make(m, sname + ".b", shape=(3,), dtype=np.bool_)
    try:
        with np.errstate(all="ignore"):
            shm.write(np.array([300, -1, 2.9]).astype(np.int64))
        flags.write([0, 2, 1.5])
        assert (shm.read().tolist(), flags.read().tolist()) == ([44, 255, 2], [False, True, True])
    finally:
        shm.close()
        flags.close()


def test_closed_is_named_before_read_only(m: Any, sname: str) -> None:
    shm = make(m, sname)
    reader = m.open(sname, readonly=True)
    try:
        fails(PermissionError, f"cannot write to read-only shared memory {sname!r}", lambda: reader.write(FRAME))
        fails(PermissionError, f"cannot write to read-only shared memory {sname!r}", lambda: reader.write(np.ones(3)))
        reader.close()
        fails(RuntimeError, closed_msg(sname, "write to"), lambda: reader.write(FRAME))
        fails(RuntimeError, closed_msg(sname, "write to"), lambda: reader.write_locked(FRAME))
        fails(RuntimeError, closed_msg(sname, "clear"), lambda: reader.clear())
    finally:
        shm.close()


def test_write_view_checks_on_entering(m: Any, sname: str) -> None:
    shm = make(m, sname)
    reader = m.open(sname, readonly=True)
    try:
        scope = reader.write_view()  # no error yet: pyshmem's is a generator context manager
        with pytest.raises(PermissionError) as info:
            with scope:
                pass
        assert str(info.value) == f"cannot write to read-only shared memory {sname!r}"
        reader.close()
        scope = reader.write_view()
        with pytest.raises(RuntimeError) as info2:
            with scope:
                pass
        assert str(info2.value) == closed_msg(sname, "write to")
    finally:
        shm.close()


def test_write_locked_and_view_locked_need_the_lock(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        fails(RuntimeError, "write_locked() requires an active 'with shm.locked()' block", lambda: shm.write_locked(FRAME))
        with pytest.raises(RuntimeError) as info:
            with shm.write_view_locked():
                pass
        assert str(info.value) == "write_view_locked() requires an active 'with shm.locked()' block"
        with shm.locked():
            fails(ValueError, "expected shape (2, 3), got (4,)", lambda: shm.write_locked(np.ones(4)))
            shm.write(FRAME)
            shm.clear()
            _write_with(shm, "write_view", 3)
        assert (shm.count, shm.frame_id) == (3, 3)
    finally:
        shm.close()


def test_aborted_write_view_keeps_frame_id_and_count(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME, frame_id=4)
        with pytest.raises(KeyError):
            with shm.write_view(frame_id=9) as view:
                view[...] = 5
                raise KeyError("x")
        del view
        assert (shm.count, shm.frame_id) == (1, 4)
    finally:
        shm.close()


# -- reads into out= ---------------------------------------------------------------------------

_OUT_OK = {
    "float64": (lambda: np.zeros((2, 3)), FRAME.tolist()),
    "complex64": (lambda: np.zeros((2, 3), np.complex64), FRAME.astype(np.complex64).tolist()),
    "float16": (lambda: np.zeros((2, 3), np.float16), FRAME.tolist()),
    "broadcast": (lambda: np.zeros((4, 2, 3), F32), [FRAME.tolist()] * 4),
    "strided": (lambda: np.zeros((2, 6), F32)[:, ::2], FRAME.tolist()),
    "fortran": (lambda: np.asfortranarray(np.zeros((2, 3), F32)), FRAME.tolist()),
    "transposed-view": (lambda: np.zeros((3, 2), F32).T, FRAME.tolist()),
}


def _read_into(shm: Any, method: str, out: Any) -> Any:
    if method == "read_new":
        timer = threading.Timer(0.05, lambda: shm.write(FRAME))
        timer.start()
        try:
            return shm.read_new(out=out, timeout=30)
        finally:
            timer.join()
    if method.startswith("read_after"):
        result = getattr(shm, method)(0, out=out, timeout=0)
    else:
        result = getattr(shm, method)(out=out)
    return getattr(result, "payload", result)


READ_METHODS = ["read", "read_publication", "read_after", "read_after_publication", "read_new"]


@pytest.mark.parametrize("method", READ_METHODS)
@pytest.mark.parametrize("kind", sorted(_OUT_OK))
def test_out_takes_what_np_copyto_takes(m: Any, sname: str, method: str, kind: str) -> None:
    make_out, expected = _OUT_OK[kind]
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        out = make_out()
        assert _read_into(shm, method, out) is out
        assert out.tolist() == expected
        assert shm.last_read_count == shm.count
    finally:
        shm.close()


def _readonly_out() -> np.ndarray:
    out = np.zeros((2, 3), F32)
    out.flags.writeable = False
    return out


_OUT_BAD = {
    "int32": (lambda: np.zeros((2, 3), np.int32), TypeError, "Cannot cast array data from dtype('float32') to dtype('int32') according to the rule 'same_kind'"),
    "bool": (lambda: np.zeros((2, 3), bool), TypeError, "Cannot cast array data from dtype('float32') to dtype('bool') according to the rule 'same_kind'"),
    "other-shape": (lambda: np.zeros((3, 2), F32), ValueError, "could not broadcast input array from shape (2,3) into shape (3,2)"),
    "flat": (lambda: np.zeros(6, F32), ValueError, "could not broadcast input array from shape (2,3) into shape (6,)"),
    "0-d": (lambda: np.zeros((), F32), ValueError, "could not broadcast input array from shape (2,3) into shape ()"),
    "read-only": (_readonly_out, ValueError, "assignment destination is read-only"),
    "list": (lambda: [[0.0] * 3] * 2, TypeError, "copyto() argument 1 must be a numpy.ndarray, not list"),
    "memoryview": (lambda: memoryview(bytearray(24)), TypeError, "copyto() argument 1 must be a numpy.ndarray, not memoryview"),
}


@pytest.mark.parametrize("method", ["read", "read_publication", "read_after", "read_after_publication"])
@pytest.mark.parametrize("kind", sorted(_OUT_BAD))
def test_out_refusals_are_numpys(m: Any, sname: str, method: str, kind: str) -> None:
    make_out, exc, message = _OUT_BAD[kind]
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        out = make_out()
        fails(exc, message, lambda: _read_into(shm, method, out))
        assert shm.last_read_count == 0  # nothing was read
        if isinstance(out, np.ndarray):
            assert not out.any()
    finally:
        shm.close()


def test_out_same_layout_is_filled_directly(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        out = np.empty((2, 3), F32)
        assert shm.read(out=out) is out and out.tolist() == FRAME.tolist()
        assert shm.read_publication(out=out).payload is out
    finally:
        shm.close()


# -- reads without the lock's safety (safe=False) --------------------------------------------------


def test_unsafe_reads_before_the_first_write_are_zeros(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        with shm.locked():
            view = shm.read(safe=False)
            publication = shm.read_publication(safe=False)
            assert view.tolist() == publication.payload.tolist() == np.zeros((2, 3)).tolist()
            assert (publication.count, publication.frame_id, publication.write_time, publication.missed_publications) == (0, 0, 0.0, 0)
            assert shm.last_read_count == 0
        del view, publication
    finally:
        shm.close()


def test_unsafe_reads_need_the_lock_and_a_writable_handle(m: Any, sname: str) -> None:
    shm = make(m, sname)
    reader = m.open(sname, readonly=True)
    try:
        shm.write(FRAME)
        shm.write(FRAME)
        fails(RuntimeError, "safe=False requires an active 'with shm.locked()' block", lambda: shm.read(safe=False))
        fails(ValueError, "out is supported only for safe CPU reads; pass a NumPy destination buffer to a CPU-backed handle", lambda: shm.read(safe=False, out=np.zeros((2, 3), F32)))
        fails(PermissionError, f"cannot take an unsafe shared view from read-only shared memory {sname!r}", lambda: reader.read(safe=False))
        fails(PermissionError, f"cannot take an unsafe publication view from read-only shared memory {sname!r}", lambda: reader.read_publication(safe=False))
        with shm.locked():
            assert shm.read(safe=False).tolist() == FRAME.tolist()
            assert (shm.last_read_count, shm.missed_writes) == (2, 1)
            publication = shm.read_publication(safe=False)
            assert (publication.count, publication.missed_publications) == (2, 0)
        del publication
    finally:
        reader.close()
        shm.close()


# -- closed handles ----------------------------------------------------------------------------

_CLOSED = [
    ("read", {}, "read from"),
    ("read_publication", {}, "read a publication from"),
    ("read_new", {"timeout": 0}, "read from"),
    ("read_new_publication", {"timeout": 0}, "read from"),
    ("read_after", {"after": 0}, "read from"),
    ("read_after_publication", {"after": 0}, "read from"),
    ("wait_for_count", {"after": 0}, "read from"),
    ("describe", {}, "describe"),
    ("acquire", {}, "acquire"),
    ("release", {}, "release"),
    ("clear", {}, "clear"),
    ("producer_alive", {}, "check producer liveness for"),
    ("is_stale", {"max_age": 1}, "read age from"),
    ("pinned_buffer", {}, "allocate a pinned buffer for"),
    ("__dlpack__", {}, "export DLPack from"),
    ("__dlpack_device__", {}, "read the DLPack device of"),
    ("write", {"value": FRAME}, "write to"),
]


@pytest.mark.parametrize("method, kwargs, operation", _CLOSED, ids=[c[0] for c in _CLOSED])
def test_closed_handle_calls(m: Any, sname: str, method: str, kwargs: dict, operation: str) -> None:
    shm = make(m, sname)
    shm.write(FRAME)
    shm.close()
    fails(RuntimeError, closed_msg(sname, operation), lambda: getattr(shm, method)(**kwargs))


@pytest.mark.parametrize(
    "attr, operation",
    [("count", "read count from"), ("last_read_count", "read last_read_count from"), ("missed_writes", "read missed_writes from"),
     ("total_missed_writes", "read total_missed_writes from"), ("write_time", "read write_time from"),
     ("write_sequence", "read write_sequence from"), ("frame_id", "read frame_id from"),
     ("creator_pid", "read creator_pid from"), ("age", "read age from")],
)  # fmt: skip
def test_closed_handle_properties(m: Any, sname: str, attr: str, operation: str) -> None:
    shm = make(m, sname)
    shm.close()
    fails(RuntimeError, closed_msg(sname, operation), lambda: getattr(shm, attr))
    assert (shm.name, shape_dtype_size(shm), repr(shm)) == (sname, ((2, 3), "float32", 24), f"SharedMemory(name={sname!r}, shape=(2, 3), dtype='float32', gpu_device=None)")
    shm.close()
    shm.close(timeout=-1)


def shape_dtype_size(shm: Any) -> tuple:
    return (shm.shape, str(shm.dtype), shm.size)


def test_closed_handle_async_read(m: Any, sname: str) -> None:
    shm = make(m, sname)
    shm.close()
    fails(RuntimeError, closed_msg(sname, "read from"), lambda: asyncio.run(shm.read_new_async(timeout=0)))


def test_closed_handle_to_config(m: Any, sname: str) -> None:
    """docs/pyshmem.md, "to_config() on a closed handle": pyshmem 1.4 reads its unmapped header
    there (the process crashes), so only framebus.pyshmem is called."""
    if is_real(m):
        pytest.skip("pyshmem 1.4.0's to_config() on a closed handle crashes the interpreter")
    shm = make(m, sname)
    shm.close()
    assert shm.to_config()["shape"] == [2, 3]


def test_close_while_waiting(m: Any, sname: str) -> None:
    shm = make(m, sname)
    errors: list = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        try:
            shm.wait_for_count(after=0, timeout=60)
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=wait)
    thread.start()
    started.wait()
    while thread.is_alive() and not errors:
        shm.close()
        thread.join(0.05)
    thread.join()
    assert errors in ([f"shared memory {sname!r} was closed while a read was waiting on it"], [closed_msg(sname, "read from")])


# -- timeouts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [-1, 0])
def test_read_new_times_out_at_once_for_zero_and_negative(m: Any, sname: str, timeout: float) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        fails(TimeoutError, f"timed out waiting for a new write on {sname!r}", lambda: shm.read_new(timeout=timeout))
        fails(TimeoutError, f"timed out waiting for a new write on {sname!r}", lambda: asyncio.run(shm.read_new_async(timeout=timeout)))
        if timeout < 0:
            fails(ValueError, "timeout must be non-negative", lambda: shm.read_new_publication(timeout=timeout))
        else:
            fails(TimeoutError, f"timed out waiting for stream {sname!r} to pass count 1", lambda: shm.read_new_publication(timeout=timeout))
    finally:
        shm.close()


@pytest.mark.parametrize("method", ["wait_for_count", "read_after", "read_after_publication"])
def test_level_waits_timeouts(m: Any, sname: str, method: str) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        call = getattr(shm, method)
        fails(ValueError, "timeout must be non-negative", lambda: call(after=0, timeout=-1))
        fails(ValueError, "timeout must be non-negative", lambda: call(after=5, timeout=-0.5))
        fails(TimeoutError, f"timed out waiting for stream {sname!r} to pass count 1", lambda: call(after=1, timeout=0))
        result = call(after=0, timeout=0)
        assert (result if method == "wait_for_count" else shm.last_read_count) == 1
    finally:
        shm.close()


@pytest.mark.parametrize("method", ["wait_for_count", "read_after", "read_after_publication", "read_new", "read_new_publication"])
def test_nan_timeout_is_refused(m: Any, sname: str, method: str) -> None:
    """docs/pyshmem.md, "NaN timeouts": pyshmem waits forever (or returns when the count has
    already passed); framebus.pyshmem refuses NaN with a ValueError."""
    if is_real(m):
        pytest.skip("pyshmem 1.4.0 waits forever on a NaN timeout")
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        kwargs = {"after": 0} if method in ("wait_for_count", "read_after", "read_after_publication") else {}
        with pytest.raises(ValueError):
            getattr(shm, method)(timeout=float("nan"), **kwargs)
        with pytest.raises(ValueError):
            shm.acquire(timeout=float("nan"))
        with pytest.raises(ValueError):
            asyncio.run(shm.read_new_async(timeout=float("nan")))
    finally:
        shm.close()


@pytest.mark.parametrize("timeout", [-1, 0, None])
def test_lock_timeouts_below_zero_are_one_try(m: Any, sname: str, timeout: Any) -> None:
    shm = make(m, sname)
    try:
        shm.acquire(timeout=timeout)
        shm.release()
        with shm.locked(timeout=timeout) as same:
            assert same is shm
        with shm.write_view(timeout=timeout) as view:
            view[...] = 1
        del view
        with m.locked_many([shm], timeout=None if timeout is None else max(timeout, 0)) as handles:
            assert handles == (shm,)
        assert shm.count == 1
    finally:
        shm.close()


def test_contended_lock_times_out(m: Any, sname: str) -> None:
    shm = make(m, sname)
    errors: list = []
    try:
        shm.acquire()

        def other() -> None:
            try:
                shm.acquire(timeout=-1)
            except TimeoutError as exc:
                errors.append(str(exc))
            try:
                shm.release()
            except RuntimeError as exc:
                errors.append(str(exc))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        shm.release()
        assert errors == ["timed out waiting for shared memory lock", "cannot release a lock owned by another thread"]
        fails(RuntimeError, "cannot release an unlocked shared memory lock", shm.release)
    finally:
        shm.close()


# -- counts: after= edge values, ahead and behind -----------------------------------------------------


@pytest.mark.parametrize("method", ["wait_for_count", "read_after", "read_after_publication"])
@pytest.mark.parametrize("after", [-1, None, "x", float("nan"), float("inf"), [1]])
def test_after_must_be_a_non_negative_integer(m: Any, sname: str, method: str, after: Any) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        message = "after must be non-negative" if after == -1 else "after must be an integer"
        fails(ValueError, message, lambda: getattr(shm, method)(after=after, timeout=0))
    finally:
        shm.close()


@pytest.mark.parametrize("method", ["wait_for_count", "read_after", "read_after_publication"])
@pytest.mark.parametrize("after, passed", [("0", True), (0.9, True), (False, True), (np.uint64(0), True), (True, False), ("1", False)])
def test_after_is_converted_with_int(m: Any, sname: str, method: str, after: Any, passed: bool) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        call = getattr(shm, method)
        if passed:
            call(after=after, timeout=0)
            assert shm.count == 1
        else:
            fails(TimeoutError, f"timed out waiting for stream {sname!r} to pass count 1", lambda: call(after=after, timeout=0))
    finally:
        shm.close()


@pytest.mark.parametrize("method", ["wait_for_count", "read_after", "read_after_publication"])
@pytest.mark.parametrize("after", [2**63 - 1, 2**63, U64 - 1, U64, 2**70])
def test_after_beyond_any_count_times_out(m: Any, sname: str, method: str, after: int) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        fails(TimeoutError, f"timed out waiting for stream {sname!r} to pass count {after}", lambda: getattr(shm, method)(after=after, timeout=0))
    finally:
        shm.close()


def test_counts_ahead_and_behind(m: Any, sname: str) -> None:
    writer = make(m, sname)
    try:
        for _ in range(3):
            writer.write(FRAME)
        reader = m.open(sname)
        assert (reader.last_read_count, reader.missed_writes) == (3, 0)  # the count at open
        for _ in range(2):
            writer.write(FRAME)
        assert reader.wait_for_count(after=1, timeout=0) == 5
        reader.read_after(2, timeout=0)
        assert (reader.last_read_count, reader.missed_writes, reader.total_missed_writes) == (5, 1, 1)
        for _ in range(3):
            writer.write(FRAME)
        publication = reader.read_after_publication(0, timeout=0)
        assert (publication.count, publication.missed_publications, reader.missed_writes, reader.total_missed_writes) == (8, 2, 2, 3)
        reader.read_after(7, timeout=0)
        assert (reader.last_read_count, reader.missed_writes, reader.total_missed_writes) == (8, 0, 3)
        fails(TimeoutError, f"timed out waiting for stream {sname!r} to pass count 8", lambda: reader.read_after(8, timeout=0))
        reader.read()
        assert (reader.last_read_count, reader.missed_writes) == (8, 0)
        reader.close()
    finally:
        writer.close()


def test_read_new_sees_a_write_from_another_thread(m: Any, sname: str) -> None:
    shm = make(m, sname)
    try:
        shm.write(FRAME)
        timer = threading.Timer(0.05, lambda: shm.write(FRAME * 2, frame_id=3))
        timer.start()
        publication = shm.read_new_publication(timeout=30)
        timer.join()
        assert (publication.count, publication.frame_id, publication.missed_publications, shm.last_read_count) == (2, 3, 1, 2)
        assert publication.payload.tolist() == (FRAME * 2).tolist()
    finally:
        shm.close()


# -- read-only handles ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, kwargs, operation",
    [("clear", {}, "clear"), ("acquire", {}, "acquire the write lock for"), ("unlink", {}, "unlink"),
     ("delete", {}, "unlink"), ("write_locked", {"value": FRAME}, "write to"),
     ("pinned_buffer", {}, "allocate a pinned write buffer for")],
)  # fmt: skip
def test_read_only_handle_refusals(m: Any, sname: str, method: str, kwargs: dict, operation: str) -> None:
    shm = make(m, sname)
    reader = m.open(sname, readonly=True)
    try:
        fails(PermissionError, f"cannot {operation} read-only shared memory {sname!r}", lambda: getattr(reader, method)(**kwargs))
        with pytest.raises(PermissionError):
            with m.locked_many([reader]):
                pass
        assert sname in m.list_streams() and shm.count == 0
    finally:
        reader.close()
        shm.close()


# -- lifecycle -----------------------------------------------------------------------------------


def test_unlink_edges(m: Any, sname: str) -> None:
    shm = make(m, sname)
    shm.unlink()
    shm.unlink()  # already gone: silent
    shm.delete()
    assert sname not in m.list_streams()
    closed = make(m, sname)
    closed.close()
    closed.unlink()  # a closed handle still unlinks its stream
    assert sname not in m.list_streams()
    old = make(m, sname)
    m.unlink(sname)
    new = make(m, sname)
    try:
        fails(m.StaleStreamError, f"stream {sname!r} has been replaced by a newer generation", old.unlink)
        assert sname in m.list_streams()
    finally:
        new.close()
        old.close()


def test_unlinked_stream_stays_usable_through_open_handles(m: Any, sname: str) -> None:
    shm = make(m, sname)
    reader = m.open(sname)
    try:
        shm.write(FRAME)
        shm.unlink()
        assert (reader.read().tolist(), reader.count) == (FRAME.tolist(), 1)
        reader.write(FRAME * 3)
        assert reader.read().tolist() == (FRAME * 3).tolist()
    finally:
        reader.close()


def test_with_blocks(m: Any, sname: str) -> None:
    with make(m, sname) as shm:
        shm.write(FRAME)
    assert sname in m.list_streams()
    again = m.open(sname)
    assert again.count == 1
    again.close()
    m.unlink(sname)
    with make(m, sname, auto_unlink=True):
        pass
    assert sname not in m.list_streams()
    with pytest.raises(KeyError):
        with m.stream(sname, shape=(2,)):
            raise KeyError("k")
    assert sname not in m.list_streams()
    with m.stream(sname, shape=(2,)) as shm:
        shm.unlink()
    fails(ValueError, "shape must contain at least one dimension", lambda: m.stream(sname, shape=()).__enter__())


def test_describe_and_config(m: Any, sname: str) -> None:
    shm = make(m, sname, dtype=np.int16)
    try:
        shm.write(np.ones((2, 3)))
        lines = dict(line.split(":", 1) for line in shm.describe().splitlines())
        assert list(lines) == ["name", "shape", "dtype", "size", "gpu_enabled", "gpu_device", "cpu_mirror", "count", "write_time",
                               "write_seq", "owner", "readonly", "creator_pid", "producer", "age", "notify"]  # fmt: skip
        assert {k: lines[k] for k in ("shape", "dtype", "size", "count", "write_seq", "owner", "producer")} == {
            "shape": "        (2, 3)", "dtype": "        int16", "size": "         12 bytes", "count": "        1",
            "write_seq": "    2", "owner": "        True", "producer": "     alive",
        }  # fmt: skip
        config = shm.to_config()
        assert {k: v for k, v in config.items() if k != "notify"} == {"name": sname, "shape": [2, 3], "dtype": "int16", "gpu_device": None, "cpu_mirror": True}
        assert config["notify"] is (not is_real(m))  # docs/pyshmem.md, notify: always True in framebus
        shm.unlink()
        again = m.SharedMemory.create_from_config(config)
        assert (again.shape, str(again.dtype), again.owner) == ((2, 3), "int16", True)
        again.unlink()
        minimal = m.SharedMemory.create_from_config({"name": sname, "shape": [3]})
        assert (minimal.shape, str(minimal.dtype)) == ((3,), "float32")
        minimal.unlink()
        with pytest.raises(KeyError):
            m.SharedMemory.create_from_config({"name": sname})
    finally:
        shm.close()


def test_age_staleness_and_dlpack(m: Any, sname: str) -> None:
    shm = make(m, sname)
    reader = m.open(sname, readonly=True)
    try:
        fails(ValueError, "max_age must be positive", lambda: shm.is_stale(0))
        fails(ValueError, "max_age must be positive", lambda: shm.is_stale(-1))
        assert (shm.is_stale(1e9), shm.is_stale(float("nan")), shm.is_stale(float("inf"))) == (True, False, False)
        shm.write(FRAME)
        assert (shm.is_stale(1e9), shm.is_stale(float("inf")), 0.0 <= shm.age < 1e9) == (False, False, True)
        assert np.from_dlpack(reader).tolist() == FRAME.tolist()
        assert reader.__dlpack_device__() == (1, 0)
    finally:
        reader.close()
        shm.close()


def test_locked_many_arguments(m: Any, sname: str) -> None:
    a = make(m, sname)
    b = make(m, sname + ".b")
    same = m.open(sname)
    try:
        for kwargs, message in [
            (dict(timeout=-1), "timeout must be non-negative"),
            (dict(poll_interval=0), "poll_interval must be positive"),
            (dict(poll_interval=-1), "poll_interval must be positive"),
            (dict(poll_interval=float("nan")), "poll_interval must be positive"),
            (dict(poll_interval=float("inf")), "poll_interval must be positive"),
        ]:
            fails(ValueError, message, lambda: m.locked_many([b, a], **kwargs).__enter__())
        fails(ValueError, "locked_many() requires unique stream names", lambda: m.locked_many([a, same]).__enter__())
        with m.locked_many([b, a], timeout=0) as handles:
            assert handles == (b, a)
        with m.locked_many([]) as handles:
            assert handles == ()
    finally:
        same.close()
        a.close()
        b.close()


# -- what framebus.pyshmem does differently on purpose (docs/pyshmem.md) ----------------------------------


@pytest.mark.parametrize("device", ["cuda:0", 0, "cpu", True])
def test_gpu_device_without_gpu_streams(m: Any, sname: str, device: Any) -> None:
    """docs/pyshmem.md, "GPU streams": pyshmem without PyTorch says PyTorch is required (any
    device); framebus.pyshmem answers as pyshmem with PyTorch but without CUDA does."""
    if is_real(m):
        try:
            import torch  # noqa: F401

            pytest.skip("PyTorch is installed: pyshmem's answer depends on its CUDA")
        except ImportError:
            fails(RuntimeError, "PyTorch is required for GPU shared memory", lambda: make(m, sname, gpu_device=device))
        return
    if fbshm.gpu_available():
        pytest.skip("this framebus build has GPU streams")
    if device in ("cpu", True):
        fails(ValueError, "only CUDA devices are currently supported", lambda: make(m, sname, gpu_device=device))
    else:
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            make(m, sname, gpu_device=device)
    assert (m.gpu_available(), m.GPU_SUPPORTED_DTYPES) == (False, frozenset())


def test_notify_is_always_on(m: Any, sname: str) -> None:
    """docs/pyshmem.md, notify: framebus readers always sleep on a futex."""
    shm = make(m, sname)
    try:
        expected = not is_real(m)
        assert (shm.notify, m.stat(sname)["notify"], shm.to_config()["notify"]) == (expected, expected, expected)
    finally:
        shm.close()


def test_closing_another_handle_keeps_the_lock(m: Any, sname: str) -> None:
    """docs/pyshmem.md, "Closing a handle releases only the lock levels taken through it"."""
    shm = make(m, sname)
    try:
        shm.acquire()
        m.open(sname).close()
        if is_real(m):
            fails(RuntimeError, "cannot release an unlocked shared memory lock", shm.release)
        else:
            shm.release()
            fails(RuntimeError, "cannot release an unlocked shared memory lock", shm.release)
    finally:
        shm.close()
