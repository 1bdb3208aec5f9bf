"""Streams between real processes: a spawned writer and readers checking every frame (content
derived from its frame_id, plus a CRC in its metadata), in latest and lossless mode; large
frames under a back-to-back writer; request/acknowledge ping-pong; writers in several processes;
handles attaching and detaching while frames flow.

Timeouts here are generous upper bounds so that nothing hangs, never performance thresholds."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import framebus

# Upper bound for any single wait in these tests.
LONG = 30.0

#: Reader code: checks every frame it gets and reports "ok <frames> <missed> <max gap>".
#: A frame must equal base ^ frame_id, carry crc32(payload) as metadata, have the sequence
#: number frame_id + 1, and frame ids must increase (lossless: by exactly one).
READER = """
import zlib
name, mode, last, verify_read = {name!r}, {mode!r}, {last}, {verify_read}
s = framebus.open(name, mode=mode)
base = np.arange(int(np.prod(s.shape)), dtype=np.uint32).reshape(s.shape)
out = np.empty(s.shape, s.dtype)
say("ready")
prev, frames, gaps, snapped = -1, 0, 0, -1
problems = []
# In latest mode a read() snapshot counts as seeing its frame (read_new then waits for a newer
# one), so a snapshot that lands on the last frame ends the loop too. Lossless readers consume
# only through read_new.
while prev < last and (mode == "lossless" or snapped < last):
    pub = s.read_new_publication(timeout={timeout}, out=out if frames % 2 else None)
    fid, arr = pub.frame_id, pub.payload
    if int.from_bytes(pub.meta, "little") != zlib.crc32(arr):
        problems.append(f"crc mismatch at frame {{fid}}")
    if not np.array_equal(arr ^ base, np.full(s.shape, fid, np.uint32)):
        problems.append(f"torn or wrong content at frame {{fid}}")
    if pub.seq != fid + 1:
        problems.append(f"frame {{fid}} has sequence {{pub.seq}}")
    if fid <= prev or (mode == "lossless" and fid != prev + 1):
        problems.append(f"frame {{fid}} after {{prev}}")
    if mode == "lossless" and pub.missed:
        problems.append(f"lossless reader missed {{pub.missed}}")
    gaps = max(gaps, fid - prev)
    prev = fid
    frames += 1
    if verify_read and frames % 7 == 0:
        snap = s.read_publication()
        snapped = snap.frame_id
        if not np.array_equal(snap.payload ^ base, np.full(s.shape, snap.frame_id, np.uint32)):
            problems.append(f"torn snapshot at frame {{snap.frame_id}}")
    if len(problems) > 5:
        break
for p in problems:
    say("problem", p)
say("ok", frames, s.total_missed, gaps)
s.close()
"""

#: Writer code: waits for "go", then writes frames 0..last (content base ^ k, CRC as metadata).
WRITER = """
import zlib
name, last = {name!r}, {last}
s = framebus.open(name)
base = np.arange(int(np.prod(s.shape)), dtype=np.uint32).reshape(s.shape)
frame = np.empty(s.shape, np.uint32)
say("ready")
hear()
for k in range(last + 1):
    np.bitwise_xor(base, np.uint32(k), out=frame)
    s.write(frame, frame_id=k, meta=zlib.crc32(frame).to_bytes(4, "little"), timeout={timeout})
