"""The benchmark suite (``framebus-bench``, the package in benches/; ``framebus bench`` runs it
with the same arguments): every suite runs once at tiny sizes (``--quick --smoke``) and writes
well-formed JSON, Markdown and plots; bad input gets a clear error. No test here checks a speed:
benchmarks report figures, they never pass or fail on them."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from typing import Dict, List, Set

import pytest

from framebus import cli
from framebus_bench import SUITES, resolve
from framebus_bench.harness import summarize
from framebus_bench.records import ROLES, Metric, Row, SuiteResult, better_ratio, compute_ratios, load

#: A generous bound for the whole smoke run (it takes well under a minute on 2 cores).
SMOKE_TIMEOUT = 240

#: Optional peers: family name in the rows -> module that provides it.
PEERS = {"pyshmem": "pyshmem", "pyzmq": "zmq", "iceoryx2": "iceoryx2", "turbopipe": "turbopipe"}


def _ours() -> Set[str]:
    """Entries a benchmark run may create under /dev/shm and /tmp."""
    found = set()
    for d in ("/dev/shm", "/tmp"):
        try:
            for e in os.listdir(d):
                if e.startswith("bench-") or e.startswith("framebus.bench-"):
                    found.add(os.path.join(d, e))
        except OSError:
            pass
    return found


def _run(args: List[str], cwd: str, timeout: float = SMOKE_TIMEOUT) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-m", "framebus_bench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    """One smoke run of every suite with every output, shared by the tests below."""
    d = tmp_path_factory.mktemp("bench")
    before = _ours()
    proc = _run(["--quick", "--smoke", "--json", "run.json", "--markdown", "run.md", "--plot", "img"], str(d))
    after = _ours()
    return {"dir": str(d), "proc": proc, "leftovers": sorted(after - before)}


@pytest.mark.timeout(SMOKE_TIMEOUT + 60)
def test_smoke_run_succeeds(smoke: Dict[str, object]) -> None:
    proc = smoke["proc"]
    assert isinstance(proc, subprocess.CompletedProcess)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert f"{len(SUITES)} suite(s)" in proc.stderr
    # The terminal report: a table per suite and the W7 waterfall.
    for s in SUITES:
        assert s.id in proc.stdout
    assert "waterfall" in proc.stdout


def test_smoke_run_leaves_nothing_behind(smoke: Dict[str, object]) -> None:
    assert smoke["leftovers"] == []


def test_json_is_well_formed(smoke: Dict[str, object]) -> None:
    path = os.path.join(str(smoke["dir"]), "run.json")
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    assert raw["format"] == "framebus-bench/1"
    run = load(path)
    assert run.machine.get("cpus")
    assert "framebus" in run.versions and "numpy" in run.versions
    assert [s.id for s in run.suites] == [s.id for s in SUITES]
    for suite in run.suites:
        assert suite.title and suite.columns
        for row in suite.rows:
            assert row.role in ROLES
            assert row.primary in row.metrics, (suite.id, row.variant)
            for m in row.metrics.values():
                assert isinstance(m.value, float) or isinstance(m.value, int)
            for v in row.ratios.values():
                assert v is None or v > 0
        has_framebus = any(r.role == "framebus" for r in suite.rows)
        if suite.id == "W6":
            # framebus's own row needs framebus.pipe (another branch) and an FFmpeg binary.
            import framebus

            if hasattr(framebus, "pipe") and not any("no FFmpeg" in n for n in suite.notes):
                assert has_framebus
        elif suite.id == "W10":
            # GPU frames: skipped with a note where there is no GPU (or no torch with CUDA).
            assert has_framebus or any("W10 skipped" in n for n in suite.notes), suite.notes
        elif suite.id == "W12":
            # The chain to ROS 2: skipped with a note without PyAV, eclipse-zenoh or root (ip netns).
            assert has_framebus or any("W12 skipped" in n for n in suite.notes), suite.notes
        else:
            assert has_framebus, f"{suite.id} has no framebus row"
            assert all(math.isfinite(r.value()) for r in suite.rows if r.role == "framebus" and suite.id not in ("W7",)), suite.id
    w7 = next(s for s in run.suites if s.id == "W7")
    assert w7.waterfall and all(len(w["stages"]) == 3 for w in w7.waterfall)


def test_missing_peers_are_skipped_with_a_note(smoke: Dict[str, object]) -> None:
    run = load(os.path.join(str(smoke["dir"]), "run.json"))
    families = {r.family for s in run.suites for r in s.rows}
    notes = " ".join(n for s in run.suites for n in s.notes)
    for family, module in PEERS.items():
        if importlib.util.find_spec(module) is not None:
            assert family in families, f"{family} is installed but measured nowhere"
        else:
            assert "not installed" in notes, f"{family} is missing but no note says so"


def test_markdown_tables_are_well_formed(smoke: Dict[str, object]) -> None:
    with open(os.path.join(str(smoke["dir"]), "run.md"), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("Command: `framebus-bench --quick --smoke --json run.json")
    for s in SUITES:
        assert re.search(rf"^### {s.id} ", text, re.M), s.id
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---") or line.startswith("|--"):
            width = lines[i - 1].count(" | ")
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                assert lines[j].replace("\\|", "").count(" | ") == width, lines[j]
                j += 1


def test_plots_are_pngs_linked_from_the_markdown(smoke: Dict[str, object]) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed")
    d = str(smoke["dir"])
    pngs = sorted(os.listdir(os.path.join(d, "img")))
    for expected in ("w1w2_throughput.png", "w3_pingpong.png", "w4_latency.png", "w6_pipes.png", "w7_waterfall.png"):
        if expected == "w6_pipes.png" and not any(p.startswith("w6") for p in pngs):
            continue  # no FFmpeg here
        assert expected in pngs
    for p in pngs:
        with open(os.path.join(d, "img", p), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", p
    with open(os.path.join(d, "run.md"), encoding="utf-8") as f:
        links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", f.read())
    assert links
    for link in links:
        assert os.path.exists(os.path.join(d, link)), link


def test_compare_shows_the_change_of_each_row(smoke: Dict[str, object]) -> None:
    d = str(smoke["dir"])
    proc = _run(["W9", "--smoke", "--compare", "run.json", "--markdown", "again.md"], d, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "change against" in proc.stdout
    with open(os.path.join(d, "again.md"), encoding="utf-8") as f:
        text = f.read()
    assert "### Change against" in text
    assert re.search(r"\| W9 \| blocked [^|]+ \| framebus read_new", text)


# -- errors and helpers (no measuring) ------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["W42"], "unknown suite 'W42'"),
        (["--json", "/nonexistent-dir/x.json"], "does not exist"),
        (["--markdown", "/"], "is a directory"),
    ],
)
def test_bad_input_is_a_clear_error(args: List[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["bench", *args]) == 2  # a bad option value: a usage error
    err = capsys.readouterr().err
    assert "framebus bench: error:" in err and message in err


def test_a_missing_compare_file_is_a_runtime_error(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["bench", "--compare", "/nonexistent-dir/old.json"]) == 1  # as a missing stream or video
    err = capsys.readouterr().err
    assert "framebus bench: error:" in err and "does not exist" in err


def test_compare_refuses_a_foreign_json_file(tmp_path, capsys: pytest.CaptureFixture) -> None:
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"hello": 1}))
    assert cli.main(["bench", "W1", "--compare", str(p)]) == 1  # the file is not what it should be
    assert "not a framebus bench JSON file" in capsys.readouterr().err


def test_list_names_every_suite(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(s.id in out for s in SUITES)


def test_resolve_by_id_family_and_all() -> None:
    assert [s.id for s in resolve([])] == [s.id for s in SUITES]
    assert [s.id for s in resolve(["w3", "local"])] == ["W1", "W2", "W3"]
    assert len(resolve(["all", "W1"])) == len(SUITES)
    with pytest.raises(ValueError, match="choose from"):
        resolve(["nope"])


def test_statistics_and_ratios() -> None:
    st = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert st["median"] == 3.0 and st["min"] == 1.0 and st["max"] == 100.0 and st["n"] == 5
    assert math.isnan(summarize([])["median"])
    assert better_ratio(200.0, 100.0, True) == 2.0
    assert better_ratio(50.0, 100.0, False) == 2.0
    assert better_ratio(float("nan"), 1.0, True) is None
    suite = SuiteResult("WX", "t", "w")
    for variant, fam, role, v in [("fb", "framebus", "framebus", 10.0), ("ps", "pyshmem", "peer", 2.0), ("z", "pyzmq", "peer", 5.0), ("lim", "limit", "limit", 20.0)]:
        suite.rows.append(Row("c", variant, fam, role, {"hz": Metric(v, "Hz")}, "hz"))
    compute_ratios(suite)
    fb = suite.rows[0]
    assert fb.ratios == {"best_peer": 2.0, "pyshmem": 5.0, "limit": 0.5}
    assert fb.extra["best_peer"] == "z"


def test_sweep_reports_every_size_and_a_crossover_per_peer(smoke: Dict[str, object]) -> None:
    run = load(os.path.join(str(smoke["dir"]), "run.json"))
    sweep = next(s for s in run.suites if s.id == "sweep")
    assert sweep.cases() == ["64 B", "4 KiB"]
    for row in sweep.rows:
        assert {"p95", "gbps", "fps", "bytes"} <= set(row.extra), row.variant
        assert row.metrics["lat"].p99 is not None
    peers = {r.variant for r in sweep.rows if r.role != "framebus"}
    assert all(any(n.startswith(p + ":") for n in sweep.notes) for p in peers)
    assert os.path.exists(os.path.join(str(smoke["dir"]), "img", "sweep.png"))


def test_sweep_crossover_is_the_size_from_which_framebus_stays_ahead() -> None:
    from framebus_bench.records import Metric, Row
    from framebus_bench.sweep import crossovers, size_label

    suite = SuiteResult("sweep", "t", "w")
    for n, fb, peer in ((64, 5.0, 4.0), (1024, 3.0, 4.0), (4096, 5.0, 4.0), (1 << 20, 3.0, 4.0), (4 << 20, 3.0, 9.0)):
        for variant, role, v in (("fb", "framebus", fb), ("peer", "peer", peer)):
            suite.rows.append(Row(size_label(n), variant, variant, role, {"lat": Metric(v, "µs", False)}, "lat"))
    assert crossovers(suite) == {"peer": "1 MiB"}
    assert size_label(64) == "64 B" and size_label(32 << 20) == "32 MiB"


def test_live_progress_notes_keep_square_brackets():
    """A note such as "pip install './benches[peers]'" reaches a terminal whole (rich markup
    would swallow "[bench]")."""
    import io

    from rich.console import Console

    from framebus_bench.cli import _RichReporter

    out = io.StringIO()
    reporter = _RichReporter(Console(file=out, force_terminal=False, width=200), 1)
    reporter.note("W1", "iceoryx2: skipped (pip install './benches[peers]')")
    assert "./benches[peers]" in out.getvalue()


def test_openfilter_pipeline_splits_each_hop_where_the_transport_takes_and_gives_the_frame():
    """The OpenFilter waterfall's arithmetic (no OpenFilter needed): per hop, the sender's out,
    the encoder's in, the decoder's out and the receiver's in, in that order in ``t``."""
    from framebus_bench.openfilter_pipeline import BREAKDOWN, summarize as of_summarize

    ms = 1_000_000
    # [0, then per hop: out, enc, dec, in] with before/transport/after of 1/2/3, 4/5/6, 7/8/9 ms
    t, now = [0], 100 * ms
    for before, transport, after in ((1, 2, 3), (4, 5, 6), (7, 8, 9)):
        t += [now, now + before * ms, now + (before + transport) * ms, now + (before + transport + after) * ms]
        now += 50 * ms
    records = [{"i": 0, "warm": True, "t": [0] * 13, "ok": False}, {"i": 1, "warm": False, "t": t, "ok": True}]
    res = of_summarize(records, "framebus", "tiny", 1)
    assert res["frames"] == 1 and res["torn"] == 0  # the warm-up frame is not counted
    assert res["per_hop_ms"] == [6.0, 15.0, 24.0]
    assert [[part[k] for k in BREAKDOWN] for part in res["breakdown_ms"]] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]


