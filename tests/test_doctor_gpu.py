"""``framebus doctor``'s CUDA section: what ``framebus.gpu_info()`` says (door, driver, devices),
whether CUDA IPC works (a device stream written by the doctor is read back by another process
and compared), and the fix when there is no GPU or IPC fails. The IPC probe runs for real behind
the strict fake door (``FRAMEBUS_CUDA=fake``), whose device memory other processes open through
inter-process handles as they would on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from framebus import _native
from framebus.commands import doctor
from framebus.commands.doctor import Check


def cli_json(env_update: dict) -> tuple:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAMEBUS_CUDA", "CUDA_VISIBLE_DEVICES")}
    env.update(env_update)
    p = subprocess.run([sys.executable, "-m", "framebus", "doctor", "--json"], capture_output=True, text=True, timeout=120, env=env)
    return p, {c["name"]: c for c in json.loads(p.stdout)["checks"]}


def doctor_leftovers() -> list:
    return [f for f in os.listdir("/dev/shm") if f.startswith("framebus.doctor-gpu-")]


def test_fake_door_devices_and_ipc_probe():
    before = doctor_leftovers()
    p, checks = cli_json({"FRAMEBUS_CUDA": "fake"})
    assert p.returncode == 0, p.stdout + p.stderr
    cuda, ipc = checks["CUDA"], checks["CUDA IPC"]
    assert cuda["status"] == "ok" and "fake CUDA door" in cuda["detail"] and "2 device(s)" in cuda["detail"]
    assert "cuda:0 framebus fake CUDA device 0 (compute 8.6, 16.0 GiB)" in cuda["detail"]
    assert cuda["fix"] == "unset FRAMEBUS_CUDA to use the GPU"
    assert ipc["status"] == "ok" and "read back, byte for byte, by another process" in ipc["detail"]
    assert doctor_leftovers() == before


def test_fake_door_without_devices_is_information_not_failure():
    p, checks = cli_json({"FRAMEBUS_CUDA": "fake", "FRAMEBUS_FAKE_CUDA_DEVICES": "0"})
    assert p.returncode == 0, p.stdout
    assert checks["CUDA"]["status"] == "info" and "no GPU streams here" in checks["CUDA"]["detail"]
    assert "CUDA IPC" not in checks


def test_this_machine_without_the_fake():
    # Whatever this machine has: with a device the IPC probe runs; without one the section says
    # why, with a fix, and nothing fails because of it.
    import framebus

    p, checks = cli_json({})
    cuda = checks["CUDA"]
    if framebus.gpu_info()["devices"]:
        assert cuda["status"] == "ok" and "CUDA IPC" in checks
    else:
        assert cuda["status"] == "info" and "no GPU streams here" in cuda["detail"] and cuda["fix"]
        assert "CUDA IPC" not in checks


def _probe_with_child(child: str) -> dict:
    """check_cuda_ipc behind the fake door with ``child`` as the reading process."""
    code = textwrap.dedent(
        """
        import json, os, sys
        from framebus.commands import doctor
        doctor.IPC_CHILD = sys.argv[1]
        c = doctor.check_cuda_ipc("cuda:0", timeout=60)
        left = [f for f in os.listdir("/dev/shm") if f.startswith("framebus.doctor-gpu-")]
        print(json.dumps({"status": c.status, "detail": c.detail, "fix": c.fix, "left": left}))
        """
    )
    env = dict(os.environ, FRAMEBUS_CUDA="fake")
    p = subprocess.run([sys.executable, "-c", code, child], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_ipc_failure_in_the_other_process_is_a_warning_with_the_fix():
    r = _probe_with_child("import sys; sys.exit('framebus.errors.DeviceError: cuIpcOpenMemHandle failed with CUDA_ERROR_INVALID_CONTEXT')")
    assert r["status"] == "warn" and "CUDA_ERROR_INVALID_CONTEXT" in r["detail"]
    assert "--ipc=host" in r["fix"] and "MIG" in r["fix"] and "WSL2" in r["fix"]
    assert r["left"] == []


def test_other_bytes_in_the_other_process_fail():
    r = _probe_with_child("import sys; sys.stdout.write('00' * 256)")
    assert r["status"] == "fail" and "other bytes" in r["detail"]
    assert r["left"] == []


def test_check_cuda_lists_the_driver_and_devices_and_probes_the_first():
    probed = []

    def ipc(device: str) -> Check:
        probed.append(device)
        return Check("CUDA IPC", "ok", "probed")

    info = {
        "door": "cuda",
        "driver_version": 13000,
        "error": None,
        "devices": [{"ordinal": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "ab" * 16, "total_memory": 85 * 2**30, "compute_capability": (9, 0)}],
    }
    cuda, probe = doctor.check_cuda(info, ipc)
    assert cuda.status == "ok" and cuda.fix == ""
    assert cuda.detail == "CUDA driver, driver API 13.0, 1 device(s): cuda:0 NVIDIA H100 80GB HBM3 (compute 9.0, 85.0 GiB)"
    assert probed == ["cuda:0"] and probe.detail == "probed"


NO_DRIVER = _native.DOOR_CODES["FRAMEBUS_NO_CUDA_DRIVER"]
BAD_SETTING = _native.DOOR_CODES["FRAMEBUS_BAD_SETTING"]
NOT_BUILT = _native.DOOR_CODES["FRAMEBUS_GPU_NOT_BUILT"]
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE


@pytest.mark.parametrize(
    "code, env, runtime, words",
    [
        (NO_DRIVER, {}, None, "install the NVIDIA driver"),
        (NO_DRIVER, {}, "docker", "--gpus all"),
        (NO_DEVICE, {"CUDA_VISIBLE_DEVICES": ""}, None, "hides every GPU"),
        (NO_DEVICE, {"CUDA_VISIBLE_DEVICES": "-1"}, "docker", "hides every GPU"),
        (NO_DEVICE, {}, None, "nvidia-smi"),
        (NO_DEVICE, {}, "kubepods", "nvidia.com/gpu"),
        (803, {}, None, "different versions"),
        (35, {}, None, "update the driver"),
        (None, {"FRAMEBUS_CUDA": "fake"}, None, "unset FRAMEBUS_CUDA"),
        (BAD_SETTING, {"FRAMEBUS_CUDA": "bogus"}, None, "'cuda' or 'fake'"),
        (NOT_BUILT, {}, None, "built without GPU streams"),
    ],
)
def test_the_fix_when_there_is_no_gpu(code, env, runtime, words):
    assert words in doctor.cuda_fix(code, env=env, runtime=runtime)


def test_the_fix_is_chosen_by_the_code_not_the_words():
    # A message that mentions another error's number or words does not steer the fix: only
    # the code does (the driver's text may change, or be translated).
    info = {"door": "cuda", "driver_version": 13000, "devices": [], "error_code": 100,
            "error": "cuInit failed with CUDA_ERROR_NO_DEVICE (100): mismatch 803 insufficient (35)"}
    (c,) = doctor.check_cuda(info, ipc=None)
    assert "different versions" not in c.fix and "update the driver" not in c.fix, c.fix
    info = dict(info, error_code=803, error="something the driver said")
    (c,) = doctor.check_cuda(info, ipc=None)
    assert "different versions" in c.fix


def test_gpu_info_carries_the_doors_error_as_values():
    code = """
import json, framebus
print(json.dumps(framebus.gpu_info()))
"""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    bogus = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(env, FRAMEBUS_CUDA="bogus"), check=True).stdout)
    assert (bogus["error_code"], bogus["error_name"], bogus["error_call"]) == (BAD_SETTING, "FRAMEBUS_BAD_SETTING", "FRAMEBUS_CUDA")
    assert bogus["built"] == ["cuda", "fake"]
    fake = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(env, FRAMEBUS_CUDA="fake"), check=True).stdout)
    assert fake["error_code"] is None and fake["error"] is None and fake["door"] == "fake"


def test_no_device_is_information_with_the_fix():
    (c,) = doctor.check_cuda({"door": None, "driver_version": None, "devices": [], "error": "no CUDA driver found: libcuda.so.1 could not be loaded", "error_code": NO_DRIVER}, ipc=None)
    assert c.status == "info" and "no GPU streams here" in c.detail and "CPU streams are unaffected" in c.detail and c.fix
