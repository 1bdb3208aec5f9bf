"""The soak: one writer and four readers (two lossless, two latest), each its own process, move
checksummed 1080p RGB frames for a while. Every frame read is checked; lossless readers must
see every frame; RSS (VmRSS and its private part RssAnon) is sampled from /proc every 0.5 s;
afterwards no /dev/shm entry and no file descriptor may be left over."""

from __future__ import annotations

import random
import time
import warnings
from typing import Any, Dict, List

import numpy as np

import framebus
from reliability_helpers import Pattern, Tally, ctx, fd_count, kill, shm_entries, unique_name, unlink_quietly

SHAPE_1080P = (1080, 1920, 3)
BOUND = 120.0


def _rss(pid: int) -> Dict[str, int]:
    out = {"VmRSS": 0, "RssAnon": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in out:
                    out[k] = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def soak_writer(name: str, shape: tuple, seconds: float, q: Any, seed: int) -> None:
    """Writes checksummed frames (write() and loans) for ``seconds``; reports count and fds."""
    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    fds_before = fd_count()
    s = framebus.open(name)
    pat = Pattern(shape)
    buf = np.empty(shape, np.uint8)
    fid = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fid += 1
        pat.frame(fid, 0, out=buf)
        meta = pat.meta(buf, fid)
        if rng.random() < 0.3:
            with s.loan(BOUND, frame_id=fid, meta=meta) as arr:
                arr[...] = buf
        else:
            s.write(buf, frame_id=fid, meta=meta, timeout=BOUND)
    arr = None  # a loaned array keeps the handle's mapping (and descriptor) alive, like a view
    s.close()
    q.put({"role": "writer", "written": fid, "fds_before": fds_before, "fds_after": fd_count()})


def soak_reader(name: str, mode: str, shape: tuple, stop: Any, q: Any, ready: Any, seed: int) -> None:
    """Reads and checks every new frame (copies, copies into a reused buffer, views) until
    ``stop`` and 1 s without frames; reports counts and fds."""
    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    fds_before = fd_count()
    pat = Pattern(shape)
    s = framebus.open(name, mode=mode)
    out = np.empty(shape, np.uint8)
    rep: Dict[str, Any] = {"role": "reader", "mode": mode, "checked": 0, "torn": 0, "lost": 0, "errors": [], "clear_errors": {}}
    last_seq, last_fid = s.last_seq, None
    ready.set()
    while True:
        k = rng.random()
        try:
            if k < 0.4:
                with s.wait_view(1.0) as f:
                    seq, fid, problem = f.seq, f.frame_id, pat.check(f.array, f.meta, f.frame_id)
            elif k < 0.7:
                pub = s.read_new_publication(timeout=1.0, out=out)
                seq, fid, problem = pub.seq, pub.frame_id, pat.check(out, pub.meta, pub.frame_id)
            else:
                pub = s.read_new_publication(timeout=1.0)
                seq, fid, problem = pub.seq, pub.frame_id, pat.check(pub.payload, pub.meta, pub.frame_id)
        except TimeoutError:
            if stop.is_set():
                break
            continue
        rep["checked"] += 1
        if problem is not None:
            rep["torn"] += 1
            if len(rep["errors"]) < 20:
                rep["errors"].append(problem)
        if mode == "lossless" and (seq != last_seq + 1 or (last_fid is not None and fid != last_fid + 1)):
            rep["lost"] += max(1, seq - last_seq - 1)
            if len(rep["errors"]) < 20:
                rep["errors"].append(f"lossless: seq {last_seq} -> {seq}, frame id {last_fid} -> {fid}")
        last_seq, last_fid = seq, fid
    rep["last_seq"] = last_seq
    rep["missed"] = s.total_missed
    s.close()
    rep["fds_before"], rep["fds_after"] = fds_before, fd_count()
    q.put(rep)


def soak(seconds: float, shape: tuple = SHAPE_1080P, slots: int = 8, seed: int = 0) -> Tally:
    """Runs the soak; ``Tally.extra`` holds frames written, RSS samples (KiB) and leaks."""
    t = Tally("soak")
    t0 = time.monotonic()
    c = ctx()
    shm_before = shm_entries()
    parent_fds = fd_count()
    name = unique_name("soak")
    w = framebus.create(name, shape=shape, dtype=np.uint8, slots=slots, meta_capacity=64)
    stop, q = c.Event(), c.Queue()
    procs: List[Any] = []
    rng = random.Random(seed)
    samples: Dict[str, List[Dict[str, int]]] = {}
    try:
        for i, mode in enumerate(["lossless", "lossless", "latest", "latest"]):
            ready = c.Event()
            p = c.Process(target=soak_reader, args=(name, mode, shape, stop, q, ready, rng.randrange(1 << 30)), daemon=True)
            p.start()
            procs.append((f"reader{i}-{mode}", p))
            if not ready.wait(BOUND):
                t.errors.append("a soak reader did not start")
        wp = c.Process(target=soak_writer, args=(name, shape, seconds, q, rng.randrange(1 << 30)), daemon=True)
        wp.start()
        procs.insert(0, ("writer", wp))
        while wp.is_alive() and time.monotonic() - t0 < seconds + BOUND:
            for label, p in procs:
                if p.pid:
                    samples.setdefault(label, []).append(_rss(p.pid))
            time.sleep(0.5)
        wp.join(BOUND)
        stop.set()
        reports = []
        for _ in procs:
            try:
                reports.append(q.get(timeout=BOUND))
            except Exception:  # noqa: BLE001 - queue.Empty
                t.errors.append("a soak process did not report")
        for _, p in procs:
            p.join(BOUND)
            if p.exitcode != 0:
                t.errors.append(f"soak process exit code {p.exitcode}")
                kill(p)
        final = w.write_sequence
        written = 0
        for r in reports:
            if r["role"] == "writer":
                written = r["written"]
            else:
                t.add_reader(r)
                if r["mode"] == "lossless" and r["last_seq"] != final:
                    t.lost += max(0, final - r["last_seq"])
                    t.errors.append(f"lossless reader ended at {r['last_seq']} of {final}")
            if r["fds_after"] != r["fds_before"]:
                t.errors.append(f"{r['role']} {r.get('mode', '')}: {r['fds_before']} fds before, {r['fds_after']} after")
        if written != final:
            t.errors.append(f"writer wrote {written} frames, stream sequence is {final}")
        t.extra.update(
            frames_written=written,
            bytes_written=written * int(np.prod(shape)),
            latest_missed=[r.get("missed", 0) for r in reports if r.get("mode") == "latest"],
            lossless_read=[r.get("checked", 0) for r in reports if r.get("mode") == "lossless"],
        )
    finally:
        for _, p in procs:
            kill(p)
            p.close()
        w.close()
        unlink_quietly(name)
        q.close()
        q.join_thread()
    del procs, q, stop
    t.extra["parent_fds_leaked"] = fd_count() - parent_fds
    t.extra["shm_leaked"] = sorted(n for n in shm_entries() - shm_before if n.startswith("framebus.rel-"))
    t.extra["rss"] = _rss_summary(samples)
    t.seconds = time.monotonic() - t0
    return t


def _rss_summary(samples: Dict[str, List[Dict[str, int]]]) -> Dict[str, Dict[str, int]]:
    """Per process: peak VmRSS; the highest VmRSS/RssAnon of the second quarter of the run
    (after warm-up) and the lowest of the last quarter. A leak lifts the whole last quarter
    above the second; a frame-sized allocation coming and going does not."""
    out = {}
    for label, series in samples.items():
        series = [s for s in series if s["VmRSS"]]
        n = len(series)
        if n < 8:
            continue
        warm, tail = series[n // 4: n // 2], series[-(n // 4):]
        out[label] = {
            "peak_rss_kb": max(s["VmRSS"] for s in series),
            "rss_after_warmup_kb": max(s["VmRSS"] for s in warm),
            "rss_end_kb": min(s["VmRSS"] for s in tail),
            "anon_after_warmup_kb": max(s["RssAnon"] for s in warm),
            "anon_end_kb": min(s["RssAnon"] for s in tail),
            "samples": n,
        }
    return out


def rss_growth_problems(rss: Dict[str, Dict[str, int]], slack_kb: int = 16384) -> List[str]:
    """Processes whose private memory (RssAnon) or RSS grew after warm-up by more than
    ``slack_kb`` (16 MiB: a few frames' worth; a leak of one frame per iteration would be GBs)."""
    problems = []
    for label, r in rss.items():
        if r["anon_end_kb"] - r["anon_after_warmup_kb"] > slack_kb:
            problems.append(f"{label}: RssAnon {r['anon_after_warmup_kb']} -> {r['anon_end_kb']} KiB")
        if r["rss_end_kb"] - r["rss_after_warmup_kb"] > slack_kb * 4:
            problems.append(f"{label}: VmRSS {r['rss_after_warmup_kb']} -> {r['rss_end_kb']} KiB")
    return problems
