"""Whether NVIDIA's Multi-Process Service runs (framebus._mps), judged from a made-up
environment: a temporary directory as CUDA_MPS_PIPE_DIRECTORY, a made-up process list and a
made-up /proc; and ``framebus doctor``'s MPS check, with and without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from framebus import _mps
from framebus._mps import CONTROL, DEFAULT_PIPE_DIR, SERVER, MpsStatus, mps_status
from framebus.commands import doctor

GPU = {"door": "cuda", "devices": [{"ordinal": 0, "name": "NVIDIA H200"}], "error": None}


def test_control_pipe_in_the_pipe_directory_means_running(tmp_path) -> None:
    os.mkfifo(tmp_path / "control")
    st = mps_status(env={"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}, procs=[(1, "systemd"), (77, CONTROL), (78, SERVER)])
    assert st.running and st.control_pipe and st.pipe_dir == str(tmp_path) and st.pipe_dir_from_env
    assert st.control_pids == (77,) and st.server_pids == (78,)
    text = st.describe()
    assert text.startswith(f"running: control pipe in {tmp_path} (CUDA_MPS_PIPE_DIRECTORY)")
    assert f"{CONTROL} pid 77" in text and f"{SERVER} pid 78" in text


def test_control_pipe_whose_daemon_is_not_visible(tmp_path) -> None:
    # A daemon outside this container (its pipe directory mounted in) counts: CUDA connects to it.
    os.mkfifo(tmp_path / "control")
    st = mps_status(env={"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}, procs=[])
    assert st.running and "not visible from here" in st.describe()


def test_nothing_found_means_not_running(tmp_path) -> None:
    (tmp_path / "control").write_text("")  # a plain file is no control pipe
    # "nvidia-cuda-mps" is a truncated comm: neither program is named by it
    st = mps_status(env={"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}, procs=[(1, "init"), (5, "nvidia-cuda-mps"), (6, "python3")])
    assert not st.running and not st.control_pipe and st.control_pids == st.server_pids == ()
    assert st.describe() == f"not running (no control pipe in {tmp_path} (CUDA_MPS_PIPE_DIRECTORY), no {CONTROL} or {SERVER} process)"


def test_default_pipe_directory_and_a_daemon_on_another_directory(tmp_path) -> None:
    st = mps_status(env={}, procs=[(40, SERVER)])
    assert st.pipe_dir == DEFAULT_PIPE_DIR and not st.pipe_dir_from_env
    if not st.control_pipe:  # this machine runs no MPS on the default directory
        assert st.running and "this process's CUDA does not use it" in st.describe()


def test_processes_from_a_made_up_proc(tmp_path) -> None:
    for pid, cmdline, comm in [("10", b"/usr/bin/nvidia-cuda-mps-control\0-d\0", b"nvidia-cuda-mps\n"), ("11", b"nvidia-cuda-mps-server\0", b"nvidia-cuda-mps\n"), ("12", b"", b"kthreadd\n")]:
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "cmdline").write_bytes(cmdline)
        (tmp_path / pid / "comm").write_bytes(comm)
    (tmp_path / "self").mkdir()
    (tmp_path / "13").mkdir()  # gone before it could be read: no files
    assert sorted(_mps.processes(str(tmp_path))) == [(10, CONTROL), (11, SERVER), (12, "kthreadd")]
    assert mps_status(env={"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "none")}, procs=_mps.processes(str(tmp_path))).control_pids == (10,)


def test_doctor_on_a_gpu_without_mps_says_what_starting_it_changes() -> None:
    st = MpsStatus(pipe_dir=DEFAULT_PIPE_DIR, pipe_dir_from_env=False, control_pipe=False)
    (c,) = doctor.check_mps(info=GPU, status=st)
    assert c.name == "MPS" and c.status == "info" and c.detail.startswith("not running (no control pipe in")
    assert "H200" in c.fix and "453 -> 254 µs" in c.fix and "347 -> 84 µs" in c.fix and "531 -> 198 µs" in c.fix
    assert "`nvidia-cuda-mps-control -d`" in c.fix and "`echo quit | nvidia-cuda-mps-control`" in c.fix


def test_doctor_on_a_gpu_with_mps(tmp_path) -> None:
    st = MpsStatus(pipe_dir=str(tmp_path), pipe_dir_from_env=True, control_pipe=True, control_pids=(5,))
    (c,) = doctor.check_mps(info=GPU, status=st)
    assert c.status == "ok" and "running: control pipe in" in c.detail and "shortens each hop" in c.detail and not c.fix


def test_doctor_without_a_gpu_is_information() -> None:
    st = MpsStatus(pipe_dir=DEFAULT_PIPE_DIR, pipe_dir_from_env=False, control_pipe=False)
    (c,) = doctor.check_mps(info={"door": "fake", "devices": [{"ordinal": 0}]}, status=st)
    assert c.status == "info" and "only for device streams on a CUDA GPU (none here)" in c.detail


def test_doctor_lists_the_mps_check(tmp_path) -> None:
    os.mkfifo(tmp_path / "control")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(FRAMEBUS_CUDA="fake", CUDA_MPS_PIPE_DIRECTORY=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "framebus", "doctor", "--json"], capture_output=True, text=True, timeout=120, env=env)
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert checks["MPS"]["status"] == "info" and f"running: control pipe in {tmp_path}" in checks["MPS"]["detail"]
