"""Frames that leave the GPU, against the strict fake door (FRAMEBUS_CUDA=fake): a bridge,
``framebus record`` and a pipe reading a device stream without a CPU mirror download each frame
(one device-to-host copy into page-locked memory allocated once), and say so in ``framebus
ls``/``top``; with a mirror nothing changes. The door is chosen once per process, so each
scenario runs in a fresh interpreter with the variable set (see test_gpu_fake.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

BOUND = 120.0

PRELUDE = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    import numpy as np
    import framebus
    from framebus import _native
    from framebus._host_read import DownloadingStream, open_for_host

    def frame_of(seq, shape=(6, 8, 3)):
        return ((np.arange(np.prod(shape)) * 5 + seq * 7) % 251).astype(np.uint8).reshape(shape)

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "framebus", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout
    """
)


def run(code: str, *args: str) -> dict:
    """Runs PRELUDE + code with FRAMEBUS_CUDA=fake; returns the JSON it prints last."""
    env = dict(os.environ, FRAMEBUS_CUDA="fake")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], capture_output=True, text=True, timeout=BOUND, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def name():
    n = f"t-gpudl-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    for suffix in ("", "-dst"):
        try:
            os.unlink(f"/dev/shm/framebus.{n}{suffix}")
        except FileNotFoundError:
            pass


def test_a_bridge_sends_a_device_stream_without_a_mirror_and_ls_and_top_show_the_download(name):
    pytest.importorskip("zmq")
    r = run(
        """
        from framebus import net
        name = sys.argv[1]; dst_name = name + "-dst"
        src = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0, meta_capacity=32)
        pub = net.publish(name, "tcp://127.0.0.1:*", mode="lossless")
        sub = net.subscribe(pub.endpoint, dst_name, timeout=30)
        got = []
        with framebus.open(dst_name, mode="lossless") as dst:
            for i in range(12):
                src.write(frame_of(i), frame_id=i, meta=b"m%d" % i, timeout=30)
                p = dst.read_new_publication(timeout=30)
                got.append([p.payload.tobytes() == frame_of(i).tobytes(), p.frame_id, p.meta.decode()])
            during = list(_native.fake_cuda_host_counts())
            ls = [x for x in json.loads(cli("ls", "--json")) if x["name"] == name][0]
            from framebus.commands.ls import rows
            row = [x for x in rows() if x["name"] == name][0]
            top = json.loads(cli("top", name, "--once", "--json", "--interval", "0.05"))
            sub.stop()
        pub.stop()
        after = list(_native.fake_cuda_host_counts())
        src.unlink()
        readers = top["streams"][0]["readers"]
        print(json.dumps({"got": got, "during": during, "after": after, "downloads": ls["downloads"], "row": row["readers"],
                          "top": [[x["role"], x["download"]] for x in readers]}))
        """,
        name,
    )
    assert r["got"] == [[True, i, f"m{i}"] for i in range(12)]
    # One page-locked buffer and one CUDA stream served all 12 frames, and were given back.
    assert r["during"] == [1, 1, 1]
    assert r["after"] == [0, 1, 0]
    assert r["downloads"] == 1 and r["row"] == "1 (1 lossless, 1 download)"
    assert ["bridge out", True] in r["top"]


