//! A handle on a device stream: its own type over the shared ring, with the device side of
//! both ends. The ring (sequence numbers, pins, the reader table, the write lock, waits, the end
//! of the stream) is the host stream's, reached through [`DeviceStream::ring`]; what touches
//! frames (write, read, view, loan) is here, each through the GPU door (device.rs has the
//! slots' memory and events and the ordering between processes).
//!
//! - [`DeviceStream::write`] copies a frame (device memory of this process, or host memory)
//!   into the next slot on the caller's CUDA stream.
//! - [`DeviceStream::read_into`] copies a pinned frame out, to device or host memory.
//! - [`DeviceStream::frame`] wraps a pinned frame as a [`DeviceFrame`] (zero-copy: its slot's
//!   address, ordered on each CUDA stream it is handed to).
//! - [`DeviceStream::begin_loan`] claims the next slot as a [`DeviceLoan`] to render into.

use std::sync::{Arc, Mutex};

use super::device::{Dest, Source};
use super::handle::{CreateOptions, DeviceAccess, ReaderMode, Stream};
use super::reader::Pinned;
use super::spec::StreamSpec;
use super::writer::{FrameInfo, WriteGuard};
use crate::error::{Error, Result};
use crate::gpu::buffer::DeviceBuffer;
use crate::sync::deadline::Deadline;

/// One handle on a device stream (see the module documentation). Cloning it gives another
/// reference to the same handle (the same reader entry).
#[derive(Clone)]
pub struct DeviceStream {
    ring: Arc<Stream>,
}

impl std::fmt::Debug for DeviceStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceStream({:?}, cuda:{})", self.ring.name(), self.device())
    }
}

impl DeviceStream {
    /// Creates a device stream: `spec.device` names the GPU, whose memory this process
    /// allocates now and owns. As [`Stream::create`] otherwise (`exist_ok` opens a stream of
    /// the same spec).
    pub fn create(name: &str, spec: &StreamSpec, options: &CreateOptions) -> Result<DeviceStream> {
        if spec.device.is_none() {
            return Err(Error::InvalidArgument(format!(
                "stream {name:?}: a device stream needs a device (device=\"cuda:0\"); without one, create a host stream"
            )));
        }
        DeviceStream::from_ring(Arc::new(Stream::create(name, spec, options)?))
    }

    /// Opens an existing device stream through its GPU, attaching a reader in `mode`.
    pub fn open(name: &str, mode: ReaderMode) -> Result<DeviceStream> {
        DeviceStream::from_ring(Arc::new(Stream::open_with(name, mode, DeviceAccess::Device)?))
    }

    /// The device handle of an opened ring that reaches its frames through the GPU; WrongMemory
    /// for a host stream or a handle on a device stream's CPU mirror.
    pub fn from_ring(ring: Arc<Stream>) -> Result<DeviceStream> {
        ring.device_slots()?;
        Ok(DeviceStream { ring })
    }

    /// The shared ring: sequence numbers, pins, waits, the write lock, the end of the stream.
    pub fn ring(&self) -> &Arc<Stream> {
        &self.ring
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        self.ring.name()
    }

    /// This process's CUDA ordinal of the stream's device.
    pub fn device(&self) -> u32 {
        self.ring.device().map_or(0, |d| d.device())
    }

    /// Bytes of one frame.
    pub fn frame_bytes(&self) -> u64 {
        self.ring.device().map_or(0, |d| d.frame_bytes())
    }

