//! Frames that leave the GPU: [`DeviceDownload`] reads a device stream's frames on the host, for
//! consumers that need bytes in host memory (a bridge, `framebus record`, a pipe into FFmpeg)
//! of a stream without a CPU mirror.
//!
//! Each read pins a frame (the newest, or the next one this handle has not seen, exactly as the
//! device reader does), makes the downloader's own CUDA stream wait for the frame's ready
//! event, queues one device-to-host copy on it into page-locked host memory allocated once and
//! reused, waits for the copy, records the handle's release event on that stream (so a writer
//! ordering its next frame into the slot after the readers' work also orders it after this
//! copy), and unpins. The handle's reader entry is marked as a download for `framebus ls`/`top`.

use std::sync::Arc;

use super::device::Dest;
use super::device_stream::DeviceStream;
use super::reader::Pinned;
use super::Stream;
use crate::error::{Error, Result};
use crate::gpu::host::{OwnStream, PinnedHost};
use crate::sync::deadline::Deadline;

/// What was published with a downloaded frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Downloaded {
    pub seq: u64,
    pub timestamp_ns: u64,
    pub frame_id: i64,
    pub meta: Vec<u8>,
}

/// A host reader over a device stream (see the module documentation). Reads take `&mut self`:
/// the page-locked buffer holds the last frame read until the next read.
pub struct DeviceDownload {
    stream: DeviceStream,
    host: PinnedHost,
    cuda_stream: OwnStream,
}

impl std::fmt::Debug for DeviceDownload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceDownload({:?}, {:?})", self.stream, self.host)
    }
}

impl DeviceDownload {
    /// A downloader over `stream` (a handle reaching the frames through the GPU): allocates one
    /// frame of page-locked host memory and a CUDA stream, and marks the handle's reader entry.
    pub fn new(stream: DeviceStream) -> Result<DeviceDownload> {
        let dev = stream.ring().device_slots()?;
        let (door, device) = (dev.door(), dev.device());
        let bytes = usize::try_from(stream.frame_bytes()).map_err(|_| Error::InvalidArgument("frame too large".into()))?;
        let host = PinnedHost::allocate(door, device, bytes, stream.name())?;
        let cuda_stream = OwnStream::create(door, device, stream.name())?;
        stream.ring().mark_download();
        Ok(DeviceDownload { stream, host, cuda_stream })
    }

    /// The device handle it reads through.
    pub fn stream(&self) -> &DeviceStream {
        &self.stream
    }

    /// The shared ring (waits, counters, the end of the stream).
    pub fn ring(&self) -> &Arc<Stream> {
        self.stream.ring()
    }

    /// The last frame read (one frame's bytes, in page-locked memory; zeros before the first).
    pub fn bytes(&self) -> &[u8] {
        self.host.as_slice()
    }

    /// Downloads the newest frame without waiting. As the device reader's `read`: Empty before
    /// the first frame, DeviceUnavailable when the stream's owner has exited or in a child
    /// forked after the downloader was made.
    pub fn latest(&mut self) -> Result<Downloaded> {
        self.ring().device_slots()?; // a forked child's copy is refused before anything is pinned
        let pinned = self.ring().pin_latest()?;
        self.download(pinned)
    }

    /// Waits for the next frame this handle has not seen (as `wait_pinned`: Timeout, Ended,
    /// DeviceUnavailable when the owner has exited or in a forked child) and downloads it.
    pub fn next(&mut self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<Downloaded> {
        self.ring().device_slots()?; // a forked child's copy is refused before anything is consumed
        let pinned = self.ring().wait_pinned(deadline, check)?;
        self.download(pinned)
    }

    /// Copies the pinned frame into the page-locked buffer on the downloader's CUDA stream
    /// (after the frame's ready event; the release event recorded after the copy), then unpins.
    fn download(&mut self, pinned: Pinned) -> Result<Downloaded> {
        if let Some(gone) = self.ring().device_owner_gone() {
            return Err(gone);
        }
        let f = pinned.frame();
        let info = Downloaded { seq: f.seq, timestamp_ns: f.timestamp_ns, frame_id: f.frame_id, meta: f.meta.to_vec() };
        self.stream.read_into(&pinned, Dest::Host(self.host.as_mut_ptr()), self.cuda_stream.handle())?;
        drop(pinned);
        // A frame copied while its owner died may be gone with it: say so rather than hand it out.
        if let Some(gone) = self.ring().device_owner_gone() {
            return Err(gone);
        }
        Ok(info)
    }
}
