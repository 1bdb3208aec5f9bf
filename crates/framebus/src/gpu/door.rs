//! The one door every CUDA call goes through. Everything above it (device slots, the handle
//! exchange, event ordering, the bindings) is written against [`Door`] and tested across
//! processes against the strict fake (`FRAMEBUS_CUDA=fake`); the driver side is the only code
//! that needs a GPU.
//!
//! Addresses are plain integers: a device pointer (`CUdeviceptr`), a host pointer for the
//! host-device copies, and a CUDA stream (`CUstream`, 0 for the legacy default stream) as the
//! caller's library reports it (`torch.cuda.current_stream().cuda_stream`,
//! `cupy.cuda.get_current_stream().ptr`). Every call names the device ordinal it acts on; the
//! door makes that device's primary context current on the calling thread.

use std::fmt;

/// Bytes of a CUDA IPC handle (`CUipcMemHandle`, `CUipcEventHandle`).
pub const IPC_HANDLE_BYTES: usize = 64;

/// An inter-process handle of device memory or of an event, as exported by the door that made
/// it. Opaque bytes; stored in the stream's segment for other processes to open.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IpcHandle(pub [u8; IPC_HANDLE_BYTES]);

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcHandle({:02x?}..)", &self.0[..8])
    }
}

/// An event of this process (`CUevent`), created or opened through the door.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Event(pub u64);

/// Which implementation is behind the door.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorKind {
    /// The CUDA driver API, loaded at run time.
    Cuda,
    /// The strict fake: "device" memory in host shared memory (`FRAMEBUS_CUDA=fake`).
    Fake,
}

impl DoorKind {
    /// Stored in a device stream's segment, so a process behind the other door refuses it.
    pub fn code(self) -> u32 {
        match self {
            DoorKind::Cuda => 1,
            DoorKind::Fake => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DoorKind::Cuda => "cuda",
            DoorKind::Fake => "fake",
        }
    }
}

/// One device as the driver describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: u32,
    pub name: String,
    /// `cuDeviceGetUuid`: identifies the device across processes (ordinals depend on
    /// `CUDA_VISIBLE_DEVICES`).
    pub uuid: [u8; 16],
    pub total_memory: u64,
    /// (major, minor) compute capability.
    pub compute_capability: (i32, i32),
}

/// A failed door call: which call, the driver's error code and name (`CUDA_ERROR_...`), and
/// what it means. The core turns it into `Error::Device` with the stream's name. A negative code
/// is framebus's own (no driver library, a setting not understood): no driver call failed, so
/// its message is the detail alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoorError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
    pub detail: String,
}

/// Code and name of the error for a machine without the driver library (not a driver code).
pub const NO_DRIVER: (i32, &str) = (-1, "FRAMEBUS_NO_CUDA_DRIVER");

/// Code and name of the error for an environment setting of the door (`FRAMEBUS_CUDA`,
/// `FRAMEBUS_FAKE_CUDA_DEVICES`) whose value is not understood.
pub const BAD_SETTING: (i32, &str) = (-2, "FRAMEBUS_BAD_SETTING");

/// Code and name of the error for a side of the door this build does not have (cargo features
/// `cuda`, `fake-cuda`).
pub const NOT_BUILT: (i32, &str) = (-3, "FRAMEBUS_GPU_NOT_BUILT");

impl fmt::Display for DoorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code < 0 {
            return f.write_str(&self.detail);
        }
        write!(f, "{} failed with {} ({}): {}", self.call, self.name, self.code, self.detail)
    }
}

impl std::error::Error for DoorError {}

/// Result of a door call.
pub type DoorResult<T> = std::result::Result<T, DoorError>;

/// Every CUDA operation framebus uses. Implementations are thread-safe; a device pointer or
/// event is valid only in the process that allocated, created or opened it.
pub trait Door: Send + Sync {
    fn kind(&self) -> DoorKind;

    /// `cuDriverGetVersion` (for example 13000 for CUDA 13.0).
    fn driver_version(&self) -> DoorResult<i32>;
    fn device_count(&self) -> DoorResult<u32>;
    /// Fails for an ordinal at or past `device_count()`.
    fn device_info(&self, device: u32) -> DoorResult<DeviceInfo>;

