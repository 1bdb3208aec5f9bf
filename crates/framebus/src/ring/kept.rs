//! A loan's slot kept after the loan ended, for memory the caller still references (a NumPy
//! view of the loan's array, a memoryview, a buffer a pipe has not written yet, the `with`
//! target name Python leaves bound).
//!
//! The slot stays pinned, so the ring never reuses it under that memory and the arrays show the
//! committed frame for as long as they live. A committed slot whose memory may still be written
//! through a writable alias is also *detached* in this handle's read-write mapping: its pages
//! are replaced by a private copy-on-write mapping of the same bytes (the shared pages are moved
//! aside with their page-table entries, so giving them back costs no page faults). A write
//! through an alias that survived the commit then lands in a page of this process alone.
//!
//! **A kept frame never makes a writer wait.** When a writer of this process needs the slot
//! (every other slot is taken) or a writer of another process waits for a slot while this
//! process waits itself (for the write lock, or for a frame), the kept frame is *evicted*: the
//! range the arrays point at becomes this process's private copy of the frame (every page
//! copied now), the handle goes on reaching the slot through another shared window
//! (ring/windows.rs), and the pin is dropped. The arrays keep showing exactly the committed
//! bytes; the copy is paid only when the slot is really needed. Without this, a kept array
//! deadlocks its own writer: pyshmem programs keep `with shm.write_view() as view:` targets
//! bound, and a writer that waits for that slot waits for itself.
//!
//! When the kept frame is dropped (the last reference is gone), a pinned slot's shared pages
//! are mapped back *before* the pin is released; an evicted range becomes a spare window. Should
//! mapping the shared pages back fail (the kernel out of memory for mappings), the slot stays
//! pinned for the rest of the handle's life rather than let the writer write into private pages
//! nobody else can see.

use std::sync::atomic::{AtomicUsize, Ordering as LocalOrdering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::handle::Stream;
use super::layout::{state_seq, unpack_published, WRITING};
use super::reader::Pinned;
use crate::shm::Mapping;
use crate::sync::atomic::Ordering;

/// Kept frames alive in this process (a fast "none" for the paths that look for some).
static KEPT_FRAMES: AtomicUsize = AtomicUsize::new(0);
/// Handles of this process that have kept frames (or had: dead entries are pruned).
static KEEPERS: Mutex<Vec<Weak<Stream>>> = Mutex::new(Vec::new());

/// Tells whether something outside the ring may refer to the physical pages at
/// `(address, length)`: a pipe write made with vmsplice. A private copy would not reach it, so
/// such a kept frame keeps its slot pinned until that write is done.
static PAGES_IN_USE: OnceLock<fn(usize, usize) -> bool> = OnceLock::new();

/// Installs the check of [`PAGES_IN_USE`] (the pipe writers of the bindings); the first call
/// wins.
pub fn set_pages_in_use_check(check: fn(usize, usize) -> bool) {
    let _ = PAGES_IN_USE.set(check);
}

fn pages_in_use(at: *mut u8, len: usize) -> bool {
    PAGES_IN_USE.get().is_some_and(|check| check(at as usize, len))
}

/// Whether this process has kept frames at all.
pub(super) fn any_kept() -> bool {
    KEPT_FRAMES.load(LocalOrdering::SeqCst) > 0
}

/// A kept slot of a finished loan; see the module documentation.
pub struct KeptSlot {
    stream: Arc<Stream>,
    id: u64,
    slot: u32,
    seq: u64,
    /// `process::fork_generation()` of the process that kept the frame: a copy that reached a
    /// child through fork() never unpins the parent's slot.
    generation: u64,
}

/// A handle's kept frames.
#[derive(Default)]
pub(super) struct KeptTable {
    next_id: u64,
    records: Vec<Record>,
}

struct Record {
    id: u64,
    slot: u32,
    seq: u64,
    /// Where the arrays point: the slot's address in this handle when the loan claimed it.
    at: *mut u8,
    state: State,
}

// SAFETY: `at` is an address inside a mapping the handle owns; the table only passes it to the
// mapping calls of its own handle, under the table's lock.
unsafe impl Send for KeptTable {}

enum State {
    /// The slot is pinned for the arrays. `Some(parked)`: detached (the range is private
    /// copy-on-write; `parked` holds the shared pages if the kernel could move them).
    Pinned { detached: Option<Option<Mapping>> },
    /// The range is a private copy of the frame; the slot is free for the writer.
    Evicted,
}

/// Which kept frames an eviction gives up.
#[derive(Clone, Copy, Debug)]
pub(super) enum Evict {
    /// One that frees a slot a writer holding the lock could claim at once.
    Claimable,
    /// Every one that nothing else pins (this process is about to wait while a writer waits).
    All,
}

impl KeptSlot {
    /// Keeps `pin`'s slot; with `detach` a committed frame's slot is detached (see the module
    /// documentation). A slot that cannot be detached (the mapping call failed) is only pinned.
    pub(super) fn new(pin: Pinned, detach: bool) -> KeptSlot {
        let (stream, slot, seq) = pin.into_parts();
        let at = stream.payload(slot);
        let detached = if detach {
            let (offset, len) = stream.slot_extent(slot);
            // SAFETY: `at` is slot `slot`'s current address in this handle (page aligned,
            // slot_stride long, a read-write shared mapping of the slot's file range); the slot
            // is pinned, so the writer does not claim it; the core keeps no reference into it;
            // views read through the separate read-only mapping.
            unsafe { stream.segment.detach(at, offset, len) }.ok()
        } else {
            None
        };
        let mut table = stream.kept.lock().unwrap_or_else(|p| p.into_inner());
        table.next_id += 1;
        let id = table.next_id;
        table.records.push(Record { id, slot, seq, at, state: State::Pinned { detached } });
        drop(table);
        stream.mark_kept(slot, true);
        KEPT_FRAMES.fetch_add(1, LocalOrdering::SeqCst);
        let mut keepers = KEEPERS.lock().unwrap_or_else(|p| p.into_inner());
        keepers.retain(|w| w.strong_count() > 0);
        if !keepers.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&stream))) {
            keepers.push(Arc::downgrade(&stream));
        }
        KeptSlot { stream, id, slot, seq, generation: crate::process::fork_generation() }
    }

    /// Sequence number of the kept frame (0: the empty slot of a discarded loan).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether writes through this process's read-write mapping of the frame are private to it
    /// (detached, or evicted to a private copy).
    pub fn detached(&self) -> bool {
        self.stream.with_record(self.id, |r| !matches!(r.state, State::Pinned { detached: None })).unwrap_or(false)
    }

    /// Whether the frame still pins its slot (false once evicted to a private copy).
    pub fn pins_slot(&self) -> bool {
        self.stream.with_record(self.id, |r| matches!(r.state, State::Pinned { .. })).unwrap_or(false)
    }

    /// The slot the frame was written in.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The frame's bytes as this process's arrays see them (the committed frame, or this
    /// process's private copy of it).
    pub fn bytes(&self) -> &[u8] {
        let at = self.stream.with_record(self.id, |r| r.at).expect("a kept frame's record lives as long as it does");
        // SAFETY: `at` is the kept frame's range (slot_stride >= frame_bytes long): pinned and
        // shared, private after detach, or a private copy after eviction; it stays mapped and
        // is not rewritten by the ring while `self` (and so the record) lives.
        unsafe { std::slice::from_raw_parts(at, self.stream.geometry.frame_bytes as usize) }
    }
}

