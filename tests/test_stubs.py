"""The hand-written stub of the native module matches the built module (mypy.stubtest)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_native_stub_matches_the_module():
    pytest.importorskip("mypy")
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "framebus._native"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
