"""The hand-written stub of the native module matches the built module (mypy.stubtest), and
the package type-checks against it (mypy, configured in pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_native_stub_matches_the_module():
    pytest.importorskip("mypy")
    allowlist = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubtest_allowlist.txt")
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "framebus._native", "--allowlist", allowlist],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_package_type_checks():
    pytest.importorskip("mypy")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
