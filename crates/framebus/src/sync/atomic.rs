//! The one place where atomic types are named.
//!
//! Everything that lives in shared memory or is part of a lock-free protocol uses these aliases, so
//! that `RUSTFLAGS="--cfg loom"` swaps in loom's model-checked atomics for the protocol tests.
//! Shared-memory structs are `#[repr(C)]`; the std atomics used there have the same size and
//! alignment as the integers they wrap, which `layout.rs` asserts at compile time.

#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
