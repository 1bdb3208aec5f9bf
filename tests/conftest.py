"""Shared fixtures of the framebus test suite.

- ``name``: a stream name unique to the test (``t-<pid>-<counter>``); every stream named after it
  (the name itself and ``<name>.<suffix>``) is removed when the test ends.
- an autouse guard that fails a test which leaves a new ``/dev/shm/framebus.*`` entry behind that
  belongs to this session (our name prefix, or created by this process or a child it spawned).
  Entries of other sessions sharing /dev/shm are ignored.
- ``spawn``: runs Python code in a child process (``sys.executable -c``), with line-based
  messages over stdout and stdin, and kills whatever is still running when the test ends.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Dict, List, Optional, Set

import pytest

import framebus

# A shell without job control starts background commands with SIGINT ignored, and an ignored
# signal stays ignored across exec: every command a test starts would then shrug off the Ctrl-C
# the signal tests send it. Python's own handler here is reset to the default in each child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SHM = "/dev/shm"
PREFIX = f"t-{os.getpid()}-"
_counter = itertools.count()
#: pids of every child process spawned by this session (their segments count as ours).
SPAWNED: Set[int] = set()

#: Generous upper bound for one message from a child (never a performance threshold).
CHILD_TIMEOUT = 60.0

#: Code every child runs first.
PRELUDE = """\
import os, sys, time, signal
import numpy as np
import framebus

def say(*parts):
    print(*parts, flush=True)

def hear():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return line.strip()

"""


def segment_path(name: str) -> str:
    return f"{SHM}/framebus.{name}"


def shm_entries() -> Set[str]:
    """Names of all framebus segments in /dev/shm."""
    try:
        return {f[len("framebus."):] for f in os.listdir(SHM) if f.startswith("framebus.")}
    except FileNotFoundError:
        return set()


def remove_streams(prefix: str) -> None:
    """Removes the stream ``prefix`` and every stream ``prefix.<suffix>``."""
    for n in shm_entries():
        if n == prefix or n.startswith(prefix + "."):
            try:
                os.unlink(segment_path(n))
            except FileNotFoundError:
                pass


def _ours(entry: str) -> bool:
    if entry.startswith(PREFIX):
        return True
    try:
        pid = framebus.stat(entry).creator_pid
    except Exception:  # noqa: BLE001 - vanished, unreadable or not ours
        return False
    return pid == os.getpid() or pid in SPAWNED


@pytest.fixture(autouse=True)
def no_leaked_segments():
    """Fails the test if it left a segment of this session in /dev/shm (checked after every
    other fixture of the test has been torn down, including the ``name`` cleanup)."""
    before = shm_entries()
    yield
    leaked = sorted(e for e in shm_entries() - before if _ours(e))
    for e in leaked:
        try:
            os.unlink(segment_path(e))
        except FileNotFoundError:
            pass
    assert not leaked, f"test left segments in /dev/shm: {leaked}"


@pytest.fixture
def name(no_leaked_segments) -> str:
    """A stream name unique to this test; ``<name>`` and ``<name>.*`` are removed afterwards."""
    n = f"{PREFIX}{next(_counter)}"
    remove_streams(n)
    yield n
    remove_streams(n)


def pytest_sessionfinish(session, exitstatus):
    for n in shm_entries():
        if n.startswith(PREFIX):
            try:
                os.unlink(segment_path(n))
            except FileNotFoundError:
                pass


class Child:
    """A Python child process running ``PRELUDE + code``. It talks by lines: ``say(...)`` in
    the child is read here with :meth:`expect` / :meth:`line`; :meth:`send` writes a line the
    child reads with ``hear()``."""

    def __init__(self, code: str, *, env: Optional[Dict[str, str]] = None, preexec_fn=None, wrap: Optional[List[str]] = None):
        full_env = dict(os.environ)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env["PYTHONFAULTHANDLER"] = "1"
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(
            (wrap or []) + [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
            preexec_fn=preexec_fn,
        )
        SPAWNED.add(self.proc.pid)
        self.pid = self.proc.pid
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._err: List[str] = []
        self._pumps = [
            threading.Thread(target=self._pump_out, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for t in self._pumps:
            t.start()

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._err.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def line(self, timeout: float = CHILD_TIMEOUT) -> str:
        """The child's next stdout line (fails if it exits or stays silent for ``timeout``)."""
        try:
            got = self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"child {self.pid} sent nothing within {timeout} s; stderr:\n{self.stderr}")
        if got is None:
            self.proc.wait(timeout=10)
            pytest.fail(f"child {self.pid} exited (rc {self.proc.returncode}) before saying anything; stderr:\n{self.stderr}")
        return got

    def expect(self, text: str, timeout: float = CHILD_TIMEOUT) -> str:
        got = self.line(timeout)
        assert got == text, f"child {self.pid} said {got!r}, expected {text!r}; stderr:\n{self.stderr}"
        return got

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=CHILD_TIMEOUT)

    def finish(self, timeout: float = CHILD_TIMEOUT) -> int:
        """Closes stdin, waits for exit, and fails the test unless the exit status is 0."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"child {self.pid} did not exit within {timeout} s; stderr:\n{self.stderr}")
        self.join_pumps()
        assert rc == 0, f"child {self.pid} exited with {rc}; stderr:\n{self.stderr}"
        return rc

    def join_pumps(self) -> None:
        """Waits until both pipes reached end of file (the child has exited)."""
        for t in self._pumps:
            t.join(timeout=CHILD_TIMEOUT)

    def close(self) -> None:
        """Kills the child if it still runs, reaps it and closes the pipes."""
        if self.proc.poll() is None:
            self.kill()
        self.proc.wait(timeout=CHILD_TIMEOUT)
        self.join_pumps()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if f:
                    f.close()
            except (OSError, ValueError):
                pass

    def rest(self) -> List[str]:
        """Every line still to come, once the child has exited."""
        out = []
        while True:
            try:
                got = self._lines.get(timeout=CHILD_TIMEOUT)
            except queue.Empty:
                break
            if got is None:
                break
            out.append(got)
        return out


def private_shm_wrapper(size: str = "64m") -> Optional[List[str]]:
    """A command prefix that runs a child with its own empty /dev/shm (a tmpfs of ``size`` in a
    private mount namespace), so that it can run ``gc`` or fill /dev/shm without touching other
    sessions' segments; None where that is not possible (not root, no unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    script = f"mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$@\""
    probe = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    return ["unshare", "-m", "sh", "-c", script, "sh"]


def lock_holder(spawn, name: str) -> "Child":
    """A child process that has opened stream ``name`` and holds its write lock (until killed
    or told anything)."""
    child = spawn(
        f"""
        s = framebus.open({name!r})
        s.acquire()
        say("locked")
        hear()
        """
    )
    child.expect("locked")
    return child


@pytest.fixture
def spawn():
    """``spawn(code, env=None)`` starts a :class:`Child`; all are killed at the end of the test."""
    children: List[Child] = []

    def start(code: str, **kwargs) -> Child:
        c = Child(code, **kwargs)
        children.append(c)
        return c

    yield start
    for c in children:
        c.close()
