//! The read path: pin a committed slot, copy or view it, unpin; and the futex wait for a frame
//! newer than the last one a handle saw.
//!
//! Pinning sets this handle's bit for the slot and then re-checks the slot state; the writer
//! stores `WRITING` and then re-checks the pin bits (see writer.rs). A pinned slot is never
//! rewritten, so a reader copying a large frame is never overtaken, whatever the writer's pace.

use std::sync::Arc;
use std::time::Instant;

use super::handle::{PinCounts, ReaderMode, Stream};
use super::layout::{slot_state, state_seq, unpack_published, WRITING};
use super::protocol::{self, AfterFailedPin};
use crate::error::{Error, Result};
use crate::sync::atomic::Ordering;
use crate::sync::deadline::Deadline;
use crate::sync::futex;

/// How long a reader waiting for a rewrite of the newest frame's slot sleeps before it looks
/// again (a claim that meets a pin backs off without waking anyone).
const REWRITE_SLICE: std::time::Duration = std::time::Duration::from_millis(10);

/// A committed frame, pinned while the caller looks at it.
pub struct FrameRef<'a> {
    /// Sequence number (1 for the first frame).
    pub seq: u64,
    /// Slot index it lives in.
    pub slot: u32,
    /// Write time, ns since the Unix epoch.
    pub timestamp_ns: u64,
    /// User frame id.
    pub frame_id: i64,
    /// The frame's bytes.
    pub payload: &'a [u8],
    /// The frame's metadata bytes.
    pub meta: &'a [u8],
}

impl Stream {
    /// Pins `slot` if it still holds committed frame `seq`.
    pub(super) fn pin(&self, slot: u32, seq: u64) -> bool {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let held = pins.count[slot as usize] > 0;
        if !protocol::pin(&self.slot(slot).state, &self.my_entry().pinned, 1 << slot, seq, held) {
            if !held {
                drop(pins);
                self.wake_writer();
            }
            return false;
        }
        self.count_pin(&mut pins, slot);
        true
    }

    /// Counts one more pin of `slot` (its shared bit is set).
    fn count_pin(&self, pins: &mut PinCounts, slot: u32) {
        pins.count[slot as usize] += 1;
    }

