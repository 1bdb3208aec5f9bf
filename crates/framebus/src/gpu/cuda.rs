//! The real side of the door: the CUDA driver API (`libcuda.so.1`), loaded at run time through
//! cudarc's raw bindings, so framebus builds without a CUDA toolkit and loads on machines without
//! a driver. Nothing here is called before [`CudaDoor::new`] has checked that the library and
//! every symbol it uses are there (cudarc panics on a missing one); each call is still wrapped in
//! `catch_unwind`, so no panic can reach Python.
//!
//! Each device's primary context is retained on first use and kept for the life of the process;
//! every call makes the device's context current on the calling thread first.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::door::{DeviceInfo, Door, DoorError, DoorKind, DoorResult, Event, IpcHandle, IPC_HANDLE_BYTES};

/// Every driver symbol the door calls, as cudarc loads them.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuEventCreate",
    "cuIpcGetEventHandle",
    "cuIpcOpenEventHandle",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuStreamSynchronize",
    "cuPointerGetAttribute",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
];

pub use super::door::NO_DRIVER;

/// Whether the CUDA driver library (`libcuda.so.1`) can be loaded on this machine.
pub fn driver_library_present() -> bool {
    // SAFETY: tries to dlopen the driver library under its usual names and drops it again; the
    // library's initialisers are the driver's own, run as for any program that links it.
    catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// The driver's name for `code` (`CUDA_ERROR_...`) and its description.
fn describe(code: sys::CUresult) -> (String, String) {
    let text = |f: unsafe fn(sys::CUresult, *mut *const c_char) -> sys::CUresult| {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `p` is a valid out pointer; on success the driver points it at a static
        // NUL-terminated string.
        let rc = catch_unwind(AssertUnwindSafe(|| unsafe { f(code, &mut p) }));
        match rc {
            // SAFETY: checked non-null; the driver's strings are static and NUL-terminated.
            Ok(sys::CUresult::CUDA_SUCCESS) if !p.is_null() => Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()),
            _ => None,
        }
    };
    let name = text(sys::cuGetErrorName).unwrap_or_else(|| format!("{code:?}"));
    let detail = text(sys::cuGetErrorString).unwrap_or_else(|| "unknown CUDA error".to_string());
    (name, detail)
}

/// Runs one driver call; a non-success result (or a panic in the bindings) becomes a DoorError.
fn check(call: &'static str, f: impl FnOnce() -> sys::CUresult) -> DoorResult<()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(sys::CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => {
            let (name, detail) = describe(code);
            Err(DoorError { call, code: code as i32, name, detail })
        }
        Err(_) => Err(DoorError {
            call,
            code: NO_DRIVER.0,
            name: NO_DRIVER.1.into(),
            detail: format!("the CUDA driver library lacks {call} (or failed inside it): update the NVIDIA driver"),
        }),
    }
}

fn no_driver(detail: String) -> DoorError {
    DoorError { call: "dlopen(libcuda.so.1)", code: NO_DRIVER.0, name: NO_DRIVER.1.to_string(), detail }
}

/// One device: its driver handle and, once used, its retained primary context.
struct Device {
    handle: sys::CUdevice,
    /// The primary context as an address (a `CUcontext`, shared by all threads).
    context: OnceLock<DoorResult<usize>>,
}

/// The door on the CUDA driver API.
pub struct CudaDoor {
    devices: Vec<Device>,
}

impl std::fmt::Debug for CudaDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDoor({} devices)", self.devices.len())
    }
}

