//! Background writers for file descriptors: `pipe(buffer, fd)` for Rust and the Python
//! bindings. Each descriptor gets one writer thread and one ordered, bounded queue; a job holds
//! a keeper (anything that owns the bytes) until its bytes are written, or, when they were
//! handed to the pipe with vmsplice, until the reader has consumed them. A failed write is
//! stored and reported by the next call on that descriptor, and the jobs behind it are dropped.
//!
//! ```no_run
//! use framebus::pipe::{Registry, Options};
//! use framebus::Deadline;
//! let writers: Registry<Vec<u8>> = Registry::default();
//! let w = writers.writer(1)?; // stdout
//! w.push(b"hello\n".to_vec(), Deadline::never(), &mut || true, drop).map_err(|_| "push failed").unwrap();
//! w.sync(Deadline::never(), &mut || true)?;
//! # Ok::<(), framebus::pipe::PipeError>(())
//! ```
//!
//! Modules: `queue` (the per-descriptor job queue), `writer` (the thread and the waits),
//! `output` (chunked writes, vmsplice fallback), `sys` (Linux calls), `registry` (one writer per
//! descriptor), `error`. The design, and why vmsplice is safe here, is in docs/design-pipes.md.

pub mod error;
mod output;
mod queue;
pub mod registry;
pub mod sys;
pub mod writer;

use std::sync::Arc;

pub use error::PipeError;
pub use registry::Registry;
pub use writer::{PushError, Writer};

/// Memory a job writes from, owned by the job until it is finished.
///
/// # Safety
/// `len()` bytes at `addr()` must be readable for as long as the value lives, at the same
/// address even after the value is moved, and may be read from another thread. While the
/// value is held by a queue the memory must not be modified (the writer reads it, and a
/// vmsplice'd page is read by the pipe's reader later).
pub unsafe trait Payload: Send + 'static {
    /// Start of the bytes.
    fn addr(&self) -> *const u8;
    /// Number of bytes.
    fn len(&self) -> usize;
    /// Whether there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// SAFETY: a Vec's heap buffer does not move when the Vec is moved, and it lives as long as the Vec.
unsafe impl Payload for Vec<u8> {
    fn addr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

// SAFETY: as for Vec: the boxed slice is on the heap and owned by the box.
unsafe impl Payload for Box<[u8]> {
    fn addr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

// SAFETY: the slice lives in the Arc's allocation, alive while this reference is.
unsafe impl Payload for Arc<[u8]> {
    fn addr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

// SAFETY: 'static memory never moves nor goes away.
unsafe impl Payload for &'static [u8] {
    fn addr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

/// How writers are set up. `Options::default()` reads `FRAMEBUS_PIPE_VMSPLICE` (0/false/off/no
/// turns vmsplice off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Unfinished jobs a descriptor may hold before `push` waits (>= 1).
    pub queue: usize,
    /// Hand pages to pipes with vmsplice (where the descriptor is a pipe) instead of copying.
    pub vmsplice: bool,
    /// Pipe capacity to ask for: None = /proc/sys/fs/pipe-max-size, Some(0) = leave it.
    pub pipe_size: Option<usize>,
    /// Jobs smaller than this are copied with write(2) even when vmsplice is on.
    pub splice_min: usize,
}

impl Default for Options {
    fn default() -> Self {
        let off = std::env::var("FRAMEBUS_PIPE_VMSPLICE")
            .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "off" | "no"))
            .unwrap_or(false);
        Options { queue: 16, vmsplice: !off, pipe_size: None, splice_min: 64 * 1024 }
    }
}

impl Options {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), PipeError> {
        if self.queue == 0 || self.queue > 1 << 20 {
            return Err(PipeError::InvalidArgument(format!("queue size must be 1 to {}, got {}", 1 << 20, self.queue)));
        }
        Ok(())
    }
}

/// Counters and configuration of one writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes written to the descriptor.
    pub bytes: u64,
    /// Of which handed over with vmsplice.
    pub spliced: u64,
    /// Jobs fully written.
    pub jobs: u64,
    /// Unfinished jobs.
    pub pending: usize,
    /// Bytes of the unfinished jobs.
    pub pending_bytes: u64,
    /// Capacity of the pipe, None when the descriptor is not a pipe.
    pub pipe_size: Option<usize>,
    /// Whether vmsplice is in use.
    pub vmsplice: bool,
    /// Whether the descriptor is a pipe or FIFO.
    pub fifo: bool,
}
