//! The reader table: one entry per attached handle with its process identity, mode, pins and
//! position, so that the writer can honour pins and lossless readers and reclaim dead ones.

use super::handle::{ReaderMode, Stream};
use super::layout::{mode, role, unpack_published, ReaderEntry};
use crate::error::{Error, Result};
use crate::process::ProcessId;
use crate::sync::atomic::Ordering;
use crate::sync::futex;

/// `ReaderEntry::pid` while a reaper clears a dead handle's entry (never a real pid).
const RECLAIMING: u32 = u32::MAX;

/// What the writer must respect when choosing a slot.
pub(super) struct Constraints {
    /// Union of all pin masks.
    pub pinned: u64,
    /// Smallest `consumed` of a lossless reader, or u64::MAX without any.
    pub min_consumed: u64,
    /// Smallest `consumed` of every other handle that reads (lossless, or latest with a frame
    /// read; u64::MAX without any): the newest frame has been taken by every reader when this
    /// reaches its number.
    pub min_taken: u64,
}

/// Clears what a claimed entry's last user left in it (pins, counters, role, label,
/// reservation); its pid, start, mode and position are set by whoever claimed it.
pub(super) fn clear_entry(e: &ReaderEntry) {
    e.pinned.store(0, Ordering::SeqCst);
    e.missed.store(0, Ordering::Relaxed);
    e.reads.store(0, Ordering::Relaxed);
    e.pinned_since_ns.store(0, Ordering::Relaxed);
    e.writer_waits.store(0, Ordering::Relaxed);
    e.role.store(role::HANDLE, Ordering::Relaxed);
    e.kept.store(0, Ordering::Relaxed);
    e.reserved_until_s.store(0, Ordering::Relaxed);
    for word in &e.label {
        word.store(0, Ordering::Relaxed);
    }
}

impl Stream {
    /// Claims a free entry for this handle; dead entries are reclaimed when the table is full.
    pub(super) fn register(&self, mode_: ReaderMode) -> Result<u32> {
        self.register_at(mode_, None)
    }

    /// As `register`; with `resume`, the handle continues from that sequence (a handle adopted
    /// in a forked child, owner.rs) instead of starting at the newest frame: a lossless entry
    /// holds every frame after it that the ring still has, and a read counts the frames already
    /// reclaimed as missed.
    pub(super) fn register_at(&self, mode_: ReaderMode, resume: Option<u64>) -> Result<u32> {
        let me = ProcessId::current();
        for attempt in 0..2 {
            for i in 0..self.geometry.max_readers {
                let e = self.reader(i);
                if e.pid.load(Ordering::Relaxed) != 0 || e.pid.compare_exchange(0, me.pid, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                    continue;
                }
                e.start.store(me.start, Ordering::Release);
                clear_entry(e);
                self.header().readers_hwm.fetch_max(i + 1, Ordering::SeqCst);
                let (seq, _) = unpack_published(self.header().published.load(Ordering::SeqCst));
                if let Some(from) = resume {
                    // Never past the newest frame (a stream created anew under the name).
                    let from = from.min(seq);
                    e.consumed.store(from, Ordering::SeqCst);
                    self.seen.store(from, Ordering::Relaxed);
                    self.entry.consumed(from);
                    e.mode.store(if mode_ == ReaderMode::Lossless { mode::LOSSLESS } else { mode::LATEST }, Ordering::SeqCst);
                    return Ok(i);
                }
                e.consumed.store(seq, Ordering::SeqCst);
                self.seen.store(seq, Ordering::Relaxed);
                self.entry.consumed(seq);
                if mode_ == ReaderMode::Lossless {
                    e.mode.store(mode::LOSSLESS, Ordering::SeqCst);
                    // A writer that scanned before the store above may still overwrite frames
                    // up to the newest one; start after whatever is newest now.
                    let (now, _) = unpack_published(self.header().published.load(Ordering::SeqCst));
                    e.consumed.store(now, Ordering::SeqCst);
                    self.seen.store(now, Ordering::Relaxed);
                    self.entry.consumed(now);
                } else {
                    e.mode.store(mode::LATEST, Ordering::SeqCst);
                }
                return Ok(i);
            }
            if attempt == 0 && self.reap_dead_readers() == 0 {
                break;
            }
        }
        Err(Error::TooManyReaders { name: self.name.clone(), max: self.geometry.max_readers })
    }

