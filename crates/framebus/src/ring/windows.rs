//! Where this handle reaches each slot's shared pages.
//!
//! Normally at the slot's place in the handle's read-write mapping. When a kept loan's frame is
//! given a private copy at that place (ring/kept.rs: the slot is needed again while arrays of
//! the loan are still alive), the handle goes on reaching the slot through a *window*: another
//! read-write shared mapping of the same bytes. `Stream::payload` reads the current address of
//! a slot with one atomic load; it only changes during an eviction, which happens while the
//! slot is pinned by the kept frame alone, so no copy of this handle is using the slot then.
//!
//! Windows are kept for reuse: an evicted range becomes a spare shared window of its slot once
//! the kept arrays are gone, so the number of mappings a handle makes stays bounded (a slot has
//! at most [`SPARES_PER_SLOT`] spare windows plus the ranges its live kept frames occupy).

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use super::handle::Stream;
use super::layout::MAX_SLOTS;
use crate::error::Result;
use crate::shm::Mapping;

/// Spare windows a slot keeps for its next eviction; more are unmapped.
pub const SPARES_PER_SLOT: usize = 2;

/// Per-slot addresses of one handle (see the module documentation).
pub(super) struct SlotWindows {
    /// The address through which the handle reaches each slot; null: its place in the mapping.
    current: [AtomicPtr<u8>; MAX_SLOTS as usize],
    store: Mutex<WindowStore>,
}

#[derive(Default)]
struct WindowStore {
    /// Shared windows not in use: (slot, address).
    spare: Vec<(u32, *mut u8)>,
    /// The mappings made for windows; unmapped with the handle.
    owned: Vec<Mapping>,
}

// SAFETY: the addresses are plain numbers naming ranges of mappings the handle owns (its own
// mapping or `owned`); nothing is dereferenced through them here.
unsafe impl Send for WindowStore {}

impl Default for SlotWindows {
    fn default() -> SlotWindows {
        SlotWindows { current: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())), store: Mutex::new(WindowStore::default()) }
    }
}

impl SlotWindows {
    /// The window slot `i` is reached through, if it is not its place in the mapping.
    pub(super) fn current(&self, i: u32) -> Option<*mut u8> {
        let p = self.current[i as usize].load(Ordering::Acquire);
        (!p.is_null()).then_some(p)
    }
}

impl Stream {
    /// The place of slot `i` in the handle's mapping, its file offset and its length.
    pub(super) fn home_range(&self, i: u32) -> (*mut u8, u64, usize) {
        let offset = self.geometry.payload_offset + u64::from(i) * self.geometry.slot_stride;
        // SAFETY: payload_offset + slot_count * slot_stride == total_bytes == mapping length.
        let home = unsafe { self.map.as_ptr().add(offset as usize) };
        (home, offset, self.geometry.slot_stride as usize)
    }

    /// File offset and length of slot `i`.
    pub(super) fn slot_extent(&self, i: u32) -> (u64, usize) {
        let (_, offset, len) = self.home_range(i);
        (offset, len)
    }

    /// A shared window on slot `i` to switch to: `parked` (the slot's shared pages a detach set
    /// aside), else a spare one, else a new mapping.
    pub(super) fn take_window(&self, i: u32, parked: Option<Mapping>) -> Result<*mut u8> {
        let mut store = self.windows.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(parked) = parked {
            let at = parked.as_ptr();
            store.owned.push(parked);
            return Ok(at);
        }
        if let Some(k) = store.spare.iter().position(|&(s, _)| s == i) {
            return Ok(store.spare.swap_remove(k).1);
        }
        let (offset, len) = self.slot_extent(i);
        let window = self.segment.map_window(offset, len)?;
        let at = window.as_ptr();
        store.owned.push(window);
        Ok(at)
    }

    /// Makes `at` the address slot `i` is reached through.
    pub(super) fn switch_window(&self, i: u32, at: *mut u8) {
        let home = self.home_range(i).0;
        let value = if at == home { std::ptr::null_mut() } else { at };
        self.windows.current[i as usize].store(value, Ordering::Release);
    }

    /// Gives back `at`, a range of slot `i` that held a kept frame's private copy and is no
    /// longer referenced: shared again and kept as a spare, or unmapped when the slot has
    /// enough spares and the range is a window of its own.
    pub(super) fn return_window(&self, i: u32, at: *mut u8) {
        let mut store = self.windows.store.lock().unwrap_or_else(|p| p.into_inner());
        let spares = store.spare.iter().filter(|&&(s, _)| s == i).count();
        if spares >= SPARES_PER_SLOT {
            if let Some(k) = store.owned.iter().position(|m| m.as_ptr() == at) {
                drop(store.owned.swap_remove(k));
                return;
            }
        }
        let (offset, len) = self.slot_extent(i);
        // SAFETY: `at` is slot i's range in this handle's mapping or in one of its windows (page
        // aligned, slot_stride long, mapping the slot's file range privately since the eviction);
        // the kept frame that used it is gone and no other copy of the handle reaches the slot
        // through it (the slot's current address is another window).
        if unsafe { self.segment.share_again(at, offset, len) }.is_ok() {
            store.spare.push((i, at));
        }
    }
}
