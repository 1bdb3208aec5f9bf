"""Hostile input for every public call (issue 6): wrong types, shapes, dtypes, non-contiguous
arrays, huge sizes, negative/NaN/inf timeouts, bad names, closed handles, double close, views
after close, pipe() to a closed descriptor.

Each case runs in its own child process on its own stream (shape (4, 6) float32, one frame of
known content and metadata). The child executes the snippet and reports the exception; the
test checks that the child exited normally (the interpreter survived), that the exception is
of the expected builtin family with a readable message (no Rust Debug dump), and that nothing
was written (sequence, contents and metadata unchanged) unless the case is meant to write.
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional, Tuple

import numpy as np
import pytest

import framebus
from reliability_helpers import ctx, unique_name, unlink_quietly

SHAPE = (4, 6)
ORIGINAL = np.arange(24, dtype=np.float32).reshape(SHAPE)
META = b"original"

# (snippet, expected exception family or None for "succeeds", whether it may write)
V, T, F, R, O, K, E, P = ValueError, TypeError, FileNotFoundError, RuntimeError, OSError, TimeoutError, FileExistsError, PermissionError
BAD_NAMES = ["''", "'a/b'", "'../x'", "'..'", "'/abs'", "'a\\x00b'", "'x' * 201", "'\u00e9t\u00e9'", "'sp ace'", "'.hidden'", "'a\\\\b'", "'\\n'", "'a' * 10000"]

CASES: dict = {}
BUGS: dict = {}


def case(cid: str, code: str, expect: Any, writes: bool = False, bug: Optional[str] = None) -> None:
    assert cid not in CASES, cid
    CASES[cid] = (code, expect, writes)
    if bug:
        BUGS[cid] = bug


# -- create -------------------------------------------------------------------------------------
for i, bad in enumerate(BAD_NAMES):
    case(f"create-name-{i}", f"framebus.create({bad}, shape=(2,))", V)
    case(f"open-name-{i}", f"framebus.open({bad})", V)
    case(f"unlink-name-{i}", f"framebus.unlink({bad})", V)
    case(f"stat-name-{i}", f"framebus.stat({bad})", V)
case("create-shape-2**64", "framebus.create(name + '-n', shape=(2**64,))", V)
case("create-name-int", "framebus.create(123, shape=(2,))", T)
case("create-name-none", "framebus.create(None, shape=(2,))", T)
case("create-name-bytes", "framebus.create(b'abc', shape=(2,))", T)
for i, (shape, exc) in enumerate([("'abc'", T), ("(0, 3)", V), ("(-1,)", V), ("()", V), ("(1,) * 9", V), ("(2**40, 2**40)", V),
                                  ("(2**62,)", V), ("(1.5, 2)", T), ("True", T), ("None", T), ("(2, None)", T), ("[[2]]", T)]):
    case(f"create-shape-{i}", f"framebus.create(name + '-n', shape={shape})", exc)
for i, dtype in enumerate(["object", "'U4'", "'S3'", "[('a', 'f4')]", "'V8'", "'M8[ns]'", "'(2,)f4'"]):
    case(f"create-dtype-{i}", f"framebus.create(name + '-n', shape=(2,), dtype={dtype})", V)
case("create-dtype-garbage", "framebus.create(name + '-n', shape=(2,), dtype='notadtype')", T)
case("create-size-mismatch", "framebus.create(name + '-n', shape=(2,), size=9)", V)
case("create-size-str", "framebus.create(name + '-n', shape=(2,), size='8')", T)
for i, (kw, exc) in enumerate([("slots=0", V), ("slots=1", V), ("slots=65", V), ("slots=-1", V), ("slots='4'", T), ("slots=True", T),
                               ("slots=2**40", V), ("meta_capacity=-1", V), ("meta_capacity=2**21", V), ("max_readers=0", V),
                               ("max_readers=5000", V), ("permissions=0o7777", V), ("permissions=0o4700", V), ("permissions=-1", V), ("permissions='0600'", T), ("mode=0o600", T),
                               ("gpu_device=0", T), ("cpu_mirror=True", V), ("device='gpu'", V), ("device=True", T), ("slots=4.0", T)]):
    case(f"create-kw-{i}", f"framebus.create(name + '-n', shape=(2,), {kw})", exc)
case("create-exists", "framebus.create(name, shape=(4, 6), dtype=np.float32)", E)
case("create-exist-ok-other-spec", "framebus.create(name, shape=(4, 7), dtype=np.float32, exist_ok=True)", E)
case("create-huge", "framebus.create(name + '-n', shape=(2**20, 2**20), dtype=np.uint8, slots=2)", (V, O))
case("create-huge-shm", "framebus.create(name + '-n', shape=(1 << 18, 1 << 18), dtype=np.uint8, slots=2)", (V, O))
# -- variable-shape streams (issue #15) ------------------------------------------------------------
for i, (kw, exc) in enumerate([("capacity=0", V), ("capacity=-1", V), ("capacity='lots'", V), ("capacity=1.5", T), ("capacity=True", T),
                               ("capacity=2**70", V), ("capacity='2**70'", V), ("capacity=16, shape=(2,)", V), ("capacity=16, size=16", V)]):
    case(f"create-capacity-{i}", f"framebus.create(name + '-n', {kw})", exc)
for i, (call, exc) in enumerate([("s.write(ORIGINAL, codec='h264')", V), ("s.loan(nbytes=4)", V), ("s.loan(arrays={'a': ((2,), 'u1')})", V),
                                 ("s.loan(shape=(9,))", V), ("s.loan(dtype=np.int8)", V)]):
    case(f"fixed-per-frame-args-{i}", call, exc)
# Each runs on a variable-shape stream that already served a frame (written, then read by another
# handle): a call that fails must leave that frame the newest, unchanged (checked in the child).
_VARIABLE = """\
v = framebus.create(name + '-v', capacity=4096, meta_capacity=16)
v.write({{'kept': np.arange(5, dtype=np.int16)}}, frame_id=9, meta=b'served')
rd = framebus.open(name + '-v')
assert rd.read()['kept'].tolist() == [0, 1, 2, 3, 4]
try:
    {}