impl CudaDoor {
    /// Loads the driver library, checks every symbol the door uses, runs `cuInit(0)` and lists
    /// the devices. A clean error, never a panic, where there is no driver or no device.
    pub fn new() -> DoorResult<CudaDoor> {
        if !driver_library_present() {
            return Err(no_driver(
                "no CUDA driver found: libcuda.so.1 could not be loaded; install the NVIDIA driver, or set FRAMEBUS_CUDA=fake to use the fake door"
                    .to_string(),
            ));
        }
        for name in SYMBOLS {
            // SAFETY: the library is present (checked above, so culib() does not panic); looking up a
            // symbol by name only reads the library's symbol table, and the result is not called.
            let found = catch_unwind(|| unsafe { sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()).is_ok() });
            if !matches!(found, Ok(true)) {
                return Err(no_driver(format!("the CUDA driver library lacks {name}: update the NVIDIA driver")));
            }
        }
        // SAFETY: cuInit takes flags 0 and may be called more than once.
        check("cuInit", || unsafe { sys::cuInit(0) })?;
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid out pointer.
        check("cuDeviceGetCount", || unsafe { sys::cuDeviceGetCount(&mut count) })?;
        let mut devices = Vec::new();
        for ordinal in 0..count.max(0) {
            let mut handle: sys::CUdevice = 0;
            // SAFETY: `handle` is a valid out pointer and the ordinal is below the device count.
            check("cuDeviceGet", || unsafe { sys::cuDeviceGet(&mut handle, ordinal) })?;
            devices.push(Device { handle, context: OnceLock::new() });
        }
        Ok(CudaDoor { devices })
    }

    fn device(&self, call: &'static str, device: u32) -> DoorResult<&Device> {
        self.devices.get(device as usize).ok_or_else(|| DoorError {
            call,
            code: sys::CUresult::CUDA_ERROR_INVALID_DEVICE as i32,
            name: "CUDA_ERROR_INVALID_DEVICE".to_string(),
            detail: format!("device {device} does not exist: the driver sees {}", self.devices.len()),
        })
    }

    /// Makes `device`'s primary context current on this thread (retaining it on first use).
    fn enter(&self, call: &'static str, device: u32) -> DoorResult<()> {
        let d = self.device(call, device)?;
        let ctx = d
            .context
            .get_or_init(|| {
                let mut ctx: sys::CUcontext = std::ptr::null_mut();
                // SAFETY: `ctx` is a valid out pointer and `handle` came from cuDeviceGet. The
                // retained context is kept for the life of the process.
                check("cuDevicePrimaryCtxRetain", || unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, d.handle) })?;
                Ok(ctx as usize)
            })
            .clone()?;
        // SAFETY: `ctx` is a primary context retained above and never released.
        check("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) })
    }

    fn attribute(&self, device: &Device, attribute: sys::CUdevice_attribute) -> DoorResult<i32> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out pointer and the device handle came from cuDeviceGet.
        check("cuDeviceGetAttribute", || unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device.handle) })?;
        Ok(value)
    }
}

fn to_handle(reserved: &[c_char; IPC_HANDLE_BYTES]) -> IpcHandle {
    IpcHandle(reserved.map(|c| c as u8))
}

fn from_handle(h: &IpcHandle) -> [c_char; IPC_HANDLE_BYTES] {
    h.0.map(|b| b as c_char)
}

fn event_ptr(e: Event) -> sys::CUevent {
    e.0 as usize as sys::CUevent
}

fn stream_ptr(s: u64) -> sys::CUstream {
    s as usize as sys::CUstream
}

impl Door for CudaDoor {
    fn kind(&self) -> DoorKind {
        DoorKind::Cuda
    }

    fn driver_version(&self) -> DoorResult<i32> {
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid out pointer.
        check("cuDriverGetVersion", || unsafe { sys::cuDriverGetVersion(&mut v) })?;
        Ok(v)
    }

    fn device_count(&self) -> DoorResult<u32> {
        Ok(self.devices.len() as u32)
    }

