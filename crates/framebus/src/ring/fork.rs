//! Lossless handles across fork(): the child's reader entry is reserved before the process
//! forks, so that no frame after the handle's position is reclaimed before the child uses it.
//!
//! Without a reservation, a forked child's copy of a lossless handle registers its entry on
//! first use (owner.rs). A parent that closes its own copy right after fork() ends the
//! backpressure, the writer runs ahead, and the child later finds the gap (counted as missed,
//! never lost silently, but lost). With one:
//! - `prepare_fork` (in the parent, just before fork()) claims a free entry in
//!   `mode::RESERVED` at the handle's position, stamped with the parent's pid and start time 0
//!   (unclaimed), holding frames back until `reserved_until_s`;
//! - `after_fork_child` (in the child) stamps it with the child's pid and start time, so the
//!   entry dies with the child (the writer reaps it like any dead reader's) and is the child's;
//! - `after_fork_parent` forgets it in the parent;
//! - the child's first use of the handle (`adopt`) turns it into its lossless entry, resuming
//!   from the inherited position; closing or dropping the handle there frees it.
//!
//! A child that never uses the handle (a worker that inherited every handle of its parent)
//! must not hold a writer back for good, so a reservation holds frames for a grace period
//! only (`FRAMEBUS_FORK_GRACE` seconds, default 5; 0 turns reservations off). After that the
//! writer ignores it, and a child that uses the handle later counts what it lost as missed.
//! An entry a child never claimed (fork() failed, or the child was killed at once) is freed by
//! any reaper once its grace is over.
//!
//! Who calls these: the Python bindings, from `os.register_at_fork` hooks, for every open
//! lossless handle of the process; a Rust program that forks calls them itself.

use std::time::Duration;

use super::handle::{ReaderMode, Stream};
use super::layout::{mode, unpack_published, ReaderEntry};
use crate::process::{fork_generation, ProcessId};
use crate::sync::atomic::Ordering;

/// Default grace of a reservation.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// How long a fork reservation holds frames back: `FRAMEBUS_FORK_GRACE` (seconds, a number
/// >= 0; 0 turns reservations off), else 5 s. An unreadable value keeps the default.
pub fn fork_grace() -> Duration {
    std::env::var("FRAMEBUS_FORK_GRACE")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e6)
        .map_or(DEFAULT_GRACE, Duration::from_secs_f64)
}

/// CLOCK_MONOTONIC in whole seconds: one clock for every process of the machine.
pub(super) fn monotonic_s() -> u32 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec.clamp(0, i64::from(u32::MAX)) as u32
}

/// Whether entry `e` holds frames after its `consumed` back from the writer: a lossless entry,
/// or a fork reservation within its grace.
pub(super) fn holds_frames(e: &ReaderEntry) -> bool {
    match e.mode.load(Ordering::SeqCst) {
        mode::LOSSLESS => true,
        mode::RESERVED => monotonic_s() < e.reserved_until_s.load(Ordering::SeqCst),
        _ => false,
    }
}

/// Whether entry `e` is a reservation no child claimed whose grace is over (freed by reapers).
pub(super) fn abandoned_reservation(e: &ReaderEntry) -> bool {
    e.mode.load(Ordering::SeqCst) == mode::RESERVED && e.start.load(Ordering::SeqCst) == 0 && !holds_frames(e)
}

