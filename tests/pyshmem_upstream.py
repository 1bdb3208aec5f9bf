"""Runs pyshmem 1.4.0's own public-API CPU tests against framebus.pyshmem (or, with
``--real``, against the installed pyshmem for comparison).

The test file is taken unmodified from pyshmem's sdist (``pip download``; cached under
``~/.cache/framebus/pyshmem-sdist`` or $FRAMEBUS_PYSHMEM_SDIST_CACHE).

Selection rule (the "public-API tests"): a test function of tests/test_cpu_api.py is selected
unless its source, or the source of a module-level helper it uses (transitively), touches
pyshmem's private surface: the private module (``pyshmem_shared``, i.e. ``pyshmem._shared``)
or any underscore attribute (``shm._lock_state``, ``pyshmem._cli``, ...) other than
``os._exit``. Parametrized tests count once per parameter set.

Aliasing: a directory put first on PYTHONPATH holds a ``pyshmem`` package whose ``__init__``
replaces itself in ``sys.modules`` with ``framebus.pyshmem`` (so child processes started by
the tests get it too), registers an empty ``pyshmem._shared`` (the test module imports it at
the top; the selected tests never use it) and a ``pyshmem-1.4.0.dist-info`` (the alias is what
is installed as ``pyshmem``). pyshmem's ``src`` directory is not extracted, so the tests'
own child processes import the alias as well.

Usage: python tests/pyshmem_upstream.py [--real] [--gpu] [pytest args...]

``--gpu`` runs pyshmem's tests/test_gpu_api.py instead, under the same rule, against
framebus.pyshmem's GPU streams (framebus device streams; frames come back as torch tensors).
It needs a CUDA GPU, torch with CUDA and a framebus with GPU streams; without them it prints
why and exits 0 (skipped). Offline (the GPU machine), put pyshmem's sdist in a folder and name
it in $FRAMEBUS_PYSHMEM_SDIST_CACHE (scripts/gpu-wheels.sh does).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

VERSION = "1.4.0"
SDIST = f"pyshmem-{VERSION}.tar.gz"
_PRIVATE = re.compile(r"pyshmem_shared|\.(?!_exit\b)_[A-Za-z]\w*")


class Unavailable(Exception):
    """The sdist could not be had (offline, no pip)."""


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "framebus" / "pyshmem-sdist"
    return Path(os.environ.get("FRAMEBUS_PYSHMEM_SDIST_CACHE", default))


def sdist() -> Path:
    """The path of pyshmem's sdist, downloading it into the cache the first time."""
    target = cache_dir() / SDIST
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--timeout", "15", "--retries", "1", "--no-binary", ":all:", "--no-deps", f"pyshmem=={VERSION}", "-d", str(target.parent)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"pip download failed: {exc}") from exc
    if done.returncode != 0 or not target.exists():
        raise Unavailable(f"pip download of pyshmem=={VERSION} failed: {done.stderr.strip()[-300:]}")
    return target


CPU_TESTS = "test_cpu_api.py"
GPU_TESTS = "test_gpu_api.py"

#: Selected GPU tests that fail for a reason outside framebus.pyshmem (``--gpu`` does not count them).
GPU_KNOWN_FAILURES = {
    "test_spawned_process_gpu_benchmark_smoke": "it runs benchmarks/benchmark_ipc.py, which pyshmem's sdist does not ship (pyshmem itself fails it from the sdist)",
}


def extract(work: Path, test_file: str = CPU_TESTS) -> Path:
    """Writes the sdist's tests/``test_file`` and tests/conftest.py, unmodified, under
    ``work/tests`` and returns that directory."""
    tests = work / "tests"
    tests.mkdir(parents=True)
    with tarfile.open(sdist()) as tar:
        for member in (test_file, "conftest.py"):
            data = tar.extractfile(f"pyshmem-{VERSION}/tests/{member}")
            assert data is not None
            (tests / member).write_bytes(data.read())
    (work / "pytest.ini").write_text("[pytest]\nmarkers =\n    cpu: CPU tests\n    gpu: GPU tests\ntimeout = 60\n")
    return tests


