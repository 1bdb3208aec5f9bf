"""framebus.pyshmem beyond pyshmem's own tests: its streams are framebus streams, the parts
where framebus differs on purpose, the CLI, purge's scope and the GPU names."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import framebus
import framebus.pyshmem as pyshmem


def test_compat_streams_are_framebus_streams(name: str) -> None:
    with pyshmem.create(name, shape=(2, 3), dtype=np.uint16, auto_unlink=True) as shm:
        shm.write(np.arange(6, dtype=np.uint16).reshape(2, 3), frame_id=9)
        assert name in [str(s) for s in framebus.list_streams()]
        native = framebus.open(name)
        try:
            np.testing.assert_array_equal(native.read(), np.arange(6).reshape(2, 3))
            assert native.frame_id == 9
        finally:
            native.close()
    assert name not in pyshmem.list_streams()


def test_compat_reads_zeros_before_the_first_write_where_framebus_raises(name: str) -> None:
    """Before the first write pyshmem's reads return zeros (its untouched buffer); framebus's
    raise StreamEmptyError. On one stream, each API keeps its own answer."""
    with pyshmem.create(name, shape=(2, 3), dtype=np.int16, auto_unlink=True) as shm:
        native = framebus.open(name)
        try:
            assert shm.read().tolist() == np.zeros((2, 3)).tolist() and shm.read().dtype == np.int16
            out = np.full((2, 3), 7, np.int16)
            assert shm.read(out=out) is out and not out.any()
            other = np.full((2, 3), 7.0, np.float64)  # another dtype goes through np.copyto
            assert shm.read(out=other) is other and not other.any()
            pub = shm.read_publication()
            assert (pub.count, pub.frame_id, pub.write_time, pub.payload.tolist()) == (0, 0, 0.0, np.zeros((2, 3)).tolist())
            with pytest.raises(framebus.StreamEmptyError):
                native.read()
            shm.write(np.ones((2, 3), np.int16))
            assert shm.read().tolist() == native.read().tolist() == np.ones((2, 3)).tolist()
        finally:
            native.close()


def test_native_streams_open_through_compat(name: str) -> None:
    with framebus.create(name, shape=(4,), dtype=np.float64) as w:
        w.write(np.full(4, 2.5))
        shm = pyshmem.open(name, readonly=True)
        try:
            assert repr(shm) == f"SharedMemory(name={name!r}, shape=(4,), dtype='float64', gpu_device=None)"
            np.testing.assert_array_equal(shm.read(), np.full(4, 2.5))
            assert shm.count == 1 and shm.owner is False
        finally:
            shm.close()
        w.unlink()


def test_compat_write_casts_silently_like_pyshmem(name: str) -> None:
    """docs/pyshmem.md: through framebus.pyshmem a cast that changes values is done (as
    pyshmem's np.asarray does); the native write refuses it."""
    import warnings

    with pyshmem.create(name, shape=(2,), dtype=np.float16, auto_unlink=True) as shm:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's own overflow warning, as under pyshmem
            shm.write(np.array([1, 70000], np.int64))
        assert shm.read().tolist() == [1.0, float("inf")]
        native = framebus.open(name)
        try:
            with pytest.raises(ValueError, match="70000"):
                native.write(np.array([1, 70000], np.int64))
        finally:
            native.close()


def test_uint64_frame_ids_keep_their_bits(name: str) -> None:
    with pyshmem.stream(name, shape=(1,)) as shm:
        shm.write(np.zeros(1, np.float32), frame_id=2**64 - 2)
        assert shm.frame_id == 2**64 - 2
        assert shm.read_publication().frame_id == 2**64 - 2
        native = framebus.open(name)
        try:
            assert native.frame_id == -2  # the same 64 bits, read as signed by the native API
        finally:
            native.close()
        # pyshmem stores any int modulo 2**64 (tests/test_pyshmem_edges.py compares it with pyshmem)
        shm.write(np.zeros(1, np.float32), frame_id=2**64 + 3)
        assert shm.frame_id == 3


def test_aborted_write_view_leaves_the_last_complete_frame(name: str) -> None:
    with pyshmem.stream(name, shape=(2,)) as shm:
        shm.write(np.array([1.0, 2.0], np.float32))
        with pytest.raises(KeyError):
            with shm.write_view() as view:
                view[...] = [8.0, 9.0]
                raise KeyError("abandon")
        np.testing.assert_array_equal(shm.read(), [1.0, 2.0])
        assert shm.count == 1
        shm.acquire(timeout=1.0)  # the block gave the write lock back
        shm.release()


def test_read_new_waits_for_a_write_after_the_call(name: str) -> None:
    with pyshmem.stream(name, shape=(1,)) as shm:
        shm.write(np.ones(1, np.float32))
        with pytest.raises(TimeoutError, match="timed out waiting for a new write"):
            shm.read_new(timeout=0.05)
        # level-triggered calls see the write that is already there
        assert shm.wait_for_count(after=0, timeout=0) == 1
        np.testing.assert_array_equal(shm.read_after(0, timeout=0), [1.0])


def test_close_wakes_a_waiting_reader_with_pyshmem_error(name: str) -> None:
    with pyshmem.stream(name, shape=(1,)):
        reader = pyshmem.open(name)
        errors = []

        def wait() -> None:
            try:
                reader.read_new(timeout=30)
            except RuntimeError as exc:
                errors.append(exc)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)
        reader.close()
        t.join(10)
        assert not t.is_alive()
        assert "closed while a read was waiting" in str(errors[0])
        assert isinstance(errors[0], framebus.StreamClosedError)


