//! framebus core: named shared-memory rings of frames between processes, with blocking futex
//! waits, torn-free snapshot reads, per-frame metadata, a robust cross-process write lock and
//! recovery from dead writers and readers. Pure Rust, no Python: the bindings live in
//! `framebus-python`.
//!
//! ```no_run
//! use framebus::{Stream, StreamSpec, CreateOptions, FrameInfo, ReaderMode, Deadline};
//! let spec = StreamSpec::new("|u1", 1, vec![1080, 1920, 3]);
//! let writer = Stream::create("camera", &spec, &CreateOptions::default())?;
//! let reader = Stream::open("camera", ReaderMode::Latest)?;
//! writer.write(&vec![7u8; 1080 * 1920 * 3], &FrameInfo::default(), Deadline::never(), &mut || true)?;
//! let sum: u64 = reader.read_new(Deadline::never(), &mut || true, |f| f.payload.iter().map(|&b| b as u64).sum())?;
//! framebus::unlink("camera")?;
//! # Ok::<(), framebus::Error>(())
//! ```

pub mod copy;
pub mod error;
pub mod gpu;
pub mod pipe;
pub mod process;
pub mod recovery;
pub mod ring;
pub mod shm;
pub mod sync;

pub use error::{Error, Result};
pub use gpu::buffer::DeviceBuffer;
pub use gpu::door::DoorError;
pub use recovery::StreamInfo;
pub use ring::{CreateOptions, FrameInfo, FrameRef, KeptSlot, Pinned, ReaderMode, Stream, StreamSpec, WriteGuard, MAX_SEQ, REWRITE_MIN};
pub use ring::{DeviceDownload, DeviceFrame, DeviceLoan, DeviceStream, Downloaded};
pub use sync::deadline::Deadline;
pub use sync::lock::Acquired;

/// Removes a stream's name; processes that have it open keep working until they close it. The
/// GPU memory of a device stream this process created is freed here (created elsewhere: by its
/// creator, when it next creates or closes a device stream, or exits).
pub fn unlink(stream: &str) -> Result<()> {
    shm::unlink(stream)?;
    gpu::registry::sweep_owned();
    Ok(())
}