    fn device_info(&self, device: u32) -> DoorResult<DeviceInfo> {
        let d = self.device("cuDeviceGet", device)?;
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds 256 chars, the length passed; the driver NUL-terminates it.
        check("cuDeviceGetName", || unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, d.handle) })?;
        let name = name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect::<Vec<u8>>();
        let mut uuid = sys::CUuuid { bytes: [0; 16] };
        // SAFETY: `uuid` is a valid out struct.
        check("cuDeviceGetUuid", || unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, d.handle) })?;
        let mut total: usize = 0;
        // SAFETY: `total` is a valid out pointer.
        check("cuDeviceTotalMem", || unsafe { sys::cuDeviceTotalMem_v2(&mut total, d.handle) })?;
        use sys::CUdevice_attribute::{
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
        };
        Ok(DeviceInfo {
            ordinal: device,
            name: String::from_utf8_lossy(&name).into_owned(),
            uuid: uuid.bytes.map(|c| c as u8),
            total_memory: total as u64,
            compute_capability: (self.attribute(d, MAJOR)?, self.attribute(d, MINOR)?),
        })
    }

    fn alloc(&self, device: u32, bytes: u64) -> DoorResult<u64> {
        self.enter("cuMemAlloc", device)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out pointer; the device's context is current.
        check("cuMemAlloc", || unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) })?;
        Ok(ptr)
    }

    fn free(&self, device: u32, ptr: u64) -> DoorResult<()> {
        self.enter("cuMemFree", device)?;
        // SAFETY: the driver validates the pointer and reports a bad one as an error.
        check("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr) })
    }

    fn export_memory(&self, device: u32, ptr: u64) -> DoorResult<IpcHandle> {
        self.enter("cuIpcGetMemHandle", device)?;
        let mut h = sys::CUipcMemHandle { reserved: [0; IPC_HANDLE_BYTES] };
        // SAFETY: `h` is a valid out struct; the driver validates the pointer.
        check("cuIpcGetMemHandle", || unsafe { sys::cuIpcGetMemHandle(&mut h, ptr) })?;
        Ok(to_handle(&h.reserved))
    }

    fn open_memory(&self, device: u32, handle: &IpcHandle) -> DoorResult<u64> {
        self.enter("cuIpcOpenMemHandle", device)?;
        let h = sys::CUipcMemHandle { reserved: from_handle(handle) };
        let mut ptr: sys::CUdeviceptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint;
        // SAFETY: `ptr` is a valid out pointer; the handle is passed by value and the driver
        // validates it.
        check("cuIpcOpenMemHandle", || unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, h, flags) })?;
        Ok(ptr)
    }

    fn close_memory(&self, device: u32, ptr: u64) -> DoorResult<()> {
        self.enter("cuIpcCloseMemHandle", device)?;
        // SAFETY: the driver validates the pointer and reports one it did not open as an error.
        check("cuIpcCloseMemHandle", || unsafe { sys::cuIpcCloseMemHandle(ptr) })
    }

    fn create_event(&self, device: u32) -> DoorResult<Event> {
        self.enter("cuEventCreate", device)?;
        let mut e: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_INTERPROCESS as c_uint | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        // SAFETY: `e` is a valid out pointer; the device's context is current.
        check("cuEventCreate", || unsafe { sys::cuEventCreate(&mut e, flags) })?;
        Ok(Event(e as usize as u64))
    }

    fn export_event(&self, device: u32, event: Event) -> DoorResult<IpcHandle> {
        self.enter("cuIpcGetEventHandle", device)?;
        let mut h = sys::CUipcEventHandle { reserved: [0; IPC_HANDLE_BYTES] };
        // SAFETY: `h` is a valid out struct; the event is one the door created (the caller's
        // contract), which the driver validates.
        check("cuIpcGetEventHandle", || unsafe { sys::cuIpcGetEventHandle(&mut h, event_ptr(event)) })?;
        Ok(to_handle(&h.reserved))
    }

    fn open_event(&self, device: u32, handle: &IpcHandle) -> DoorResult<Event> {
        self.enter("cuIpcOpenEventHandle", device)?;
        let h = sys::CUipcEventHandle { reserved: from_handle(handle) };
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `e` is a valid out pointer; the handle is passed by value.
        check("cuIpcOpenEventHandle", || unsafe { sys::cuIpcOpenEventHandle(&mut e, h) })?;
        Ok(Event(e as usize as u64))
    }

    fn destroy_event(&self, device: u32, event: Event) -> DoorResult<()> {
        self.enter("cuEventDestroy", device)?;
        // SAFETY: the event was created or opened through the door (the caller's contract).
        check("cuEventDestroy", || unsafe { sys::cuEventDestroy_v2(event_ptr(event)) })
    }

    fn record(&self, device: u32, event: Event, stream: u64) -> DoorResult<()> {
        self.enter("cuEventRecord", device)?;
        // SAFETY: event and stream are the caller's live handles of this device.
        check("cuEventRecord", || unsafe { sys::cuEventRecord(event_ptr(event), stream_ptr(stream)) })
    }

    fn wait(&self, device: u32, stream: u64, event: Event) -> DoorResult<()> {
        self.enter("cuStreamWaitEvent", device)?;
        // SAFETY: event and stream are the caller's live handles; flags 0 (CU_EVENT_WAIT_DEFAULT).
        check("cuStreamWaitEvent", || unsafe { sys::cuStreamWaitEvent(stream_ptr(stream), event_ptr(event), 0) })
    }

    fn query(&self, device: u32, event: Event) -> DoorResult<bool> {
        self.enter("cuEventQuery", device)?;
        // SAFETY: the event is the caller's live handle.
        match check("cuEventQuery", || unsafe { sys::cuEventQuery(event_ptr(event)) }) {
            Ok(()) => Ok(true),
            Err(e) if e.code == sys::CUresult::CUDA_ERROR_NOT_READY as i32 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn synchronize_event(&self, device: u32, event: Event) -> DoorResult<()> {
        self.enter("cuEventSynchronize", device)?;
        // SAFETY: the event is the caller's live handle.
        check("cuEventSynchronize", || unsafe { sys::cuEventSynchronize(event_ptr(event)) })
    }

    fn copy_device_to_device(&self, device: u32, dst: u64, src: u64, bytes: u64, stream: u64) -> DoorResult<()> {
        self.enter("cuMemcpyDtoDAsync", device)?;
        // SAFETY: the driver validates both device ranges; the stream is the caller's.
        check("cuMemcpyDtoDAsync", || unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes as usize, stream_ptr(stream)) })
    }

    fn copy_host_to_device(&self, device: u32, dst: u64, src: *const u8, bytes: u64, stream: u64) -> DoorResult<()> {
        self.enter("cuMemcpyHtoDAsync", device)?;
        // SAFETY: the caller keeps `src` readable for `bytes` bytes until the copy has finished
        // (the door's contract); the driver validates the device range.
        check("cuMemcpyHtoDAsync", || unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, bytes as usize, stream_ptr(stream)) })
    }

    fn copy_device_to_host(&self, device: u32, dst: *mut u8, src: u64, bytes: u64, stream: u64) -> DoorResult<()> {
        self.enter("cuMemcpyDtoHAsync", device)?;
        // SAFETY: the caller keeps `dst` writable for `bytes` bytes until the copy has finished
        // (the door's contract); the driver validates the device range.
        check("cuMemcpyDtoHAsync", || unsafe { sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes as usize, stream_ptr(stream)) })
    }

    fn synchronize_stream(&self, device: u32, stream: u64) -> DoorResult<()> {
        self.enter("cuStreamSynchronize", device)?;
        // SAFETY: the stream is the caller's live handle of this device.
        check("cuStreamSynchronize", || unsafe { sys::cuStreamSynchronize(stream_ptr(stream)) })
    }

    fn host_alloc(&self, device: u32, bytes: u64) -> DoorResult<u64> {
        self.enter("cuMemHostAlloc", device)?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out pointer; flags 0 asks for plain page-locked memory.
        check("cuMemHostAlloc", || unsafe { sys::cuMemHostAlloc(&mut ptr, bytes as usize, 0) })?;
        Ok(ptr as usize as u64)
    }

    fn host_free(&self, device: u32, ptr: u64) -> DoorResult<()> {
        self.enter("cuMemFreeHost", device)?;
        // SAFETY: the caller passes an address host_alloc returned (the door's contract); the
        // driver reports one it did not allocate as an error.
        check("cuMemFreeHost", || unsafe { sys::cuMemFreeHost(ptr as usize as *mut c_void) })
    }

    fn create_stream(&self, device: u32) -> DoorResult<u64> {
        self.enter("cuStreamCreate", device)?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: `s` is a valid out pointer; the device's context is current.
        check("cuStreamCreate", || unsafe { sys::cuStreamCreate(&mut s, flags) })?;
        Ok(s as usize as u64)
    }

    fn destroy_stream(&self, device: u32, stream: u64) -> DoorResult<()> {
        self.enter("cuStreamDestroy", device)?;
        // SAFETY: the stream is one create_stream returned (the door's contract).
        check("cuStreamDestroy", || unsafe { sys::cuStreamDestroy_v2(stream_ptr(stream)) })
    }

    fn pointer_device(&self, ptr: u64) -> DoorResult<Option<u32>> {
        const CALL: &str = "cuPointerGetAttribute";
        if self.devices.is_empty() {
            return Ok(None);
        }
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `current` is a valid out pointer.
        check("cuCtxGetCurrent", || unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        if current.is_null() {
            self.enter(CALL, 0)?;
        }
        let query = |attribute: sys::CUpointer_attribute| -> DoorResult<Option<u32>> {
            let mut value: c_uint = 0;
            // SAFETY: both attributes asked for here are written as one unsigned int into `value`.
            let r = check(CALL, || unsafe { sys::cuPointerGetAttribute((&mut value as *mut c_uint).cast(), attribute, ptr) });
            match r {
                Ok(()) => Ok(Some(value)),
                Err(e) if e.code == sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32 => Ok(None),
                Err(e) => Err(e),
            }
        };
        use sys::CUpointer_attribute::{CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
        // Page-locked host memory also has a device ordinal; it is host memory to framebus.
        if query(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)? == Some(sys::CUmemorytype::CU_MEMORYTYPE_HOST as c_uint) {
            return Ok(None);
        }
        query(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
    }
}
