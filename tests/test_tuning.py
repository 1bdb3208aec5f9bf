"""The copy plan (framebus.tuning, _native.copy_plan, ``framebus bench --explain``): visible,
overridable from the environment, and every kernel/thread choice copies frames exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Dict

import numpy as np
import pytest

import framebus
import framebus.tuning as tuning


def _plan_in_child(env: Dict[str, str], code: str = "import json, framebus.tuning as t; print(json.dumps(t.copy_plan(64 << 20)))") -> Dict:
    full = {k: v for k, v in os.environ.items() if k not in tuning.ENVIRONMENT}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_plan_says_what_each_copy_gets():
    plan = tuning.copy_plan(1 << 10)
    for key in ("arch", "features", "cpus", "write_large", "read", "threads", "shmem_thp", "huge_pages", "prefault", "notes", "explain", "helpers_learned"):
        assert key in plan
    assert plan["frame"]["write"] == "cached"  # small frames always go through memcpy
    assert plan["frame"]["threads"] == 1
    assert plan["helpers_learned"].startswith("cached copies: ")
    assert "write()" in tuning.explain() and "frame of 1,024 bytes" in tuning.explain(1024)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="nbytes"):
        tuning.copy_plan(-1)
    with pytest.raises(TypeError, match="nbytes"):
        tuning.copy_plan("big")  # type: ignore[arg-type]


def test_environment_overrides_and_ignores_nonsense():
    plan = _plan_in_child({"FRAMEBUS_COPY": "cached", "FRAMEBUS_COPY_THREADS": "2", "FRAMEBUS_PREFAULT": "off"})
    assert plan["write_large"] == "cached" and plan["read"] == "cached"
    assert plan["threads"] == 2 and plan["frame"]["threads"] == 2
    assert plan["prefault"] is False
    plan = _plan_in_child({"FRAMEBUS_COPY": "warp", "FRAMEBUS_COPY_THREADS": "-3"})
    assert plan["threads"] == "auto"
    assert sum("ignored" in n for n in plan["notes"]) == 2


CHECK = """
import json, sys, numpy as np, framebus
name = sys.argv[1]
shape = (1100, 1600, 10)  # 17.6 MB: above the thread and streaming thresholds
src = np.random.default_rng(1).integers(0, 255, shape, dtype=np.uint8)
with framebus.create(name, shape=shape, dtype="uint8", slots=2) as w:
    with framebus.open(name, mode="lossless") as r:
        out = np.empty_like(src)
        for i in range(3):
            src[0, 0, 0] = i
            w.write(src)
            r.read_new(timeout=5, out=out)
            assert np.array_equal(out, src)
            assert np.array_equal(r.read(), src)
    w.unlink()
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize("env", [
    {"FRAMEBUS_COPY": "stream", "FRAMEBUS_COPY_THREADS": "3"},
    {"FRAMEBUS_COPY": "cached", "FRAMEBUS_COPY_THREADS": "1", "FRAMEBUS_PREFAULT": "off"},
    {"FRAMEBUS_COPY": "auto", "FRAMEBUS_HUGEPAGES": "off"},
], ids=["stream-3-threads", "cached-1-thread", "auto"])
def test_every_choice_copies_frames_exactly(env):
    name = f"tuning-{uuid.uuid4().hex[:10]}"
    code = CHECK.replace("sys.argv[1]", repr(name))
    try:
        assert _plan_in_child(env, code) == {"ok": True}
    finally:
        if name in framebus._native.stream_names():
            framebus._native.unlink(name)


def test_bench_explain_prints_the_plan():
    out = subprocess.run([sys.executable, "-m", "framebus", "bench", "--explain"], capture_output=True, text=True, timeout=60, check=True)
    assert "copy plan" in out.stdout and "write()" in out.stdout and "huge pages" in out.stdout


def test_plan_keeps_a_waited_for_frame_in_the_cache_only_where_it_fits():
    code = "import json, framebus.tuning as t; print(json.dumps(t.copy_plan(1920 * 1080 * 3)))"
    plan = _plan_in_child({}, code)
    llc = plan["llc_bytes"]
    assert llc is None or (isinstance(llc, int) and llc > 0)
    frame = plan["frame"]
    if plan["write_auto"]:  # x86-64, FRAMEBUS_COPY unset
        assert frame["write"] == "stream"  # nobody waiting: streamed past the cache
        fits = llc is not None and 2 * frame["nbytes"] <= llc
        assert frame["write_reader_waiting"] == ("cached" if fits else "stream")
        assert "reader is waiting" in plan["explain"]
    forced = _plan_in_child({"FRAMEBUS_COPY": "stream"}, code)
    assert forced["write_auto"] is False
    if forced["write_large"] == "stream":
        assert forced["frame"]["write_reader_waiting"] == "stream"  # the override holds


WAITING = """
import json, threading, numpy as np, framebus
name = NAME
shape = (1080, 1920, 3)  # 6.2 MB: streamed unless a reader waits
rng = np.random.default_rng(2)
frames = [rng.integers(0, 255, shape, dtype=np.uint8) for _ in range(6)]
ok = []
with framebus.create(name, shape=shape, dtype="uint8", slots=4) as w:
    with framebus.open(name, mode="lossless") as r:
        out = np.empty(shape, np.uint8)
        def read():
            for f in frames:
                r.read_new(timeout=10, out=out)  # asleep in the wait when most frames come
                ok.append(bool(np.array_equal(out, f)))
        t = threading.Thread(target=read)
        t.start()
        for f in frames:
            w.write(f, timeout=10)
            import time; time.sleep(0.01)
        t.join(20)
    w.unlink()
print(json.dumps({"ok": ok}))
"""


@pytest.mark.parametrize("env", [{}, {"FRAMEBUS_COPY_THREADS": "2"}], ids=["auto", "2-threads"])
def test_frames_a_reader_waits_for_arrive_exactly(env):
    name = f"tuning-{uuid.uuid4().hex[:10]}"
    try:
        assert _plan_in_child(env, WAITING.replace("NAME", repr(name))) == {"ok": [True] * 6}
    finally:
        if name in framebus._native.stream_names():
            framebus._native.unlink(name)