    /// `cuMemAlloc`: `bytes` (> 0) of device memory on `device`.
    fn alloc(&self, device: u32, bytes: u64) -> DoorResult<u64>;
    /// `cuMemFree` of a pointer `alloc` returned in this process (not of an opened one).
    fn free(&self, device: u32, ptr: u64) -> DoorResult<()>;
    /// `cuIpcGetMemHandle` of an allocation of this process.
    fn export_memory(&self, device: u32, ptr: u64) -> DoorResult<IpcHandle>;
    /// `cuIpcOpenMemHandle` (lazy peer access) of a handle exported by *another* process. As in
    /// CUDA, a handle may be opened once per process and device until it is closed, and a
    /// process cannot open its own allocation's handle.
    fn open_memory(&self, device: u32, handle: &IpcHandle) -> DoorResult<u64>;
    /// `cuIpcCloseMemHandle` of a pointer `open_memory` returned.
    fn close_memory(&self, device: u32, ptr: u64) -> DoorResult<()>;

    /// `cuEventCreate` with `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`.
    fn create_event(&self, device: u32) -> DoorResult<Event>;
    /// `cuIpcGetEventHandle` of an event this process created.
    fn export_event(&self, device: u32, event: Event) -> DoorResult<IpcHandle>;
    /// `cuIpcOpenEventHandle` of an event exported by another process.
    fn open_event(&self, device: u32, handle: &IpcHandle) -> DoorResult<Event>;
    /// `cuEventDestroy` of a created or opened event.
    fn destroy_event(&self, device: u32, event: Event) -> DoorResult<()>;
    /// `cuEventRecord` on `stream`.
    fn record(&self, device: u32, event: Event, stream: u64) -> DoorResult<()>;
    /// `cuStreamWaitEvent`: work queued on `stream` after this call waits for the event's last
    /// record. The fake refuses an event that was never recorded (CUDA would not wait at all,
    /// which hides an ordering bug).
    fn wait(&self, device: u32, stream: u64, event: Event) -> DoorResult<()>;
    /// `cuEventQuery`: whether the work before the event's last record has finished.
    fn query(&self, device: u32, event: Event) -> DoorResult<bool>;
    /// `cuEventSynchronize`: blocks the calling thread until that work has finished.
    fn synchronize_event(&self, device: u32, event: Event) -> DoorResult<()>;

    /// `cuMemcpyDtoDAsync` on `stream`.
    fn copy_device_to_device(&self, device: u32, dst: u64, src: u64, bytes: u64, stream: u64) -> DoorResult<()>;
    /// `cuMemcpyHtoDAsync` on `stream` from host memory at `src` (readable for `bytes` bytes
    /// until the copy has finished: callers synchronize before they let it go).
    fn copy_host_to_device(&self, device: u32, dst: u64, src: *const u8, bytes: u64, stream: u64) -> DoorResult<()>;
    /// `cuMemcpyDtoHAsync` on `stream` into host memory at `dst` (writable until the copy has
    /// finished).
    fn copy_device_to_host(&self, device: u32, dst: *mut u8, src: u64, bytes: u64, stream: u64) -> DoorResult<()>;
    /// `cuStreamSynchronize`.
    fn synchronize_stream(&self, device: u32, stream: u64) -> DoorResult<()>;

    /// `cuMemHostAlloc` (flags 0): `bytes` (> 0) of page-locked host memory, which the device
    /// copies to and from by DMA; its address in this process.
    fn host_alloc(&self, device: u32, bytes: u64) -> DoorResult<u64>;
    /// `cuMemFreeHost` of an address `host_alloc` returned in this process.
    fn host_free(&self, device: u32, ptr: u64) -> DoorResult<()>;
    /// `cuStreamCreate` with `CU_STREAM_NON_BLOCKING`: a CUDA stream of the caller's own, not
    /// ordered with the legacy default stream.
    fn create_stream(&self, device: u32) -> DoorResult<u64>;
    /// `cuStreamDestroy` of a stream `create_stream` returned.
    fn destroy_stream(&self, device: u32, stream: u64) -> DoorResult<()>;

    /// The device ordinal a device pointer of this process belongs to
    /// (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`), None for host memory the driver does not know:
    /// how a write refuses an array on the wrong device or on the host.
    fn pointer_device(&self, ptr: u64) -> DoorResult<Option<u32>>;
}