def select(source: str) -> Tuple[List[str], List[str]]:
    """(selected, excluded) test function names of the test module ``source``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def text(node: ast.AST) -> str:
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])  # type: ignore[attr-defined]
        return "\n".join(lines[start - 1 : node.end_lineno])  # type: ignore[attr-defined]

    def private(name: str, seen: Set[str]) -> bool:
        if name in seen:
            return False
        seen.add(name)
        node = funcs[name]
        if _PRIVATE.search(text(node)):
            return True
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return any(private(h, seen) for h in used if h in funcs and not h.startswith("test"))

    selected, excluded = [], []
    for name in funcs:
        if name.startswith("test"):
            (excluded if private(name, set()) else selected).append(name)
    return selected, excluded


ALIAS_INIT = '''"""pyshmem, played by framebus.pyshmem (written by framebus's tests/pyshmem_upstream.py)."""
import sys
import types

import framebus.pyshmem as _compat

_placeholder = types.ModuleType("pyshmem._shared", "stand-in for pyshmem's private module")
# Decorators of the excluded tests read its attributes at import time; they get None.
_placeholder.__getattr__ = lambda name: None  # type: ignore[method-assign]
sys.modules["pyshmem._shared"] = _placeholder
_compat._shared = _placeholder  # type: ignore[attr-defined]  # `import pyshmem._shared as x` reads it here
sys.modules[__name__] = _compat
'''


def alias(work: Path) -> Path:
    root = work / "alias"
    (root / "pyshmem").mkdir(parents=True)
    (root / "pyshmem" / "__init__.py").write_text(ALIAS_INIT)
    info = root / f"pyshmem-{VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pyshmem\nVersion: {VERSION}\n")
    return root


def run(work: Path, *, real: bool = False, extra: Optional[List[str]] = None, test_file: str = CPU_TESTS,
        only: Optional[List[str]] = None) -> Tuple[Dict[str, str], List[str], str]:
    """Runs the selected tests of ``test_file`` (those named in ``only``, when given) in a
    subprocess pytest; returns ({node id: outcome}, the excluded names, pytest's output).
    Outcomes: passed, failed, skipped."""
    tests = extract(work, test_file)
    selected, excluded = select((tests / test_file).read_text())
    if only is not None:
        selected = [name for name in selected if name in only]
    env = dict(os.environ)
    if not real:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(alias(work)), env.get("PYTHONPATH", "")) if p)
    report = work / "report.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(work), "-c", str(work / "pytest.ini"), f"--junit-xml={report}"]
    cmd += [f"tests/{test_file}::{name}" for name in selected] + list(extra or [])
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    outcomes: Dict[str, str] = {}
    if report.exists():
        for case in ET.parse(report).iter("testcase"):
            name = case.get("name", "")
            if case.find("failure") is not None or case.find("error") is not None:
                outcomes[name] = "failed"
            elif case.find("skipped") is not None:
                outcomes[name] = "skipped"
            else:
                outcomes[name] = "passed"
    return outcomes, excluded, done.stdout + done.stderr


def settle(outcomes: Dict[str, str], flaky: Iterable[str], rerun: Callable[[str], Optional[str]], retries: int) -> Dict[str, List[str]]:
    """Runs each failed test named in ``flaky`` again by itself (``rerun(name)`` gives its
    outcome), up to ``retries`` times, until it passes; ``outcomes`` then records it as passed.
    A test that fails every time stays failed; other failures are not rerun. Returns {name:
    the outcomes of its reruns}."""
    tries: Dict[str, List[str]] = {}
    for name in sorted(set(flaky)):
        if outcomes.get(name) != "failed":
            continue
        tries[name] = []
        for _ in range(retries):
            outcome = rerun(name) or "missing"
            tries[name].append(outcome)
            if outcome == "passed":
                outcomes[name] = "passed"
                break
    return tries


def gpu_missing(real: bool = False) -> Optional[str]:
    """Why the GPU tests cannot run here (None when they can): pyshmem's GPU tests need torch
    with CUDA, and framebus.pyshmem also a framebus with GPU streams on the real driver."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if real:
        return None
    import framebus

    info = framebus.gpu_info() if hasattr(framebus, "gpu_info") else {"door": None, "error": "this framebus has no GPU streams"}
    if info.get("door") != "cuda" or not info.get("devices"):
        return f"framebus has no GPU streams on the CUDA driver here (door {info.get('door')}, {info.get('error') or 'no device'})"
    return None


def main(argv: List[str]) -> int:
    real = "--real" in argv
    test_file = GPU_TESTS if "--gpu" in argv else CPU_TESTS
    if test_file == GPU_TESTS:
        why = gpu_missing(real)
        if why:
            print(f"skipped: {why} (pyshmem's GPU tests need a CUDA GPU)")
            return 0
    extra = [a for a in argv if a not in ("--real", "--gpu")]
    with tempfile.TemporaryDirectory(prefix="pyshmem-upstream-") as tmp:
        try:
            outcomes, excluded, output = run(Path(tmp), real=real, extra=extra, test_file=test_file)
        except Unavailable as exc:
            print(f"skipped: {exc}")
            return 0
    failed = sorted(n for n, o in outcomes.items() if o == "failed")
    passed = sum(o == "passed" for o in outcomes.values())
    skipped = sum(o == "skipped" for o in outcomes.values())
    known = GPU_KNOWN_FAILURES if test_file == GPU_TESTS else {}
    print(output[:3000] if not outcomes or len(outcomes) < 3 else output[-4000:])
    print(f"{test_file}, target: {'pyshmem (real)' if real else 'framebus.pyshmem'}; selected items: {len(outcomes)}; passed: {passed}; skipped: {skipped}; failed: {len(failed)}; excluded functions: {len(excluded)}")
    for name in failed:
        print(f"  FAILED {name}" + (f" (expected: {known[name]})" if name in known else ""))
    if not outcomes:
        return 1
    return 1 if [n for n in failed if n not in known] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
