//! The lock-free heart of the ring, as small functions over atomics so that loom can check them
//! (`RUSTFLAGS="--cfg loom" cargo test -p framebus --release --lib loom`).
//!
//! A slot's state word holds `seq << 1 | WRITING`; only the write-lock holder stores it. Each
//! attached handle owns a pin mask with one bit per slot. The two sides are a Dekker pair:
//!
//! * writer: store `WRITING` into the state, then look at every pin mask;
//! * reader: set its pin bit, then look at the state.
//!
//! A sequentially consistent fence sits between the store and the load on each side, so at least
//! one side sees the other: either the writer sees the pin and backs off (restoring the state),
//! or the reader sees `WRITING` (or a newer sequence) and backs off. A slot is therefore never
//! written while pinned. (The fences, not SeqCst accesses alone, are what loom can check.)

use super::layout::{slot_state, WRITING};
use crate::sync::atomic::{fence, AtomicU64, Ordering};

/// Writer: tries to take the slot whose state is `current` (not writing) for writing. Fails,
/// leaving the state as it was, if any pin mask has `bit` set.
pub fn claim<'a>(state: &AtomicU64, current: u64, bit: u64, mut pin_masks: impl Iterator<Item = &'a AtomicU64>) -> bool {
    debug_assert_eq!(current & WRITING, 0);
    state.store(current | WRITING, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    if pin_masks.any(|mask| mask.load(Ordering::SeqCst) & bit != 0) {
        state.store(current, Ordering::SeqCst);
        return false;
    }
    true
}

/// Writer: publishes the frame `seq` in a claimed slot. Everything written to the slot before
/// this call is visible to a reader that pins it afterwards (release/acquire on the state).
pub fn commit(state: &AtomicU64, seq: u64) {
    state.store(slot_state(seq, false), Ordering::Release);
}

/// Writer: gives up a claimed slot; it holds no frame afterwards.
pub fn abort(state: &AtomicU64) {
    state.store(slot_state(0, false), Ordering::Release);
}

/// Reader: pins the slot if it still holds committed frame `seq`. `held` tells whether this
/// handle already holds a pin on the slot (the bit is then set and stays set).
pub fn pin(state: &AtomicU64, my_mask: &AtomicU64, bit: u64, seq: u64, held: bool) -> bool {
    if !held {
        my_mask.fetch_or(bit, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    if state.load(Ordering::SeqCst) == slot_state(seq, false) {
        return true;
    }
    if !held {
        my_mask.fetch_and(!bit, Ordering::SeqCst);
    }
    false
}

/// What a reader makes of the newest frame's slot after it failed to pin frame `seq` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailedPin {
    /// `published` names another frame now: look again.
    Moved,
    /// The writer is rewriting the slot (it may once every reader has taken the frame): wait
    /// for the new frame, unless the claim turns out abandoned.
    Rewriting,
    /// The slot was emptied while `published` still names its frame: a rewrite was given up
    /// and the newest frame went with it.
    Lost,
    /// Anything else: a commit on its way to `published`; look again.
    Other,
}

/// Classifies a failed pin of the newest frame: `moved` tells whether `published` changed
/// since it named `seq`, `state` is the slot's state read before that check.
pub fn after_failed_pin(seq: u64, moved: bool, state: u64) -> AfterFailedPin {
    if moved {
        AfterFailedPin::Moved
    } else if state == slot_state(0, false) {
        AfterFailedPin::Lost
    } else if state == slot_state(seq, false) | WRITING {
        AfterFailedPin::Rewriting
    } else {
        AfterFailedPin::Other
    }
}

/// Reader: drops this handle's last pin on the slot.
pub fn unpin(my_mask: &AtomicU64, bit: u64) {
    my_mask.fetch_and(!bit, Ordering::SeqCst);
}

/// Device streams' release records: a seqlock over a few words that one handle (its owner)
/// replaces and any writer reads. Publishes `values` into `words`; returns the new version
/// (even, non-zero). Only the record's owner calls this, so there is one publisher at a time.
pub fn publish_words(version: &AtomicU64, words: &[AtomicU64], values: &[u64]) -> u64 {
    let odd = version.load(Ordering::Relaxed) | 1;
    version.store(odd, Ordering::Relaxed);
    fence(Ordering::Release);
    for (word, value) in words.iter().zip(values) {
        word.store(*value, Ordering::Relaxed);
    }
    let next = odd.wrapping_add(1).max(2);
    version.store(next, Ordering::Release);
    next
}

/// Reads a release record into `out`: its version when the words read are one publication,
/// whole; None while it is empty (version 0) or being replaced (odd, or changed meanwhile).
pub fn read_words(version: &AtomicU64, words: &[AtomicU64], out: &mut [u64]) -> Option<u64> {
    let before = version.load(Ordering::Acquire);
    if before == 0 || before & 1 == 1 {
        return None;
    }
    for (word, value) in words.iter().zip(out.iter_mut()) {
        *value = word.load(Ordering::Relaxed);
    }
    fence(Ordering::Acquire);
    (version.load(Ordering::Relaxed) == before).then_some(before)
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    struct Slot {
        state: AtomicU64,
        mask: AtomicU64,
        payload: UnsafeCell<u64>,
    }

    /// A writer rewriting a slot and a reader pinning it never touch the payload at the same
    /// time, and a pinned reader sees exactly the frame it pinned.
    #[test]
    fn loom_claim_and_pin_exclude_each_other() {
        loom::model(|| {
            let slot = Arc::new(Slot { state: AtomicU64::new(slot_state(1, false)), mask: AtomicU64::new(0), payload: UnsafeCell::new(1) });
            let w = slot.clone();
            let writer = loom::thread::spawn(move || {
                if claim(&w.state, slot_state(1, false), 1, std::iter::once(&w.mask)) {
                    // SAFETY (model): the claim excludes pinned readers; loom checks it.
                    w.payload.with_mut(|p| unsafe { *p = 2 });
                    commit(&w.state, 2);
                }
            });
            if pin(&slot.state, &slot.mask, 1, 1, false) {
                let v = slot.payload.with(|p| unsafe { *p });
                assert_eq!(v, 1, "a pinned frame changed under the reader");
                unpin(&slot.mask, 1);
            }
            writer.join().unwrap();
        });
    }

    /// A reader that pins after a commit sees the committed payload (release/acquire).
    #[test]
    fn loom_commit_publishes_payload() {
        loom::model(|| {
            let slot = Arc::new(Slot { state: AtomicU64::new(slot_state(0, false)), mask: AtomicU64::new(0), payload: UnsafeCell::new(0) });
            let w = slot.clone();
            let writer = loom::thread::spawn(move || {
                assert!(claim(&w.state, slot_state(0, false), 1, std::iter::empty()));
                w.payload.with_mut(|p| unsafe { *p = 7 });
                commit(&w.state, 1);
            });
            if pin(&slot.state, &slot.mask, 1, 1, false) {
                assert_eq!(slot.payload.with(|p| unsafe { *p }), 7);
                unpin(&slot.mask, 1);
            }
            writer.join().unwrap();
        });
    }

    /// A writer reading a release record while its owner replaces it gets one publication whole
    /// (the old words with the old version, or the new with the new), never a mix.
    #[test]
    fn loom_release_records_are_never_torn() {
        loom::model(|| {
            let record = Arc::new((AtomicU64::new(0), [AtomicU64::new(0), AtomicU64::new(0)]));
            assert_eq!(publish_words(&record.0, &record.1, &[1, 1]), 2);
            let owner = record.clone();
            let publisher = loom::thread::spawn(move || publish_words(&owner.0, &owner.1, &[2, 2]));
            let mut out = [0u64; 2];
            match read_words(&record.0, &record.1, &mut out) {
                Some(2) => assert_eq!(out, [1, 1]),
                Some(4) => assert_eq!(out, [2, 2]),
                Some(v) => panic!("version {v}"),
                None => {}
            }
            assert_eq!(publisher.join().unwrap(), 4);
            assert_eq!(read_words(&record.0, &record.1, &mut out), Some(4));
            assert_eq!(out, [2, 2]);
        });
    }

    /// A writer rewriting the newest frame's slot (every reader had taken that frame) and a
    /// reader looking for the newest frame: the reader gets frame 1 whole (pinned before the
    /// claim), frame 2 whole (after the commit), or, when the rewrite is given up, no frame;
    /// never bytes of one frame under the other's number.
    fn rewrite_model(commit_it: bool) {
        loom::model(move || {
            let slot = Arc::new(Slot { state: AtomicU64::new(slot_state(1, false)), mask: AtomicU64::new(0), payload: UnsafeCell::new(1) });
            let published = Arc::new(AtomicU64::new(1));
            let (w, wp) = (slot.clone(), published.clone());
            let writer = loom::thread::spawn(move || {
                if claim(&w.state, slot_state(1, false), 1, std::iter::once(&w.mask)) {
                    // SAFETY (model): the claim excludes pinned readers; loom checks it.
                    w.payload.with_mut(|p| unsafe { *p = 2 });
                    if commit_it {
                        commit(&w.state, 2);
                        wp.store(2, Ordering::SeqCst);
                    } else {
                        abort(&w.state);
                    }
                }
            });
            let got = loop {
                let seq = published.load(Ordering::SeqCst);
                if pin(&slot.state, &slot.mask, 1, seq, false) {
                    let v = slot.payload.with(|p| unsafe { *p });
                    assert_eq!(v, seq, "frame {seq} showed another frame's bytes");
                    unpin(&slot.mask, 1);
                    break Some(seq);
                }
                let state = slot.state.load(Ordering::SeqCst);
                let moved = published.load(Ordering::SeqCst) != seq;
                match after_failed_pin(seq, moved, state) {
                    AfterFailedPin::Lost => break None,
                    _ => loom::thread::yield_now(),
                }
            };
            writer.join().unwrap();
            match (commit_it, got) {
                (_, Some(1)) | (true, Some(2)) | (false, None) => {}
                other => panic!("unexpected outcome {other:?}"),
            }
        });
    }

    #[test]
    fn loom_a_rewrite_of_the_newest_slot_is_waited_for() {
        rewrite_model(true);
    }

    #[test]
    fn loom_a_rewrite_given_up_leaves_no_frame() {
        rewrite_model(false);
    }

    /// Two pins of one handle and a writer: the bit stays set while either pin is held.
    #[test]
    fn loom_abort_leaves_no_frame() {
        loom::model(|| {
            let slot = Arc::new(Slot { state: AtomicU64::new(slot_state(3, false)), mask: AtomicU64::new(0), payload: UnsafeCell::new(3) });
            let w = slot.clone();
            let writer = loom::thread::spawn(move || {
                if claim(&w.state, slot_state(3, false), 1, std::iter::once(&w.mask)) {
                    w.payload.with_mut(|p| unsafe { *p = 99 });
                    abort(&w.state);
                }
            });
            if pin(&slot.state, &slot.mask, 1, 3, false) {
                assert_eq!(slot.payload.with(|p| unsafe { *p }), 3);
                unpin(&slot.mask, 1);
            }
            writer.join().unwrap();
            assert!(!pin(&slot.state, &slot.mask, 1, 99, false));
        });
    }
}
