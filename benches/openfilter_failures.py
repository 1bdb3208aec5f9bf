"""Replays OpenFilter's shared-memory failure modes against OpenFilter SHM and OpenFilter on
framebus, with the same filters (tests/openfilter_filters.py: every image carries its CRC-32):

- keep: a filter keeps every frame it receives and re-checks them all on each new one;
- two-topics: the same with two topics per message (OpenFilter SHM shares one pool between them);
- restart: the sender is killed with SIGKILL and restarted under the same id while the receiver
  runs; counts frames whose pixels do not match their data (stale or torn) and segments left;
- non-contiguous: the source sends a strided view (every other column).

Usage: python benches/openfilter_failures.py [--json FILE]
Prints one line per scenario and transport."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
import warnings

warnings.simplefilter("ignore")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("SCARF_NO_ANALYTICS", "true")
os.environ.setdefault("LOG_LEVEL", "error")
os.environ.setdefault("LOG_PATH", "false")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def _segments(prefix: str) -> list:
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


def scenario(kind: str, transport: str) -> dict:
    """Runs one scenario in this (fresh) process and returns what it found."""
    if transport == "openfilter-shm":
        os.environ["OPENFILTER_SHM_ENABLE"] = "1"
    else:
        import framebus.integrations.openfilter as fb_openfilter

        fb_openfilter.enable()
    import openfilter_filters as f
    from openfilter.filter_runtime import Filter

    _lines, _wait = f.lines, f.wait_until

    work = tempfile.mkdtemp(prefix="fb-off-")
    out = os.path.join(work, "out.jsonl")
    addr = f"ipc://{work}/a"
    sid = f"replay{os.getpid()}"
    src = {"id": sid, "outputs": addr, "outputs_jpg": False, "interval": 0.03}
    if kind in ("keep", "two-topics"):
        topics = {"main": (120, 160, 3)} if kind == "keep" else {"main": (120, 160, 3), "thumb": (30, 40, 3)}
        n = 12
        stages = [(f.Source, dict(src, frames=n, topics=topics)), (f.Keeper, {"sources": addr, "results": out})]
        runner = Filter.Runner(stages, exit_time=5, sig_stop=False)
        _wait(lambda: len(_lines(out)) >= n)
        runner.stop()
        got = _lines(out)
        first_bad = next((r["kept"] for r in got if not r["ok"]), None)
        return {"received": len(got), "kept frames intact at the end": bool(got) and got[-1]["ok"], "first change seen after": first_bad}
    if kind == "restart":
        runner = Filter.Runner([(f.Sink, {"sources": addr, "results": out})], exit_time=5, sig_stop=False)
        ctx = mp.get_context("fork")
        first = ctx.Process(target=f.Source.run, args=(dict(src, frames=10_000, topics={"main": (240, 320, 3)}, generation=1),))
        first.start()
        _wait(lambda: len(_lines(out)) >= 5)
        os.kill(first.pid, signal.SIGKILL)
        first.join()
        leaked = _segments(f"of-{sid}") + _segments(f"framebus.of.{sid}")
        mark = len(_lines(out))
        second = ctx.Process(target=f.Source.run, args=(dict(src, frames=10_000, topics={"main": (240, 320, 3)}, generation=2),))
        second.start()
        _wait(lambda: len(_lines(out)) >= mark + 10, 30)
        second.terminate()
        second.join()
        runner.stop()
        time.sleep(0.5)
        got = _lines(out)[mark:]
        return {
            "received after restart": len(got),
            "frames not matching their data": sum(1 for r in got if not r["ok"]),
            "segments after SIGKILL": len(leaked),
            "segments left at the end": len(_segments(f"of-{sid}") + _segments(f"framebus.of.{sid}")),
        }
    if kind == "non-contiguous":

        class Strided(f.Source):
            def process(self, frames):
                out_ = super().process(frames)
                if out_:
                    from openfilter.filter_runtime import Frame

                    img = out_["main"].image[:, ::2]
                    out_["main"] = Frame(img, dict(out_["main"].data, crc=f.crc(img)), "RGB")
                return out_

        stages = [(Strided, dict(src, frames=5, topics={"main": (120, 160, 3)})), (f.Sink, {"sources": addr, "results": out})]
        runner = Filter.Runner(stages, exit_time=5, sig_stop=False)
        _wait(lambda: len(_lines(out)) >= 5, 20)
        runner.stop()
        got = _lines(out)
        return {"received": len(got), "intact": sum(1 for r in got if r["ok"])}
    raise ValueError(kind)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--one", nargs=2, metavar=("SCENARIO", "TRANSPORT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(scenario(*args.one)))
        return 0
    import subprocess

    results = []
    for kind in ("keep", "two-topics", "restart", "non-contiguous"):
        for transport in ("openfilter-shm", "framebus"):
            proc = subprocess.run([sys.executable, __file__, "--one", kind, transport], capture_output=True, text=True, timeout=300)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            found = json.loads(lines[-1]) if lines else {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
            results.append({"scenario": kind, "transport": transport, **found})
            print(f"{kind:<15} {transport:<15} {json.dumps(found)}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
