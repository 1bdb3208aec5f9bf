//! What a copy of device frames to the host uses: page-locked host memory of this process
//! ([`PinnedHost`], `cuMemHostAlloc`) and a CUDA stream of its own ([`OwnStream`],
//! `cuStreamCreate`), both through the door and given back when dropped.

use super::door::{Door, DoorError};
use crate::error::{Error, Result};
use crate::process::ProcessId;

/// `len` bytes of page-locked host memory on behalf of one device, allocated once and reused.
pub struct PinnedHost {
    door: &'static dyn Door,
    device: u32,
    ptr: u64,
    len: usize,
    /// The allocating process: a copy inherited through fork() is not the child's to free.
    pid: u32,
}

impl std::fmt::Debug for PinnedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedHost(cuda:{}, {} bytes at {:#x})", self.device, self.len, self.ptr)
    }
}

// SAFETY: the memory is a plain host allocation owned by this value; access goes through
// `&self`/`&mut self` (shared reads, exclusive writes), so moving or sharing it between threads
// is as safe as for a `Vec<u8>`.
unsafe impl Send for PinnedHost {}
// SAFETY: see Send: `&self` only hands out shared reads.
unsafe impl Sync for PinnedHost {}

fn failed<'a>(name: &'a str, op: &'static str) -> impl Fn(DoorError) -> Error + 'a {
    move |source| Error::Device { name: Some(name.to_owned()), op, source }
}

impl PinnedHost {
    /// Allocates `len` bytes (at least one is taken) of page-locked memory for copies from
    /// `device`; `name` (the stream's) is for messages.
    pub fn allocate(door: &'static dyn Door, device: u32, len: usize, name: &str) -> Result<PinnedHost> {
        let ptr = door.host_alloc(device, len.max(1) as u64).map_err(failed(name, "allocating page-locked host memory"))?;
        Ok(PinnedHost { door, device, ptr, len, pid: ProcessId::current().pid })
    }

    /// The address of the first byte (where a device-to-host copy lands).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr as usize as *mut u8
    }

    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes (what the last copy left there).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of at least `len` bytes (one when `len` is 0)
        // owned by self; writes need `&mut self`, so none runs while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.ptr as usize as *const u8, self.len) }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if self.pid == ProcessId::current().pid {
            let _ = self.door.host_free(self.device, self.ptr);
        }
    }
}

/// A CUDA stream of this process on one device, destroyed when dropped.
pub struct OwnStream {
    door: &'static dyn Door,
    device: u32,
    stream: u64,
    pid: u32,
}

impl std::fmt::Debug for OwnStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnStream(cuda:{}, {:#x})", self.device, self.stream)
    }
}

impl OwnStream {
    /// Creates a non-blocking CUDA stream on `device`; `name` (the stream's) is for messages.
    pub fn create(door: &'static dyn Door, device: u32, name: &str) -> Result<OwnStream> {
        let stream = door.create_stream(device).map_err(failed(name, "creating a CUDA stream"))?;
        Ok(OwnStream { door, device, stream, pid: ProcessId::current().pid })
    }

    /// The CUDA stream handle, as the door's calls take it.
    pub fn handle(&self) -> u64 {
        self.stream
    }
}

impl Drop for OwnStream {
    fn drop(&mut self) {
        if self.pid == ProcessId::current().pid {
            let _ = self.door.destroy_stream(self.device, self.stream);
        }
    }
}