say("wrote", s.write_sequence)
s.close()
"""


def _reader_result(child):
    lines = []
    while True:
        got = child.line()
        lines.append(got)
        if got.startswith("ok "):
            break
    problems = [l for l in lines if l.startswith("problem")]
    _, frames, missed, gap = lines[-1].split()
    return problems, int(frames), int(missed), int(gap)


@pytest.mark.parametrize("mode", ["latest", "lossless"])
def test_writer_and_two_readers_check_every_frame(name, spawn, mode):
    last = 1999 if mode == "latest" else 799
    with framebus.create(name, shape=(64, 256), dtype=np.uint32, slots=4, meta_capacity=8) as owner:
        # The second reader also takes read() snapshots between its read_new calls.
        readers = [spawn(READER.format(name=name, mode=mode, last=last, verify_read=v, timeout=LONG)) for v in (False, True)]
        writer = spawn(WRITER.format(name=name, last=last, timeout=LONG))
        for c in readers + [writer]:
            c.expect("ready")
        assert owner.attached == 4
        writer.send("go")
        assert writer.line() == f"wrote {last + 1}"
        writer.finish()
        for r, snapshots in zip(readers, (False, True)):
            problems, frames, missed, gap = _reader_result(r)
            assert not problems, problems
            r.finish()
            if mode == "lossless":
                assert (frames, missed, gap) == (last + 1, 0, 1)
            elif snapshots:
                # Frames passed over by a read() snapshot count neither as read nor as missed.
                assert 1 <= frames and frames + missed <= last + 1
            else:
                # Every frame was either read or counted as missed by read_new.
                assert 1 <= frames and frames + missed == last + 1
        assert owner.attached == 1
        assert owner.write_sequence == last + 1
        owner.unlink()


def test_lossless_and_latest_readers_side_by_side(name, spawn):
    """A lossless reader holds the writer back; a latest reader beside it still sees intact,
    increasing frames."""
    last = 499
    with framebus.create(name, shape=(32, 32), dtype=np.uint32, slots=3, meta_capacity=4) as owner:
        lossless = spawn(READER.format(name=name, mode="lossless", last=last, verify_read=False, timeout=LONG))
        latest = spawn(READER.format(name=name, mode="latest", last=last, verify_read=False, timeout=LONG))
        writer = spawn(WRITER.format(name=name, last=last, timeout=LONG))
        for c in (lossless, latest, writer):
            c.expect("ready")
        writer.send("go")
        writer.expect(f"wrote {last + 1}")
        for r, mode in ((lossless, "lossless"), (latest, "latest")):
            problems, frames, missed, _ = _reader_result(r)
            assert not problems, (mode, problems)
            assert frames + missed == last + 1
            if mode == "lossless":
                assert frames == last + 1
        for c in (lossless, latest, writer):
            c.finish()
        owner.unlink()


def test_large_frames_never_starve_a_slow_reader(name, spawn):
    """2000x2000 float32 frames written back to back: a reader that copies each frame and then
    takes its time still gets a new intact frame within its (generous) timeout every time,
    because the slot it copies from is pinned and the writer moves on to other slots."""
    shape = (2000, 2000)
    reads = 15
    with framebus.create(name, shape=shape, dtype=np.float32, slots=4) as owner:
        writer = spawn(
            f"""
            s = framebus.open({name!r})
            frame = np.empty({shape}, np.float32)
            say("ready")
            k = 0
            import threading
            stop = threading.Event()
            threading.Thread(target=lambda: (hear(), stop.set()), daemon=True).start()
            while not stop.is_set():
                frame.fill(k % (1 << 24))
                s.write(frame, frame_id=k, timeout={LONG})
                k += 1
            say("wrote", k)
            s.close()
            """
        )
        reader = spawn(
            f"""
            s = framebus.open({name!r})
            out = np.empty({shape}, np.float32)
            say("ready")
            prev = -1
            for i in range({reads}):
                pub = s.read_new_publication(timeout={LONG}, out=out)
                lo, hi = float(out.min()), float(out.max())
                if lo != hi or lo != pub.frame_id % (1 << 24) or pub.frame_id <= prev:
                    say("bad", pub.frame_id, lo, hi, prev)
                prev = pub.frame_id
                time.sleep(0.01)  # a slow consumer
            say("done", s.total_missed)
            s.close()
            """
        )
        reader.expect("ready")
        writer.expect("ready")
        got = reader.line(timeout=LONG * reads)
        assert got.startswith("done "), f"{got}; reader stderr:\n{reader.stderr}"
        writer.send("stop")
        wrote = writer.line()
        assert wrote.startswith("wrote ")
        reader.finish()
        writer.finish()
        # The writer really ran back to back while the reader read (frames were skipped).
        assert int(wrote.split()[1]) >= reads
        owner.unlink()


def test_ping_pong_never_misses_a_wake_up(name, spawn):
    """1000 request/acknowledge round trips across two processes: every request gets exactly its
    acknowledgement; nothing is skipped, repeated or lost (each wait has a generous timeout)."""
    rounds = 1000
    req = framebus.create(name + ".req", shape=(4,), dtype=np.int64)
    ack = framebus.create(name + ".ack", shape=(4,), dtype=np.int64)
    try:
        echo = spawn(
            f"""
            req = framebus.open({name + ".req"!r})
            ack = framebus.open({name + ".ack"!r})
            say("ready")
            for k in range({rounds}):
                v = req.read_new(timeout={LONG})
                if v[0] != k or req.missed:
                    say("bad", k, v.tolist(), req.missed)
                    break
                ack.write(v * 2 + 1, frame_id=k)
            say("done", req.total_missed)
            """
        )
        echo.expect("ready")
        with framebus.open(name + ".ack") as answers:
            for k in range(rounds):
                req.write(np.array([k, k + 1, k + 2, k + 3]), frame_id=k)
                pub = answers.read_new_publication(timeout=LONG)
                assert pub.frame_id == k and pub.payload.tolist() == [2 * k + 1, 2 * k + 3, 2 * k + 5, 2 * k + 7]
                assert pub.missed == 0
        echo.expect("done 0")
        echo.finish()
    finally:
        req.unlink()
        ack.unlink()


def test_writers_in_several_processes(name, spawn):
    """Three processes write to one stream at once (each write takes the cross-process lock);
    a lossless reader gets every frame intact, and each writer's frames in its own order."""
    per_writer = 300
    with framebus.create(name, shape=(128,), dtype=np.int64, slots=4) as owner, framebus.open(name, mode="lossless") as r:
        writers = [
            spawn(
                f"""
                s = framebus.open({name!r})
                say("ready")
                hear()
                for k in range({per_writer}):
                    fid = {w} * 1_000_000 + k
                    if k % 10 == 0:
                        with s.locked(timeout={LONG}):
                            s.write(np.full(128, fid, np.int64), frame_id=fid, timeout={LONG})
                    else:
                        s.write(np.full(128, fid, np.int64), frame_id=fid, timeout={LONG})
                say("wrote")
                s.close()
                """
            )
            for w in range(3)
        ]
        for w in writers:
            w.expect("ready")
        for w in writers:
            w.send("go")
        last = {0: -1, 1: -1, 2: -1}
        for i in range(3 * per_writer):
            pub = r.read_new_publication(timeout=LONG)
            fid = pub.frame_id
            assert (pub.payload == fid).all(), f"torn frame {fid}"
            assert pub.seq == i + 1
            w, k = divmod(fid, 1_000_000)
            assert k == last[w] + 1, f"writer {w}: frame {k} after {last[w]}"
            last[w] = k
        for w in writers:
            w.expect("wrote")
            w.finish()
        assert owner.write_sequence == 3 * per_writer
        assert not owner.lock_held() and owner.lock_owner is None
        owner.unlink()