    /// Frees this handle's entry (pins and lossless position included) and wakes a waiting writer.
    pub(super) fn unregister(&self) {
        // A handle inherited through fork() and not adopted holds the parent's entry: leave it
        // alone (owner.rs), but free the entry reserved for it at fork (fork.rs). The pid check
        // guards an entry reaped and reused meanwhile.
        self.release_fork_reservation();
        let Some(index) = self.owned_index() else { return };
        let e = self.reader(index);
        if e.pid.load(Ordering::Acquire) != ProcessId::current().pid {
            return;
        }
        e.mode.store(mode::LATEST, Ordering::SeqCst);
        e.pinned.store(0, Ordering::SeqCst);
        e.start.store(0, Ordering::Relaxed);
        e.pid.store(0, Ordering::Release);
        self.wake_writer();
    }

    /// Ends this handle's say over the writer when it is closed while views or loan exports
    /// of it still pin slots (they keep the core handle, and so its entry, alive): a lossless
    /// handle stops holding frames back at once, and the entry is marked `CLOSED`; only the
    /// pins of views still alive remain, and the entry is freed when the last one goes.
    pub fn end_backpressure(&self) {
        let Some(index) = self.owned_index() else { return };
        let e = self.reader(index);
        if e.pid.load(Ordering::Acquire) != ProcessId::current().pid {
            return;
        }
        e.mode.store(mode::CLOSED, Ordering::SeqCst);
        self.wake_writer();
    }

    /// Entries in use: (index, process).
    pub fn attached(&self) -> Vec<(u32, ProcessId)> {
        let hwm = self.readers_hwm();
        (0..hwm)
            .filter_map(|i| {
                let e = self.reader(i);
                let pid = e.pid.load(Ordering::Acquire);
                (pid != 0 && pid != RECLAIMING).then(|| (i, ProcessId { pid, start: e.start.load(Ordering::Acquire) }))
            })
            .collect()
    }

    /// Number of live attached handles (dead ones are not counted).
    pub fn ownercount(&self) -> usize {
        self.attached().iter().filter(|(_, p)| p.is_alive()).count()
    }

