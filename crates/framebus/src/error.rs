//! Errors of the core. Each variant's message names the stream, the path and the errno where
//! they apply, and says what to do; the Python bindings map variants to Python exceptions in one
//! place (`crates/framebus-python/src/errors.rs`).

use std::io;

/// Result alias of the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a stream operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stream name is not usable as a segment name.
    #[error("invalid stream name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },

    /// A caller-supplied value is out of range or inconsistent.
    #[error("{0}")]
    InvalidArgument(String),

    /// A frame given whole (its table first, as a bridge receives it) does not describe a valid
    /// frame of this stream.
    #[error("stream {name:?}: the frame's table is invalid ({reason}); nothing was written")]
    InvalidFrameTable { name: String, reason: String },

    /// No segment of that name exists.
    #[error("stream {name:?} does not exist ({path}); create it first with framebus.create({name:?}, shape=..., dtype=...)")]
    NotFound { name: String, path: String },

    /// A segment of that name already exists.
    #[error("stream {name:?} already exists ({path}); open it with framebus.open({name:?}), or pass exist_ok=True (reuses a stream of the same spec, replaces one whose creator died). If a script that crashed left it behind, `framebus gc` removes it; create streams in a `with framebus.create(..., auto_unlink=True)` block so they are removed when the block ends")]
    AlreadyExists { name: String, path: String },

    /// The segment exists but was created with another spec (exist_ok=True); both specs in
    /// words (NumPy's dtype names), also for the bindings to attach to the exception.
    #[error("stream {name:?} already exists with a different spec (existing {existing}; requested {requested}): create it with the existing spec, use another name, or remove it first (framebus.unlink({name:?}) from Python, or `framebus gc` if its creator died)")]
    SpecMismatch { name: String, existing: String, requested: String },

    /// The operating system refused access.
    #[error("permission denied to {op} {path} (errno {errno}); the stream was created by another user or with a restrictive mode (mode=0o600 by default)")]
    PermissionDenied { op: &'static str, path: String, errno: i32 },

    /// /dev/shm cannot hold the segment.
    #[error("not enough space in /dev/shm for stream {name:?} ({path}): it needs {bytes} bytes and {free} are free (errno {errno}: {reason}); nothing was created. Free space with `framebus gc`, use fewer slots or smaller frames, or enlarge /dev/shm (in Docker: `--shm-size=1g` or `--ipc=host`; `framebus doctor --plan HxWxC:dtype` or `--plan capacity=SIZE` checks a plan)")]
    NoSpace { name: String, path: String, bytes: u64, free: u64, errno: i32, reason: String },

    /// The segment has a layout version this build does not understand.
    #[error("stream {name:?} ({path}) has layout version {found}, this framebus understands version {supported}; open it with a matching framebus or recreate it")]
    IncompatibleVersion { name: String, path: String, found: u32, supported: u32 },

    /// The segment is not a framebus stream or its header is damaged.
    #[error("stream {name:?} ({path}) is corrupt or not a framebus stream: {reason}; unlink it with framebus.unlink({name:?})")]
    Corrupt { name: String, path: String, reason: String },

    /// The entry under the stream's name is no segment (a FIFO, socket, directory, device file
    /// or symbolic link): framebus never opens, describes or removes such an entry.
    #[error("{path} is {kind}, not a framebus segment (those are regular files): framebus leaves it alone; use another stream name, or remove it yourself if you know what it is")]
    NotSegment { name: String, path: String, kind: &'static str },

    /// The creator has not finished initialising the segment in time.
    #[error("stream {name:?} ({path}) is not initialised yet{hint}")]
    NotReady { name: String, path: String, hint: &'static str },

    /// A blocking operation ran out of time.
    #[error("timed out after {seconds:.3} s waiting to {op} on stream {name:?}")]
    Timeout { name: String, op: &'static str, seconds: f64 },

    /// A write found no slot it may take before its timeout; `holders` says what holds each.
    #[error("timed out after {seconds:.3} s waiting for a free slot to write on stream {name:?}: {holders}")]
    NoFreeSlot { name: String, seconds: f64, holders: String },

    /// The write lock stayed taken until the timeout; `holder` says by whom.
    #[error("timed out after {seconds:.3} s waiting for the write lock of stream {name:?}, held by {holder}")]
    LockBusy { name: String, seconds: f64, holder: String },

    /// The reader table is full.
    #[error("stream {name:?} already has {max} attached handles (its reader table is full); close unused handles or create it with a larger max_readers")]
    TooManyReaders { name: String, max: u32 },

    /// The calling thread does not hold the write lock.
    #[error("stream {name:?}: {what}")]
    LockState { name: String, what: &'static str },

    /// The calling thread already has a claimed slot (an open loan) on this stream: a second
    /// claim would give two frames one sequence number.
    #[error("stream {name:?} already has an open loan in this thread (frame {seq}, not yet committed): commit or abort it (or leave its with block) before the next write() or loan(); another thread would wait for it")]
    LoanOpen { name: String, seq: u64 },

    /// The stream's sequence numbers are used up.
    #[error("stream {name:?} has reached the largest sequence number ({max}); nothing was written: sequence numbers never wrap or repeat, so create a new stream (or unlink and recreate this one)")]
    SequenceExhausted { name: String, max: u64 },

    /// The writer ended the stream and this handle has read every frame it will get.
    #[error("stream {name:?} has ended: its writer called end() and every frame this handle could read was read; open it again for a restarted producer")]
    Ended { name: String },

    /// While this handle waited, the stream's name was removed and another segment now has it
    /// (a producer that restarted and created the stream anew), or it was removed with nothing
    /// new under it and no live handle writes the stream any more: no frame will come to this
    /// handle (`unlinked` tells which).
    #[error("{}", replaced_message(name, *unlinked))]
    Replaced { name: String, unlinked: bool },

    /// Nothing has been written to the stream yet.
    #[error("stream {name:?} has no frame yet; wait with read_new() or write one first")]
    Empty { name: String },

    /// The newest frame went with a write that was given up while rewriting its slot (every
    /// reader had already taken that frame; its writer died or dropped the write).
    #[error("stream {name:?} has no newest frame right now: the write that was replacing it was given up (its writer died or dropped it mid-write), and every reader had taken that frame; wait with read_new() for the next one")]
    NewestLost { name: String },

    /// A CUDA call (through the GPU door) failed: on a device stream (`name`), or on device
    /// memory of no stream (a device buffer). `source` says which call, the driver's code and
    /// name: the bindings hand them on as values, never only as text.
    #[error("{}{op}: {source}", stream_prefix(name))]
    Device {
        name: Option<String>,
        op: &'static str,
        #[source]
        source: crate::gpu::door::DoorError,
    },

    /// A device stream (or device memory) cannot be made or reached in this process: no GPU
    /// door (no CUDA driver, a door not built, a setting not understood: then `door` is its
    /// error), no such device, the other door, or memory whose owner is gone.
    #[error("{}{reason}", stream_prefix(name))]
    DeviceUnavailable { name: Option<String>, reason: String, door: Option<crate::gpu::door::DoorError> },

    /// A frame handed out zero-copy was used after it was released.
    #[error("this frame of stream {name:?} was released; take a new view")]
    Released { name: String },

    /// A host operation was asked of a device stream (or the other way round).
    #[error("stream {name:?}: {what}")]
    WrongMemory { name: String, what: String },

    /// A wait was interrupted by the caller's check (a Python signal).
    #[error("interrupted")]
    Interrupted,

    /// Any other system call failure.
    #[error("{op} failed for stream {name:?} ({path}): {source}")]
    Io {
        op: &'static str,
        name: String,
        path: String,
        #[source]
        source: io::Error,
    },
}

fn stream_prefix(name: &Option<String>) -> String {
    name.as_ref().map_or_else(String::new, |n| format!("stream {n:?}: "))
}

fn replaced_message(name: &str, unlinked: bool) -> String {
    if unlinked {
        format!("stream {name:?} was unlinked (its name removed) while this handle waited, and no handle that writes it is left, so no frame will come: open it again once its producer creates it anew")
    } else {
        format!("stream {name:?} was replaced by a new stream of the same name (a producer created it anew), so no frame will come to this handle: open it again with framebus.open({name:?})")
    }
}

impl Error {
    /// The GPU door's error behind this one (which call failed, the driver's code and name),
    /// if any.
    pub fn door_error(&self) -> Option<&crate::gpu::door::DoorError> {
        match self {
            Error::Device { source, .. } => Some(source),
            Error::DeviceUnavailable { door, .. } => door.as_ref(),
            _ => None,
        }
    }

    /// The errno carried by this error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::PermissionDenied { errno, .. } | Error::NoSpace { errno, .. } => Some(*errno),
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