    /// Checks that device memory at `ptr` (`what`, for the message) is on this stream's device:
    /// InvalidArgument for another device or memory the driver does not know.
    pub fn check_device_memory(&self, ptr: u64, what: &str) -> Result<()> {
        let dev = self.ring.device_slots()?;
        let on = dev.door().pointer_device(ptr).map_err(|source| Error::Device {
            name: Some(self.name().to_owned()),
            op: "looking up the array's device",
            source,
        })?;
        match on {
            Some(d) if d == dev.device() => Ok(()),
            Some(d) => Err(Error::InvalidArgument(format!(
                "{what} is on cuda:{d}, stream {:?} on cuda:{}: copy it there first (tensor.to('cuda:{}'))",
                self.name(),
                dev.device(),
                dev.device()
            ))),
            None => Err(Error::InvalidArgument(format!("{what} is not in GPU memory the CUDA driver knows (its pointer {ptr:#x})"))),
        }
    }

    /// Writes one frame: takes a slot (waiting like a host write), queues the copy from `src`
    /// on `cuda_stream` after every reader's work on the slot, records the slot's ready event
    /// and commits. Nothing waits on the host for a device source; a host source is waited
    /// for (its memory must stay readable until the copy ran). Returns the frame's sequence.
    pub fn write(
        &self,
        src: Source,
        cuda_stream: u64,
        info: &FrameInfo<'_>,
        deadline: Deadline,
        check: &mut dyn FnMut() -> bool,
    ) -> Result<u64> {
        self.ring.write_device(src, cuda_stream, info, deadline, check)
    }

    /// Copies the pinned frame to `dst` on `cuda_stream` (after the frame's ready event; a host
    /// destination is waited for) and records this handle's release event after the copy.
    pub fn read_into(&self, pinned: &Pinned, dst: Dest, cuda_stream: u64) -> Result<()> {
        self.check_pin(pinned)?;
        self.ring.read_device_into(pinned.slot(), dst, cuda_stream)
    }

    /// A new device buffer of one frame's size on the stream's device (where a copy of a
    /// frame lands).
    pub fn new_buffer(&self) -> Result<DeviceBuffer> {
        DeviceBuffer::allocate(self.device(), self.frame_bytes())
    }

    /// The pinned frame as a zero-copy device frame.
    pub fn frame(&self, pinned: Pinned) -> Result<DeviceFrame> {
        self.check_pin(&pinned)?;
        let ptr = self.ring.device_slots()?.slot_ptr(pinned.slot());
        Ok(DeviceFrame {
            name: self.name().to_owned(),
            ptr,
            device: self.device(),
            state: Mutex::new(FrameState { pinned: Some(pinned), streams: Vec::new() }),
        })
    }