impl Stream {
    /// In the parent, just before fork(): reserves a reader entry for the child's copy of this
    /// handle (lossless handles with an entry only; see the module documentation). Nothing
    /// happens when the table is full or reservations are off: the child then registers on
    /// first use and counts what it lost as missed.
    pub fn prepare_fork(&self) {
        self.entry.set_reserved(None);
        if self.mode != ReaderMode::Lossless || !self.is_attached() {
            return;
        }
        // A handle closed while its views still pin slots holds nothing back.
        if self.owned_index().is_some_and(|i| self.reader(i).mode.load(Ordering::SeqCst) == mode::CLOSED) {
            return;
        }
        let grace = fork_grace();
        if grace.is_zero() {
            return;
        }
        let until = monotonic_s().saturating_add(grace.as_secs_f64().ceil() as u32).saturating_add(1);
        let position = self.position();
        let me = ProcessId::current().pid;
        for i in 0..self.geometry.max_readers {
            let e = self.reader(i);
            if e.pid.load(Ordering::Relaxed) != 0 || e.pid.compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            e.start.store(0, Ordering::Release);
            super::readers::clear_entry(e);
            let (newest, _) = unpack_published(self.header().published.load(Ordering::SeqCst));
            // The handle's own entry holds every frame after `position` while this runs, so
            // none of them can be reclaimed before the reservation holds them too.
            e.consumed.store(position.min(newest), Ordering::SeqCst);
            e.reserved_until_s.store(until, Ordering::SeqCst);
            e.mode.store(mode::RESERVED, Ordering::SeqCst);
            self.header().readers_hwm.fetch_max(i + 1, Ordering::SeqCst);
            self.entry.set_reserved(Some(i));
            return;
        }
    }

    /// In the parent, after fork(): the reservation is the child's now (or, if fork() failed,
    /// nobody's: its grace runs out and a reaper frees it).
    pub fn after_fork_parent(&self) {
        self.entry.set_reserved(None);
    }

    /// In the child, after fork(): stamps this handle's reservation with this process, so that
    /// it is freed when the process exits, and keeps it for the handle's first use here.
    pub fn after_fork_child(&self) {
        let Some(index) = self.entry.reserved() else { return };
        let e = self.reader(index);
        if e.mode.load(Ordering::SeqCst) != mode::RESERVED || e.start.load(Ordering::SeqCst) != 0 {
            self.entry.set_reserved(None);
            return;
        }
        let me = ProcessId::current();
        e.pid.store(me.pid, Ordering::SeqCst);
        e.start.store(me.start, Ordering::SeqCst);
        self.entry.set_reserved_here(index, fork_generation());
    }

    /// For `adopt`: the reservation this process claimed for the handle, if any (taken: it
    /// is the handle's entry from now on). The entry turns lossless at `resume`.
    pub(super) fn take_fork_reservation(&self, resume: u64) -> Option<u32> {
        let index = self.entry.reserved_here(fork_generation())?;
        self.entry.set_reserved(None);
        let e = self.reader(index);
        let me = ProcessId::current();
        if e.pid.load(Ordering::SeqCst) != me.pid || e.mode.load(Ordering::SeqCst) != mode::RESERVED {
            return None;
        }
        let (newest, _) = unpack_published(self.header().published.load(Ordering::SeqCst));
        let from = resume.min(newest);
        e.consumed.store(from, Ordering::SeqCst);
        self.seen.store(from, Ordering::Relaxed);
        self.entry.consumed(from);
        e.reserved_until_s.store(0, Ordering::Relaxed);
        // Frames the writer reclaimed after the grace are found as a gap by the next read
        // and counted as missed (reader.rs, `take_next`).
        e.mode.store(mode::LOSSLESS, Ordering::SeqCst);
        Some(index)
    }

    /// Frees the reservation this process claimed for a handle it never used (the handle is
    /// closed or dropped in the child).
    pub(super) fn release_fork_reservation(&self) {
        let Some(index) = self.entry.reserved_here(fork_generation()) else { return };
        self.entry.set_reserved(None);
        let e = self.reader(index);
        if e.pid.load(Ordering::SeqCst) != ProcessId::current().pid || e.mode.load(Ordering::SeqCst) != mode::RESERVED {
            return;
        }
        e.mode.store(mode::LATEST, Ordering::SeqCst);
        e.reserved_until_s.store(0, Ordering::Relaxed);
        e.start.store(0, Ordering::Relaxed);
        e.pid.store(0, Ordering::Release);
        self.wake_writer();
    }
}
