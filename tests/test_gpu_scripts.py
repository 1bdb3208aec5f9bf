"""The GPU machine's scripts, as far as they run without a GPU: scripts/gpu_exchange.py's
exchange (writer and reader processes, lossless, write/loan in, view/read_new out, checksums)
behind the fake CUDA door, its skip without torch and CuPy, pyshmem_upstream.py --gpu's skip,
and scripts/gpu-test.sh's shell syntax."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args: str, env: dict = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "FRAMEBUS_CUDA"}
    full.update(env or {})
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=180, env=full)


def test_exchange_behind_the_fake_door():
    before = {f for f in os.listdir("/dev/shm") if "gpu-exchange-" in f}
    p = _run(sys.executable, "scripts/gpu_exchange.py", "--fake", "--frames", "9")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("9/9 frames, checksums equal") == 2 and "all exchanges matched" in p.stdout
    assert {f for f in os.listdir("/dev/shm") if "gpu-exchange-" in f} == before


def test_exchange_skips_without_its_libraries():
    if importlib.util.find_spec("torch") and importlib.util.find_spec("cupy"):
        pytest.skip("torch and CuPy are installed here")
    p = _run(sys.executable, "scripts/gpu_exchange.py")
    assert p.returncode == 0 and p.stdout.startswith("skipped: "), p.stdout + p.stderr


def test_upstream_gpu_runner_skips_without_a_gpu():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import pyshmem_upstream

    why = pyshmem_upstream.gpu_missing()
    if why is None:
        pytest.skip("this machine has a GPU with torch and framebus GPU streams")
    p = _run(sys.executable, "tests/pyshmem_upstream.py", "--gpu")
    assert p.returncode == 0 and p.stdout.startswith("skipped: "), p.stdout + p.stderr


@pytest.mark.parametrize("script", ["scripts/gpu-test.sh", "scripts/gpu-wheels.sh"])
def test_shell_scripts_parse(script):
    p = _run("bash", "-n", script)
    assert p.returncode == 0, p.stderr
