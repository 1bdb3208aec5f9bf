"""Runs the reliability suites (docs/reliability.md) and prints one summary table.

    python scripts/stress.py --short      # about the CI lengths: 10 kills per scenario, 30 s soak
    python scripts/stress.py --long       # make stress: 200 kills per scenario, 10 min soak, 1000s of fuzz cases

The suites live in tests/ (reliability_crash.py, reliability_soak.py, test_reliability_fuzz.py
and the Rust proptest file crates/framebus/tests/fuzz_header.rs); this script runs the same
code with other lengths, writes everything to a JSON file and exits non-zero if anything was
torn, lost, crashed, hung or leaked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

LENGTHS = {
    "short": {"iters": 10, "soak": 30.0, "py_fuzz": 30, "rust_fuzz": 64, "kept_iters": 500},
    "long": {"iters": 200, "soak": 600.0, "py_fuzz": 400, "rust_fuzz": 5000, "kept_iters": 20000},
}


def rust_fuzz(cases: int) -> Dict[str, Any]:
    """The proptest suite with ``cases`` cases per property."""
    env = dict(os.environ, FRAMEBUS_FUZZ_CASES=str(cases), RUST_BACKTRACE="0")
    t0 = time.monotonic()
    p = subprocess.run(["cargo", "test", "-q", "-p", "framebus", "--release", "--test", "fuzz_header"], cwd=ROOT, env=env, capture_output=True, text=True)
    out = p.stdout + p.stderr
    m = re.search(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", out)
    passed, failed, ignored = (int(x) for x in m.groups()) if m else (0, 1, 0)
    # two random properties run `cases` cases each (damaged fields/tables, random noise); one
    # control property opens undamaged segments
    return {
        "cases": 2 * cases if p.returncode == 0 else 0,
        "control_cases": cases,
        "tests_passed": passed,
        "tests_failed": failed,
        "tests_ignored_known_bugs": ignored,
        "returncode": p.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "tail": out[-2000:] if p.returncode else "",
    }


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--short", action="store_true", help="CI lengths (default)")
    g.add_argument("--long", action="store_true", help="the long run of make stress")
    ap.add_argument("--iters", type=int, help="kills per crash scenario")
    ap.add_argument("--soak-seconds", type=float)
    ap.add_argument("--py-fuzz", type=int, help="damaged segments opened from Python")
    ap.add_argument("--rust-fuzz", type=int, help="proptest cases per property")
    ap.add_argument("--only", nargs="*", default=None, help="crash, soak, pyfuzz, rustfuzz, kept (default: all)")
    ap.add_argument("--seed", type=int, help="FRAMEBUS_STRESS_SEED (a random one is printed otherwise)")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench-out", "stress.json"))
    args = ap.parse_args(argv)
    length = "long" if args.long else "short"
    cfg = dict(LENGTHS[length])
    for k, v in (("iters", args.iters), ("soak", args.soak_seconds), ("py_fuzz", args.py_fuzz), ("rust_fuzz", args.rust_fuzz)):
        if v is not None:
            cfg[k] = v
    if args.seed is not None:
        os.environ["FRAMEBUS_STRESS_SEED"] = str(args.seed)
    only = set(args.only or ["crash", "soak", "pyfuzz", "rustfuzz", "kept"])

    import kept_loan_children
    import reliability_crash
    import reliability_soak
    import test_reliability_fuzz
    from reliability_helpers import ctx, fd_count, seed_for, shm_entries

    ctx()
    seed_for("")  # fixes FRAMEBUS_STRESS_SEED for the whole run
    seed = os.environ["FRAMEBUS_STRESS_SEED"]
    print(f"framebus stress ({length}): {cfg}, FRAMEBUS_STRESS_SEED={seed}", flush=True)
    shm_before, fds_before = shm_entries(), fd_count()
    started = time.monotonic()
    report: Dict[str, Any] = {"length": length, "config": cfg, "seed": int(seed), "host": platform.node(), "cpus": os.cpu_count(),
                              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "crash": [], "soak": None, "py_fuzz": None, "rust_fuzz": None, "kept": None}
    failures: List[str] = []

    if "crash" in only:
        for scenario in reliability_crash.SCENARIOS:
            t = reliability_crash.run(scenario, cfg["iters"], seed_for(scenario))
            print(f"  {t.summary()}  [{t.seconds:.0f} s]", flush=True)
            report["crash"].append(t.as_dict())
            if not t.ok():
                failures.append(f"crash/{scenario}: torn={t.torn} lost={t.lost} errors={t.errors[:3]}")
    if "soak" in only:
        t = reliability_soak.soak(cfg["soak"], seed=seed_for("soak"))
        problems = reliability_soak.rss_growth_problems(t.extra["rss"])
        t.extra["rss_problems"] = problems
        print(f"  {t.summary()}  written={t.extra.get('frames_written')} rss={t.extra['rss']}", flush=True)
        report["soak"] = t.as_dict()
        if not t.ok() or problems or t.extra["shm_leaked"] or t.extra["parent_fds_leaked"]:
            failures.append(f"soak: torn={t.torn} lost={t.lost} errors={t.errors[:3]} rss={problems} shm={t.extra['shm_leaked']} fds={t.extra['parent_fds_leaked']}")
    if "pyfuzz" in only:
        t0 = time.monotonic()
        r = test_reliability_fuzz.fuzz_cases(cfg["py_fuzz"], seed_for("pyfuzz"))
        r["seconds"] = round(time.monotonic() - t0, 1)
        print(f"  python fuzz: {r['cases']} cases, {r['crashes']} crashes, {r['hangs']} hangs, unclear={r['unclear'][:3]}  [{r['seconds']} s]", flush=True)
        report["py_fuzz"] = r
        if r["unclear"] or r["crashes"] or r["hangs"]:
            failures.append(f"python fuzz: {r['unclear'][:3]}")
    if "rustfuzz" in only:
        r = rust_fuzz(cfg["rust_fuzz"])
        print(f"  rust fuzz (proptest): {r['cases']} cases, returncode {r['returncode']}  [{r['seconds']} s]", flush=True)
        report["rust_fuzz"] = r
        if r["returncode"]:
            failures.append(f"rust fuzz failed: {r['tail'][-500:]}")

    if "kept" in only:
        r = kept_loan_children.run_writers_keeping_loans(f"rel-kept-{os.getpid()}", writers=4, iterations=cfg["kept_iters"], keep=3)
        print(f"  kept loans: {r['writers']} writers x {r['iterations']} writes on {r['slots']} slots, {r['reads']} reads, "
              f"torn {r['torn']}, kept arrays changed {r['kept_arrays_changed']}, errors {r['errors'][:3]}  [{r['seconds']} s]", flush=True)
        report["kept"] = r
        if r["errors"] or r["torn"] or r["kept_arrays_changed"] or r["writes_reported"] != r["writes_in_stream"]:
            failures.append(f"kept loans: {r}")

    import gc

    gc.collect()
    leaked_shm = sorted(n for n in shm_entries() - shm_before if n.startswith("framebus.rel-"))
    report["leaked_segments"] = leaked_shm
    report["leaked_fds"] = fd_count() - fds_before
    report["seconds"] = round(time.monotonic() - started, 1)
    report["failures"] = failures
    if leaked_shm:
        failures.append(f"leaked segments: {leaked_shm}")
    print()
    print(table(report))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"\nJSON: {args.json}")
    for line in failures:
        print(f"FAILED: {line}")
    return 1 if failures else 0


def table(r: Dict[str, Any]) -> str:
    """The summary table (Markdown, as pasted into docs/reliability.md)."""
    rows = [("suite", "kills survived", "frames checked", "frames lost", "corrupt frames", "errors", "time")]
    for t in r["crash"]:
        rows.append((f"crash: {t['scenario']}", t["kills"], t["frames_checked"], t["lost"], t["torn"], len(t["errors"]), f"{t['seconds']:.0f} s"))
    if r["crash"]:
        c = r["crash"]
        rows.append(("**crash matrix total**", sum(t["kills"] for t in c), sum(t["frames_checked"] for t in c), sum(t["lost"] for t in c),
                     sum(t["torn"] for t in c), sum(len(t["errors"]) for t in c), f"{sum(t['seconds'] for t in c):.0f} s"))
    s = r["soak"]
    if s:
        rows.append((f"soak 1080p, 1 writer + 2 lossless + 2 latest, {r['config']['soak']:.0f} s", "-", s["frames_checked"], s["lost"], s["torn"],
                     len(s["errors"]), f"{s['seconds']:.0f} s"))
    k = r.get("kept")
    if k:
        rows.append((f"kept loans: {k['writers']} writers keeping loans, {k['slots']} slots", "-", k["reads"],
                     k["writes_reported"] - k["writes_in_stream"], k["torn"] + k["kept_arrays_changed"], len(k["errors"]), f"{k['seconds']:.0f} s"))
    lines = ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    lines.insert(1, "|" + "---|" * len(rows[0]))
    extra = []
    if s:
        peak = max((v["peak_rss_kb"] for v in s["extra"]["rss"].values()), default=0)
        extra.append(f"soak: {s['extra'].get('frames_written')} frames written ({s['extra'].get('bytes_written', 0) / 1e9:.1f} GB), "
                     f"peak RSS {peak / 1024:.0f} MiB (largest process), RSS problems {len(s['extra'].get('rss_problems', []))}, "
                     f"leaked segments {len(s['extra']['shm_leaked'])}, leaked fds {s['extra']['parent_fds_leaked']}")
    if r["py_fuzz"]:
        p = r["py_fuzz"]
        extra.append(f"python fuzz: {p['cases']} damaged segments, {p['crashes']} crashes, {p['hangs']} hangs, {len(p['unclear'])} unclear errors")
    if r["rust_fuzz"]:
        p = r["rust_fuzz"]
        extra.append(f"rust fuzz (proptest): {p['cases']} damaged segments + {p['control_cases']} control cases, "
                     f"{p['tests_failed']} failed, {p['tests_ignored_known_bugs']} ignored (known bugs)")
    extra.append(f"after the run: leaked segments {len(r['leaked_segments'])}, leaked fds {r['leaked_fds']}; total {r['seconds']:.0f} s")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {e}" for e in extra)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
