//! The fork hooks (`os.register_at_fork`, installed by `framebus/__init__.py`): before a fork,
//! every open lossless handle of this process reserves a reader entry for the child's copy; after
//! it, the parent forgets the reservations and the child claims them (the core's `ring/fork.rs`
//! says why and for how long).
//!
//! The list of handles is touched only while the GIL is held, and never while it is released:
//! the forking thread holds the GIL, so no other thread can be inside the list's lock at
//! fork(), and the child's copy of the lock is free.

use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;

/// Open lossless handles of this process (dead entries are pruned as the list is walked).
static LOSSLESS: Mutex<Vec<Weak<framebus::Stream>>> = Mutex::new(Vec::new());

/// Puts a new lossless handle on the list (call with the GIL held).
pub(crate) fn track(_py: Python<'_>, stream: &Arc<framebus::Stream>) {
    let mut list = LOSSLESS.lock().unwrap_or_else(|p| p.into_inner());
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(stream));
}

/// Calls `f` on every live handle of the list.
fn each(f: impl Fn(&framebus::Stream)) {
    let mut list = LOSSLESS.lock().unwrap_or_else(|p| p.into_inner());
    list.retain(|w| w.strong_count() > 0);
    for stream in list.iter().filter_map(Weak::upgrade) {
        f(&stream);
    }
}

/// Before fork(): reserves a reader entry for the child's copy of each open lossless handle.
/// Never raises (a full reader table just means no reservation). Does not copy frames.
#[pyfunction]
pub(crate) fn fork_prepare(_py: Python<'_>) {
    each(framebus::Stream::prepare_fork);
}

/// After fork(), in the parent: the reservations are the child's now.
#[pyfunction]
pub(crate) fn fork_parent(_py: Python<'_>) {
    each(framebus::Stream::after_fork_parent);
}

/// After fork(), in the child: claims the reservations for this process (freed when it exits,
/// or when it closes a handle it never used).
#[pyfunction]
pub(crate) fn fork_child(_py: Python<'_>) {
    each(framebus::Stream::after_fork_child);
}
