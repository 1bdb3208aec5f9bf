//! The write path: take the write lock, claim a slot nobody needs, fill it, publish it.
//!
//! A slot may be claimed when it is not the newest frame's slot, no attached handle has it pinned
//! and every lossless reader has consumed the frame in it. The claim is a store of the `WRITING`
//! state followed by a re-check of the pin masks (readers set their pin bit and then re-check the
//! state: with sequentially consistent ordering on both sides at least one of them sees the
//! other and backs off). Commit stores the new state with release ordering, then `published`,
//! then bumps the futex word and wakes readers only if some are waiting.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use super::handle::{now_ns, Stream};
use super::kept::{Evict, KeptSlot};
use super::layout::{published, slot_state, state_seq, unpack_published, MAX_SEQ, WRITING};
use super::protocol;
use super::reader::Pinned;
use crate::error::{Error, Result};
use crate::sync::atomic::Ordering;
use crate::sync::deadline::{Deadline, WAIT_SLICE};
use crate::sync::futex;
use crate::sync::lock::{my_token, Acquired, LockError, LockWords};

/// Smallest frame whose slot a copy write may rewrite while it holds the newest frame: from
/// here a second slot's footprint in the caches costs copy speed (1080p in lock-step: about
/// 0.75x of one buffer); smaller frames keep the plain rule (W3 measured them 9-15% slower
/// with it).
pub const REWRITE_MIN: u64 = 1 << 20;

/// Whether a claim may take the newest frame's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reuse {
    /// Never: the newest frame stays readable while the next one is written.
    Never,
    /// When every other handle that reads (lossless, or latest once it has read a frame) has
    /// taken the newest frame (its `consumed` reached it) and nobody pins it. Readers that look for the newest frame while
    /// the slot is rewritten wait for the new one (reader.rs, `await_rewrite`).
    NewestWhenTaken,
}

/// Per-frame values a writer attaches to a frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameInfo<'a> {
    /// User frame id; None keeps the previous frame's id.
    pub frame_id: Option<i64>,
    /// Metadata bytes (at most the stream's meta_capacity).
    pub meta: &'a [u8],
    /// Timestamp in ns since the Unix epoch; None stamps the time of the commit.
    pub timestamp_ns: Option<u64>,
    /// Sequence number to give the frame; None takes the one after the newest frame's. It must
    /// be above the newest frame's (a bridge keeps its source's numbers this way); readers
    /// count the numbers it skips as missed.
    pub seq: Option<u64>,
}

/// A claimed slot, filled by the caller and then committed. Dropping it without committing
/// discards the frame: readers never see it. Holds the write lock until dropped. `S` is
/// `&Stream` for a scoped write and `Arc<Stream>` for a loan that outlives a borrow.
pub struct WriteGuard<S: Deref<Target = Stream>> {
    stream: S,
    slot: u32,
    seq: u64,
    /// Lock holder identity of the thread that claimed the slot.
    token: u64,
    done: bool,
}

