"""OpenFilter on framebus (framebus.integrations.openfilter): real OpenFilter pipelines, each stage
a process started by OpenFilter's own runner, checked byte for byte (every image's CRC-32 travels
in its data). Skipped where openfilter is not installed (the test command installs it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
import warnings
from typing import Callable, List

import pytest

# OpenFilter reports usage over the network and writes logs/ into the working directory by
# default; the tests do neither (set before OpenFilter is imported).
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("SCARF_NO_ANALYTICS", "true")
os.environ.setdefault("LOG_PATH", "false")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    openfilter_runtime = pytest.importorskip("openfilter.filter_runtime", reason="openfilter is not installed (pip install 'framebus[openfilter]')")
    import openfilter_filters as of_filters

import framebus.integrations.openfilter as fb_openfilter
from framebus import _native

pytestmark = pytest.mark.filterwarnings("ignore")

TIMEOUT = 60.0


@pytest.fixture(autouse=True)
def _enabled():
    fb_openfilter.enable()
    yield
    fb_openfilter.disable()
    os.environ.pop(fb_openfilter.ENV_RECEIVE, None)


@pytest.fixture
def work(tmp_path):
    return tmp_path


_lines = of_filters.lines


def _wait(what: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    return of_filters.wait_until(what, timeout)


def _run(stages, until: Callable[[], bool], timeout: float = TIMEOUT):
    from openfilter.filter_runtime import Filter

    runner = Filter.Runner(stages, exit_time=5, sig_stop=False)
    try:
        assert _wait(until, timeout), "the pipeline did not deliver in time"
    finally:
        runner.stop()
    return runner


def _of_streams(prefix: str = "of.") -> List[str]:
    return [n for n in _native.stream_names() if n.startswith(prefix)]


def _addr(work, tag: str) -> str:
    return f"ipc://{work}/{tag}"


def test_frames_travel_through_framebus_intact(work):
    out = work / "sink.jsonl"
    n = 12
    src = {"id": f"src{uuid.uuid4().hex[:6]}", "outputs": _addr(work, "a"), "frames": n, "topics": {"main": (240, 320, 3)}, "outputs_jpg": False}
    stages = [
        (of_filters.Source, src),
        (of_filters.Sink, {"sources": _addr(work, "a"), "results": str(out)}),
    ]
    _run(stages, lambda: len(_lines(out)) >= n)
    got = _lines(out)
    assert [r["i"] for r in got[:n]] == list(range(n))
    assert all(r["ok"] for r in got)
    last = got[-1]["stats"]
    assert last["received_framebus"] >= n and last["received_inline"] == 0 and last["missed"] == 0
    assert _wait(lambda: not _of_streams(f"of.{src['id']}.")), "a clean exit leaves no stream behind"


def test_a_filter_keeping_frames_never_sees_them_change(work):
    """A filter keeps every frame it gets (far more than the ring has slots): each kept frame
    stays intact; once no slot is free the sender falls back to inline pixels."""
    out = work / "keeper.jsonl"
    n = 24
    stages = [
        (of_filters.Source, {"outputs": _addr(work, "k"), "frames": n, "topics": {"main": (120, 160, 3)}, "outputs_jpg": False}),
        (of_filters.Keeper, {"sources": _addr(work, "k"), "results": str(out)}),
    ]
    _run(stages, lambda: len(_lines(out)) >= n)
    got = _lines(out)
    assert len(got) == n and all(r["ok"] for r in got), [r for r in got if not r["ok"]]
    stats = got[-1]["stats"]
    assert stats["received_framebus"] >= 3, stats
    assert stats["received_inline"] >= 1, stats  # the ring filled with kept frames
    assert stats["missed"] == 0


def test_two_topics_of_different_sizes_and_two_subscribers(work):
    out1, out2 = work / "s1.jsonl", work / "s2.jsonl"
    n = 8
    topics = {"main": (360, 480, 3), "thumb": (30, 40, 3)}
    # A subscriber that connects after the first messages misses them (OpenFilter sends to the
    # clients connected at the time), so the source goes on until both have 8 messages.
    src = {"id": f"two{uuid.uuid4().hex[:6]}", "outputs": _addr(work, "t"), "frames": 10 * n, "topics": topics, "outputs_jpg": False}
    stages = [
        (of_filters.Source, src),
        (of_filters.Sink, {"sources": _addr(work, "t"), "results": str(out1)}),
        (of_filters.Sink, {"sources": _addr(work, "t"), "results": str(out2)}),
    ]
    streams_seen: set = set()

    def done() -> bool:
        streams_seen.update(_of_streams(f"of.{src['id']}."))
        return len(_lines(out1)) >= 2 * n and len(_lines(out2)) >= 2 * n

    _run(stages, done)
    for out in (out1, out2):
        got = _lines(out)
        assert all(r["ok"] for r in got)
        shapes = {r["topic"]: tuple(r["shape"]) for r in got}
        assert shapes == topics
        assert got[-1]["stats"]["received_framebus"] >= 2 * n and got[-1]["stats"]["missed"] == 0
    assert {s.split(".")[2] for s in streams_seen} == {"main", "thumb"}  # one stream per topic


def test_a_receiver_that_cannot_map_gets_every_frame_inline(work):
    """A receiver started with FRAMEBUS_OPENFILTER_RECEIVE=0 (as one on another host): the sender
    sends it OpenFilter's own messages, nothing is lost."""
    out = work / "remote.jsonl"
    n = 10
    stages = [
        (of_filters.Source, {"outputs": _addr(work, "r"), "frames": n, "topics": {"main": (120, 160, 3)}, "outputs_jpg": False}),
        (of_filters.Sink, {"sources": _addr(work, "r"), "results": str(out), "__env_run": {fb_openfilter.ENV_RECEIVE: "0"}}),
    ]
    _run(stages, lambda: len(_lines(out)) >= n)
    got = _lines(out)
    assert [r["i"] for r in got] == list(range(n)) and all(r["ok"] for r in got)
    stats = got[-1]["stats"]
    assert stats["received_framebus"] == 0 and stats["received_inline"] == n


