//! Synchronisation primitives that work across processes: the atomics facade (loom-aware),
//! futex wait/wake and the robust write lock.

pub mod atomic;
pub mod deadline;
pub mod futex;
pub mod lock;
pub mod spin;