impl Stream {
    pub(super) fn lock_words(&self) -> LockWords<'_> {
        let h = self.header();
        LockWords {
            owner: &h.lock_owner,
            owner_start: &h.lock_owner_start,
            depth: &h.lock_depth,
            futex: &h.lock_futex,
            waiters: &h.lock_waiters,
            recoveries: &h.lock_recoveries,
        }
    }

    /// Takes the cross-process write lock (re-entrant for the calling thread). Returns how it was
    /// obtained; `Recovered` means its holder had died and any frame it was writing is dropped.
    /// Holds taken through this handle are released when the handle is closed or dropped.
    /// A writer of this process that has to wait for the lock while another waits for a slot
    /// first gives up its process's kept loan frames (kept.rs), so that a kept array never
    /// holds back the writer it waits for.
    pub fn acquire(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<Acquired> {
        self.adopt()?; // a handle inherited through fork() registers its own entry first (owner.rs)
        self.yield_kept_to_waiting_writer();
        let mut looking = || {
            self.yield_kept_to_waiting_writer();
            check()
        };
        let how = self.lock_words().acquire(deadline, &mut looking).map_err(|e| self.lock_error(e, Some(deadline)))?;
        match how {
            Acquired::Reentrant => {}
            Acquired::Recovered { .. } => {
                self.lock_recoveries.fetch_add(1, Ordering::Relaxed);
                self.repair_abandoned_slots();
                self.note_writer();
            }
            Acquired::Fresh => {
                self.repair_abandoned_slots();
                self.note_writer();
            }
        }
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        *holds = (my_token(), holds.1 + 1);
        Ok(how)
    }

    /// Gives up this process's kept frames on this stream if a writer waits for a slot (see
    /// kept.rs); one process-local load when the process keeps none.
    pub(super) fn yield_kept_to_waiting_writer(&self) {
        if super::kept::any_kept() && self.header().writer_waiters.load(Ordering::SeqCst) > 0 && !self.lock_held() {
            self.evict_kept(Evict::All);
        }
    }

    /// Records this process as the stream's writer (for monitors): two relaxed stores, and
    /// none when it already is.
    fn note_writer(&self) {
        let h = self.header();
        let me = crate::process::ProcessId::current();
        if h.writer_pid.load(Ordering::Relaxed) != me.pid || h.writer_start.load(Ordering::Relaxed) != me.start {
            h.writer_start.store(me.start, Ordering::Relaxed);
            h.writer_pid.store(me.pid, Ordering::Release);
        }
        if self.is_attached() {
            let e = self.my_entry();
            let word = e.role.load(Ordering::Relaxed);
            if word & super::layout::role::KIND == super::layout::role::HANDLE {
                e.role.store(super::layout::role::WRITER | (word & !super::layout::role::KIND), Ordering::Relaxed);
            }
        }
    }

    /// Drops one level of the calling thread's lock.
    pub fn release(&self) -> Result<()> {
        self.release_as(my_token())
    }

    /// Drops one level of the hold of thread `token` (see `lock::my_token`).
    fn release_as(&self, token: u64) -> Result<()> {
        self.lock_words().release_token(token).map_err(|e| self.lock_error(e, None))?;
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        if holds.0 == token && holds.1 > 0 {
            holds.1 -= 1;
        }
        Ok(())
    }

    /// Releases every hold of the write lock taken through this handle (on close): a handle
    /// that is closed while its thread holds the lock does not keep other writers waiting.
    pub fn release_all_holds(&self) {
        let (token, depth) = std::mem::take(&mut *self.holds.lock().unwrap_or_else(|p| p.into_inner()));
        for _ in 0..depth {
            if self.lock_words().release_token(token).is_err() {
                break;
            }
        }
    }

    /// Whether the calling thread holds the write lock.
    pub fn lock_held(&self) -> bool {
        self.lock_words().held_by_me()
    }

    /// Pid of the lock holder, if any.
    pub fn lock_holder(&self) -> Option<u32> {
        self.lock_words().holder_pid()
    }

    fn lock_error(&self, e: LockError, deadline: Option<Deadline>) -> Error {
        match e {
            LockError::Timeout => {
                let holder = match self.lock_holder() {
                    Some(pid) if pid == crate::process::ProcessId::current().pid => {
                        "another thread of this process (a write, an open loan or a lock() block)".to_owned()
                    }
                    Some(pid) => format!("process {pid}"),
                    None => "nobody any more (it was just released)".to_owned(),
                };
                Error::LockBusy { name: self.name.clone(), seconds: deadline.map_or(0.0, |d| d.seconds()), holder }
            }
            LockError::Interrupted => Error::Interrupted,
            LockError::NotOwner => {
                Error::LockState { name: self.name.clone(), what: "cannot release the write lock: this thread does not hold it" }
            }
        }
    }

    /// With the lock freshly taken no frame of ours is in progress: a slot still marked
    /// `WRITING` was abandoned by a writer that died, and is emptied so it can be reused.
    fn repair_abandoned_slots(&self) {
        for i in 0..self.geometry.slot_count {
            let slot = self.slot(i);
            if slot.state.load(Ordering::Acquire) & WRITING != 0 {
                slot.state.store(slot_state(0, false), Ordering::Release);
                self.header().aborted_writes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes the lock and claims a slot for the next frame, waiting while every candidate slot
    /// is pinned or unread by a lossless reader.
    pub fn begin_write(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<WriteGuard<&Stream>> {
        let (slot, seq) = self.claim_for_write(deadline, check, Reuse::Never)?;
        Ok(WriteGuard { stream: self, slot, seq, token: my_token(), done: false })
    }

    /// As `begin_write`, for a frame copied in at once (`write`): the claim may also take the
    /// newest frame's slot once every reader has taken that frame (see `Reuse`), so that a
    /// reader in lock-step with the writer finds each frame in the slot, still in the CPU
    /// caches, that the previous one left. The guard must be committed or dropped without
    /// waiting on anything: readers that look for the newest frame meanwhile wait for it.
    pub fn begin_copy(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<WriteGuard<&Stream>> {
        let (slot, seq) = self.claim_for_write(deadline, check, Reuse::NewestWhenTaken)?;
        Ok(WriteGuard { stream: self, slot, seq, token: my_token(), done: false })
    }

    /// As `begin_write`, for a loan that keeps the handle alive (zero-copy writes from Python).
    pub fn begin_loan(self: &Arc<Self>, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<WriteGuard<Arc<Stream>>> {
        let (slot, seq) = self.claim_for_write(deadline, check, Reuse::Never)?;
        Ok(WriteGuard { stream: self.clone(), slot, seq, token: my_token(), done: false })
    }

    fn claim_for_write(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool, reuse: Reuse) -> Result<(u32, u64)> {
        let how = self.acquire(deadline, check)?;
        // One claim at a time: only the lock holder claims, and a fresh hold found no claim in
        // progress (abandoned ones are repaired), so a slot still being written under a
        // re-entrant hold is this thread's own open loan. A second claim would take the same
        // sequence number.
        if how == Acquired::Reentrant {
            if let Some(seq) = self.open_claim() {
                let _ = self.release();
                return Err(Error::LoanOpen { name: self.name.clone(), seq });
            }
        }
        self.claim_slot(deadline, check, reuse).inspect_err(|_| {
            let _ = self.release();
        })
    }

    /// The sequence number of the frame a slot in `WRITING` state is being filled for, if any
    /// slot is (call with the write lock held).
    fn open_claim(&self) -> Option<u64> {
        let writing = (0..self.geometry.slot_count).any(|i| self.slot(i).state.load(Ordering::SeqCst) & WRITING != 0);
        writing.then(|| self.latest_seq().saturating_add(1))
    }

    fn claim_slot(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool, reuse: Reuse) -> Result<(u32, u64)> {
        let h = self.header();
        let mut reaped_at: Option<Instant> = None;
        let mut waiting_since: Option<Instant> = None;
        let counted = |since: Option<Instant>| {
            if let Some(t) = since {
                h.write_wait_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        };
        loop {
            if let Some(claimed) = self.try_claim(reuse) {
                counted(waiting_since);
                return Ok(claimed);
            }
            // Nothing free: a frame a finished loan of this process keeps is given a private
            // copy and its slot taken (a writer never waits for its own process's kept arrays).
            if self.evict_kept(Evict::Claimable) > 0 {
                continue;
            }
            // Maybe a reader died holding pins or lagging; look at most every 100 ms.
            if reaped_at.is_none_or(|t| t.elapsed() >= WAIT_SLICE) {
                reaped_at = Some(Instant::now());
                if self.reap_dead_readers() > 0 {
                    continue;
                }
            }
            let Some(slice) = deadline.slice() else {
                counted(waiting_since);
                return Err(Error::NoFreeSlot {
                    name: self.name.clone(),
                    seconds: deadline.seconds(),
                    holders: if deadline.is_probe() { String::new() } else { self.why_no_free_slot() },
                });
            };
            if waiting_since.is_none() {
                waiting_since = Some(Instant::now());
                h.write_waits.fetch_add(1, Ordering::Relaxed);
                self.blame_slowest_readers();
            }
            // Register as a waiter first, then look again: a reader that frees a slot after this
            // look sees the waiter and bumps `released`, so the futex wait cannot miss it.
            h.writer_waiters.fetch_add(1, Ordering::SeqCst);
            // Writers of other processes waiting for the lock look again now, and give up the
            // kept frames that may be what this one waits for.
            self.lock_words().nudge_waiters();
            let released = h.released.load(Ordering::SeqCst);
            let claimed = self.try_claim(reuse);
            if claimed.is_none() {
                futex::wait(&h.released, released, slice);
            }
            h.writer_waiters.fetch_sub(1, Ordering::SeqCst);
            if let Some(claimed) = claimed {
                counted(waiting_since);
                return Ok(claimed);
            }
            if !check() {
                counted(waiting_since);
                return Err(Error::Interrupted);
            }
        }
    }

    /// Claims a free slot if there is one (see `pick_slot`): (slot, sequence of the frame to write).
    fn try_claim(&self, reuse: Reuse) -> Option<(u32, u64)> {
        let (latest, latest_slot) = unpack_published(self.header().published.load(Ordering::SeqCst));
        let mut c = self.constraints();
        // The newest frame's slot, when every reader has taken that frame: a fixed host
        // stream's copy write only (a loan may stay open for as long as its caller likes, and
        // readers looking for the newest frame would wait that long).
        let rewrites = self.header().flags & super::layout::FLAG_REWRITES_NEWEST != 0 && self.geometry.frame_bytes >= REWRITE_MIN;
        // (A damaged `published` naming no slot is refused by the reads that follow the write.)
        let newest_ok = latest > 0 && latest_slot < self.geometry.slot_count;
        if reuse == Reuse::NewestWhenTaken && rewrites && newest_ok && c.min_taken >= latest && c.pinned & (1 << latest_slot) == 0 {
            let state = self.slot(latest_slot).state.load(Ordering::SeqCst);
            if state == slot_state(latest, false)
                && protocol::claim(&self.slot(latest_slot).state, state, 1 << latest_slot, self.pin_masks())
            {
                return Some((latest_slot, latest + 1));
            }
            c.pinned |= 1 << latest_slot;
        }
        while let Some((slot, state)) = self.pick_slot(latest, latest_slot, &c) {
            if protocol::claim(&self.slot(slot).state, state, 1 << slot, self.pin_masks()) {
                return Some((slot, latest + 1));
            }
            c.pinned |= 1 << slot;
        }
        None
    }

    /// The claimable slot that was written most recently, and its current state. Reusing the
    /// most recently freed slot keeps the writer's working set at two or three slots while
    /// readers keep up, so large frames are still in the CPU caches when they are rewritten
    /// and read (rotating through every slot put `slots` frames through the cache; a 4-slot
    /// ring of 1080p frames was 0.6-0.8x the copy rate of a 2-slot one).
    fn pick_slot(&self, latest: u64, latest_slot: u32, c: &super::readers::Constraints) -> Option<(u32, u64)> {
        let mut best: Option<(u32, u64)> = None;
        for i in 0..self.geometry.slot_count {
            if (latest > 0 && i == latest_slot) || c.pinned & (1 << i) != 0 {
                continue;
            }
            let state = self.slot(i).state.load(Ordering::SeqCst);
            if state & WRITING != 0 || state_seq(state) > c.min_consumed {
                continue;
            }
            if best.is_none_or(|(_, s)| state_seq(state) > state_seq(s)) {
                best = Some((i, state));
            }
        }
        best
    }

    /// Ends the stream: readers that have read every frame stop waiting with `Error::Ended`
    /// (a lossless reader first gets every frame it has not read). A later write clears the mark.
    pub fn end(&self) {
        let h = self.header();
        h.ended.store(1, Ordering::SeqCst);
        h.notify.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&h.notify);
    }

    /// Whether the writer ended the stream (and has not written since).
    pub fn is_ended(&self) -> bool {
        self.header().ended.load(Ordering::SeqCst) != 0
    }

    /// Copies one frame into the stream: `data` must be exactly the stream's frame size.
    pub fn write(&self, data: &[u8], info: &FrameInfo<'_>, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<u64> {
        if self.spec.variable {
            return Err(Error::InvalidArgument(format!("stream {:?} has variable-shape frames; write them with write_arrays", self.name)));
        }
        self.check_frame(data.len(), info)?;
        let mut guard = self.begin_copy(deadline, check)?;
        let h = self.header();
        // A claim of the newest frame's slot (published moves only at commit) means every
        // reader took that frame: readers in step with this writer, which read this one from
        // the cache at once, as readers asleep waiting for it do.
        let (latest, newest_slot) = unpack_published(h.published.load(Ordering::SeqCst));
        let rewrite = u32::from(latest > 0 && guard.slot() == newest_slot);
        crate::copy::copy_frame_to(guard.payload_mut(), data, h.waiters.load(Ordering::Relaxed).max(rewrite));
        guard.commit(info)
    }

    /// Checks a frame's size and metadata before anything is claimed.
    pub fn check_frame(&self, len: usize, info: &FrameInfo<'_>) -> Result<()> {
        if len as u64 != self.geometry.frame_bytes {
            return Err(Error::InvalidArgument(format!(
                "stream {:?} takes frames of {} bytes, got {len}",
                self.name, self.geometry.frame_bytes
            )));
        }
        if info.meta.len() > self.geometry.meta_capacity as usize {
            return Err(Error::InvalidArgument(format!(
                "metadata of {} bytes exceeds the stream's meta_capacity of {} bytes; create it with a larger meta_capacity",
                info.meta.len(),
                self.geometry.meta_capacity
            )));
        }
        let latest = unpack_published(self.header().published.load(Ordering::SeqCst)).0;
        if info.seq.is_none() && latest >= MAX_SEQ {
            return Err(Error::SequenceExhausted { name: self.name.clone(), max: MAX_SEQ });
        }
        if let Some(seq) = info.seq {
            if seq > MAX_SEQ {
                return Err(Error::InvalidArgument(format!("sequence number {seq} exceeds the largest a stream keeps, {MAX_SEQ}")));
            }
            if seq <= latest {
                return Err(Error::InvalidArgument(format!(
                    "sequence number {seq} is not above the newest frame's ({latest}) in stream {:?}: sequence numbers must increase (leave seq out to take the next one)",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

impl<S: Deref<Target = Stream>> WriteGuard<S> {
    /// The slot's frame bytes, to be filled before commit. Readers cannot see them until then.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.stream.geometry.frame_bytes as usize;
        // SAFETY: the slot is claimed (state WRITING, we hold the write lock), so no writer
        // touches it and no reader reads it until commit; the range is inside the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.stream.payload(self.slot), len) }
    }

    /// The handle the slot was claimed through.
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// Raw pointer to the payload (for loans that outlive a Rust borrow).
    pub fn payload_ptr(&self) -> *mut u8 {
        self.stream.payload(self.slot)
    }

    /// Sequence number the frame gets when committed without an explicit one.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Slot index being written.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Publishes the frame with its timestamp, id, metadata and (if given) sequence number;
    /// returns its sequence number. An invalid `info` discards the frame.
    pub fn commit(mut self, info: &FrameInfo<'_>) -> Result<u64> {
        self.publish(info)
    }

    fn publish(&mut self, info: &FrameInfo<'_>) -> Result<u64> {
        let s = &*self.stream;
        // The write lock is held since the claim, so the newest frame checked here stays the newest.
        s.check_frame(s.geometry.frame_bytes as usize, info)?;
        // Re-check the number this frame gets: it must be the one after the newest (one claim
        // at a time makes that the number given at the claim); never a repeat.
        let seq = match info.seq {
            Some(seq) => seq,
            None => {
                let next = s.latest_seq() + 1;
                if next != self.seq {
                    return Err(Error::InvalidArgument(format!(
                        "stream {:?}: the frame claimed as sequence {} would be published as {next}; it was discarded",
                        s.name, self.seq
                    )));
                }
                next
            }
        };
        let h = s.header();
        let desc = s.slot(self.slot);
        // SAFETY: metadata lives after the frame bytes inside this claimed slot's stride
        // (frame_bytes + meta_capacity <= slot_stride), and check_frame bounded its length.
        unsafe {
            std::ptr::copy_nonoverlapping(info.meta.as_ptr(), s.payload(self.slot).add(s.geometry.frame_bytes as usize), info.meta.len());
        }
        let frame_id = match info.frame_id {
            Some(id) => id as u64,
            None => match s.published() {
                Ok((seq, prev)) if seq > 0 => s.slot(prev).frame_id.load(Ordering::Relaxed),
                _ => 0,
            },
        };
        desc.timestamp_ns.store(info.timestamp_ns.unwrap_or_else(now_ns), Ordering::Relaxed);
        desc.frame_id.store(frame_id, Ordering::Relaxed);
        let len = match s.spec.variable {
            true => {
                // SAFETY: the claimed slot's payload is at least frame_bytes >= TABLE_BYTES long.
                let table = unsafe { std::slice::from_raw_parts(s.payload(self.slot), 128) };
                super::frame_table::recorded_len(table, s.geometry.frame_bytes)
            }
            false => s.geometry.frame_bytes,
        };
        desc.payload_len.store(len, Ordering::Relaxed);
        desc.meta_len.store(info.meta.len() as u32, Ordering::Relaxed);
        protocol::commit(&desc.state, seq);
        if h.ended.load(Ordering::Relaxed) != 0 {
            h.ended.store(0, Ordering::SeqCst);
        }
        h.published.store(published(seq, self.slot), Ordering::SeqCst);
        h.frames_written.fetch_add(1, Ordering::Relaxed);
        // Frame bytes, not the slot's table page: a 100-byte packet counts 100 (plus alignment
        // between arrays), not 4 KiB more.
        let counted = match (s.spec.variable, s.spec.device) {
            (true, _) => len.saturating_sub(super::frame_table::TABLE_BYTES),
            // A device stream's frame is in device memory; its host slot may hold none of it.
            (false, Some(_)) => s.spec.frame_bytes().unwrap_or(len),
            (false, None) => len,
        };
        h.bytes_written.fetch_add(counted, Ordering::Relaxed);
        h.notify.fetch_add(1, Ordering::SeqCst);
        if h.waiters.load(Ordering::SeqCst) > 0 {
            futex::wake_all(&h.notify);
        }
        self.done = true;
        let _ = s.release_as(self.token);
        Ok(seq)
    }
}

impl WriteGuard<Arc<Stream>> {
    /// Publishes the frame like `commit` and keeps its slot pinned by this handle until the
    /// returned `Pinned` is dropped: for a loan whose arrays are still referenced (handed to a
    /// pipe, kept by the caller), so the ring never reuses the slot under them. The pin is set
    /// before the frame is published and the lock released, so no writer can claim the slot in
    /// between. On error the frame is discarded and nothing stays pinned.
    /// With `detach`, the slot is also detached in this handle's mapping (kept.rs): writes
    /// through memory of the loan that survived it stay private to this process.
    pub fn commit_pinned(mut self, info: &FrameInfo<'_>, detach: bool) -> Result<KeptSlot> {
        let stream = Arc::clone(&self.stream);
        stream.pin_own_claim(self.slot);
        let slot = self.slot;
        match self.publish(info) {
            Ok(seq) => Ok(KeptSlot::new(Pinned::new(stream, slot, seq), detach)),
            Err(e) => {
                drop(self);
                stream.unpin(slot);
                Err(e)
            }
        }
    }

    /// Discards the frame like dropping the guard, but keeps the (now empty) slot pinned until
    /// the returned `Pinned` is dropped, so memory still referenced by the caller is not
    /// rewritten by a later frame while it is in use.
    /// Nothing reads an empty slot, so it is not detached.
    pub fn abort_pinned(self) -> KeptSlot {
        let stream = Arc::clone(&self.stream);
        let slot = self.slot;
        stream.pin_own_claim(slot);
        drop(self);
        KeptSlot::new(Pinned::new(stream, slot, 0), false)
    }
}

impl<S: Deref<Target = Stream>> Drop for WriteGuard<S> {
    fn drop(&mut self) {
        if !self.done {
            protocol::abort(&self.stream.slot(self.slot).state);
            self.stream.header().aborted_writes.fetch_add(1, Ordering::Relaxed);
            let _ = self.stream.release_as(self.token);
        }
    }
}
