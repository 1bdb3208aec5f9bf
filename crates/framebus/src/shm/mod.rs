//! POSIX shared-memory segments: names, creation with a umask-proof mode and full allocation,
//! opening, mapping and unlinking.

pub mod kind;
pub mod name;
mod segment;

pub use segment::{unlink, Mapping, Segment};
