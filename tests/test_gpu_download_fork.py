"""A host reader of a device stream (``open_for_host``: a DownloadingStream, read by
``host_view``/``host_wait_view`` as a bridge does) across fork(), against the strict fake door.

A CUDA context does not survive fork(): in the child every frame operation of the inherited copy
raises DeviceUnavailableError naming fork() and what to do (spawn, or the CPU mirror), before it
pins a frame or takes a reader entry; the parent's reads go on byte for byte, whatever the child
did with its copy (closed it, dropped it, left it open). Each scenario runs in a fresh
interpreter with FRAMEBUS_CUDA=fake (test_gpu_download.run); timeouts are upper bounds."""

from __future__ import annotations

import os

import pytest

from test_gpu_download import run

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

SCENARIO = """
import gc
from framebus.errors import DeviceUnavailableError
from framebus._host_read import host_view, host_wait_view
name, mode, then = sys.argv[1], sys.argv[2], sys.argv[3]
src = framebus.create(name, shape=(6, 8, 3), dtype=np.uint8, slots=3, device=0)
reader = open_for_host(name, mode=mode)
device_reader = framebus.open(name, mode=mode)  # the device handle itself, frames as DeviceArrays
src.write(frame_of(0), timeout=30)
first = reader.read_new(timeout=30).tobytes() == frame_of(0).tobytes()
device_reader.read_new(timeout=30)
rfd, wfd = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(rfd); os.close(go_w)
    out = {}
    calls = {
        "read": lambda: reader.read(),
        "read_new": lambda: reader.read_new(timeout=2),
        "read_publication": lambda: reader.read_publication(),
        "read_new_publication": lambda: reader.read_new_publication(timeout=2),
        "host_view": lambda: host_view(reader),
        "host_wait_view": lambda: host_wait_view(reader, 2),
        "device_read": lambda: device_reader.read(),
        "device_read_new": lambda: device_reader.read_new(timeout=2),
    }
    for what, call in calls.items():
        try:
            call()
            out[what] = "no error"
        except DeviceUnavailableError as exc:
            out[what] = str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported
            out[what] = f"{type(exc).__name__}: {exc}"
    if then == "close":
        reader.close(); device_reader.close()
    elif then == "drop":
        del reader, device_reader
        gc.collect()
    os.write(wfd, (json.dumps(out) + "\\n").encode())
    os.read(go_r, 1)  # alive (its copy closed, dropped or left open) while the parent reads on
    os._exit(0)
os.close(wfd); os.close(go_r)
child = json.loads(os.fdopen(rfd).readline())
got = []
for k in range(1, 8):  # more frames than slots: a lossless child entry would hold the writer back
    src.write(frame_of(k), timeout=30)
    p = reader.read_new_publication(timeout=30)
    got.append([p.seq, p.payload.tobytes() == frame_of(k).tobytes()])
    device_reader.read_new(timeout=30)
os.write(go_w, b"1"); os.close(go_w)
_, status = os.waitpid(pid, 0)
reader.close(); device_reader.close(); src.unlink()
print(json.dumps({"first": first, "child": child, "got": got, "status": status, "parent": os.getpid()}))
"""


@pytest.mark.parametrize("then", ["close", "drop", "keep"])
@pytest.mark.parametrize("mode", ["latest", "lossless"])
def test_a_forked_child_is_told_to_spawn_and_the_parent_downloads_on(name, mode, then):
    """Each frame read of the inherited DownloadingStream (and of the device handle) in the
    child raises DeviceUnavailableError saying fork(), the parent's pid and what to do; the
    child exits cleanly, and the parent keeps reading every frame byte for byte."""
    r = run(SCENARIO, name, mode, then)
    assert r["first"] is True
    assert len(r["child"]) == 8
    for what, err in r["child"].items():
        assert "fork()" in err and "spawn" in err and "cpu_mirror" in err and f"pid {r['parent']}" in err, (what, err)
    assert r["got"] == [[k + 1, True] for k in range(1, 8)]
    assert r["status"] == 0
