//! A handle belongs to one process. Its reader entry (pins, lossless position, role) is the
//! entry of the process that registered it; a copy of the handle that reaches another process
//! through fork() registers an entry of its own on first use instead of sharing the parent's.
//!
//! The check costs a relaxed load of the process-wide fork generation (bumped by a
//! `pthread_atfork` child handler, see `process::fork_generation`, behind its one-time
//! registration check) and a load of the handle's own word, which packs the generation its
//! entry was registered in with the entry's index. No system call and no read-modify-write: a
//! handle used in the process that opened it never pays more than that.
//!
//! In a forked child, the first operation that needs the entry (a read, a view, a wait, a
//! write or the write lock; the Python bindings do it on any call but `close`) *adopts* the
//! handle: it takes the entry reserved for it at fork() (fork.rs) or registers a new entry in
//! the same mode, a lossless one resuming from the last frame the handle had consumed when the
//! process forked. Frames the writer reclaimed before that (after a reservation's grace, or
//! without one) are counted as missed when the next read finds the gap (see `reader.rs`,
//! `take_next`). Until then, and for what the parent did through the handle, the
//! child keeps its hands off: closing or dropping an inherited handle, view, kept loan slot or
//! write-lock hold in the child never touches the parent's entry, pins or lock.

use std::sync::atomic::{AtomicU64, Ordering};

use super::handle::{PinCounts, ReaderMode, Stream};
use crate::error::Result;
use crate::process::fork_generation;

/// No entry (a `peek` handle).
const NONE: u32 = u32::MAX;
/// Entry index while a thread of this process is registering the handle's new entry.
const ADOPTING: u32 = u32::MAX - 1;

fn pack(generation: u64, index: u32) -> u64 {
    (generation << 32) | u64::from(index)
}

/// Whose reader entry a handle holds: see the module documentation.
pub(crate) struct Owner {
    /// `(fork generation as u32) << 32 | entry index` (`NONE`: no entry).
    word: AtomicU64,
    /// Lossless mode: the last frame this handle consumed, as this process knows it (the shared
    /// `consumed` word of the entry may be the parent's, moving on after a fork).
    position: AtomicU64,
    /// A reader entry reserved for a forked child's copy of this handle (fork.rs):
    /// `NO_RESERVATION`, `(PENDING << 32) | index` between `prepare_fork` and the child's claim,
    /// then `(fork generation as u32) << 32 | index` in the child that claimed it.
    reserved: AtomicU64,
}

/// `Owner::reserved` without a reservation.
const NO_RESERVATION: u64 = u64::MAX;
/// Generation half of `Owner::reserved` for a reservation not claimed yet.
const PENDING: u32 = u32::MAX;

impl Owner {
    /// No entry yet, owned by this process.
    pub(super) fn detached() -> Owner {
        Owner {
            word: AtomicU64::new(pack(fork_generation() & 0xffff_ffff, NONE)),
            position: AtomicU64::new(0),
            reserved: AtomicU64::new(NO_RESERVATION),
        }
    }

    /// This owner with entry `index`, registered by this process (the position `register`
    /// noted is kept).
    pub(super) fn bound(&self, index: u32) -> Owner {
        Owner {
            word: AtomicU64::new(pack(fork_generation() & 0xffff_ffff, index)),
            position: AtomicU64::new(self.position.load(Ordering::Relaxed)),
            reserved: AtomicU64::new(NO_RESERVATION),
        }
    }

    /// Notes (or, with None, forgets) an entry reserved for a child about to be forked.
    pub(super) fn set_reserved(&self, index: Option<u32>) {
        self.reserved.store(index.map_or(NO_RESERVATION, |i| pack(u64::from(PENDING), i)), Ordering::Relaxed);
    }

    /// The entry reserved by `prepare_fork` and not claimed yet.
    pub(super) fn reserved(&self) -> Option<u32> {
        let w = self.reserved.load(Ordering::Relaxed);
        (w != NO_RESERVATION && (w >> 32) as u32 == PENDING).then_some(w as u32)
    }

    /// Notes that this process (fork generation `generation`) claimed reserved entry `index`.
    pub(super) fn set_reserved_here(&self, index: u32, generation: u64) {
        self.reserved.store(pack(generation & 0xffff_ffff, index), Ordering::Relaxed);
    }

    /// The entry this process (fork generation `generation`) claimed for the handle, if any.
    pub(super) fn reserved_here(&self, generation: u64) -> Option<u32> {
        let w = self.reserved.load(Ordering::Relaxed);
        (w != NO_RESERVATION && (w >> 32) as u32 == generation as u32 && (w >> 32) as u32 != PENDING).then_some(w as u32)
    }