finally:
    try:
        if {}:
            p = rd.read_publication()
            assert v.write_sequence == 1 and (p.frame_id, p.meta, list(p.payload)) == (9, b'served', ['kept']), 'the served frame changed'
            assert p.payload['kept'].tolist() == [0, 1, 2, 3, 4], 'the served frame changed'
            with rd.view() as f:
                assert f.seq == 1 and f.arrays['kept'].tolist() == [0, 1, 2, 3, 4], 'the served frame changed'
    finally:
        rd.close()
        v.unlink()"""
for i, (call, exc) in enumerate([
    ("v.write(np.zeros(4097, np.uint8))", V), ("v.write(np.zeros((2, 2), object))", T), ("v.write(np.array(['a']))", T),
    ("v.write({str(i): np.ones(1) for i in range(32)})", V), ("v.write({'n' * 33: np.ones(1)})", V), ("v.write({1: np.ones(1)})", T),
    ("v.write({})", V), ("v.write(b'x', codec='a b')", V), ("v.loan(shape=(2**62, 2**62, 4), dtype=np.float32)", V),
    ("v.loan(nbytes=-1)", V), ("v.loan(nbytes=4097)", V), ("v.loan()", V), ("v.loan(arrays={'a': 5})", T),
    ("v.read(out=np.empty(3))", V), ("v.write(np.ones(3)); v.read(out=np.empty(4))", V), ("v.write({'a': np.ones(3)}); v.view().array.sum()", None),
    ("v.write({'a': np.ones(3), 'b': np.ones(2)}); v.view().array", V), ("v.write({'a': np.ones(3), 'b': np.ones(2)}); memoryview(v.view())", V),
    ("v.write(b'x' * 4000, meta=b'm' * 17)", V), ("v.write(np.ones(3), timestamp_ns=-1)", (V, T, OverflowError)), ("v.write({'a': [object()]})", T),
    ("v.write(np.ones(3), seq=1)", V), ("v._write_raw(b'JUNK' * 40)", V),
]):
    # Calls joined by ';' write a frame on purpose before the hostile part.
    case(f"variable-{i}", _VARIABLE.format(call, "';' not in " + repr(call)), exc)
case("variable-empty-read-out", "v = framebus.create(name + '-v', capacity=4096)\ntry:\n    v.read(out=np.empty(3))\nfinally:\n    v.unlink()", framebus.StreamEmptyError)
# -- open / unlink / stat / list / gc -------------------------------------------------------------
case("open-missing", "framebus.open(name + '-missing')", F)
case("open-mode-bogus", "framebus.open(name, mode='bogus')", V)
case("open-mode-none", "framebus.open(name, mode=None)", (T, V))
case("open-mode-int", "framebus.open(name, mode=1)", (T, V))
case("open-name-none", "framebus.open(None)", T)
case("unlink-missing", "framebus.unlink(name + '-missing')", F)
case("unlink-none", "framebus.unlink(None)", T)
case("stat-missing", "framebus.stat(name + '-missing')", F)
case("stat-int", "framebus.stat(5)", T)
case("list-args", "framebus.list_streams(1)", T)
case("gc-positional", "framebus.gc(True)", T)
case("gc-unknown-kw", "framebus.gc(force=True)", T)
# -- write ----------------------------------------------------------------------------------------
case("write-shape", "s.write(np.zeros((4, 5), np.float32))", V)
case("write-shape-transposed", "s.write(np.zeros((6, 4), np.float32))", V)
case("write-flat", "s.write(np.zeros(24, np.float32))", V)
case("write-0d", "s.write(np.float32(1))", V)
case("write-dtype-complex", "s.write(np.zeros((4, 6), np.complex64))", V)
case("write-dtype-bool-ok", "s.write(np.ones((4, 6), bool))", None, writes=True)
case("write-dtype-str", "s.write(np.zeros((4, 6), 'U2'))", (V, T))
case("write-object-array", "s.write(np.empty((4, 6), object))", (V, T))
case("write-str", "s.write('abc')", (T, V))
case("write-none", "s.write(None)", (T, V))
case("write-dict", "s.write({})", (T, V))
case("write-ragged", "s.write([[1, 2], [3]])", (T, V))
case("write-bytes-wrong-size", "s.write(b'x' * 10)", (T, V))
case("write-huge", "s.write(np.zeros((4000, 6000), np.float32))", V)
case("write-meta-long", "s.write(np.zeros((4, 6), np.float32), meta=b'x' * 17)", V)
case("write-meta-huge", "s.write(np.zeros((4, 6), np.float32), meta=b'x' * (1 << 24))", V)
case("write-meta-str", "s.write(np.zeros((4, 6), np.float32), meta='text')", T)
case("write-meta-int", "s.write(np.zeros((4, 6), np.float32), meta=5)", T)
case("write-meta-noncontig-ok", "s.write(np.zeros((4, 6), np.float32), meta=memoryview(b'abcdefgh')[::2]); assert s.read_publication().meta == b'aceg'", None, writes=True)
case("write-frame-id-str", "s.write(np.zeros((4, 6), np.float32), frame_id='7')", T)
case("write-frame-id-overflow", "s.write(np.zeros((4, 6), np.float32), frame_id=2**70)", (T, V, OverflowError))
case("write-timestamp-negative", "s.write(np.zeros((4, 6), np.float32), timestamp_ns=-1)", (T, V, OverflowError))
case("write-timeout-negative", "s.write(np.zeros((4, 6), np.float32), timeout=-1)", V)
case("write-timeout-nan", "s.write(np.zeros((4, 6), np.float32), timeout=float('nan'))", V)
case("write-timeout-neg-inf", "s.write(np.zeros((4, 6), np.float32), timeout=float('-inf'))", V)
case("write-timeout-str", "s.write(np.zeros((4, 6), np.float32), timeout='1')", T)
case("write-positional-extra", "s.write(np.zeros((4, 6), np.float32), 1)", T)
case("write-noncontig-ok", "a = np.zeros((4, 12), np.float32); a[:, ::2] = 5; s.write(a[:, ::2]); assert (s.read() == 5).all()", None, writes=True)
case("write-fortran-ok", "a = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(4, 6) + 1); s.write(a); assert (s.read() == a).all()", None, writes=True)
case("write-byteswapped-ok", "a = (np.arange(24, dtype='>f4').reshape(4, 6) + 2); s.write(a); assert (s.read() == a).all()", None, writes=True)
case("write-timeout-inf-ok", "s.write(np.zeros((4, 6), np.float32), timeout=float('inf'))", None, writes=True)
# -- reads ----------------------------------------------------------------------------------------
for i, out in enumerate(["np.empty((4, 5), np.float32)", "np.empty((4, 6), np.float64)", "np.empty((4, 12), np.float32)[:, ::2]",
                         "np.empty((6, 4), np.float32).T", "np.zeros((4, 6), np.float32)[::-1]", "[[0.0] * 6] * 4", "bytearray(96)",
                         "np.lib.stride_tricks.as_strided(np.zeros(6, np.float32), (4, 6), (0, 4))"]):
    case(f"read-out-{i}", f"s.read(out={out})", (V, T))
    case(f"read_into-{i}", f"s.read_into({out})", (V, T))
    case(f"read_new-out-{i}", f"s.read_new(timeout=0, out={out})", (V, T))
case("read-out-readonly", "a = np.empty((4, 6), np.float32); a.flags.writeable = False; s.read(out=a)", V)
case("read_into-none", "s.read_into(None)", (V, T))
case("read-timeout-negative", "s.read_new(timeout=-1)", V)
case("read_new-timeout-negative", "s.read_new(timeout=-1)", V)
case("read_new-timeout-nan", "s.read_new(timeout=float('nan'))", V)
case("read_new-timeout-str", "s.read_new(timeout='x')", T)
case("read_new-timeout-zero", "s.read_new(timeout=0)", K)
case("read_new-timeout-tiny", "s.read_new(timeout=1e-300)", K)
case("view-timeout-negative", "s.view(-1)", V)
case("view-timeout-nan", "s.view(float('nan'))", V)
case("wait_view-timeout-negative", "s.wait_view(-0.5)", V)
case("wait_view-timeout-nan", "s.wait_view(float('nan'))", V)
case("wait_view-timeout-zero", "s.wait_view(0)", K)
case("wait_after-negative", "s.wait_after(-1, timeout=0)", (T, V, OverflowError))
# -- loans ----------------------------------------------------------------------------------------
case("loan-meta-long", "s.loan(meta=b'x' * 17)", V)
case("loan-timeout-negative", "s.loan(-1)", V)
case("loan-timeout-nan", "s.loan(float('nan'))", V)
case("loan-exception-discards", "with s.loan() as a:\n    a[:] = 99\n    raise KeyError('boom')", KeyError)
case("loan-commit-twice", "l = s.loan(); l.array[:] = 3; l.commit(); l.commit()", R, writes=True)
case("loan-array-after-commit", "l = s.loan(); l.commit(); l.array", R, writes=True)
case("loan-abort-then-commit", "l = s.loan(); l.array[:] = 5; l.abort(); l.commit()", R)
case("loan-abort-twice-ok", "l = s.loan(); l.abort(); l.abort()", None)
case("loan-dropped-unpublished", "l = s.loan(); l.array[:] = 5; del l; assert not s.lock_held()", None)
# The array of a discarded loan keeps its (empty) slot and is read-only: writing it is a ValueError.
case("loan-dropped-array-kept", "l = s.loan(); a = l.array; del l; assert not s.lock_held(); a[:] = 5; del a", V)
case("loan-second-claim", "l = s.loan(); m = s.loan()", R)
case("write-during-loan", "l = s.loan(); s.write(np.zeros(s.shape, s.dtype))", R)
case("loan-array-after-commit-close", "l = s.loan(); a = l.array; l.commit(); s.close(); a.sum()", None, writes=True)
case("loan-then-close-commit", "l = s.loan(); l.array[:] = 5; s.close(); l.commit()", (None, R), writes=True)
case("loan-construct", "framebus.Loan()", T)
# -- the lock -------------------------------------------------------------------------------------
case("acquire-timeout-negative", "s.acquire(-1)", V)
case("acquire-timeout-nan", "s.acquire(float('nan'))", V)
case("acquire-timeout-str", "s.acquire('1')", T)
case("release-unheld", "s.release()", R)
case("release-twice", "s.acquire(); s.release(); s.release()", R)
case("locked-timeout-nan", "with s.locked(float('nan')):\n    pass", V)
case("locked-body-raises", "with s.locked(1):\n    raise KeyError('boom')", KeyError)
case("locked-dead-thread-ok", "import threading\nt = threading.Thread(target=s.acquire); t.start(); t.join()\nwith s.locked(0.05):\n    pass", None)
case("clear-timeout-negative", "s.clear(timeout=-1)", V)
case("clear-timeout-nan", "s.clear(timeout=float('nan'))", V)
# -- closed handles -------------------------------------------------------------------------------
for call in ["s.write(ORIGINAL)", "s.read()", "s.read_into(np.empty((4, 6), np.float32))", "s.read_new(timeout=0)", "s.view()",
             "s.wait_view(0)", "s.loan()", "s.acquire()", "s.release()", "s.clear()", "s.attached", "s.write_sequence",
             "s.read_publication()", "s.wait(timeout=0)", "with s.locked():\n    pass", "next(iter(s.frames(0, copy=True)), None) or s.read()"]:
    case(f"closed-{call.split('(')[0].split()[-1]}-{len(CASES)}", f"s.close()\n{call}", R)
case("close-twice-ok", "s.close(); s.close(); assert s.closed", None)
case("unlink-after-close", "s.close(); s.unlink()", R)  # StreamClosedError: unlink by name with framebus.unlink(name)
case("view-after-close", "f = s.view(); a = f.array; s.close(); assert (a == ORIGINAL).all(); f.release(); assert (a == ORIGINAL).all(); del a, f", None)
case("view-array-after-release", "f = s.view(); f.release(); f.array", R)
case("view-meta-after-release", "f = s.view(); f.release(); f.meta", R)
case("view-release-twice-ok", "f = s.view(); f.release(); f.release(); assert f.released", None)
case("view-writeable", "f = s.view(); a = f.array; a.flags.writeable = True", V)
case("view-write-into", "f = s.view(); f.array[0, 0] = 1", V)
case("view-after-close-gc", "f = s.view(); a = f.array[1:3]; s.close(); del f; import gc; gc.collect(); assert (a == ORIGINAL[1:3]).all()", None)
case("view-buffer-write", "f = s.view(); memoryview(f)[0:1] = b'x'", (T, V))
case("frame-construct", "framebus.Frame()", T)
case("frame-dlpack-after-release", "f = s.view(); f.release(); f.__dlpack__()", R)
case("frame-array-after-close-unmapped", "f = s.view(); s.close(); framebus.unlink(name); assert (f.array == ORIGINAL).all()", None)
# -- pipes ----------------------------------------------------------------------------------------
case("pipe-closed-fd", "r, w = os.pipe(); os.close(r); os.close(w)\ntry:\n    framebus.pipe(b'x' * 10, w); framebus.sync(w, timeout=5)\nfinally:\n    framebus.pipes.close(w, timeout=5)", O)
case("pipe-reader-gone", "r, w = os.pipe(); os.close(r)\ntry:\n    framebus.pipe(b'x' * 10, w); framebus.sync(w, timeout=5)\nfinally:\n    os.close(w)", O)
case("pipe-negative-fd", "framebus.pipe(b'x', -1)", (V, O))
case("pipe-huge-fd", "framebus.pipe(b'x', 2**40)", (V, O, OverflowError))
case("pipe-bool-fd", "framebus.pipe(b'x', True)", T)
case("pipe-str-fd", "framebus.pipe(b'x', 'one')", T)
case("pipe-str-data", "framebus.pipe('text', 1)", T)
case("pipe-object-data", "framebus.pipe(object(), 1)", T)
case("pipe-object-array", "framebus.pipe(np.empty(3, object), 1)", T)
case("pipe-noncontig", "framebus.pipe(np.zeros((4, 4))[:, ::2], 1)", T)
case("sync-timeout-negative", "framebus.sync(timeout=-1)", V)
case("sync-timeout-nan", "framebus.sync(timeout=float('nan'))", V)
case("sync-bad-fd", "framebus.sync('x')", (T, V))
case("close-timeout-negative", "framebus.pipes.close(timeout=-1)", V)
case("close-unknown-fd-ok", "framebus.pipes.close(987)", None)
case("configure-unknown", "framebus.configure(bogus=1)", T)
case("configure-pipe-size-negative", "framebus.configure(pipe_size=-5)", V)
case("configure-queue-str", "framebus.configure(queue='x')", T)
case("configure-queue-negative", "framebus.configure(queue=-1)", (T, V, OverflowError))


def _child(name: str, code: str, q: Any) -> None:
    import warnings

    warnings.simplefilter("ignore")
    s = framebus.open(name)
    ns = {"s": s, "name": name, "np": np, "framebus": framebus, "os": os, "ORIGINAL": ORIGINAL}
    try:
        exec(code, ns)
        q.put(("ok", [], ""))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        q.put(("raised", [c.__name__ for c in type(exc).__mro__], str(exc)))
    for extra in (name + "-n",):
        try:
            framebus.unlink(extra)
        except (FileNotFoundError, ValueError):
            pass


def _family(expect: Any) -> Tuple[Optional[type], ...]:
    return expect if isinstance(expect, tuple) else (expect,)


@pytest.fixture
def stream():
    name = unique_name("hostile")
    s = framebus.create(name, shape=SHAPE, dtype=np.float32, slots=4, meta_capacity=16)
    s.write(ORIGINAL, frame_id=7, meta=META)
    yield name, s
    s.close()
    unlink_quietly(name)
    unlink_quietly(name + "-n")


@pytest.mark.parametrize(
    "cid", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=BUGS[c])) if c in BUGS else c for c in CASES]
)
def test_hostile_input(cid: str, stream: Any) -> None:
    name, s = stream
    code, expect, writes = CASES[cid]
    c = ctx()
    q = c.Queue()
    p = c.Process(target=_child, args=(name, code, q))
    p.start()
    p.join(60)
    if p.exitcode is None:
        p.kill()
        p.join()
    assert p.exitcode == 0, f"the child process died (exit code {p.exitcode}) running {code!r}"
    kind, mro, msg = q.get(timeout=10)
    family = _family(expect)
    if kind == "ok":
        assert None in family, f"{code!r} raised nothing, expected {family}"
    else:
        names = [f.__name__ for f in family if f is not None]
        assert any(n in mro for n in names), f"{code!r} raised {mro[0]}: {msg}; expected one of {names}"
        if mro[0] not in ("KeyError", "OverflowError"):
            assert msg.strip(), f"{mro[0]} without a message"
        assert not re.search(r"\b[A-Z]\w+ \{ \w+:", msg), f"a Rust Debug dump in the message: {msg}"
    if not writes:
        assert s.write_sequence == 1, f"{code!r} wrote a frame"
        pub = s.read_publication()
        assert np.array_equal(pub.payload, ORIGINAL) and pub.meta == META and pub.frame_id == 7
    assert s.lock_owner is None, "the write lock was left held by a process that exited"
    assert not os.path.exists(f"/dev/shm/framebus.{name}-n"), "a failed create left a segment behind"