    /// Releases the entries of processes that died (their pins and lossless positions);
    /// returns how many were freed.
    pub fn reap_dead_readers(&self) -> usize {
        let mine = ProcessId::current().pid;
        let mut freed = 0;
        for (i, proc_) in self.attached() {
            let e = self.reader(i);
            // A fork reservation no child claimed is freed once its grace is over (fork.rs).
            if (proc_.pid == mine || proc_.is_alive()) && !super::fork::abandoned_reservation(e) {
                continue;
            }
            // Take the entry out of everyone's hands before clearing it, so that a concurrent
            // reaper cannot clear an entry a new handle has claimed meanwhile.
            if e.pid.compare_exchange(proc_.pid, RECLAIMING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            e.mode.store(mode::LATEST, Ordering::SeqCst);
            e.pinned.store(0, Ordering::SeqCst);
            e.start.store(0, Ordering::Relaxed);
            e.pid.store(0, Ordering::Release);
            freed += 1;
        }
        if freed > 0 {
            self.wake_writer();
        }
        freed
    }

    pub(super) fn readers_hwm(&self) -> u32 {
        self.header().readers_hwm.load(Ordering::SeqCst).min(self.geometry.max_readers)
    }

    /// Pins and lossless positions of all attached handles.
    pub(super) fn constraints(&self) -> Constraints {
        let mut c = Constraints { pinned: 0, min_consumed: u64::MAX, min_taken: u64::MAX };
        let own = self.owned_index();
        for i in 0..self.readers_hwm() {
            let e = self.reader(i);
            if e.pid.load(Ordering::SeqCst) == 0 {
                continue;
            }
            c.pinned |= e.pinned.load(Ordering::SeqCst);
            let m = e.mode.load(Ordering::SeqCst);
            // Lossless entries, and fork reservations within their grace (fork.rs).
            let holds = super::fork::holds_frames(e);
            if holds {
                c.min_consumed = c.min_consumed.min(e.consumed.load(Ordering::SeqCst));
            }
            // Handles that read: lossless ones (their position is exact) and latest ones once
            // they have read a frame. This handle (the writing one), closed ones and handles
            // that never read (a creator that hands the name on, a writer, an idle monitor)
            // do not hold the newest frame back; should they read it during a rewrite, they
            // wait for the new frame.
            if m != mode::CLOSED && Some(i) != own && (holds || (m != mode::RESERVED && e.reads.load(Ordering::Relaxed) > 0)) {
                c.min_taken = c.min_taken.min(e.consumed.load(Ordering::SeqCst));
            }
        }
        c
    }

    /// Counts a writer wait against the lossless readers furthest behind (the ones holding the
    /// oldest unread frame), for monitors. Only called when a writer has to wait.
    pub(super) fn blame_slowest_readers(&self) {
        let c = self.constraints();
        if c.min_consumed == u64::MAX {
            return;
        }
        for i in 0..self.readers_hwm() {
            let e = self.reader(i);
            if e.pid.load(Ordering::Relaxed) != 0 && super::fork::holds_frames(e) && e.consumed.load(Ordering::Relaxed) == c.min_consumed {
                e.writer_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// This handle's role (`role::*`): what `set_role` tagged it, or `role::WRITER` once it took
    /// the write lock (a first write). `role::HANDLE` for a handle without an entry.
    /// A handle inherited through fork() that this process has not used yet has not written
    /// here: `role::HANDLE` (never registers).
    pub fn role(&self) -> u32 {
        match self.owned_index() {
            Some(index) => self.reader(index).role.load(Ordering::Relaxed),
            None => role::HANDLE,
        }
    }

    /// Live handles of this stream other than this one whose role writes it (`role::writes`)
    /// and that are not closed: the writers that keep the stream going when this one closes.
    pub fn other_writers(&self) -> usize {
        self.attached()
            .into_iter()
            .filter(|&(i, p)| {
                let e = self.reader(i);
                Some(i) != self.owned_index()
                    && p.is_alive()
                    && e.mode.load(Ordering::Relaxed) != mode::CLOSED
                    && role::writes(e.role.load(Ordering::Relaxed))
            })
            .count()
    }

    /// Tags this handle's entry with what it is for and a short label (UTF-8, cut at
    /// `role::LABEL_BYTES` bytes on a character boundary), for `framebus top`.
    pub fn set_role(&self, role_: u32, label: &str) {
        let Ok(index) = self.adopt() else { return };
        if index == u32::MAX {
            return;
        }
        let e = self.reader(index);
        let mut bytes = [0u8; role::LABEL_BYTES];
        let mut end = label.len().min(role::LABEL_BYTES);
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        bytes[..end].copy_from_slice(&label.as_bytes()[..end]);
        for (word, chunk) in e.label.iter().zip(bytes.chunks_exact(8)) {
            word.store(u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8])), Ordering::Relaxed);
        }
        // Flags (a download) stay: they say how the handle reads, not what it is for.
        let flags = e.role.load(Ordering::Relaxed) & !role::KIND;
        e.role.store((role_ & role::KIND) | flags, Ordering::Release);
    }

    /// Marks this handle's entry as one that copies device frames to host memory (shown by
    /// `framebus ls` and `top`).
    pub fn mark_download(&self) {
        let Ok(index) = self.adopt() else { return };
        if index != u32::MAX {
            self.reader(index).role.fetch_or(role::DOWNLOAD, Ordering::AcqRel);
        }
    }

    /// Pin masks of all entries that may be in use.
    pub(super) fn pin_masks(&self) -> impl Iterator<Item = &crate::sync::atomic::AtomicU64> + '_ {
        (0..self.readers_hwm()).map(|r| &self.reader(r).pinned)
    }

    /// Union of the pin masks of every entry but this handle's.
    pub(super) fn pinned_by_others(&self) -> u64 {
        let mine = self.owned_index();
        (0..self.readers_hwm()).filter(|&r| Some(r) != mine).fold(0, |m, r| m | self.reader(r).pinned.load(Ordering::SeqCst))
    }

    /// Tells a writer waiting for a slot that one may have become free.
    pub(super) fn wake_writer(&self) {
        let h = self.header();
        if h.writer_waiters.load(Ordering::SeqCst) > 0 {
            h.released.fetch_add(1, Ordering::SeqCst);
            futex::wake_all(&h.released);
        }
    }
}

impl Stream {
    /// Mode of reader entry `i`.
    pub(crate) fn entry_mode(&self, i: u32) -> ReaderMode {
        if self.reader(i).mode.load(Ordering::Relaxed) == mode::LOSSLESS {
            ReaderMode::Lossless
        } else {
            ReaderMode::Latest
        }
    }
}