def test_handles_attach_and_detach_while_frames_flow(name, spawn):
    """Reader-table churn: processes open and close handles in a loop while a writer writes;
    every read is intact and the table is empty again at the end."""
    with framebus.create(name, shape=(16, 16), dtype=np.int32, slots=3, max_readers=8) as owner:
        owner.write(np.full((16, 16), -1, np.int32))  # read() of a stream with no frame raises
        churners = [
            spawn(
                f"""
                say("ready")
                bad = 0
                for i in range(150):
                    with framebus.open({name!r}, mode="lossless" if i % 3 == 0 else "latest") as h:
                        v = h.read()
                        if v.min() != v.max():
                            bad += 1
                say("done", bad)
                """
            )
            for _ in range(3)
        ]
        for c in churners:
            c.expect("ready")
        k = 0
        running = list(churners)
        while running:
            owner.write(np.full((16, 16), k, np.int32), frame_id=k, timeout=LONG)
            k += 1
            running = [c for c in running if c.proc.poll() is None]
        for c in churners:
            c.expect("done 0")
            c.finish()
        assert owner.attached == 1
        assert framebus.stat(name).attached == 1
        # The writer was never held back by the lossless handles that came and went.
        owner.write(np.zeros((16, 16), np.int32), timeout=LONG)
        owner.unlink()