    /// Claims the next free slot to render into (waiting like a host write). Order the CUDA
    /// stream that writes into it after the readers with [`DeviceLoan::order_after_readers`].
    pub fn begin_loan(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<DeviceLoan> {
        let guard = self.ring.begin_loan(deadline, check)?;
        let ptr = guard.device_ptr()?;
        Ok(DeviceLoan { guard, ptr, device: self.device() })
    }

    fn check_pin(&self, pinned: &Pinned) -> Result<()> {
        if !Arc::ptr_eq(pinned.stream(), &self.ring) {
            return Err(Error::InvalidArgument(format!("stream {:?}: the frame was pinned through another handle", self.name())));
        }
        Ok(())
    }
}

/// A frame of a device stream pinned in its slot (zero-copy). Each CUDA stream it is handed to
/// is made to wait for the frame's ready event; when it is released, this handle's release
/// event is recorded on each of them, so the writer's next frame into the slot waits for that
/// work. Dropping it releases it.
pub struct DeviceFrame {
    name: String,
    ptr: u64,
    device: u32,
    state: Mutex<FrameState>,
}

struct FrameState {
    pinned: Option<Pinned>,
    /// CUDA streams made to wait for the frame (the release event is recorded on each).
    streams: Vec<u64>,
}

impl DeviceFrame {
    /// The frame's device address in this process (valid while the frame is held).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// This process's CUDA ordinal of the frame's device.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Whether the frame was released.
    pub fn is_released(&self) -> bool {
        self.lock().pinned.is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FrameState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error for a use of a released frame.
    fn released(&self) -> Error {
        Error::Released { name: self.name.clone() }
    }

    /// Makes `cuda_stream` wait for the frame (once per stream). Released for a released frame.
    pub fn acquire_on(&self, cuda_stream: u64) -> Result<()> {
        let mut st = self.lock();
        let Some(pinned) = st.pinned.as_ref() else { return Err(self.released()) };
        if !st.streams.contains(&cuda_stream) {
            pinned.stream().device_acquire(pinned.slot(), cuda_stream)?;
            st.streams.push(cuda_stream);
        }
        Ok(())
    }

    /// Makes the host wait for the frame: for a consumer that names no CUDA stream.
    pub fn wait_on_host(&self) -> Result<()> {
        self.acquire_on(0)?;
        let stream = self.lock().pinned.as_ref().map(|p| p.stream().clone()).ok_or_else(|| self.released())?;
        let dev = stream.device_slots()?;
        dev.door().synchronize_stream(dev.device(), 0).map_err(|source| Error::Device {
            name: Some(self.name.clone()),
            op: "waiting for the frame",
            source,
        })
    }

    /// Copies the frame into `dst` (exactly one frame) on `cuda_stream`, after the frame's
    /// ready event, and waits for the copy.
    pub fn download(&self, dst: &mut [u8], cuda_stream: u64) -> Result<()> {
        self.acquire_on(cuda_stream)?;
        let stream = self.lock().pinned.as_ref().map(|p| p.stream().clone()).ok_or_else(|| self.released())?;
        let dev = stream.device_slots()?;
        if dst.len() as u64 != dev.frame_bytes() {
            return Err(Error::InvalidArgument(format!(
                "stream {:?}: a frame is {} bytes, the host array {}",
                self.name,
                dev.frame_bytes(),
                dst.len()
            )));
        }
        crate::gpu::buffer::download(dev.door(), dev.device(), self.ptr, dst, cuda_stream).map_err(|source| Error::Device {
            name: Some(self.name.clone()),
            op: "copying the frame to the host",
            source,
        })
    }

    /// Lets the frame go: records this handle's release event on every CUDA stream the frame
    /// was handed to (and on `extra`), then unpins. Idempotent.
    pub fn release(&self, extra: Option<u64>) -> Result<()> {
        let (pinned, mut streams) = {
            let mut st = self.lock();
            (st.pinned.take(), std::mem::take(&mut st.streams))
        };
        let Some(pinned) = pinned else { return Ok(()) };
        streams.extend(extra.filter(|s| !streams.contains(s)));
        let mut result = Ok(());
        for s in streams {
            if let Err(e) = pinned.stream().device_release(s) {
                result = result.and(Err(e));
            }
        }
        drop(pinned);
        result
    }
}

impl Drop for DeviceFrame {
    fn drop(&mut self) {
        let _ = self.release(None);
    }
}

/// A claimed slot of a device stream to render into: its device memory until commit (which
/// publishes the frame) or drop (which discards it).
pub struct DeviceLoan {
    guard: WriteGuard<Arc<Stream>>,
    ptr: u64,
    device: u32,
}

impl DeviceLoan {
    /// The slot's device address in this process.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// This process's CUDA ordinal of the slot's device.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The sequence number the frame gets (without an explicit one).
    pub fn seq(&self) -> u64 {
        self.guard.seq()
    }

    /// Makes `cuda_stream` wait for every reader's work on frames it let go: call before
    /// handing the slot to work queued there.
    pub fn order_after_readers(&self, cuda_stream: u64) -> Result<()> {
        self.guard.device_prepare(cuda_stream)
    }

    /// Publishes the frame whose writes were queued on `cuda_stream`: records the slot's ready
    /// event there (and fills a CPU mirror) and commits, without waiting on the host for a
    /// stream without a mirror. Returns its sequence number.
    pub fn commit(self, info: &FrameInfo<'_>, cuda_stream: u64) -> Result<u64> {
        self.guard.commit_device(info, cuda_stream)
    }
}
