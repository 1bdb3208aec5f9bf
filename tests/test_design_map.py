"""docs/design.md's map of crates, modules and packages is the tree's: every Rust file of the
two crates and every module of the Python packages is named there with its own first sentence
(scripts/design_map.py writes it)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_design_map_names_every_module_of_the_tree():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "design_map.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_every_module_has_documentation_of_its_own():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "design_map.py")], capture_output=True, text=True, check=True)
    undocumented = [line for line in p.stdout.splitlines() if line.endswith("(no documentation)")]
    assert not undocumented, undocumented