impl Drop for KeptSlot {
    fn drop(&mut self) {
        KEPT_FRAMES.fetch_sub(1, LocalOrdering::SeqCst);
        let s = &self.stream;
        let mut table = s.kept.lock().unwrap_or_else(|p| p.into_inner());
        let Some(k) = table.records.iter().position(|r| r.id == self.id) else { return };
        let record = table.records.swap_remove(k);
        match record.state {
            State::Evicted => s.return_window(record.slot, record.at),
            State::Pinned { detached } => {
                if let Some(parked) = detached {
                    let (offset, len) = s.slot_extent(record.slot);
                    // SAFETY: `record.at` is the range detach made private and `parked` what it
                    // returned; the kept frame's arrays are gone, so nothing uses the range.
                    if unsafe { s.segment.reattach(record.at, offset, len, parked) }.is_err() {
                        // The slot's pages at its current address are still private: never let
                        // the writer reuse it (its frame would reach nobody). The pin stays.
                        return;
                    }
                }
                if self.generation != crate::process::fork_generation() {
                    return; // the pin is the parent's (this process's mapping is shared again)
                }
                let others = table.records.iter().any(|r| r.slot == record.slot && matches!(r.state, State::Pinned { .. }));
                drop(table);
                if !others {
                    s.mark_kept(record.slot, false);
                }
                s.unpin(record.slot);
            }
        }
    }
}

impl Stream {
    fn with_record<R>(&self, id: u64, f: impl FnOnce(&Record) -> R) -> Option<R> {
        let table = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        table.records.iter().find(|r| r.id == id).map(f)
    }

    /// Sets or clears `slot`'s bit in this handle's shared kept mask (read by other processes'
    /// messages and monitors only).
    fn mark_kept(&self, slot: u32, on: bool) {
        if !self.is_attached() {
            return;
        }
        let e = self.my_entry();
        if on {
            e.kept.fetch_or(1 << slot, Ordering::Relaxed);
        } else {
            e.kept.fetch_and(!(1 << slot), Ordering::Relaxed);
        }
    }