def test_record_of_a_device_stream_without_a_mirror_is_byte_exact(name, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    out = tmp_path / "rec.mkv"
    r = run(
        """
        name, out = sys.argv[1], sys.argv[2]
        from framebus.ffmpeg import VideoReader
        src = framebus.create(name, shape=(16, 24, 3), dtype=np.uint8, device=0)
        proc = subprocess.Popen([sys.executable, "-m", "framebus", "record", name, out, "--codec", "ffv1", "--frames", "6",
                                 "--fps", "25", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(x["download"] for x in _native.stream_stats(name)["readers"]):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        for i in range(6):
            src.write(frame_of(i, (16, 24, 3)), timeout=30)  # a lossless reader: the writer waits for it
        _, err = proc.communicate(timeout=60)
        src.unlink()
        with VideoReader(out) as v:
            frames = list(v)
        print(json.dumps({"rc": proc.returncode, "err": err, "n": len(frames),
                          "exact": [f.tobytes() == frame_of(i, (16, 24, 3)).tobytes() for i, f in enumerate(frames)]}))
        """,
        name,
        str(out),
    )
    assert r["rc"] == 0, r["err"]
    assert r["n"] == 6 and all(r["exact"]), r


def test_frames_downloaded_from_a_device_stream_pipe_byte_exact_and_stay_valid(name):
    r = run(
        """
        name = sys.argv[1]
        src = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0)
        reader = open_for_host(name, mode="lossless")
        kind = type(reader).__name__
        rfd, wfd = os.pipe()
        arrays = []
        for i in range(5):
            src.write(frame_of(i), timeout=30)
            arrays.append(reader.read_new(timeout=30))
        for a in arrays:  # every array is its own copy: later reads did not overwrite it
            framebus.pipe(a, wfd)
        framebus.sync(wfd)
        data = b""
        while len(data) < 5 * 144:
            data += os.read(rfd, 5 * 144 - len(data))
        framebus.pipes.close(wfd); os.close(rfd); os.close(wfd)
        newest = reader.read_publication()
        made = _native.fake_cuda_host_counts()[1]
        no_view = not hasattr(reader, "wait_view")
        reader.close(); src.unlink()
        print(json.dumps({"kind": kind, "exact": data == b"".join(frame_of(i).tobytes() for i in range(5)),
                          "newest": [newest.seq, newest.payload.tobytes() == frame_of(4).tobytes()], "made": made, "no_view": no_view}))
        """,
        name,
    )
    assert r == {"kind": "DownloadingStream", "exact": True, "newest": [5, True], "made": 1, "no_view": True}


def test_a_device_stream_with_a_mirror_is_read_from_the_mirror_as_before(name):
    r = run(
        """
        name = sys.argv[1]
        src = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, device=0, cpu_mirror=True)
        reader = open_for_host(name)
        src.write(frame_of(3))
        got = reader.read()
        flags = [x["download"] for x in _native.stream_stats(name)["readers"]]
        made = _native.fake_cuda_host_counts()[1]
        device = reader.device
        reader.close(); src.unlink()
        print(json.dumps({"kind": type(reader).__name__, "device": device, "exact": got.tobytes() == frame_of(3).tobytes(),
                          "flags": flags, "made": made}))
        """,
        name,
    )
    assert r == {"kind": "Stream", "device": None, "exact": True, "flags": [False, False], "made": 0}


def test_a_dead_owner_while_downloading_raises_device_unavailable_naming_the_pid(name):
    r = run(
        """
        import signal
        from framebus.errors import DeviceUnavailableError
        name = sys.argv[1]
        owner_code = "; ".join([
            "import sys, time, numpy as np, framebus",
            "s = framebus.create(sys.argv[1], shape=(6, 8, 3), dtype=np.uint8, device=0)",
            "s.write(np.ones((6, 8, 3), np.uint8))",
            "print('ready', flush=True)",
            "time.sleep(600)",
        ])
        owner = subprocess.Popen([sys.executable, "-c", owner_code, name], stdout=subprocess.PIPE, text=True)
        assert owner.stdout.readline().strip() == "ready"
        reader = open_for_host(name)
        first = int(reader.read().sum())
        owner.send_signal(signal.SIGKILL); owner.wait()
        errors = []
        for call in (lambda: reader.read(), lambda: reader.read_new(timeout=30)):
            try:
                call(); errors.append(None)
            except DeviceUnavailableError as e:
                errors.append(str(e))
        reader.close()
        print(json.dumps({"first": first, "errors": errors, "pid": owner.pid}))
        """,
        name,
    )
    assert r["first"] == 6 * 8 * 3
    assert all(e is not None and f"pid {r['pid']}" in e for e in r["errors"]), r
