"""The benchmark package (benches/) installs editable without setuptools' "Editable installation"
warning, which scripts/test.sh used to print on every run: setuptools prints it for the
import-hook strategy it picks unless the packages sit, as declared, directly under one
``package-dir`` root (then a plain .pth entry does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parent.parent / "benches"


def _config() -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomli = pytest.importorskip("tomli")
        return tomli.loads((BENCHES / "pyproject.toml").read_text())
    return tomllib.loads((BENCHES / "pyproject.toml").read_text())


def test_the_packages_sit_under_the_declared_root():
    st = _config()["tool"]["setuptools"]
    assert st.get("package-dir") == {"": "."}, st
    for pkg in st["packages"]:
        assert (BENCHES / pkg.replace(".", "/") / "__init__.py").is_file(), pkg


def test_an_editable_install_prints_no_warning(tmp_path):
    """As scripts/test.sh installs it (this interpreter's pip), into a throwaway venv (pip fetches
    setuptools for the isolated build: skipped when the package index cannot be reached)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    p = subprocess.run([*pip, "install", "--no-deps", "-e", str(BENCHES)], capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    if p.returncode != 0 and ("Could not find a version" in out or "NewConnectionError" in out or "No matching distribution" in out):
        pytest.skip(f"the package index is not reachable: {out[-300:]}")
    assert p.returncode == 0, out
    assert "Editable installation" not in out and "BuildBackendWarning" not in out, out
    pth = list((venv / "lib").glob("python*/site-packages/__editable__.framebus_bench*.pth"))
    assert [f.read_text().strip() for f in pth] == [str(BENCHES)]
