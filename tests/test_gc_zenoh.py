"""``framebus gc --zenoh``: the files of Zenoh's shared-memory transport that a process killed
with SIGKILL leaves in /dev/shm are removed, and those of a live process are not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("zenoh.shm", reason="eclipse-zenoh with shared memory is not installed")

import framebus  # noqa: E402
from framebus import info  # noqa: E402

if not os.path.isdir("/proc") or not os.path.isdir(info.ZENOH_SHM_DIR):
    pytest.skip("needs /proc and /dev/shm", allow_module_level=True)

BOUND = 30.0

# A process that allocates from a Zenoh shared-memory provider, prints the segment files it
# holds open, and waits (until killed, or until its stdin closes).
CHILD = r"""
import os, sys
from zenoh import shm
provider = shm.ShmProvider.default_backend(1 << 20)
buf = provider.alloc(4096)
held = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if target.endswith(".zenoh"):
        held.append(target)
print(" ".join(sorted(held)), flush=True)
sys.stdin.read()
"""


def _start() -> "tuple[subprocess.Popen, list]":
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    files = line.split()
    assert files, f"the child holds no Zenoh segment (exit status {proc.poll()})"
    return proc, files


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(BOUND)
    proc.stdout.close()
    proc.stdin.close()


def test_gc_zenoh_removes_what_a_killed_process_left_and_nothing_live():
    live, live_files = _start()
    try:
        killed, killed_files = _start()
        _kill(killed)
        assert all(os.path.exists(f) for f in killed_files)  # SIGKILL: Zenoh's cleanup never ran

        assert set(framebus.gc(dry_run=True, zenoh=True)) >= {f"zenoh:{os.path.basename(f)}" for f in killed_files}
        assert all(os.path.exists(f) for f in killed_files)  # a dry run removes nothing
        removed = framebus.gc(zenoh=True)
        assert {f"zenoh:{os.path.basename(f)}" for f in killed_files} <= set(removed)
        assert not any(os.path.exists(f) for f in killed_files)
        assert all(os.path.exists(f) for f in live_files)  # held open by a live process: kept
        assert not {f"zenoh:{os.path.basename(f)}" for f in live_files} & set(removed)
    finally:
        _kill(live)
    framebus.gc(zenoh=True)
    assert not any(os.path.exists(f) for f in live_files)


def test_gc_cli_takes_zenoh(capsys):
    from framebus.commands import gc as gc_cmd
    import argparse

    p = argparse.ArgumentParser()
    gc_cmd.add_arguments(p)
    args = p.parse_args(["--zenoh", "--dry-run"])
    assert args.zenoh and args.dry_run
    assert gc_cmd.run(args) == 0