    /// Notes when a pin that outlives the call (a view, a kept loan) began, for monitors: per
    /// slot, and for the handle if it had none. Pins held only while a frame is copied are not
    /// timed (no clock read on the copying paths).
    fn time_pin(&self, slot: u32) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        if pins.since_ns[slot as usize] == 0 {
            let now = super::handle::now_ns();
            pins.since_ns[slot as usize] = now;
            let e = self.my_entry();
            if e.pinned_since_ns.load(Ordering::Relaxed) == 0 {
                e.pinned_since_ns.store(now, Ordering::Relaxed);
            }
        }
    }

    /// Pins `slot`, which this handle has claimed for writing (the write lock is held and the
    /// slot is in `WRITING` state, so no other writer can take it; the pin bit is visible to
    /// every later claim, which happens under the lock after this thread releases it).
    pub(super) fn pin_own_claim(&self, slot: u32) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        if pins.count[slot as usize] == 0 {
            self.my_entry().pinned.fetch_or(1 << slot, Ordering::SeqCst);
        }
        self.count_pin(&mut pins, slot);
    }

    /// How many pins this handle holds on `slot`.
    pub(super) fn pin_count(&self, slot: u32) -> u32 {
        self.pins.lock().unwrap_or_else(|p| p.into_inner()).count[slot as usize]
    }

    /// Drops one pin of `slot`.
    pub(super) fn unpin(&self, slot: u32) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let i = slot as usize;
        if pins.count[i] == 0 {
            return;
        }
        pins.count[i] -= 1;
        if pins.count[i] == 0 {
            pins.since_ns[i] = 0;
            let e = self.my_entry();
            protocol::unpin(&e.pinned, 1 << slot);
            // The age monitors show: that of the oldest pin this handle still holds.
            let mut left = e.pinned.load(Ordering::Relaxed);
            let mut oldest = 0u64;
            while left != 0 {
                let since = pins.since_ns[left.trailing_zeros() as usize];
                if since != 0 && (oldest == 0 || since < oldest) {
                    oldest = since;
                }
                left &= left - 1;
            }
            if e.pinned_since_ns.load(Ordering::Relaxed) != oldest {
                e.pinned_since_ns.store(oldest, Ordering::Relaxed);
            }
            drop(pins);
            self.wake_writer();
        }
    }

    fn frame_ref(&self, slot: u32, seq: u64) -> FrameRef<'_> {
        let d = self.slot(slot);
        let len = d.payload_len.load(Ordering::Relaxed).min(self.geometry.frame_bytes) as usize;
        let meta_len = d.meta_len.load(Ordering::Relaxed).min(self.geometry.meta_capacity) as usize;
        let base = self.payload(slot);
        // SAFETY: the slot is pinned (or, lossless, unconsumed), so the writer does not touch it
        // while the FrameRef lives; both ranges lie inside the slot's stride in the mapping.
        let (payload, meta) = unsafe {
            (std::slice::from_raw_parts(base, len), std::slice::from_raw_parts(base.add(self.geometry.frame_bytes as usize), meta_len))
        };
        FrameRef {
            seq,
            slot,
            timestamp_ns: d.timestamp_ns.load(Ordering::Relaxed),
            frame_id: d.frame_id.load(Ordering::Relaxed) as i64,
            payload,
            meta,
        }
    }

    pub(super) fn published(&self) -> Result<(u64, u32)> {
        let (seq, slot) = unpack_published(self.header().published.load(Ordering::SeqCst));
        if slot >= self.geometry.slot_count {
            return Err(Error::Corrupt {
                name: self.name.clone(),
                path: crate::shm::name::path(&self.name),
                reason: format!("published slot {slot} out of range"),
            });
        }
        Ok((seq, slot))
    }

    /// Sequence number of the newest committed frame (0 before the first write).
    pub fn latest_seq(&self) -> u64 {
        unpack_published(self.header().published.load(Ordering::SeqCst)).0
    }

    /// (sequence, timestamp ns, frame id) of the newest committed frame, read consistently;
    /// (0, 0, 0) before the first write.
    pub fn latest_record(&self) -> Result<(u64, u64, i64)> {
        let mut stuck = Stuck::default();
        loop {
            let (seq, slot) = self.published()?;
            if seq == 0 {
                return Ok((0, 0, 0));
            }
            let d = self.slot(slot);
            let record = (seq, d.timestamp_ns.load(Ordering::Acquire), d.frame_id.load(Ordering::Acquire) as i64);
            if d.state.load(Ordering::SeqCst) == slot_state(seq, false) {
                return Ok(record);
            }
            match self.await_rewrite(seq, slot) {
                Ok(true) => continue,
                Ok(false) => {}
                // The newest frame went with a write that was given up: its number stays.
                Err(Error::NewestLost { .. }) => return Ok((seq, 0, 0)),
                Err(e) => return Err(e),
            }
            stuck.check(self, seq, slot)?;
        }
    }

    /// The error for a `published` word that names a frame its slot does not hold.
    fn inconsistent(&self, seq: u64, slot: u32) -> Error {
        Error::Corrupt {
            name: self.name.clone(),
            path: crate::shm::name::path(&self.name),
            reason: format!("the newest frame is recorded as sequence {seq} in slot {slot}, but that slot holds another frame"),
        }
    }

    /// Sequence of the newest frame this handle has seen.
    /// (A handle inherited through fork() registers its own entry here first, see owner.rs;
    /// should the table be full, this is the position the handle will resume from.)
    pub fn seen_seq(&self) -> u64 {
        match (self.mode, self.adopt()) {
            (ReaderMode::Lossless, Ok(index)) if index != u32::MAX => self.reader(index).consumed.load(Ordering::SeqCst),
            _ => self.position(),
        }
    }

    /// Pins the newest committed frame; returns (slot, seq). Errors with `Empty` before the
    /// first write, and with `NewestLost` while the newest frame is gone with a rewrite of its
    /// slot that was given up (see `await_rewrite`).
    fn pin_newest(&self) -> Result<(u32, u64)> {
        self.adopt()?;
        let mut stuck = Stuck::default();
        loop {
            let (seq, slot) = self.published()?;
            if seq == 0 {
                return Err(Error::Empty { name: self.name.clone() });
            }
            if self.pin(slot, seq) {
                let e = self.my_entry();
                e.reads.fetch_add(1, Ordering::Relaxed);
                if self.mode == ReaderMode::Latest {
                    e.consumed.fetch_max(seq, Ordering::Relaxed);
                }
                return Ok((slot, seq));
            }
            if self.await_rewrite(seq, slot)? {
                continue;
            }
            stuck.check(self, seq, slot)?;
            std::hint::spin_loop();
        }
    }

    /// After a failed pin of the newest frame (`seq` in `slot`): when its writer is rewriting
    /// that slot (a copy write may reuse it once every reader has taken the frame, writer.rs),
    /// waits until the write is published or given up and returns true (look again).
    /// `Error::NewestLost` when the newest frame is gone for good: the write that replaced it was
    /// given up (its writer died or discarded it) and nothing newer was published since.
    /// False for anything else (a `published` word read just before it moved on).
    fn await_rewrite(&self, seq: u64, slot: u32) -> Result<bool> {
        let h = self.header();
        let d = self.slot(slot);
        let mut waited = false;
        loop {
            let n = h.notify.load(Ordering::SeqCst);
            let state = d.state.load(Ordering::SeqCst);
            match protocol::after_failed_pin(seq, self.published()? != (seq, slot), state) {
                AfterFailedPin::Moved => return Ok(true),
                AfterFailedPin::Lost => return Err(Error::NewestLost { name: self.name.clone() }),
                AfterFailedPin::Other => return Ok(waited),
                AfterFailedPin::Rewriting => {}
            }
            // A claim is made and kept under the write lock, and commit and abort both change
            // the state before the lock is let go. So the claim is abandoned when the lock's
            // holder is gone (the write is given up when the lock is taken over), or when the
            // lock is free and the state has not changed since (a handle closed with its claim
            // open; a new holder empties the slot before any claim of its own).
            let words = self.lock_words();
            let abandoned = words.holder_gone()
                || (words.holder_pid().is_none() && d.state.load(Ordering::SeqCst) == state && self.published()? == (seq, slot));
            if abandoned {
                return Err(Error::NewestLost { name: self.name.clone() });
            }
            // A claim backs off without a wake when it meets a pin: wait in short slices.
            h.waiters.fetch_add(1, Ordering::SeqCst);
            if self.published()? == (seq, slot) && d.state.load(Ordering::SeqCst) == state {
                futex::wait(&h.notify, n, REWRITE_SLICE);
            }
            h.waiters.fetch_sub(1, Ordering::SeqCst);
            waited = true;
        }
    }

    /// Records that a snapshot read returned frame `seq`: frames between the last one this
    /// handle saw and `seq` count as missed (latest mode).
    fn note_seen(&self, seq: u64) {
        let prev = self.seen.fetch_max(seq, Ordering::Relaxed);
        let missed = seq.saturating_sub(prev + 1);
        self.missed_last.store(missed, Ordering::Relaxed);
        if missed > 0 && self.mode == ReaderMode::Latest {
            self.missed_total.fetch_add(missed, Ordering::Relaxed);
            self.my_entry().missed.fetch_add(missed, Ordering::Relaxed);
        }
    }

    /// Calls `f` with the newest committed frame pinned (a snapshot: never torn). Errors with
    /// `Empty` before the first write (`NewestLost` as `pin_newest`). Waits only while the
    /// writer rewrites the newest frame's slot (one frame's copy).
    pub fn read_latest<R>(&self, f: impl FnOnce(&FrameRef<'_>) -> R) -> Result<R> {
        let (slot, seq) = self.pin_newest()?;
        self.note_seen(seq);
        let out = f(&self.frame_ref(slot, seq));
        self.unpin(slot);
        Ok(out)
    }

    /// Waits until a frame newer than `after` is committed; returns the newest sequence.
    /// `Ended` once the writer ended the stream and nothing newer is there. Between its sleeps
    /// (at most every `watch::INTERVAL`) it also looks whether a frame can still come at all:
    /// `DeviceUnavailable` when a device stream's owner died, `Replaced` when the stream's name
    /// was removed or taken by a new segment (see watch.rs), whatever the deadline.
    pub fn wait_for(&self, after: u64, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<u64> {
        let h = self.header();
        // Spin (for as long as spinning has been paying on this handle, see sync/spin.rs) only
        // when there is time to wait at all; a writer that answers within the spin costs no
        // system call on either side.
        let mut spinning = deadline.slice().is_some();
        let started = Instant::now();
        let spin_until = started + self.spin.budget();
        let mut spins = 0u32;
        let mut waited = false;
        loop {
            let n = h.notify.load(Ordering::SeqCst);
            let (seq, _) = self.published()?;
            if seq > after {
                if spins > 0 || waited {
                    self.spin.record(started.elapsed());
                }
                return Ok(seq);
            }
            if h.ended.load(Ordering::SeqCst) != 0 {
                return Err(Error::Ended { name: self.name.clone() });
            }
            if spinning {
                spins = spins.wrapping_add(1);
                if !spins.is_multiple_of(16) || Instant::now() < spin_until {
                    std::hint::spin_loop();
                    continue;
                }
                spinning = false;
            }
            let Some(slice) = deadline.slice() else {
                return Err(Error::Timeout { name: self.name.clone(), op: "receive a new frame", seconds: deadline.seconds() });
            };
            // A process waiting for a frame gives up its kept loan frames if a writer waits for
            // a slot (the writer may be waiting for them: kept.rs).
            self.yield_kept_to_waiting_writer();
            h.waiters.fetch_add(1, Ordering::SeqCst);
            if self.published()?.0 <= after && h.ended.load(Ordering::SeqCst) == 0 {
                futex::wait(&h.notify, n, slice);
            }
            waited = true;
            h.waiters.fetch_sub(1, Ordering::SeqCst);
            if !check() {
                return Err(Error::Interrupted);
            }
            // Still nothing new (and not ended): maybe nothing can come any more.
            if self.published()?.0 <= after && h.ended.load(Ordering::SeqCst) == 0 {
                self.check_still_fed()?;
            }
        }
    }

    /// Waits for the next frame this handle has not seen, pins it and counts it as consumed;
    /// returns (slot, seq). Latest mode: the newest frame (frames skipped are counted, see
    /// `missed`). Lossless mode: the oldest frame newer than the last one consumed, which the
    /// writer keeps until this handle has consumed it (usually `seen + 1`; a writer that gives
    /// explicit sequence numbers may leave gaps, which count as missed).
    fn take_next(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<(u32, u64)> {
        self.adopt()?;
        let seen = self.seen_seq();
        let mut after = seen;
        let (found, (slot, seq)) = loop {
            self.wait_for(after, deadline, check)?;
            let found = match self.mode {
                ReaderMode::Latest => None,
                ReaderMode::Lossless => self.pin_oldest_after(seen),
            };
            // Latest mode, or (never while the protocol holds) a lossless frame that is gone:
            // take the newest frame and count the gap. A lossless frame reclaimed before the
            // handle's entry existed (a handle adopted after fork, or resumed in another
            // process) is not taken here: the oldest frame still in the ring is, and the gap
            // before it is counted.
            match found {
                Some(hit) => break (found, hit),
                None => match self.pin_newest() {
                    Ok(hit) => break (None, hit),
                    // The newest frame went with a write that was given up: wait for the next.
                    Err(Error::NewestLost { .. }) => after = self.latest_seq(),
                    Err(e) => return Err(e),
                },
            }
        };
        let missed = seq.saturating_sub(seen + 1);
        self.missed_last.store(missed, Ordering::Relaxed);
        let e = self.my_entry();
        if missed > 0 {
            self.missed_total.fetch_add(missed, Ordering::Relaxed);
            e.missed.fetch_add(missed, Ordering::Relaxed);
        }
        self.seen.store(seq, Ordering::Relaxed);
        if self.mode == ReaderMode::Lossless {
            if found.is_some() {
                e.reads.fetch_add(1, Ordering::Relaxed);
            }
            e.consumed.store(seq, Ordering::SeqCst);
            self.entry.consumed(seq);
            self.wake_writer();
        }
        Ok((slot, seq))
    }

    /// Pins the oldest committed frame above `seen` (lossless mode). A pin fails only when the
    /// slot was claimed between the scan and the pin, which a lossless entry allows just once
    /// after it registered (a writer that scanned the table before it), so the scan is retried
    /// a bounded number of times before falling back to the newest frame.
    fn pin_oldest_after(&self, seen: u64) -> Option<(u32, u64)> {
        for _ in 0..=self.geometry.slot_count {
            let (i, target) = self.oldest_after(seen)?;
            if self.pin(i, target) {
                return Some((i, target));
            }
        }
        None
    }

    /// The committed frame with the lowest sequence above `seen`: (slot, seq). Frames above a
    /// lossless reader's consumed sequence are never reclaimed, so this is the next frame in
    /// order (the scan may see it committed just before `published` names it).
    fn oldest_after(&self, seen: u64) -> Option<(u32, u64)> {
        let mut best: Option<(u32, u64)> = None;
        for i in 0..self.geometry.slot_count {
            let state = self.slot(i).state.load(Ordering::SeqCst);
            let seq = state_seq(state);
            if state & WRITING == 0 && seq > seen && best.is_none_or(|(_, b)| seq < b) {
                best = Some((i, seq));
            }
        }
        best
    }

    /// Waits for the next frame this handle has not seen (see `take_next`) and calls `f` with
    /// it pinned.
    pub fn read_new<R>(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool, f: impl FnOnce(&FrameRef<'_>) -> R) -> Result<R> {
        let (slot, seq) = self.take_next(deadline, check)?;
        let out = f(&self.frame_ref(slot, seq));
        self.unpin(slot);
        Ok(out)
    }

    /// The newest frame, pinned until the returned handle is dropped (zero-copy view).
    pub fn pin_latest(self: &Arc<Self>) -> Result<Pinned> {
        let (slot, seq) = self.pin_newest()?;
        self.note_seen(seq);
        Ok(Pinned::new(self.clone(), slot, seq))
    }

    /// The next frame this handle has not seen (as `read_new`), pinned until the returned
    /// handle is dropped.
    pub fn wait_pinned(self: &Arc<Self>, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<Pinned> {
        let (slot, seq) = self.take_next(deadline, check)?;
        Ok(Pinned::new(self.clone(), slot, seq))
    }

    /// Frame `seq`, pinned until the returned handle is dropped, if the ring still holds it
    /// (`None` once a later write has reused its slot, or before it is written). Unlike
    /// `wait_pinned` it does not read in order: it is for a consumer told which frame to take
    /// by another channel (a message naming the sequence number). It counts as reading `seq`:
    /// a lossless handle's consumed sequence moves up to `seq` (frames before it that this
    /// handle never took are released to the writer), and `seen` moves up to `seq`.
    pub fn pin_seq(self: &Arc<Self>, seq: u64) -> Option<Pinned> {
        if seq == 0 || self.adopt().is_err() {
            return None;
        }
        let slot = (0..self.geometry.slot_count).find(|&i| {
            let state = self.slot(i).state.load(Ordering::SeqCst);
            state & WRITING == 0 && state_seq(state) == seq
        })?;
        // `pin` re-checks the slot state after setting the pin bit, so a writer that reclaimed
        // the slot between the scan and the pin makes this fail rather than pin a new frame.
        if !self.pin(slot, seq) {
            return None;
        }
        let e = self.my_entry();
        e.reads.fetch_add(1, Ordering::Relaxed);
        self.seen.fetch_max(seq, Ordering::Relaxed);
        if self.mode == ReaderMode::Lossless {
            self.entry.consumed_max(seq);
        }
        if e.consumed.fetch_max(seq, Ordering::SeqCst) < seq && self.mode == ReaderMode::Lossless {
            self.wake_writer();
        }
        Some(Pinned::new(self.clone(), slot, seq))
    }

    /// Start of the read-only mapping of all payloads (mapped on first use). Views point here,
    /// so even a view forced writable cannot change a frame.
    pub fn read_only_payloads(&self) -> Result<*const u8> {
        if let Some(m) = self.ro_payloads.get() {
            return Ok(m.as_ptr());
        }
        let g = &self.geometry;
        let map = self.segment.map_read_only(g.payload_offset, (g.total_bytes - g.payload_offset) as usize)?;
        Ok(self.ro_payloads.get_or_init(|| map).as_ptr())
    }
}

/// Detects a `published` word that stays inconsistent with its slot (a damaged segment): a
/// writer moves `published` on within microseconds, so the same failing value seen this many
/// times in a row means it will never match.
#[derive(Default)]
struct Stuck {
    last: Option<(u64, u32)>,
    count: u32,
}

impl Stuck {
    const LIMIT: u32 = 100_000;

    fn check(&mut self, s: &Stream, seq: u64, slot: u32) -> Result<()> {
        if self.last == Some((seq, slot)) {
            self.count += 1;
            if self.count >= Self::LIMIT {
                return Err(s.inconsistent(seq, slot));
            }
        } else {
            self.last = Some((seq, slot));
            self.count = 0;
        }
        Ok(())
    }
}

/// A frame pinned in its slot: the writer does not touch the slot until this is dropped. Holds
/// the stream handle (and so its mappings) alive. The pin is the pinning process's: a copy
/// that reaches a forked child is not pinned for the child, and dropping it there leaves the
/// parent's pin alone.
pub struct Pinned {
    stream: Arc<Stream>,
    slot: u32,
    seq: u64,
    /// `process::fork_generation()` of the process that pinned.
    generation: u64,
}

impl Pinned {
    /// A pin this handle already holds on `slot` (taken by `pin` or `pin_own_claim`), released
    /// when the value is dropped. `seq` 0 means the slot holds no frame (a discarded loan).
    /// Records when the slot's pins began, for monitors (a clock read only for a slot this
    /// handle did not pin yet).
    pub(super) fn new(stream: Arc<Stream>, slot: u32, seq: u64) -> Pinned {
        stream.time_pin(slot);
        Pinned { stream, slot, seq, generation: crate::process::fork_generation() }
    }

    /// The pinned slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Sequence number of the pinned frame (0: an empty slot kept for a discarded loan).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The frame's record and bytes (in the read-write mapping).
    pub fn frame(&self) -> FrameRef<'_> {
        self.stream.frame_ref(self.slot, self.seq)
    }

    /// The frame's bytes in the read-only mapping: (pointer, length).
    pub fn read_only_payload(&self) -> Result<(*const u8, usize)> {
        let base = self.stream.read_only_payloads()?;
        let len = self.frame().payload.len();
        // SAFETY: slot < slot_count, so slot * slot_stride + len lies inside the read-only
        // mapping of slot_count * slot_stride bytes.
        Ok((unsafe { base.add((u64::from(self.slot) * self.stream.geometry.slot_stride) as usize) }, len))
    }

    /// (stream, slot, seq), handing the pin over to the caller, who must unpin the slot.
    pub(super) fn into_parts(self) -> (Arc<Stream>, u32, u64) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so moving the Arc out of it leaves no
        // second owner.
        let stream = unsafe { std::ptr::read(&this.stream) };
        (stream, this.slot, this.seq)
    }

    /// The stream this frame belongs to.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.generation == crate::process::fork_generation() {
            self.stream.unpin(self.slot);
        }
    }
}