    /// Notes the last frame a lossless handle consumed.
    pub(super) fn consumed(&self, seq: u64) {
        self.position.store(seq, Ordering::Relaxed);
    }

    /// As `consumed`, for a position that only moves up.
    pub(super) fn consumed_max(&self, seq: u64) {
        self.position.fetch_max(seq, Ordering::Relaxed);
    }

    /// (generation, index).
    fn load(&self) -> (u32, u32) {
        let w = self.word.load(Ordering::Acquire);
        ((w >> 32) as u32, w as u32)
    }

    fn current() -> u32 {
        fork_generation() as u32
    }
}

impl Stream {
    /// Whether this handle came from another process through fork() and has not registered an
    /// entry of its own here yet: its entry, pins and write-lock holds are the parent's, and
    /// this process must leave them alone.
    #[inline]
    pub fn is_inherited(&self) -> bool {
        self.entry.load().0 != Owner::current()
    }

    /// Whether this handle has a reader entry (false for `peek` handles).
    pub fn is_attached(&self) -> bool {
        self.entry.load().1 != NONE
    }

    /// This handle's entry index if this process registered it (None: no entry, or inherited
    /// and not adopted). Never registers.
    pub(super) fn owned_index(&self) -> Option<u32> {
        let (generation, index) = self.entry.load();
        (generation == Owner::current() && index < ADOPTING).then_some(index)
    }

    /// This handle's entry index in this process, registering one first if the handle came
    /// through fork() (see the module documentation). Errors only when the reader table is full.
    #[inline]
    pub fn adopt(&self) -> Result<u32> {
        let (generation, index) = self.entry.load();
        if (generation == Owner::current() && index != ADOPTING) || index == NONE {
            return Ok(index);
        }
        self.adopt_slow()
    }

    #[cold]
    fn adopt_slow(&self) -> Result<u32> {
        let now = u64::from(Owner::current());
        loop {
            let word = self.entry.word.load(Ordering::Acquire);
            let (generation, index) = ((word >> 32) as u32, word as u32);
            if u64::from(generation) == now {
                if index == ADOPTING {
                    // Another thread of this process is registering the entry.
                    std::thread::yield_now();
                    continue;
                }
                return Ok(index);
            }
            if index == NONE {
                return Ok(NONE);
            }
            if self.entry.word.compare_exchange(word, pack(now, ADOPTING), Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            // The counts of pins and lock holds are the parent's: its views and holds, which
            // this process must never release. Views inherited here do not unpin (`Pinned`
            // remembers the generation it was pinned in).
            *self.pins.lock().unwrap_or_else(|p| p.into_inner()) = PinCounts::default();
            *self.holds.lock().unwrap_or_else(|p| p.into_inner()) = (0, 0);
            self.disown_kept();
            let resume = match self.mode {
                ReaderMode::Lossless => self.entry.position.load(Ordering::Relaxed),
                ReaderMode::Latest => self.seen.load(Ordering::Relaxed),
            };
            // An entry reserved for this process at fork() (fork.rs) has held the frames after
            // the inherited position since then; else register one now.
            let registered = match self.take_fork_reservation(resume) {
                Some(index) => Ok(index),
                None => self.register_at(self.mode, Some(resume)),
            };
            return match registered {
                Ok(new) => {
                    self.entry.word.store(pack(now, new), Ordering::Release);
                    Ok(new)
                }
                Err(e) => {
                    self.entry.word.store(word, Ordering::Release);
                    Err(e)
                }
            };
        }
    }

    /// Where this handle is: the last frame it consumed (lossless) or saw (latest), as this
    /// process knows it. Never registers. A copy of the handle sent to another process resumes
    /// from here (see `resume_from`).
    pub fn position(&self) -> u64 {
        match self.mode {
            ReaderMode::Lossless => self.entry.position.load(Ordering::Relaxed),
            ReaderMode::Latest => self.seen.load(Ordering::Relaxed),
        }
    }

    /// Moves a handle that was just opened back to `seq` (only ever back: a later position is
    /// ignored), so that it continues where another handle was (a handle pickled into another
    /// process). A lossless handle then holds every frame after `seq` that the ring still has;
    /// frames already reclaimed are counted as missed when a read finds the gap.
    pub fn resume_from(&self, seq: u64) -> Result<()> {
        let index = self.adopt()?;
        self.seen.fetch_min(seq, Ordering::Relaxed);
        if self.mode == ReaderMode::Lossless && index != NONE {
            self.entry.position.fetch_min(seq, Ordering::Relaxed);
            self.reader(index).consumed.fetch_min(seq, crate::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}