def test_a_sender_killed_and_restarted_sends_no_stale_frame_and_leaks_nothing(work):
    import multiprocessing as mp

    out = work / "restart.jsonl"
    sid = f"kill{uuid.uuid4().hex[:6]}"
    topics = {"main": (240, 320, 3)}
    src = {"id": sid, "outputs": _addr(work, "x"), "frames": 10_000, "topics": topics, "outputs_jpg": False, "interval": 0.03}
    from openfilter.filter_runtime import Filter

    runner = Filter.Runner([(of_filters.Sink, {"sources": _addr(work, "x"), "results": str(out)})], exit_time=5, sig_stop=False)
    first = mp.get_context("fork").Process(target=of_filters.Source.run, args=(dict(src, generation=1),))
    second = None
    try:
        first.start()
        assert _wait(lambda: len(_lines(out)) >= 5)
        before = set(_of_streams(f"of.{sid}."))
        assert before
        os.kill(first.pid, signal.SIGKILL)
        first.join(10)
        mark = len(_lines(out))
        second = mp.get_context("fork").Process(target=of_filters.Source.run, args=(dict(src, generation=2),))
        second.start()
        assert _wait(lambda: sum(1 for r in _lines(out)[mark:] if r["gen"] == 2) >= 5)
        # The new sender removed its dead predecessor's streams.
        assert not before & set(_of_streams(f"of.{sid}."))
        got = _lines(out)
        assert all(r["ok"] for r in got), [r for r in got if not r["ok"]]
        after = got[mark:]
        # Once the new sender's frames arrive, no frame of the dead one follows.
        first_new = next(k for k, r in enumerate(after) if r["gen"] == 2)
        assert all(r["gen"] == 2 for r in after[first_new:])
    finally:
        for p in (first, second):
            if p is not None and p.is_alive():
                p.terminate()
                p.join(10)
        runner.stop()
    assert _wait(lambda: not _of_streams(f"of.{sid}."), 15), _of_streams(f"of.{sid}.")


def test_environment_variable_switches_it_on_in_a_fresh_process(work, tmp_path):
    """FRAMEBUS_OPENFILTER=1 alone (the start-up hook the wheel installs) routes a pipeline
    launched by a script that never imports framebus."""
    import site
    import sysconfig

    hook = "framebus-openfilter.pth"
    dirs = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    if not any(os.path.exists(os.path.join(d, hook)) for d in dirs):
        pytest.skip(f"{hook} is not installed in site-packages (installed by the wheel and by scripts/test.sh)")
    out = work / "env.jsonl"
    script = tmp_path / "launch.py"
    script.write_text(
        "import sys, time\n"
        "sys.path.insert(0, %r)\n"
        "import openfilter_filters as f\n"
        "from openfilter.filter_runtime import Filter\n"
        "r = Filter.Runner([(f.Source, dict(outputs=%r, frames=5, topics={'main': (64, 64, 3)}, outputs_jpg=False)),\n"
        "                   (f.Sink, dict(sources=%r, results=%r))], exit_time=5, sig_stop=False)\n"
        "end = time.time() + 60\n"
        "while time.time() < end and sum(1 for _ in open(%r) if _.strip()) < 5 if __import__('os').path.exists(%r) else time.time() < end:\n"
        "    time.sleep(0.05)\n"
        "r.stop()\n" % (os.path.dirname(__file__), _addr(work, "e"), _addr(work, "e"), str(out), str(out), str(out))
    )
    env = dict(os.environ, FRAMEBUS_OPENFILTER="1")
    subprocess.run([sys.executable, str(script)], env=env, timeout=120, capture_output=True)
    got = _lines(out)
    assert len(got) >= 5 and all(r["ok"] for r in got)
    assert got[-1]["stats"]["received_framebus"] >= 5


