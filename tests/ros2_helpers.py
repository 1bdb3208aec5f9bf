"""What the ROS 2 tests that start processes share: :class:`Proc`, a child process whose stdout
lines a test waits for, and ``FB``, the ``framebus ros2`` command line. Timeouts are upper
bounds, never measurements."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, List

BOUND = 30.0
FB = [sys.executable, "-m", "framebus", "ros2"]


class Proc:
    """A child process whose stdout lines are read by a thread, so a test can wait for one."""

    def __init__(self, args: List[str], **kwargs) -> None:
        self.args = args
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.seen: List[str] = []
        self.err: List[str] = []
        self._threads = [threading.Thread(target=self._pump, args=(self.p.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._pump_err, daemon=True)]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(f, q) -> None:
        for line in f:
            q.put(line.rstrip("\n"))

    def _pump_err(self) -> None:
        for line in self.p.stderr:
            self.err.append(line.rstrip("\n"))

    def expect(self, pred: Callable[[str], bool], timeout: float = BOUND, what: str = "") -> str:
        """The next line for which ``pred`` holds (earlier lines are kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                line = None
            if line is not None:
                self.seen.append(line)
                if pred(line):
                    return line
            if left <= 0 or (line is None and self.p.poll() is not None and self.lines.empty()):
                raise AssertionError(f"{what or 'the expected line'} not seen from {self.args[:3]}: rc={self.p.poll()} "
                                     f"out={self.seen[-5:]} err={self.err[-8:]}")

    def json(self, pred: Callable[[dict], bool], timeout: float = BOUND, what: str = "") -> dict:
        def ok(line: str) -> bool:
            try:
                return pred(json.loads(line))
            except ValueError:
                return False

        return json.loads(self.expect(ok, timeout, what))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(BOUND)
        finally:
            self.close()

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(BOUND)
        for t in self._threads:
            t.join(BOUND)
        self.p.stdout.close()
        self.p.stderr.close()


def fb_router(endpoint: str) -> Proc:
    """``framebus ros2 router --listen endpoint``, once it says it listens."""
    router = Proc([*FB, "router", "--listen", endpoint])
    router.expect(lambda s: "listening on" in s, what="framebus ros2 router's start line")
    return router