def test_async_read_new(name: str) -> None:
    with pyshmem.stream(name, shape=(2,)) as shm:

        async def scenario() -> np.ndarray:
            task = asyncio.ensure_future(shm.read_new_async(timeout=10))
            await asyncio.sleep(0.05)
            shm.write(np.array([3.0, 4.0], np.float32))
            return await task

        np.testing.assert_array_equal(asyncio.run(scenario()), [3.0, 4.0])


def test_errors_are_pyshmem_messages_and_framebus_types(name: str) -> None:
    with pytest.raises(framebus.StreamNotFoundError, match=r"pyshmem.create\("):
        pyshmem.open(name)
    pyshmem.unlink(name)  # silent for a missing name
    with pyshmem.stream(name, shape=(1,)):
        with pytest.raises(framebus.StreamExistsError, match=r"use pyshmem.open\("):
            pyshmem.create(name, shape=(1,))
    with pytest.raises(ValueError, match="only letters, digits"):
        pyshmem.create("strëam", shape=(1,))
    with pytest.raises(ValueError, match="unsupported dtype"):
        pyshmem.create(name, shape=(1,), dtype=np.dtype("U4"))


def test_stale_handle_cannot_unlink_the_new_stream(name: str) -> None:
    old = pyshmem.create(name, shape=(1,))
    pyshmem.unlink(name)
    new = pyshmem.create(name, shape=(1,))
    try:
        assert new.instance_id != old.instance_id and len(new.instance_id or "") == 32
        with pytest.raises(pyshmem.StaleStreamError, match="newer generation"):
            old.unlink()
        assert name in pyshmem.list_streams()
    finally:
        new.unlink()


def test_gpu_names_raise_pyshmem_errors_without_gpu_streams(name: str) -> None:
    if framebus.gpu_available():
        pytest.skip("GPU streams are available here")
    assert pyshmem.gpu_available() is False
    assert pyshmem.GPU_SUPPORTED_DTYPES == frozenset()
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        pyshmem.create(name, shape=(1,), gpu_device="cuda:0")
    with pytest.raises(ValueError, match="only CUDA devices"):
        pyshmem.create(name, shape=(1,), gpu_device="cpu")
    with pyshmem.stream(name, shape=(1,)) as shm:
        assert shm.gpu_device is None and shm.gpu_enabled is False and shm.cpu_mirror is True
        with pytest.raises(RuntimeError, match="GPU-attached"):
            shm.pinned_buffer()
        pyshmem.open(name, gpu_device=False).close()
    assert not os.path.exists(f"/dev/shm/framebus.{name}")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "framebus.pyshmem", *args], capture_output=True, text=True, timeout=60)


def test_cli_list_unlink_and_no_command(name: str) -> None:
    shm = pyshmem.create(name, shape=(1,))
    shm.close()
    listed = _cli("list")
    assert listed.returncode == 0 and name in listed.stdout.split()
    done = _cli("unlink", name, f"{name}.absent")
    assert done.returncode == 0
    assert f"unlinked {name!r}" in done.stdout
    assert name not in pyshmem.list_streams()
    assert _cli().returncode == 1


def test_purge_keeps_streams_of_other_live_processes(name: str, spawn) -> None:
    mine = pyshmem.create(f"{name}.mine", shape=(1,))
    child = spawn(f"import framebus.pyshmem as p\ns = p.create({name + '.theirs'!r}, shape=(1,))\nsay('ready')\nhear()\ns.unlink()\n")
    child.expect("ready")
    try:
        removed = pyshmem.purge()
        assert f"{name}.mine" in removed
        assert f"{name}.theirs" not in removed
        assert f"{name}.theirs" in pyshmem.list_streams()
    finally:
        mine.close()
        child.send("done")
        child.finish()
