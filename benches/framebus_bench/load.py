"""Busy processes beside a benchmark run (``framebus bench --load N``): claims must hold on a
machine whose cores are taken by other work (inference, encoders, compilers), not only on an
idle one.

Each process is a Python loop that spins on the CPU and never sleeps. They start before the
first suite and are stopped when the run ends, on error, on Ctrl-C (SIGINT reaches the whole
foreground group; the ``finally`` stops them as well) and on SIGTERM. If the run itself dies
otherwise (SIGKILL; or a run started in the background, deaf to Ctrl-C, then killed), the kernel
kills each process with it: each asks at start for SIGKILL on its parent's death
(``prctl(PR_SET_PDEATHSIG)``), which no signal disposition of its own can ignore and which
reaches it even stopped, then checks that its parent did not die before that request. (The
request is tied to the thread that started the process: :meth:`Load.start` runs on the thread
that lives as long as the run, the main one.) As a second guard, the spin loop exits when its
parent changes, so none is ever left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

#: Seconds left between the last busy process starting to spin and the first suite.
SETTLE_S = 0.5

#: Most busy processes ``--load`` starts (a typo such as 1000 must not fork-bomb the machine).
MAX_LOAD = 64

#: The busy loop: ask the kernel for SIGKILL when the parent dies (prctl 1, PR_SET_PDEATHSIG)
#: and exit if the parent already died before that; say it is running (one byte on stdout); then
#: spin, and every few milliseconds check that the parent is still the one that started it (a
#: dead parent's children are re-parented); exit when it is not.
_SPIN = (
    "import ctypes, os, signal, sys\nparent = int(sys.argv[1])\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:\n"
    "    sys.exit('prctl(PR_SET_PDEATHSIG) failed: ' + os.strerror(ctypes.get_errno()))\n"
    "if os.getppid() != parent:\n    sys.exit(0)\n"
    "os.write(1, b'+')\nos.close(1)\n"
    "while os.getppid() == parent:\n    for _ in range(20000):\n        pass\n"
)


class Load:
    """``n`` busy processes, started by :meth:`start` and stopped by :meth:`stop` (also as a
    context manager). ValueError for a count below 0 or above :data:`MAX_LOAD`."""

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"load must be a whole number of processes, got {type(n).__name__}")
        if n < 0 or n > MAX_LOAD:
            raise ValueError(f"load must be between 0 and {MAX_LOAD} busy processes, got {n}")
        self.n = n
        self.procs: List["subprocess.Popen[bytes]"] = []

    @property
    def pids(self) -> List[int]:
        """Process ids of the busy processes started (also after they were stopped)."""
        return [p.pid for p in self.procs]

    def start(self) -> "Load":
        """Starts the processes (none for 0) and returns once every one of them is spinning:
        an interpreter starting up reads files and faults in pages, which is not the steady
        load to measure beside, and it landed on the first frames of the first suite. Stops
        those already started if one fails (RuntimeError when one exits at once)."""
        try:
            for _ in range(self.n):
                self.procs.append(
                    subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                )
            for p in self.procs:
                assert p.stdout is not None
                ready = p.stdout.read(1)
                p.stdout.close()
                if ready != b"+":
                    raise RuntimeError(f"a --load process exited at once (status {p.wait()})")
            time.sleep(SETTLE_S)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every process and waits for it (SIGTERM, then SIGKILL after 2 s)."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def describe(self, pids: bool = True) -> Optional[Dict[str, Any]]:
        """What the JSON records: count, kind, and (with ``pids``) the process ids; None for 0."""
        if not self.n:
            return None
        d: Dict[str, Any] = {"processes": self.n, "kind": "busy loop (python), one process each, never sleeps"}
        if pids:
            d["pids"] = self.pids
        return d

    def __enter__(self) -> "Load":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


__all__ = ["Load", "MAX_LOAD"]
