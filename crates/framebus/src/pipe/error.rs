//! Errors of the pipe writer. A failed write is stored by the writer thread and handed to the
//! next call on that descriptor; messages name the descriptor, the call and the errno.

use std::io;

/// Everything that can go wrong when writing to a descriptor in the background.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    /// The descriptor is not open (or cannot be inspected) when its writer is started.
    #[error("file descriptor {fd} cannot be written to: {source}; pass an open descriptor (an int or an object with fileno())")]
    BadDescriptor {
        fd: i32,
        #[source]
        source: io::Error,
    },

    /// A background write failed; the writes still queued behind it were dropped.
    #[error("{op} to file descriptor {fd} failed after {written} bytes: {source}{hint}; {dropped} queued write(s) were dropped")]
    Write {
        fd: i32,
        op: &'static str,
        written: u64,
        dropped: usize,
        hint: &'static str,
        #[source]
        source: io::Error,
    },

    /// The writer thread could not be started.
    #[error("cannot start the writer thread for file descriptor {fd}: {source}")]
    Spawn {
        fd: i32,
        #[source]
        source: io::Error,
    },

    /// A wait for queued writes ran out of time; the writes stay queued.
    #[error("timed out after {seconds:.3} s waiting for {what} on file descriptor {fd} ({pending} write(s), {pending_bytes} bytes still pending; they stay queued)")]
    Timeout { fd: i32, what: &'static str, seconds: f64, pending: usize, pending_bytes: u64 },

    /// An option is out of range.
    #[error("{0}")]
    InvalidArgument(String),

    /// A wait was interrupted by the caller's check (a Python signal).
    #[error("interrupted")]
    Interrupted,
}

impl PipeError {
    /// The errno carried by this error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            PipeError::BadDescriptor { source, .. } | PipeError::Write { source, .. } | PipeError::Spawn { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }

    /// Whether this is a broken pipe (the reading end was closed).
    pub fn is_broken_pipe(&self) -> bool {
        self.errno() == Some(libc::EPIPE)
    }
}

/// The hint appended to a write error's message.
pub(crate) fn hint_for(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EPIPE) => " (the reading end was closed: did the reader, e.g. FFmpeg, exit? check its stderr)",
        Some(libc::EBADF) => " (the descriptor was closed while writes were queued: call sync()/close() before closing it)",
        Some(libc::ENOSPC) => " (no space left on the device)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_descriptor_and_errno() {
        let e = PipeError::Write {
            fd: 7,
            op: "write",
            written: 10,
            dropped: 2,
            hint: hint_for(Some(libc::EPIPE)),
            source: io::Error::from_raw_os_error(libc::EPIPE),
        };
        let msg = e.to_string();
        assert!(msg.contains("file descriptor 7"), "{msg}");
        assert!(msg.contains("reading end was closed"), "{msg}");
        assert!(msg.contains("2 queued write(s) were dropped"), "{msg}");
        assert!(e.is_broken_pipe());
        assert_eq!(e.errno(), Some(libc::EPIPE));
        assert_eq!(PipeError::Interrupted.errno(), None);
    }
}