def test_enable_is_idempotent_and_disable_restores():
    from openfilter.filter_runtime import mq

    patched = mq.MQ.__init__
    fb_openfilter.enable()
    assert mq.MQ.__init__ is patched and fb_openfilter.enabled()
    fb_openfilter.disable()
    assert not fb_openfilter.enabled() and mq.MQ.__init__ is not patched
    fb_openfilter.enable()


@pytest.mark.parametrize("var,value", [(fb_openfilter.ENV_SLOTS, "two"), (fb_openfilter.ENV_SLOTS, "1"), (fb_openfilter.ENV_HOLD, "99")])
def test_bad_settings_are_clear_errors(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        fb_openfilter.enable()


def test_host_token_is_stable():
    assert fb_openfilter.host_token() == fb_openfilter.host_token()
    assert len(fb_openfilter.host_token()) == 10


def test_pipeline_example_reports_every_hop(work):
    """The example's --json output (one transport, a short run)."""
    out = work / "run.json"
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "openfilter_pipeline.py")
    proc = subprocess.run(
        [sys.executable, example, "--transport", "framebus", "--resolution", "tiny", "--frames", "5", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["transport"] == "framebus" and res["frames"] == 5 and res["torn"] == 0
    assert len(res["per_hop_ms"]) == 3 and all(h > 0 for h in res["per_hop_ms"])
    # Each hop split where the transport gets the frame and where the receiver has decoded it.
    assert [sorted(part) for part in res["breakdown_ms"]] == [["after", "before", "transport"]] * 3
    assert all(v >= 0 for part in res["breakdown_ms"] for v in part.values())


class _Pin:
    """Stands in for a sender's pinned view: records its release."""

    released: List[int] = []

    def __init__(self, n: int) -> None:
        self.n = n

    def release(self) -> None:
        _Pin.released.append(self.n)


def test_retention_keeps_frames_until_synchronized_clients_are_past_them(monkeypatch):
    """The sender's retention (what caused a message to arrive without its topic when a receiver
    started slowly): a message's frames are let go only once every synchronized client has
    received a later message, and never among the last `hold` messages."""
    monkeypatch.setattr(fb_openfilter.framebus, "Frame", _Pin)
    _Pin.released = []
    keep = fb_openfilter._Retention(hold=2)
    # Messages 1..6 sent; OpenFilter learns each id once the next one is built.
    for msg_id in range(1, 7):
        keep.settle(last_sent_id=msg_id - 1 if msg_id > 1 else None, acked=0)
        keep.add([_Pin(msg_id)], last_sent_id=msg_id - 1 if msg_id > 1 else None)
    assert _Pin.released == []  # the client has received nothing yet: everything stays
    keep.settle(last_sent_id=6, acked=3)  # the client received message 3 (asked for 4)
    assert _Pin.released == [1, 2]  # message 3 stays: its frames may still be being pinned
    keep.settle(last_sent_id=6, acked=6)
    assert _Pin.released == [1, 2, 3, 4]  # the last two stay (the floor)
    keep.settle(last_sent_id=6, acked=None)  # unknown progress: only the floor counts
    assert _Pin.released == [1, 2, 3, 4]
    keep.clear()
    assert _Pin.released == [1, 2, 3, 4, 5, 6]


def test_retention_without_progress_reports_releases_by_count(monkeypatch):
    monkeypatch.setattr(fb_openfilter.framebus, "Frame", _Pin)
    _Pin.released = []
    keep = fb_openfilter._Retention(hold=2)
    for msg_id in range(1, 6):
        keep.settle(last_sent_id=None, acked=None)
        keep.add([_Pin(msg_id)], last_sent_id=None)
    assert _Pin.released == [1, 2]  # settled before message 5 was added: 3 and 4 were the floor
    keep.settle(last_sent_id=None, acked=None)
    assert _Pin.released == [1, 2, 3]
