"""The GPU machine's scripts, as far as they run without a GPU: scripts/gpu_exchange.py's
exchange (writer and reader processes, lossless, write/loan in, view/read_new out, checksums)
behind the fake CUDA door, its skip without torch and CuPy, pyshmem_upstream.py --gpu's skip,
scripts/gpu-test.sh's shell syntax, and its MPS step (starting, detecting and stopping an MPS
daemon of its own) with a stand-in nvidia-cuda-mps-control."""

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


#: A stand-in for nvidia-cuda-mps-control: ``-d`` makes the control pipe and a log and starts a
#: "daemon" (a sleep whose argv[0] is the program's name); ``quit`` on stdin ends it.
FAKE_MPS = r"""#!/usr/bin/env bash
if [ "${1:-}" = -d ]; then
  echo "start $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" >>"$FAKE_MPS_LOG"
  mkfifo "$CUDA_MPS_PIPE_DIRECTORY/control"
  echo "fake control log" >"$CUDA_MPS_LOG_DIRECTORY/control.log"
  (exec -a nvidia-cuda-mps-control sleep 120) </dev/null >/dev/null 2>&1 &
  echo $! >"$FAKE_MPS_LOG.pid"
  exit 0
fi
cmd=$(cat)
echo "cmd $cmd $CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_MPS_LOG"
if [ "$cmd" = quit ]; then kill "$(cat "$FAKE_MPS_LOG.pid")"; fi
"""


def _source_gpu_test(body: str, tmp_path, path_extra: str = "", env: dict = None) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    prelude = f"""
source scripts/gpu-test.sh
PY={sys.executable}; OUTDIR={out}; LOG={out}/gpu-test.log
MPS_DIR={tmp_path}/mps; MPS_LOG_DIR={tmp_path}/mps-log
mkdir -p "$OUTDIR"
"""
    full = {k: v for k, v in os.environ.items() if k not in ("GPU_TEST_MPS", "CUDA_MPS_PIPE_DIRECTORY")}
    full["PATH"] = path_extra + os.pathsep + full["PATH"] if path_extra else full["PATH"]
    full["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), full.get("PYTHONPATH", "")])
    full.update(env or {})
    return subprocess.run(["bash", "-c", prelude + body], cwd=ROOT, capture_output=True, text=True, timeout=120, env=full)


def test_gpu_test_starts_and_stops_an_mps_daemon_of_its_own(tmp_path):
    """scripts/gpu-test.sh's MPS step with a stand-in nvidia-cuda-mps-control: the daemon runs
    on the script's own pipe directory, framebus sees MPS there, and the daemon is told to quit,
    waited for, and its log copied to the output directory."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-cuda-mps-control"
    fake.write_text(FAKE_MPS)
    fake.chmod(0o755)
    log = tmp_path / "fake-mps.log"
    body = """
echo "plan: $(mps_plan)"
mps_start || { echo "start failed"; exit 3; }
echo "daemon: $MPS_PIDS"
"$PY" -c 'import os; from framebus._mps import mps_status; print("seen:", mps_status({"CUDA_MPS_PIPE_DIRECTORY": os.environ["D"]}).control_pipe)'
mps_stop
mps_stop
echo "left: $MPS_PIDS"
"""
    p = _source_gpu_test(body.replace('os.environ["D"]', f'"{tmp_path}/mps"'), tmp_path, str(bindir), {"GPU_TEST_MPS": "1", "FAKE_MPS_LOG": str(log)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "plan: yes" in p.stdout and "seen: True" in p.stdout and "left: \n" in p.stdout
    pid = int((tmp_path / "fake-mps.log.pid").read_text())
    assert f"daemon: {pid}\n" in p.stdout and f"MPS control daemon started (pid {pid})" in p.stdout
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    calls = log.read_text().splitlines()
    assert calls == [f"start {tmp_path}/mps {tmp_path}/mps-log", f"cmd quit {tmp_path}/mps"]
    assert (tmp_path / "out" / "mps-control.log").read_text() == "fake control log\n"
    assert not (tmp_path / "mps").exists() and "MPS control daemon stopped" in (tmp_path / "out" / "gpu-test.log").read_text()


def test_gpu_test_says_why_it_runs_no_mps(tmp_path):
    p = _source_gpu_test('echo "plan: $(mps_plan)"', tmp_path, env={"GPU_TEST_MPS": "0"})
    assert "plan: GPU_TEST_MPS=0" in p.stdout, p.stdout + p.stderr
    p = _source_gpu_test('PATH=/nonexistent; echo "plan: $(mps_plan)"', tmp_path)
    assert "plan: nvidia-cuda-mps-control is not on PATH" in p.stdout, p.stdout + p.stderr
