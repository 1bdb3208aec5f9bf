"""Encoded bridges run from the command line (``framebus bridge publish --encode``,
``framebus bridge subscribe``): any number of signals still removes every stream the command
made; a subscriber killed and restarted keeps its local stream (same segment) so its readers
and recordings go on; the wait for a missing packet stream says what to start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import framebus

pytest.importorskip("zmq")
pytest.importorskip("av")
net = pytest.importorskip("framebus.net")

from conftest import SPAWNED  # noqa: E402
from video_helpers import BOUND, H, W, Writer, names, picture, source, wait_until  # noqa: E402,F401


def start(*args: str) -> subprocess.Popen:
    """``framebus ARGS`` in a session of its own (so that its process group can be signalled)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "framebus", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    SPAWNED.add(p.pid)
    return p


@pytest.mark.parametrize("how", ["sigint-twice", "process-group-twice", "sigint-then-sigterm", "sigint-thrice"])
def test_any_number_of_signals_removes_the_packet_stream(names, source, how):
    """A second signal (Ctrl-C pressed twice, or ``timeout -s INT`` whose signal reaches the
    process and its group) used to interrupt the clean-up and leave ``NAME.h264`` behind."""
    writer = Writer(source)
    packets = f"/dev/shm/framebus.{source.name}.h264"
    p = start("bridge", "publish", source.name, "tcp://127.0.0.1:*", "--encode", "h264", "--bitrate", "1M", "--quiet")
    try:
        wait_until(lambda: os.path.exists(packets) or p.poll() is not None, "the packet stream")
        time.sleep(0.3)  # a few pictures encoded: the encoder thread is busy
        first, *more = {
            "sigint-twice": [signal.SIGINT, signal.SIGINT],
            "process-group-twice": [signal.SIGINT, signal.SIGINT],
            "sigint-then-sigterm": [signal.SIGINT, signal.SIGTERM],
            "sigint-thrice": [signal.SIGINT, signal.SIGINT, signal.SIGINT],
        }[how]
        send = (lambda s: os.killpg(p.pid, s)) if how == "process-group-twice" else p.send_signal
        send(first)
        for s in more:
            time.sleep(0.005)  # apart: two signals before Python's handler runs count as one
            send(s)
        out, err = p.communicate(timeout=BOUND)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        writer.stop()
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    assert not os.path.exists(packets), f"{packets} left behind (exit {p.returncode}: {err.strip()})"
