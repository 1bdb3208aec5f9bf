"""Whether NVIDIA's CUDA Multi-Process Service (MPS) is running for this process.

MPS puts the CUDA work of many processes through one server, so processes that hand frames to
each other on one GPU (a device stream's writer and its readers) share one GPU context instead
of taking turns. A CUDA process uses MPS when, as it starts CUDA, it finds the control daemon's
pipe in its pipe directory (``CUDA_MPS_PIPE_DIRECTORY``, else ``/tmp/nvidia-mps``); otherwise it
runs without MPS. Used by ``framebus doctor`` and the GPU benchmark; reads only the environment,
the pipe directory and ``/proc``, never starts or asks the daemon anything.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Tuple

#: Where MPS keeps its pipes when ``CUDA_MPS_PIPE_DIRECTORY`` is not set.
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
CONTROL = "nvidia-cuda-mps-control"
SERVER = "nvidia-cuda-mps-server"


@dataclass(frozen=True)
class MpsStatus:
    """What :func:`mps_status` found: ``pipe_dir`` (the directory this process's CUDA would look
    in; ``pipe_dir_from_env`` when ``CUDA_MPS_PIPE_DIRECTORY`` named it), ``control_pipe``
    (the daemon's control pipe is there), the pids of the control daemon and of MPS servers
    this process can see. ``running`` is True when any of them was found."""

    pipe_dir: str
    pipe_dir_from_env: bool
    control_pipe: bool
    control_pids: Tuple[int, ...] = ()
    server_pids: Tuple[int, ...] = ()

    @property
    def running(self) -> bool:
        return self.control_pipe or bool(self.control_pids) or bool(self.server_pids)

    def describe(self) -> str:
        """One line: whether MPS runs, and what says so."""
        where = f"{self.pipe_dir}" + (" (CUDA_MPS_PIPE_DIRECTORY)" if self.pipe_dir_from_env else "")
        seen = []
        if self.control_pids:
            seen.append(f"{CONTROL} pid {', '.join(map(str, self.control_pids))}")
        if self.server_pids:
            seen.append(f"{SERVER} pid {', '.join(map(str, self.server_pids))}")
        if self.control_pipe:
            text = f"running: control pipe in {where}"
            return text + (f"; {'; '.join(seen)}" if seen else " (its daemon is not visible from here, e.g. it runs outside this container)")
        if seen:
            return (
                f"an MPS daemon runs ({'; '.join(seen)}) but this process's pipe directory {where} has no control pipe: "
                "this process's CUDA does not use it; set CUDA_MPS_PIPE_DIRECTORY to the daemon's"
            )
        return f"not running (no control pipe in {where}, no {CONTROL} or {SERVER} process)"


def _program(pid_dir: str) -> Optional[str]:
    """The program name of a process: argv[0]'s base name, else its (15-byte) comm."""
    try:
        with open(os.path.join(pid_dir, "cmdline"), "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0]
        if argv0:
            return os.path.basename(argv0.decode(errors="replace"))
        with open(os.path.join(pid_dir, "comm"), "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:  # gone, or not ours to read
        return None


def processes(proc: str = "/proc") -> List[Tuple[int, str]]:
    """(pid, program name) of every process visible in ``proc``."""
    out: List[Tuple[int, str]] = []
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            program = _program(os.path.join(proc, name))
            if program:
                out.append((int(name), program))
    return out


def mps_status(env: Optional[Mapping[str, str]] = None, procs: Optional[Iterable[Tuple[int, str]]] = None) -> MpsStatus:
    """Whether MPS runs for a CUDA process started with ``env`` (default: this process's
    environment), judged from its pipe directory and ``procs`` ((pid, program name) pairs;
    default: what ``/proc`` shows). Never raises; starts nothing."""
    env = os.environ if env is None else env
    given = env.get("CUDA_MPS_PIPE_DIRECTORY", "")
    pipe_dir = given or DEFAULT_PIPE_DIR
    try:
        control_pipe = stat.S_ISFIFO(os.stat(os.path.join(pipe_dir, "control")).st_mode)
    except OSError:
        control_pipe = False
    listed = processes() if procs is None else list(procs)
    # A kernel thread or a truncated comm ("nvidia-cuda-mps") counts for neither: argv[0] names them.
    control = tuple(sorted(pid for pid, prog in listed if prog == CONTROL))
    server = tuple(sorted(pid for pid, prog in listed if prog == SERVER))
    return MpsStatus(pipe_dir=pipe_dir, pipe_dir_from_env=bool(given), control_pipe=control_pipe, control_pids=control, server_pids=server)


__all__ = ["MpsStatus", "mps_status", "processes", "DEFAULT_PIPE_DIR"]