    /// Gives up kept frames of this process's handles on this stream's segment (see the module
    /// documentation); returns how many. `Claimable` stops at the first one that frees a slot
    /// the caller, holding the write lock, can claim.
    pub(super) fn evict_kept(&self, which: Evict) -> usize {
        if !any_kept() {
            return 0;
        }
        let Ok(me) = self.segment.identity() else { return 0 };
        let keepers: Vec<Arc<Stream>> = KEEPERS.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
        let mut evicted = 0;
        for handle in keepers.iter().filter(|h| h.segment.identity().is_ok_and(|id| id == me)) {
            evicted += handle.evict_own(which);
            if evicted > 0 && matches!(which, Evict::Claimable) {
                break;
            }
        }
        evicted
    }

    /// `evict_kept` for this handle's own kept frames.
    fn evict_own(&self, which: Evict) -> usize {
        // A handle inherited through fork() pins for the parent's entry: its kept frames are the
        // parent's to give up (a child that adopts the handle makes them private: `disown_kept`).
        if self.is_inherited() {
            return 0;
        }
        let mut table = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let (latest, latest_slot) = unpack_published(self.header().published.load(Ordering::SeqCst));
        let c = self.constraints();
        let mine = if self.is_attached() { self.my_entry().pinned.load(Ordering::SeqCst) } else { 0 };
        let others = self.pinned_by_others();
        let mut evicted = 0;
        // Oldest first: the frames a reader is least likely to want.
        let mut order: Vec<usize> = (0..table.records.len()).collect();
        order.sort_by_key(|&k| table.records[k].seq);
        for k in order {
            let slot = table.records[k].slot;
            if !matches!(table.records[k].state, State::Pinned { .. }) || self.pin_count(slot) != 1 || mine & (1 << slot) == 0 {
                continue;
            }
            if let Evict::Claimable = which {
                let state = self.slot(slot).state.load(Ordering::SeqCst);
                let newest = latest > 0 && slot == latest_slot;
                if newest || others & (1 << slot) != 0 || state & WRITING != 0 || state_seq(state) > c.min_consumed {
                    continue;
                }
            }
            if self.evict_record(&mut table.records[k]) {
                evicted += 1;
                let others_kept = table.records.iter().any(|r| r.slot == slot && matches!(r.state, State::Pinned { .. }));
                if !others_kept {
                    self.mark_kept(slot, false);
                }
                self.unpin(slot);
                if let Evict::Claimable = which {
                    break;
                }
            }
        }
        evicted
    }

    /// In a process that adopted a handle inherited through fork(): the kept frames that came
    /// with it pin for the parent, so this process's arrays of them get private copies and this
    /// process reaches their slots through windows (its writes must never land in a range the
    /// parent had detached). Their pins are the parent's and stay untouched.
    pub(super) fn disown_kept(&self) {
        let mut table = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let mut keep = Vec::new();
        for mut record in std::mem::take(&mut table.records) {
            if matches!(record.state, State::Evicted) || self.evict_record(&mut record) {
                keep.push(record);
                continue;
            }
            // No private copy could be made: share the range again, so that this process's
            // writes reach everyone (its arrays of the frame then show the slot as it is).
            if let State::Pinned { detached: Some(parked) } = record.state {
                let (offset, len) = self.slot_extent(record.slot);
                // SAFETY: as in KeptSlot's drop: the range detach made private, and what it parked.
                let _ = unsafe { self.segment.reattach(record.at, offset, len, parked) };
            }
        }
        table.records = keep;
    }

    /// Turns a pinned record's range into a private copy of its frame and switches the handle
    /// to another shared window on the slot. False (nothing lost, the slot stays pinned) where
    /// the kernel refuses a mapping.
    fn evict_record(&self, record: &mut Record) -> bool {
        let State::Pinned { detached } = &mut record.state else { return false };
        let (offset, len) = self.slot_extent(record.slot);
        let was_private = detached.is_some();
        if pages_in_use(record.at, len) {
            return false;
        }
        // The window first: without one the slot could not be reached once the range is private.
        let window = match self.take_window(record.slot, detached.as_mut().and_then(Option::take)) {
            Ok(w) => w,
            Err(_) => return false,
        };
        // SAFETY: `record.at` is the slot's range the arrays point at (page aligned,
        // slot_stride long): shared, or private copy-on-write after detach. The slot is pinned
        // by this record alone, so no writer and no other copy of this handle touch it; the
        // arrays only read it (they are read-only; a stale writable alias writes privately).
        if unsafe { self.segment.make_private(record.at, offset, len, was_private) }.is_err() {
            self.return_window(record.slot, window);
            if !was_private {
                // The range may now be private copy-on-write: treat it as detached.
                *detached = Some(None);
            }
            return false;
        }
        if pages_in_use(record.at, len) {
            // A pipe write started meanwhile may refer to the shared pages: keep the slot pinned
            // (the range stays private, as if detached; dropping the frame shares it again).
            self.return_window(record.slot, window);
            *detached = Some(None);
            return false;
        }
        self.switch_window(record.slot, window);
        record.state = State::Evicted;
        true
    }
}