# -- --load: busy processes beside a run -----------------------------------------------------------

#: A generous bound for a process to appear or go (not a speed check: only ends a hung test).
LOAD_WAIT = 60


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _busy_children(parent: int) -> List[int]:
    """The --load processes of ``parent`` (children whose command line is the busy loop)."""
    found = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", encoding="ascii") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{e}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"getppid" in cmd:
            found.append(int(e))
    return found


def _left(before: Set[str]) -> Set[str]:
    """Benchmark entries created since ``before`` whose creating process is gone (a run still
    going on beside this test is not this test's leftover)."""
    left = set()
    for path in _ours() - before:
        m = re.search(r"bench-(\d+)-", os.path.basename(path))
        if not (m and _alive(int(m.group(1)))):
            left.add(path)
    return left


def _wait_for(cond, what: str) -> None:
    import time

    deadline = time.monotonic() + LOAD_WAIT
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_load_processes_are_recorded_and_gone_afterwards(tmp_path) -> None:
    before = _ours()
    proc = _run(["W1", "--quick", "--smoke", "--load", "2", "--json", "run.json", "--markdown", "run.md"], str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "run.json", encoding="utf-8") as f:
        raw = json.load(f)
    load = raw["settings"]["load"]
    assert load["processes"] == 2 and len(load["pids"]) == 2
    assert "--load 2" in raw["command"]
    assert not [p for p in load["pids"] if _alive(p)]
    assert "Load: 2 busy process" in (tmp_path / "run.md").read_text(encoding="utf-8")
    assert _left(before) == set()
    # Without --load the run says so.
    proc = _run(["W1", "--quick", "--smoke", "--json", "idle.json"], str(tmp_path))
    with open(tmp_path / "idle.json", encoding="utf-8") as f:
        assert json.load(f)["settings"]["load"] is None


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_load_processes_never_outlive_the_run(tmp_path, sig: str) -> None:
    """Ctrl-C stops them with the run; a run killed outright leaves them to exit on their own."""
    import signal

    before = _ours()
    env = dict(os.environ, COLUMNS="200")
    bench = subprocess.Popen([sys.executable, "-m", "framebus_bench", "W2", "--load", "2"], cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(_busy_children(bench.pid)) == 2 or bench.poll() is not None, "the busy processes did not start")
        pids = _busy_children(bench.pid)
        assert len(pids) == 2 and bench.poll() is None
        bench.send_signal(getattr(signal, sig))
        bench.wait(timeout=LOAD_WAIT)
        _wait_for(lambda: not [p for p in pids if _alive(p)], f"busy processes left after {sig}")
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    if sig == "SIGINT":  # a killed run cannot clean up its streams; an interrupted one does
        assert _left(before) == set()
    else:
        for path in _left(before):  # what the killed run left: not this test's subject
            subprocess.run(["rm", "-rf", path], check=False)


