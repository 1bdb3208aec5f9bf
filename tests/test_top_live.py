"""The live ``framebus top`` in a pseudo-terminal (issue #17): the filter key ``/`` (Enter
applies, Esc clears), Ctrl-C (a clean exit, status 130), and a stream named on the command line
that disappears (shown as gone, top keeps running, and shows it again when it comes back)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
import time

import numpy as np

import framebus
from test_top import _screen

BOUND = 30.0


def start_top(*args: str):
    """``framebus top --interval 0.2 ARGS`` in a 200x40 pseudo-terminal: (pid, fd)."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.environ.update(COLUMNS="200", LINES="40", TERM="xterm")
        os.execv(sys.executable, [sys.executable, "-m", "framebus", "top", "--interval", "0.2", *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    return pid, fd


def screen_until(fd: int, text: str) -> str:
    """What the terminal shows until ``text`` appears (or BOUND seconds pass)."""
    seen = ""
    end = time.monotonic() + BOUND
    while text not in seen and time.monotonic() < end:
        seen += _screen(fd, 0.2)
    return seen


def exit_status(pid: int, fd: int) -> int:
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        _screen(fd, 0.1)  # keep reading, or the view blocks writing to the terminal
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status), status
            return os.WEXITSTATUS(status)
    raise AssertionError("top did not exit")


def stop(pid: int, fd: int) -> None:
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except OSError:
        pass
    os.close(fd)


def test_filter_key_and_ctrl_c(name):
    a = framebus.create(f"{name}.alpha", shape=(4,), dtype=np.uint8)
    b = framebus.create(f"{name}.beta", shape=(4,), dtype=np.uint8)
    pid, fd = start_top("--filter", name)
    try:
        seen = screen_until(fd, f"{name}.beta")
        assert f"{name}.alpha" in seen
        os.write(fd, b"/" + f"{name}.be".encode())
        screen_until(fd, f"filter: {name}.be")  # the view follows what is typed
        os.write(fd, b"\r")
        _screen(fd, 1.0)  # drain what was drawn before Enter
        after = screen_until(fd, f"{name}.beta")
        assert f"{name}.beta" in after and f"{name}.alpha" not in after
        os.write(fd, b"/\x1b")  # Esc clears the filter: every stream again
        assert f"{name}.alpha" in screen_until(fd, f"{name}.alpha")
        os.write(fd, b"\x03")  # Ctrl-C: SIGINT in cbreak mode
        assert exit_status(pid, fd) == 130  # Ctrl-C, as framebus --help says (q quits with 0)
    finally:
        stop(pid, fd)
        a.unlink()
        b.unlink()


def test_a_named_stream_that_disappears_is_shown_as_gone(name):
    w = framebus.create(name, shape=(4,), dtype=np.uint8)
    w.write(np.ones(4, np.uint8))
    pid, fd = start_top(name)
    try:
        assert f"writer {os.getpid()} alive" in screen_until(fd, f"writer {os.getpid()} alive")
        w.unlink()
        assert "gone: no such stream" in screen_until(fd, "gone: no such stream")
        done, _ = os.waitpid(pid, os.WNOHANG)
        assert not done, "top exited when its stream disappeared"
        w = framebus.create(name, shape=(8,), dtype=np.uint8)  # it comes back
        for _ in range(2):
            w.write(np.ones(8, np.uint8))
        assert "seq 2" in screen_until(fd, "seq 2")
        os.write(fd, b"q")
        assert exit_status(pid, fd) == 0
    finally:
        stop(pid, fd)
        w.unlink()
