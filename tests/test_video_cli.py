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


def _ino(name: str) -> int:
    return os.stat(f"/dev/shm/framebus.{name}").st_ino


@pytest.mark.parametrize("encode,recorded", [(None, ""), ("h264", ""), ("h264", ".h264")], ids=["raw", "h264", "h264-packets"])
def test_a_subscriber_killed_and_restarted_keeps_its_stream_for_its_readers(names, source, tmp_path, encode, recorded):
    """``framebus bridge subscribe`` killed with SIGKILL and started again takes over the local
    stream it left (same segment), so a lossless reader and a running ``framebus record`` of it
    go on getting frames; an encoded subscriber used to create a new segment and strand them.
    The same for a recording of an encoded subscriber's packet stream (``LOCAL.h264``, remuxed):
    it goes on, and the file decodes."""
    writer = Writer(source, fps=30)
    pub = net.publish(source.name, "tcp://127.0.0.1:*", **(dict(encode=encode, bitrate="1M", gop=15) if encode else {}))
    local = names("local")
    sub = start("bridge", "subscribe", pub.endpoint, local, "--quiet")
    rec = None
    try:
        reader = framebus.open(local, mode="lossless", timeout=BOUND)
        try:
            first = _ino(local)
            reader.read_new(timeout=BOUND)
            out = tmp_path / "rec.mp4"
            rec = start("record", local + recorded, str(out), "--wait", "30", "--quiet")
            wait_until(lambda: any(r.get("role") == "record" for r in framebus.stat(local + recorded).readers), "the recording to attach")
            recorded_first = _ino(local + recorded)
            sub.kill()  # SIGKILL: no BYE, nothing removed
            sub.communicate(timeout=BOUND)
            before = reader.write_sequence
            sub = start("bridge", "subscribe", pub.endpoint, local, "--quiet")
            for _ in range(5):  # frames written after the restart reach the old handle
                reader.read_new(timeout=BOUND)
            assert reader.write_sequence > before
            assert _ino(local) == first, "the restarted subscriber made a new segment"
            assert _ino(local + recorded) == recorded_first, "the restarted subscriber made a new packet segment"
            recorder = next(r for r in framebus.stat(local + recorded).readers if r.get("role") == "record")
            reads = recorder["reads"]
            wait_until(lambda: next(r for r in framebus.stat(local + recorded).readers if r.get("role") == "record")["reads"] > reads,
                       "the recording to read after the restart")
        finally:
            reader.close()
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=BOUND)
        assert rec.returncode == 130, err
        assert "recorded" in err and out.stat().st_size > 0, err
        import av

        with av.open(str(out)) as c:
            assert sum(1 for _ in c.decode(video=0)) > 0
    finally:
        for p in (sub, rec):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=BOUND)
        writer.stop()
        pub.stop()
    assert sub.returncode == 130


def _packets(n: int) -> list:
    """``n`` H.264 packets (bytes, keyframe) of 320x240 test pictures."""
    from framebus.media import codec as video

    enc = video.PictureEncoder("libx264", video.VideoSettings.of("h264", "1M", 10), W, H, 3)
    out = []
    for i in range(n):
        out += enc.encode(picture(i), i * 33_000_000, i == 0)
    return out + enc.flush()


@pytest.mark.parametrize("kind", ["images", "packets"])
def test_record_of_a_replaced_stream_stops_and_says_so(names, tmp_path, kind):
    """The producer is killed (its stream neither ended nor closed) and a new one creates the
    stream anew: the recording, attached to the old segment, would wait forever. It finishes
    the file, says that the stream was replaced and exits 1."""
    name = names(kind)
    make = (lambda: framebus.create(name, shape=(H, W, 3), dtype=np.uint8)) if kind == "images" else (lambda: framebus.create(name, capacity=1 << 20))
    packets = _packets(20) if kind == "packets" else []

    def write(s, i):
        if kind == "images":
            s.write(picture(i), frame_id=i)
        else:
            s.write(packets[i % len(packets)][0], codec="h264", frame_id=i)

    old = make()
    out = tmp_path / ("rec.mp4" if kind == "images" else "rec.h264.mp4")
    rec = start("record", name, str(out), "--quiet")
    new = None
    try:
        wait_until(lambda: any(r.get("role") == "record" for r in framebus.stat(name).readers), "the recording to attach")
        for i in range(10):
            write(old, i)
        wait_until(lambda: framebus.stat(name).readers and old.write_sequence == 10, "the frames written")
        framebus.unlink(name)  # what a killed producer's successor does: a new stream, same name
        new = make()
        for i in range(10):
            write(new, i)
        _, err = rec.communicate(timeout=BOUND)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.communicate()
        old.close()
        if new is not None:
            new.unlink()
    assert rec.returncode == 1, err
    assert "replaced by a new stream of the same name" in err and "run framebus record again" in err, err
    assert "Traceback" not in err, err
    assert out.stat().st_size > 0, err


@pytest.mark.parametrize("wait", [[], ["--wait", "0.2"]], ids=["no-wait", "wait"])
def test_a_missing_packet_stream_says_what_to_start_and_where_packets_are(names, wait):
    """``--packets`` keeps the packets in the subscriber's own stream NAME (not NAME.h264).
    Asking for NAME.h264 says, as every command does for a missing stream, to start what
    writes it (with --wait it used to suggest framebus.create("NAME.h264", ...)), and that
    NAME holds the packets."""
    name = names("campk")
    with framebus.create(name, capacity=1 << 16, auto_unlink=True):
        res = subprocess.run(
            [sys.executable, "-m", "framebus", "record", f"{name}.h264", "/nonexistent/out.mp4", *wait],
            capture_output=True, text=True, timeout=BOUND,
        )
    assert res.returncode == 1, res.stderr
    assert "start the program or command that writes it first" in res.stderr, res.stderr
    assert "framebus.create(" not in res.stderr, res.stderr
    assert f'`framebus bridge subscribe ENDPOINT {name} --packets` keeps the packets in "{name}" itself' in res.stderr, res.stderr
    if wait:
        assert "does not exist (waited 0.2 s)" in res.stderr, res.stderr


def test_wait_for_any_missing_stream_gives_the_command_line_hint(names):
    res = subprocess.run([sys.executable, "-m", "framebus", "hz", names("none"), "--wait", "0.1"], capture_output=True, text=True, timeout=BOUND)
    assert res.returncode == 1, res.stderr
    assert "start the program or command that writes it first" in res.stderr and "framebus.create(" not in res.stderr, res.stderr
