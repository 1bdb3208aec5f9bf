//! A loan's slot kept after the loan ended, for memory the caller still references (a NumPy
//! view of the loan's array, a memoryview, a buffer a pipe has not written yet).
//!
//! The slot stays pinned, so the ring never reuses it under that memory. A committed slot is
//! also *detached* in this handle's read-write mapping: its pages are replaced by a private
//! copy-on-write mapping of the same bytes (the shared pages are moved aside with their
//! page-table entries, so giving them back costs no page faults). A write through a writable
//! alias that survived the commit (a `memoryview` or NumPy view made while the loan was open,
//! whose writable flag cannot be revoked) then lands in a page of this process alone: no other
//! handle and no other process ever sees it, and the published frame stays exactly what was
//! committed. When the kept slot is dropped (the last reference is gone) the shared pages are
//! mapped back *before* the pin is released, so the writer's next frame in that slot goes to
//! shared memory again.
//!
//! Should mapping the shared pages back fail (the kernel out of memory for mappings), the slot
//! stays pinned for the rest of the handle's life rather than let the writer write into private
//! pages nobody else can see.

use super::reader::Pinned;
use crate::shm::Mapping;

/// A pinned slot of a finished loan; see the module documentation.
pub struct KeptSlot {
    pin: Option<Pinned>,
    /// Set while the slot's pages are private to this process (detached): the shared pages
    /// moved aside, if the kernel could move them.
    detached: Option<Option<Mapping>>,
}

impl KeptSlot {
    /// Keeps `pin`'s slot; a committed frame's slot is detached (see the module documentation).
    /// A slot that cannot be detached (the mapping call failed) is only pinned.
    pub(super) fn new(pin: Pinned, detach: bool) -> KeptSlot {
        let detached = if detach { pin.stream().detach_slot(pin.slot()).ok() } else { None };
        KeptSlot { pin: Some(pin), detached }
    }

    /// Sequence number of the kept frame (0: the empty slot of a discarded loan).
    pub fn seq(&self) -> u64 {
        self.pin.as_ref().map_or(0, Pinned::seq)
    }

    /// Whether writes through this process's read-write mapping of the slot are private to it.
    pub fn detached(&self) -> bool {
        self.detached.is_some()
    }

    /// The pinned frame.
    pub fn pinned(&self) -> &Pinned {
        self.pin.as_ref().expect("a kept slot holds its pin until dropped")
    }
}

impl Drop for KeptSlot {
    fn drop(&mut self) {
        let Some(pin) = self.pin.take() else { return };
        if let Some(parked) = self.detached.take() {
            if pin.stream().reattach_slot(pin.slot(), parked).is_err() {
                // The slot's pages in this mapping are still private: never let the writer
                // reuse it (its frame would not reach anyone). The pin, and the handle, stay.
                std::mem::forget(pin);
                return;
            }
        }
        drop(pin);
    }
}