#: Starts its arguments with SIGINT, SIGTERM and SIGHUP ignored, as a shell does for `nohup CMD &`.
_DEAF = "import os, signal, sys\nfor s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nos.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"


def test_load_processes_die_with_a_killed_run_whatever_their_signal_dispositions(tmp_path) -> None:
    """A run started deaf to Ctrl-C (and hang-ups), whose busy processes are stopped (so they
    cannot notice anything themselves), then killed outright: the kernel kills them with it."""
    import signal

    env = dict(os.environ, COLUMNS="200")
    bench = subprocess.Popen([sys.executable, "-c", _DEAF, "-m", "framebus_bench", "W2", "--load", "2"], cwd=str(tmp_path), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: List[int] = []
    try:
        _wait_for(lambda: len(_busy_children(bench.pid)) == 2 or bench.poll() is not None, "the busy processes did not start")
        pids = _busy_children(bench.pid)
        assert len(pids) == 2 and bench.poll() is None
        # Each closes its stdout once it is set up (after its prctl), before it spins.
        _wait_for(lambda: not [p for p in pids if os.path.exists(f"/proc/{p}/fd/1")], "the busy processes did not get going")
        bench.send_signal(signal.SIGINT)  # ignored: the run goes on
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        bench.kill()
        bench.wait(timeout=LOAD_WAIT)
        _wait_for(lambda: not [p for p in pids if _alive(p)], "stopped busy processes outlived the killed run")
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for p in pids:  # on failure: not left stopped behind
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    for path in _left(set()):  # what the killed run left: not this test's subject
        if f"bench-{bench.pid}-" in path:
            subprocess.run(["rm", "-rf", path], check=False)


def test_load_refuses_a_bad_count(tmp_path) -> None:
    for bad in ("-1", "65"):
        proc = _run(["W1", "--smoke", "--load", bad], str(tmp_path))
        assert proc.returncode == 2 and "--load takes 0 to 64" in proc.stderr
    proc = _run(["W1", "--smoke", "--load", "two"], str(tmp_path))
    assert proc.returncode == 2 and "--load" in proc.stderr
    from framebus_bench.load import Load

    with pytest.raises(ValueError, match="between 0 and 64"):
        Load(-1)
    with pytest.raises(TypeError):
        Load(2.0)  # type: ignore[arg-type]


def test_bench_without_the_suite_says_how_to_install_it(monkeypatch, capsys):
    """The suite is a package of its own (not in framebus's wheel): without it, `framebus bench`
    says how to install it and exits 1."""
    import builtins

    from framebus import cli

    real_import = builtins.__import__

    def no_suite(mod, *args, **kwargs):
        if mod.startswith("framebus_bench"):
            raise ModuleNotFoundError("No module named 'framebus_bench'", name="framebus_bench")
        return real_import(mod, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_suite)
    assert cli.main(["bench", "--list"]) == 1
    err = capsys.readouterr().err
    assert "benchmark suite is not installed" in err and "pip install -e ./benches" in err and "./benches[peers]" in err


def test_framebus_bench_hands_every_argument_to_the_driver(monkeypatch) -> None:
    """`framebus bench ARGS` is `framebus-bench ARGS`: the arguments reach the driver unparsed,
    in order, options before suites included, with the program name for its messages."""
    import framebus_bench.cli as driver

    got = []
    monkeypatch.setattr(driver, "main", lambda argv, prog: got.append((list(argv), prog)) or 7)
    argv = ["--json", "x.json", "W1", "--quick", "-h", "--load", "2", "sweep"]
    assert cli.main(["bench", *argv]) == 7
    assert got == [(argv, "framebus bench")]


def test_the_driver_is_not_part_of_framebus() -> None:
    """framebus's package (what its wheel ships) holds no benchmark driver: `framebus bench` only
    imports framebus_bench.cli's main, and declares no options of its own."""
    import framebus

    root = os.path.dirname(framebus.__file__)
    uses = []
    for d, _dirs, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                uses += [(os.path.relpath(path, root), m) for m in re.findall(r"(?:from|import) (framebus_bench[\w.]*)", text)]
    assert uses == [(os.path.join("commands", "bench.py"), "framebus_bench.cli")]
    with open(os.path.join(root, "commands", "bench.py"), encoding="utf-8") as fh:
        assert "add_argument(" not in fh.read()


def test_w10_runs_its_processes_behind_the_fake_gpu_door(tmp_path) -> None:
    """W10 needs a GPU to measure anything; behind the fake door (no torch) it still runs its
    writer and reader processes and checks every frame, which proves the suite's bookkeeping."""
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: W10 measures the GPU with it and skips the fake door")
    before = _ours()
    env = dict(os.environ, COLUMNS="200", PYTHONWARNINGS="default", FRAMEBUS_CUDA="fake")
    proc = subprocess.run([sys.executable, "-m", "framebus_bench", "W10", "--smoke", "--json", "w10.json"], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=SMOKE_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _ours() - before == set()
    (suite,) = load(os.path.join(str(tmp_path), "w10.json")).suites
    assert suite.id == "W10" and any("fake CUDA door" in n for n in suite.notes)
    got = {(r.extra["mode"], r.variant) for r in suite.rows}
    assert got == {(m, v) for m in ("lossless", "latest") for v in ("framebus loan + view", "framebus write + read_new")}
    for r in suite.rows:
        assert r.extra["torn"] == 0 and r.extra["disorder"] == 0 and r.extra["got"] > 0, (r.variant, r.extra)
        if r.extra["mode"] == "lossless":
            assert r.extra["lost"] == 0, (r.variant, r.extra)
        assert math.isfinite(r.value()) and math.isfinite(r.metrics["lat"].p99)
