//! Device memory of this process alone, holding one array: what a copy out of a device stream
//! lands in (`DeviceArray` in Python), and a neutral GPU array for tests and tools. Every CUDA
//! call goes through the door; the memory is freed when the buffer is dropped.

use std::sync::{Arc, Mutex};

use super::door::{Door, DoorError};
use super::registry::{self, Memory};
use crate::error::{Error, Result};

/// `bytes` of device memory on one device, with the CUDA stream of the last copy into it that
/// nobody waited for yet.
pub struct DeviceBuffer {
    memory: Arc<Memory>,
    door: &'static dyn Door,
    device: u32,
    bytes: u64,
    /// The CUDA stream the last copy into the buffer was queued on, not waited for: a consumer
    /// on another CUDA stream waits for it first ([`DeviceBuffer::sync_for`]).
    pending: Mutex<Option<u64>>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer(cuda:{}, {} bytes at {:#x})", self.device, self.bytes, self.ptr())
    }
}

fn failed(op: &'static str) -> impl Fn(DoorError) -> Error {
    move |source| Error::Device { name: None, op, source }
}

/// The door of this process, or DeviceUnavailable saying why there is none.
pub(crate) fn door_or_unavailable() -> Result<&'static dyn Door> {
    super::door().map_err(|e| Error::DeviceUnavailable { name: None, reason: format!("no GPU available: {e}"), door: Some(e) })
}

impl DeviceBuffer {
    /// Allocates `bytes` (at least one is taken) on CUDA device `device`.
    /// DeviceUnavailable without a door; Device when the allocation fails (no such device, out
    /// of memory).
    pub fn allocate(device: u32, bytes: u64) -> Result<DeviceBuffer> {
        let door = door_or_unavailable()?;
        let memory = registry::allocate_private(door, device, bytes).map_err(failed("allocating device memory"))?;
        Ok(DeviceBuffer { memory, door, device, bytes, pending: Mutex::new(None) })
    }

    /// The device address of the first byte, in this process.
    pub fn ptr(&self) -> u64 {
        self.memory.ptr()
    }

    /// The CUDA ordinal of the buffer's device, in this process.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Bytes of the buffer.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether the buffer holds no byte.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    fn check_len(&self, len: usize, what: &str) -> Result<()> {
        if len as u64 != self.bytes {
            return Err(Error::InvalidArgument(format!("{what} is {len} bytes; the device buffer holds {}", self.bytes)));
        }
        Ok(())
    }

    /// Copies `src` (exactly the buffer's size) into the buffer on `cuda_stream` and waits for
    /// the copy; nothing is pending after.
    pub fn upload(&self, src: &[u8], cuda_stream: u64) -> Result<()> {
        self.check_len(src.len(), "the host array")?;
        self.door
            .copy_host_to_device(self.device, self.ptr(), src.as_ptr(), self.bytes, cuda_stream)
            .and_then(|()| self.door.synchronize_stream(self.device, cuda_stream))
            .map_err(failed("copying into the device array"))?;
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// Copies the buffer into `dst` (exactly its size) on `cuda_stream` (None: the stream of
    /// the last copy into it, else the legacy default stream) and waits for the copy.
    pub fn download(&self, dst: &mut [u8], cuda_stream: Option<u64>) -> Result<()> {
        self.check_len(dst.len(), "the host array")?;
        let s = cuda_stream.or(self.pending()).unwrap_or(0);
        download(self.door, self.device, self.ptr(), dst, s).map_err(failed("copying the device array to the host"))
    }

    /// The CUDA stream of the last copy into the buffer not waited for.
    pub fn pending(&self) -> Option<u64> {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that a copy into the buffer was queued on `cuda_stream` (and not waited for).
    pub fn set_pending(&self, cuda_stream: u64) {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(cuda_stream);
    }

    /// Before a consumer on `consumer` (None: the host) uses the buffer: waits for a copy into
    /// it queued on another CUDA stream.
    pub fn sync_for(&self, consumer: Option<u64>) -> Result<()> {
        if let Some(s) = self.pending().filter(|s| Some(*s) != consumer) {
            self.door.synchronize_stream(self.device, s).map_err(failed("waiting for the copy into the array"))?;
        }
        Ok(())
    }
}

/// Copies `dst.len()` device bytes at `src` into `dst` on `cuda_stream` and waits for the copy.
pub(crate) fn download(door: &dyn Door, device: u32, src: u64, dst: &mut [u8], cuda_stream: u64) -> std::result::Result<(), DoorError> {
    door.copy_device_to_host(device, dst.as_mut_ptr(), src, dst.len() as u64, cuda_stream)
        .and_then(|()| door.synchronize_stream(device, cuda_stream))
}
