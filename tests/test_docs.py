"""The documentation is executable: every ```python block of README.md and docs/*.md runs in a
fresh interpreter and leaves /dev/shm as it found it (what a block created is removed even when
it fails), the examples in the package's docstrings pass as doctests, and every
``framebus.xxx`` name the docs mention exists. A block fenced as ```python no-run (one that
needs a GPU, another host or a long-running peer; the text around it says which) is only
compiled, as a doctest line marked ``# doctest: +SKIP`` is."""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python(?P<opts>[^\n]*)\n(?P<code>.*?)^```\s*$", re.M | re.S)
#: A dotted name that starts with ``framebus.`` and is used as Python (not ``framebus ls``, not a
#: path such as ``/dev/shm/framebus.camera``, not a file name such as ``framebus.pyshmem.md``).
NAME = re.compile(r"(?<![\w/.-])framebus(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def where(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def blocks(path: Path) -> Iterator[Tuple[str, int, str, bool]]:
    """(id, line, code, runs) of each ```python block of ``path``."""
    text = path.read_text()
    for m in FENCE.finditer(text):
        line = text[: m.start()].count("\n") + 1
        runs = "no-run" not in m.group("opts")
        yield f"{where(path)}:{line}", line, m.group("code"), runs


def all_blocks(paths: List[Path]) -> List[Tuple[str, int, str, bool]]:
    return [b for p in paths for b in blocks(p)]


def segments() -> set:
    return {p.name for p in Path("/dev/shm").glob("framebus.*")}


def run_block(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter; the result's ``pid`` is the interpreter's."""
    with subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        done.pid = proc.pid  # type: ignore[attr-defined]
        return done


def run_and_clean(code: str) -> Tuple[subprocess.CompletedProcess, set]:
    """Runs ``code`` (see run_block) and removes every segment its interpreter created, whether
    it passed, failed or timed out; returns the result and the segments that were left."""
    before = segments()
    p = run_block(code)
    left = created_by(p.pid, segments() - before)  # type: ignore[attr-defined]
    for seg in left:
        Path("/dev/shm", seg).unlink(missing_ok=True)
    return p, left


def created_by(pid: int, names: set) -> set:
    """The segments among ``names`` whose creator was process ``pid`` (other tests running at
    the same time create streams of their own)."""
    import framebus

    mine = set()
    for seg in names:
        try:
            if framebus.stat(seg[len("framebus.") :]).creator_pid == pid:
                mine.add(seg)
        except (OSError, ValueError):
            continue
    return mine


@pytest.mark.parametrize("block_id,line,code,runs", all_blocks(DOCS), ids=[b[0] for b in all_blocks(DOCS)])
def test_python_block_runs(block_id, line, code, runs):
    compile(code, block_id, "exec")
    if not runs:
        return
    p, left = run_and_clean(code)  # cleaned up first, then judged
    assert p.returncode == 0, f"{block_id} failed:\n{p.stdout}\n{p.stderr}"
    assert not left, f"{block_id} left {sorted(left)} in /dev/shm"


def test_readme_block_runs_twice_in_a_row():
    """Pasting the README's first block twice into fresh interpreters works both times (a
    first run must not leave anything that breaks the second)."""
    first = next(code for _, _, code, runs in blocks(ROOT / "README.md") if runs)
    for attempt in range(2):
        p, left = run_and_clean(first)  # a failed run must not leave /dev/shm/framebus.camera
        assert p.returncode == 0, f"run {attempt + 1}:\n{p.stdout}\n{p.stderr}"
        assert not left, f"run {attempt + 1} left {sorted(left)} in /dev/shm"


def mentioned_names(paths: List[Path]) -> List[Tuple[str, str]]:
    """(name, where) for every framebus.xxx name in the given files, code and prose."""
    out = []
    for path in paths:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for m in NAME.finditer(line):
                name = m.group(0)
                rest = line[m.end() :]
                if rest.startswith((".md", ".py", ".pyi", ".rs")) or name.endswith((".md", ".py")):
                    continue  # a file, not a name
                if path.name == "moving-from-0.1.md" and line.startswith("| ") and m.start() < line.index("|", 1):
                    continue  # the "0.1" column: names that went
                out.append((name, f"{where(path)}:{lineno}"))
    return out


def resolve(name: str) -> bool:
    """Whether ``name`` is an importable module or an attribute path from one."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_documented_name_exists():
    missing = sorted({(n, w) for n, w in mentioned_names(DOCS) if not resolve(n)})
    assert not missing, "names mentioned in the docs that do not exist:\n" + "\n".join(f"  {n} ({w})" for n, w in missing)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The two checks fail on the kind of doc this issue found: a README block that reads a
    frame written before its reader opened, and names that do not exist."""
    bad = tmp_path / "bad.md"
    bad.write_text(
        "Configure with `framebus.pipe.configure(queue=8)` and `framebus.pipe.pipe_stats(fd)`.\n\n"
        "```python\nimport numpy as np, framebus\n"
        "cam = framebus.create('docs-selftest', shape=(4,), dtype=np.uint8, exist_ok=True)\n"
        "cam.write(np.zeros(4, np.uint8))\nrd = framebus.open('docs-selftest')\n"
        "try:\n    rd.read_new(timeout=0.1)\nfinally:\n    rd.close(); cam.unlink()\n```\n"
    )
    names = {n for n, _ in mentioned_names([bad]) if not resolve(n)}
    assert names == {"framebus.pipe.configure", "framebus.pipe.pipe_stats"}
    (_, _, code, _), = all_blocks([bad])
    p, left = run_and_clean(code)
    assert p.returncode != 0 and not left


def test_a_failing_block_leaves_nothing_behind():
    """A block that dies with its stream still open (no with block, no unlink) is cleaned up
    by the test, so the next run of the same block is not refused with StreamExistsError."""
    code = "import numpy as np, framebus\nframebus.create('docs-selftest-crash', shape=(2,))\nraise SystemExit(3)\n"
    for _ in range(2):
        p, left = run_and_clean(code)
        assert p.returncode == 3 and left == {"framebus.docs-selftest-crash"}
    assert "framebus.docs-selftest-crash" not in segments()


#: Modules whose docstrings hold examples (``>>>``): they run as doctests.
DOCTEST_MODULES = ["framebus", "framebus.pipes", "framebus.tuning", "framebus.ffmpeg", "framebus.net"]


@pytest.mark.parametrize("module_name", DOCTEST_MODULES)
def test_docstring_examples_pass(module_name):
    import framebus

    module = importlib.import_module(module_name)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{module_name} has no examples any more: take it off DOCTEST_MODULES"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    before = segments()
    try:
        for t in tests:
            runner.run(t, out=lambda text: print(text, end=""))
    finally:
        mine = {s for s in segments() - before if framebus.stat(s[len("framebus.") :]).creator_pid == os.getpid()}
        for seg in mine:
            Path("/dev/shm", seg).unlink(missing_ok=True)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} doctest example(s) of {module_name} failed (output above)"
    assert not mine, f"the examples of {module_name} left {sorted(mine)} in /dev/shm"
