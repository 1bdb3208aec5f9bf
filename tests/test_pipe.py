"""framebus.pipe / sync / close: the native background writer of file descriptors."""

from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import framebus
from framebus.errors import InvalidArgumentError, PipeBrokenError, PipeError, PipeTimeoutError
from framebus.pipes import configure, pipe_stats


@pytest.fixture
def pipe_fds():
    r, w = os.pipe()
    yield r, w
    try:
        framebus.pipes.close(w, timeout=10)
    except (OSError, TimeoutError):
        pass
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def read_exact(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def reader_thread(fd: int, n: int) -> "tuple[threading.Thread, list]":
    box: list = []
    t = threading.Thread(target=lambda: box.append(read_exact(fd, n)), daemon=True)
    t.start()
    return t, box


def test_every_buffer_kind_round_trips_in_order(pipe_fds):
    r, w = pipe_fds
    arr = np.arange(300_000, dtype=np.uint32)
    mm = mmap.mmap(-1, 200_000)
    mm.write(bytes(range(256)) * (200_000 // 256) + bytes(200_000 % 256))
    parts = [b"header", bytearray(b"\x01" * 70_000), memoryview(b"abc" * 50_000), arr, mm, arr[:1000].reshape(10, 100)]
    expect = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    t, box = reader_thread(r, len(expect))
    for p in parts:
        framebus.pipe(p, w)
    framebus.sync(w)
    t.join(30)
    assert box and box[0] == expect
    mm.close()


def test_fd_may_be_an_object_with_fileno(pipe_fds, tmp_path):
    r, w = pipe_fds
    with open(w, "wb", closefd=False) as f:
        framebus.pipe(b"via fileno", f)
        framebus.sync(f)
    assert os.read(r, 100) == b"via fileno"


def test_regular_files_are_written_with_write(tmp_path):
    path = tmp_path / "out.bin"
    data = np.random.default_rng(1).integers(0, 256, 10_000_000, dtype=np.uint8)
    with open(path, "wb") as f:
        framebus.pipe(data, f)
        framebus.pipe(b"tail", f)
        framebus.pipes.close(f)
    assert path.read_bytes() == data.tobytes() + b"tail"


def test_non_blocking_descriptor_retries_eagain(pipe_fds):
    r, w = pipe_fds
    os.set_blocking(w, False)
    data = np.random.default_rng(2).integers(0, 256, 5_000_000, dtype=np.uint8)
    t, box = reader_thread(r, data.nbytes)
    framebus.pipe(data, w)
    framebus.sync(w)
    t.join(30)
    assert box[0] == data.tobytes()


def test_numpy_integer_descriptors(pipe_fds):
    r, w = pipe_fds
    framebus.pipe(b"np", np.int64(w))
    framebus.sync(np.int32(w))
    assert os.read(r, 2) == b"np"


def test_bad_arguments_raise_clear_errors(pipe_fds):
    r, w = pipe_fds
    with pytest.raises(TypeError, match="needs a buffer"):
        framebus.pipe([1, 2, 3], w)
    with pytest.raises(TypeError, match="C-contiguous") as info:
        framebus.pipe(np.zeros((8, 8), np.uint8)[:, ::2], w)
    assert "ascontiguousarray" in str(info.value)
    with pytest.raises(TypeError, match="C-contiguous"):
        framebus.pipe(np.zeros((8, 8), np.uint8, order="F"), w)
    with pytest.raises(TypeError, match="object"):
        framebus.pipe(np.array([object()] * 4), w)
    with pytest.raises(TypeError, match="fileno"):
        framebus.pipe(b"x", "not an fd")
    with pytest.raises(TypeError, match="bool"):
        framebus.pipe(b"x", True)
    with pytest.raises(InvalidArgumentError):
        framebus.pipe(b"x", 2**40)
    with pytest.raises(PipeError) as bad:
        framebus.pipe(b"x", r)  # the read end
    assert bad.value.errno == errno.EBADF
    with pytest.raises(PipeError) as closed:
        framebus.pipe(b"x", 987_654)
    assert closed.value.errno == errno.EBADF
    with pytest.raises(ValueError):
        framebus.sync(w, timeout=-1)


def test_rotating_numpy_frames_arrive_byte_exact_with_and_without_vmsplice():
    for vmsplice in (True, False):
        configure(vmsplice=vmsplice)
        try:
            r, w = os.pipe()
            frames = [np.random.default_rng(i).integers(0, 256, (120, 160, 3), dtype=np.uint8) for i in range(3)]
            n = 30
            t, box = reader_thread(r, n * frames[0].nbytes)
            for i in range(n):
                framebus.pipe(frames[i % 3], w)
            framebus.pipes.close(w)
            t.join(30)
            assert box[0] == b"".join(frames[i % 3].tobytes() for i in range(n))
            os.close(r)
            os.close(w)
        finally:
            configure(vmsplice=True)


def test_pipe_is_enlarged_and_stats_are_reported(pipe_fds):
    import fcntl

    r, w = pipe_fds
    framebus.pipe(b"x", w)
    framebus.sync(w)
    os.read(r, 1)
    stats = pipe_stats(w)
    assert stats is not None and stats["fifo"] and stats["bytes"] == 1 and stats["pending"] == 0
    with open("/proc/sys/fs/pipe-max-size") as f:
        max_size = int(f.read())
    assert fcntl.fcntl(w, 1032) == stats["pipe_size"]  # F_GETPIPE_SZ
    assert stats["pipe_size"] >= min(max_size, 65536)
    assert pipe_stats(987_654) is None


def test_a_reused_descriptor_number_gets_its_pipe_enlarged_again():
    """A caller that closes its pipe without framebus.pipes.close() and gets the same number for the
    next one (subprocess.Popen after Popen) must get the new pipe configured afresh."""
    import fcntl

    payload = np.arange(3 << 20, dtype=np.uint8)
    sizes = []
    for _ in range(3):
        p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        try:
            fd = p.stdin.fileno()
            framebus.pipe(payload, fd)
            framebus.sync(fd)
            sizes.append((fd, fcntl.fcntl(fd, 1032), pipe_stats(fd)))  # F_GETPIPE_SZ
        finally:
            p.stdin.close()
            p.wait(30)
    fds = {fd for fd, _, _ in sizes}
    for fd, real, stats in sizes:
        assert real == stats["pipe_size"] > 65536, "the pipe in use was enlarged"
        assert stats["bytes"] == payload.nbytes, "offsets start again for each new pipe"
    if len(fds) == 1:
        framebus.pipes.close(fds.pop())


def test_broken_pipe_raises_at_next_call_and_interpreter_survives(pipe_fds):
    r, w = pipe_fds
    os.close(r)
    framebus.pipe(np.zeros(1 << 20, np.uint8), w)
    with pytest.raises(BrokenPipeError) as info:
        framebus.sync(w)
    assert isinstance(info.value, PipeBrokenError) and info.value.errno == errno.EPIPE
    assert f"file descriptor {w}" in str(info.value)
    # The error was reported once; a new write starts a new writer, which fails the same way.
    framebus.pipe(b"again", w)
    with pytest.raises(BrokenPipeError):
        framebus.sync(w)


def test_broken_pipe_from_pipe_call(pipe_fds):
    r, w = pipe_fds
    os.close(r)
    framebus.pipe(b"x" * 100_000, w)
    with pytest.raises(BrokenPipeError):
        for _ in range(10_000):
            framebus.pipe(b"y" * 100_000, w)


def test_sync_timeout_keeps_writes_queued(pipe_fds):
    r, w = pipe_fds
    big = np.ones(8 << 20, np.uint8)  # larger than any pipe: stays pending until read
    framebus.pipe(big, w)
    with pytest.raises(TimeoutError) as info:
        framebus.sync(w, timeout=0.05)
    assert isinstance(info.value, PipeTimeoutError)
    assert pipe_stats(w)["pending"] == 1
    t, box = reader_thread(r, big.nbytes)
    framebus.sync(w)
    t.join(30)
    assert len(box[0]) == big.nbytes


def test_same_buffer_queued_twice_waits_for_the_first_write(pipe_fds):
    r, w = pipe_fds
    buf = np.full(4 << 20, 7, np.uint8)
    framebus.pipe(buf, w)
    done = threading.Event()

    def second() -> None:
        framebus.pipe(buf, w)
        done.set()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    assert not done.wait(0.2), "the second pipe() of the same memory must wait"
    rt, box = reader_thread(r, 2 * buf.nbytes)
    assert done.wait(30)
    framebus.sync(w)
    rt.join(30)
    assert box[0] == buf.tobytes() * 2


def test_sync_of_a_buffer_waits_for_its_writes_like_turbopipe(pipe_fds):
    r, w = pipe_fds
    a = np.full(4 << 20, 1, np.uint8)
    b = np.full(1000, 2, np.uint8)
    framebus.pipe(a, w)
    framebus.sync(b, timeout=0)  # not queued: returns at once
    with pytest.raises(TimeoutError):
        framebus.sync(a, timeout=0.05)
    t, box = reader_thread(r, a.nbytes)
    framebus.sync(a)
    t.join(30)
    assert box[0] == a.tobytes()


def test_buffer_reference_is_held_until_written(pipe_fds):
    import gc
    import weakref

    r, w = pipe_fds

    class Owner(bytearray):
        pass

    data = Owner(b"z" * (2 << 20))
    ref = weakref.ref(data)
    framebus.pipe(data, w)
    del data
    gc.collect()
    assert ref() is not None, "the queued buffer must stay alive"
    t, box = reader_thread(r, 2 << 20)
    framebus.sync(w)
    t.join(30)
    gc.collect()
    assert ref() is None, "released once written"
    assert box[0] == b"z" * (2 << 20)


def test_queue_size_is_configurable_and_bounded():
    old = configure()
    try:
        assert configure(queue=2)["queue"] == 2
        with pytest.raises(ValueError):
            configure(queue=0)
        with pytest.raises(ValueError):
            configure(pipe_size=-5)
    finally:
        configure(queue=old["queue"])


def test_sync_and_close_of_all_descriptors():
    fds = [os.pipe() for _ in range(3)]
    threads = []
    for r, w in fds:
        framebus.pipe(b"q" * 300_000, w)
        threads.append(reader_thread(r, 300_000))
    framebus.sync()
    framebus.pipes.close()
    for (r, w), (t, box) in zip(fds, threads):
        t.join(30)
        assert box[0] == b"q" * 300_000
        assert pipe_stats(w) is None
        os.close(r)
        os.close(w)


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)


def test_interpreter_exit_with_pending_writes_to_a_live_reader_finishes_them(tmp_path):
    out = tmp_path / "out.bin"
    code = f"""
        import subprocess, numpy as np, framebus
        p = subprocess.Popen(["sh", "-c", "sleep 0.3; cat > {out}"], stdin=subprocess.PIPE)
        data = np.arange(3_000_000, dtype=np.uint8)
        for _ in range(4):
            framebus.pipe(data, p.stdin.fileno())
        # exit without sync: the exit hook finishes the writes
    """
    res = run_python(code)
    assert res.returncode == 0, res.stderr
    import time

    for _ in range(600):  # cat finishes after the child has exited
        if out.exists() and out.stat().st_size == 4 * 3_000_000:
            break
        time.sleep(0.05)
    assert out.stat().st_size == 4 * 3_000_000


def test_interpreter_exit_with_a_stalled_reader_does_not_hang():
    code = """
        import os, numpy as np, framebus
        r, w = os.pipe()          # nobody ever reads r
        framebus.pipe(np.ones(16 << 20, np.uint8), w)
        framebus.pipe(b"more", w)
    """
    env_code = "import os; os.environ['FRAMEBUS_PIPE_EXIT_STALL'] = '0.3'\n" + textwrap.dedent(code)
    res = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "abandoning 2 queued write(s)" in res.stderr


def test_interpreter_exit_after_reader_died_does_not_hang_or_crash():
    code = """
        import subprocess, numpy as np, framebus
        p = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        for i in range(20):
            try:
                framebus.pipe(np.full(1 << 20, i, np.uint8), p.stdin.fileno())
            except BrokenPipeError:
                break
        print("alive")
    """
    res = run_python(code)
    assert res.returncode == 0, res.stderr
    assert "alive" in res.stdout


def test_ctrl_c_while_waiting_for_room_raises_keyboard_interrupt():
    code = """
        import os, signal, threading, numpy as np, framebus
        r, w = os.pipe()
        buf = np.ones(8 << 20, np.uint8)
        framebus.pipe(buf, w)
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            framebus.pipe(buf, w)      # same memory: waits for the reader that never comes
        except KeyboardInterrupt:
            print("interrupted")
        os._exit(0)
    """
    res = run_python(code)
    assert "interrupted" in res.stdout, res.stderr


def test_moderngl_buffer_is_accepted(pipe_fds):
    moderngl = pytest.importorskip("moderngl")
    try:
        ctx = moderngl.create_standalone_context(backend="egl")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no OpenGL context: {exc}")
    r, w = pipe_fds
    data = bytes(range(256)) * 64
    buf = ctx.buffer(data)
    framebus.pipe(buf, w)
    framebus.sync(w)
    assert read_exact(r, len(data)) == data
    framebus.pipe(buf.mglo, w)
    framebus.sync(w)
    assert read_exact(r, len(data)) == data
    ctx.release()


def test_turbopipe_calling_convention_lives_in_its_own_module(pipe_fds):
    """`import framebus.turbopipe as turbopipe` runs turbopipe code; the package's top level has
    no `close` (it would read as closing a stream): it is framebus.pipes.close."""
    import framebus.turbopipe as turbopipe

    r, w = pipe_fds
    data = memoryview(b"abcdef")
    turbopipe.pipe(data, w)
    turbopipe.sync(data)
    assert os.read(r, 6) == b"abcdef"
    turbopipe.close(w)
    assert not hasattr(framebus, "close") and callable(framebus.pipes.close)
    assert set(turbopipe.__all__) == {"pipe", "sync", "close"}
