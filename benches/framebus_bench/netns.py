"""A second "machine" on this one: a Linux network namespace joined to this one by a veth pair
(``ip netns`` + ``ip link``, needs root and iproute2). Processes started with
:meth:`Netns.prefix` run with their own network stack (their own loopback, one interface with
its own address), so traffic to them crosses a real link; /dev/shm and the clocks stay shared,
so latencies measured across the link compare on one clock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from typing import List, Optional


def unavailable() -> Optional[str]:
    """Why a namespace cannot be made here (not root, no ``ip``), or None."""
    if os.geteuid() != 0:
        return "needs root to create a network namespace (ip netns)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip) to create a network namespace"
    return None


def _sh(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.returncode}")


class Netns:
    """A network namespace ``name`` and a veth pair: this side has ``host_ip``, the namespace
    ``peer_ip`` (a /24 of its own) and its loopback up. ``close()`` (or leaving the ``with``
    block) removes both. OSError when a step fails (what failed and why)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
        self.name = f"fbw{tag}"
        self.host_dev, self.peer_dev = f"vh{tag}"[:15], f"vp{tag}"[:15]
        net = 10 + (os.getpid() + int(tag[-4:], 16)) % 200
        self.host_ip, self.peer_ip = f"10.{net}.78.1", f"10.{net}.78.2"
        self._made = False

    def __enter__(self) -> "Netns":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        _sh("ip", "netns", "add", self.name)
        self._made = True
        try:
            _sh("ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.peer_dev)
            _sh("ip", "link", "set", self.peer_dev, "netns", self.name)
            _sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_dev)
            _sh("ip", "link", "set", self.host_dev, "up")
            _sh(*self.prefix(), "ip", "addr", "add", f"{self.peer_ip}/24", "dev", self.peer_dev)
            _sh(*self.prefix(), "ip", "link", "set", self.peer_dev, "up")
            _sh(*self.prefix(), "ip", "link", "set", "lo", "up")
        except OSError:
            self.close()
            raise

    def prefix(self) -> List[str]:
        """The command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def close(self) -> None:
        if not self._made:
            return
        self._made = False
        for cmd in (("ip", "netns", "del", self.name), ("ip", "link", "del", self.host_dev)):
            subprocess.run(cmd, capture_output=True)
