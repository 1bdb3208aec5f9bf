//! The strict fake behind the door (`FRAMEBUS_CUDA=fake`): "device" memory is host shared memory
//! that other processes can open, so everything above the door runs and is tested across
//! processes on machines without a GPU.
//!
//! - An allocation is a `memfd` of its own (gone with the owning process, like CUDA memory;
//!   nothing in `/dev/shm`), mapped read-write; its device pointer is the address of this
//!   process's mapping.
//! - Its IPC handle carries a magic, the owner's pid and start time, the memfd's descriptor
//!   number, an allocation id, the size and the device. Another process opens
//!   `/proc/<pid>/fd/<fd>` and checks, on the file it got, that the memfd's name
//!   (`framebus-fake-cuda:<pid>:<start>:<id>:<device>`) and size are the handle's: a stale
//!   handle (owner freed it or exited, descriptor number reused) fails, never maps other memory.
//! - An event is a memfd too, holding a record count: `record` increments it; copies run at call
//!   time, so a recorded event is complete at once.
//! - Page-locked host memory (`host_alloc`) is plain page-aligned host memory of this process,
//!   counted so that tests see how often it is allocated; a created CUDA stream is a number.
//!
//! It refuses what CUDA refuses and what would hide a protocol bug, each with a CUDA-like error
//! name (see [`Door`] and `docs/gpu.md`). The tables belong to the process that made them: a
//! forked child starts with empty ones and cannot free or close its parent's memory or events.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::door::{DeviceInfo, Door, DoorError, DoorKind, DoorResult, Event, IpcHandle, IPC_HANDLE_BYTES};
use crate::process::{current_ids, start_time, ProcessId};

/// Devices of a fake door unless `FRAMEBUS_FAKE_CUDA_DEVICES` says otherwise.
pub const DEFAULT_DEVICES: u32 = 2;
/// The most devices `FRAMEBUS_FAKE_CUDA_DEVICES` may ask for.
pub const MAX_DEVICES: u32 = 64;
/// What the fake reports as `cuDriverGetVersion` (CUDA 13.0).
pub const DRIVER_VERSION: i32 = 13000;
/// Memory each fake device reports, and the most one allocation may take.
pub const TOTAL_MEMORY: u64 = 16 << 30;

const MEM_MAGIC: [u8; 8] = *b"FBFAKEM1";
const EVENT_MAGIC: [u8; 8] = *b"FBFAKEE1";
/// Bytes of an event's memfd: magic, record count.
const EVENT_BYTES: usize = 64;

pub(crate) const INVALID_VALUE: (i32, &str) = (1, "CUDA_ERROR_INVALID_VALUE");
pub(crate) const OUT_OF_MEMORY: (i32, &str) = (2, "CUDA_ERROR_OUT_OF_MEMORY");
pub(crate) const INVALID_DEVICE: (i32, &str) = (101, "CUDA_ERROR_INVALID_DEVICE");
pub(crate) const INVALID_CONTEXT: (i32, &str) = (201, "CUDA_ERROR_INVALID_CONTEXT");
pub(crate) const ALREADY_MAPPED: (i32, &str) = (208, "CUDA_ERROR_ALREADY_MAPPED");
pub(crate) const INVALID_HANDLE: (i32, &str) = (400, "CUDA_ERROR_INVALID_HANDLE");
pub(crate) const NOT_READY: (i32, &str) = (600, "CUDA_ERROR_NOT_READY");

fn fail(call: &'static str, (code, name): (i32, &str), detail: impl Into<String>) -> DoorError {
    DoorError { call, code, name: name.to_string(), detail: detail.into() }
}

/// Live objects of this process's fake door (a forked child starts at zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeCounts {
    /// Allocations not yet freed.
    pub allocations: usize,
    /// Memory handles opened and not yet closed.
    pub openings: usize,
    /// Events created or opened and not yet destroyed.
    pub events: usize,
    /// Page-locked host allocations not yet freed.
    pub host_allocations: usize,
    /// Page-locked host allocations made by this process so far (freed ones too).
    pub host_allocations_made: u64,
    /// CUDA streams created and not yet destroyed.
    pub streams: usize,
}

/// One shared mapping of this process.
struct Mapping {
    base: u64,
    len: u64,
}

impl Mapping {
    fn map(file: &File, len: u64) -> std::io::Result<Mapping> {
        // SAFETY: maps `len` bytes of an open memfd (already sized to at least `len`) shared and
        // read-write at an address the kernel picks; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { base: ptr as u64, len })
    }

    fn unmap(self) {
        // SAFETY: this mapping was made by `map` with this length and is dropped from the tables
        // here, so no pointer the fake hands out refers to it afterwards.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len as usize) };
    }

    fn contains(&self, ptr: u64, bytes: u64) -> bool {
        ptr >= self.base && ptr.checked_add(bytes).is_some_and(|end| end <= self.base + self.len)
    }
}

struct Allocation {
    map: Mapping,
    device: u32,
    id: u64,
    /// Keeps the memfd's descriptor number (in the handle) valid until `free`.
    file: File,
}

struct Opening {
    map: Mapping,
    device: u32,
    key: Owner,
}

struct EventEntry {
    map: Mapping,
    device: u32,
    id: u64,
    /// Some for an event created here (its descriptor is in the handle); None for an opened one.
    file: Option<File>,
}

impl EventEntry {
    fn records(&self) -> &AtomicU64 {
        // SAFETY: the mapping is EVENT_BYTES long, page aligned, stays mapped while the entry
        // lives, and offset 8 holds the record count, only ever accessed atomically.
        unsafe { &*((self.map.base + 8) as *const AtomicU64) }
    }
}

/// Identity of an allocation or event across processes: (pid, start time, id).
type Owner = (u32, u64, u64);

struct Tables {
    /// The process these tables belong to; another pid means a forked child.
    pid: u32,
    allocations: BTreeMap<u64, Allocation>,
    openings: BTreeMap<u64, Opening>,
    events: BTreeMap<u64, EventEntry>,
    /// Page-locked host allocations: address -> bytes.
    host: BTreeMap<u64, u64>,
    host_made: u64,
    /// Created CUDA streams: number -> device.
    streams: BTreeMap<u64, u32>,
}

static TABLES: Mutex<Tables> = Mutex::new(Tables {
    pid: 0,
    allocations: BTreeMap::new(),
    openings: BTreeMap::new(),
    events: BTreeMap::new(),
    host: BTreeMap::new(),
    host_made: 0,
    streams: BTreeMap::new(),
});
/// Allocation and event ids, never reused in a process line (so a destroyed event stays known).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// This process's tables. In a forked child the parent's entries are forgotten (their inherited
/// descriptors closed, the mappings left alone): they are not the child's to free or close.
fn tables() -> MutexGuard<'static, Tables> {
    let mut t = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    let pid = current_ids().0;
    if t.pid != pid {
        t.allocations.clear();
        t.openings.clear();
        t.events.clear();
        t.host.clear();
        t.host_made = 0;
        t.streams.clear();
        t.pid = pid;
    }
    t
}

/// Live allocations, openings and events of this process's fake door.
pub fn fake_counts() -> FakeCounts {
    let t = tables();
    FakeCounts {
        allocations: t.allocations.len(),
        openings: t.openings.len(),
        events: t.events.len(),
        host_allocations: t.host.len(),
        host_allocations_made: t.host_made,
        streams: t.streams.len(),
    }
}

/// The mapping (allocation or opening) of this process that holds all of `[ptr, ptr+bytes)`.
fn find(t: &Tables, ptr: u64, bytes: u64) -> Option<(&Mapping, u32)> {
    let a = t.allocations.range(..=ptr).next_back().map(|(_, a)| (&a.map, a.device));
    let o = t.openings.range(..=ptr).next_back().map(|(_, o)| (&o.map, o.device));
    [a, o].into_iter().flatten().find(|(m, _)| m.contains(ptr, bytes.max(1)))
}

/// Copies the bytes of `[ptr, ptr+len)` out, if that range lies inside one live allocation or
/// opening of this process (for tests and monitoring; copies).
pub fn fake_read(ptr: u64, len: u64) -> Option<Vec<u8>> {
    let t = tables();
    find(&t, ptr, len)?;
    let mut out = vec![0u8; len as usize];
    // SAFETY: the range lies inside a live mapping of this process (checked above, table locked
    // so it cannot be unmapped meanwhile), and `out` has `len` bytes.
    unsafe { std::ptr::copy(ptr as *const u8, out.as_mut_ptr(), len as usize) };
    Some(out)
}

/// Writes `data` at `ptr` if `[ptr, ptr+data.len())` lies inside one live allocation or opening
/// of this process; false otherwise (for tests; copies).
pub fn fake_write(ptr: u64, data: &[u8]) -> bool {
    let t = tables();
    if find(&t, ptr, data.len() as u64).is_none() {
        return false;
    }
    // SAFETY: the range lies inside a live read-write mapping of this process (checked above,
    // table locked), and `data` is a live slice of that length.
    unsafe { std::ptr::copy(data.as_ptr(), ptr as *mut u8, data.len()) };
    true
}

/// The host address behind a fake device range, if `[ptr, ptr+len)` lies inside one live
/// allocation or opening of this process. Valid until that allocation is freed or closed.
pub fn fake_host_ptr(ptr: u64, len: u64) -> Option<*mut u8> {
    let t = tables();
    find(&t, ptr, len).map(|_| ptr as *mut u8)
}

/// The layout of a fake page-locked allocation of `bytes` (page aligned, like the driver's).
fn host_layout(bytes: u64) -> Option<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(usize::try_from(bytes).ok()?, 4096).ok()
}

/// A new memfd named `name`, `len` bytes long.
fn memfd(name: &str, len: u64) -> std::io::Result<File> {
    let cname = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: memfd_create through the raw system call (the libc wrapper needs glibc 2.27) with a
    // NUL-terminated name that outlives the call; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd as i32) };
    file.set_len(len)?;
    Ok(file)
}

fn object_name(kind: &str, pid: u32, start: u64, id: u64, device: u32) -> String {
    format!("framebus-fake-cuda-{kind}:{pid}:{start}:{id}:{device}")
}

/// The fields of a fake IPC handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handle {
    pid: u32,
    start: u64,
    fd: i32,
    id: u64,
    size: u64,
    device: u32,
}

impl Handle {
    fn encode(&self, magic: [u8; 8]) -> IpcHandle {
        let mut b = [0u8; IPC_HANDLE_BYTES];
        b[0..8].copy_from_slice(&magic);
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..20].copy_from_slice(&self.start.to_le_bytes());
        b[20..24].copy_from_slice(&self.fd.to_le_bytes());
        b[24..32].copy_from_slice(&self.id.to_le_bytes());
        b[32..40].copy_from_slice(&self.size.to_le_bytes());
        b[40..44].copy_from_slice(&self.device.to_le_bytes());
        IpcHandle(b)
    }

    fn decode(h: &IpcHandle, magic: [u8; 8]) -> Option<Handle> {
        let b = &h.0;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if b[0..8] != magic || b[44..].iter().any(|&x| x != 0) {
            return None;
        }
        Some(Handle { pid: u32_at(8), start: u64_at(12), fd: u32_at(20) as i32, id: u64_at(24), size: u64_at(32), device: u32_at(40) })
    }
}

/// Opens the memfd a handle names, through the owner's descriptor table, and checks on the file
/// it got that it is that very object (name and size), so a stale handle never opens other memory.
fn open_owned(call: &'static str, kind: &str, h: &Handle) -> DoorResult<File> {
    let stale =
        |why: &str| fail(call, INVALID_HANDLE, format!("stale {kind} handle of process {} ({why}): its owner freed it or exited", h.pid));
    if start_time(h.pid) != Some(h.start) {
        return Err(stale("that process is gone"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{}/fd/{}", h.pid, h.fd))
        .map_err(|e| stale(&format!("descriptor {}: {e}", h.fd)))?;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|e| stale(&e.to_string()))?;
    let expected = format!("/memfd:{} (deleted)", object_name(kind, h.pid, h.start, h.id, h.device));
    if link.as_os_str() != expected.as_str() {
        return Err(stale("its descriptor now holds another file"));
    }
    let len = file.metadata().map_err(|e| stale(&e.to_string()))?.len();
    if len != h.size {
        return Err(stale(&format!("size {len}, handle says {}", h.size)));
    }
    Ok(file)
}

/// The device count a `FRAMEBUS_FAKE_CUDA_DEVICES` value asks for (None: unset).
fn device_count_setting(value: Option<&str>) -> DoorResult<u32> {
    let Some(v) = value else { return Ok(DEFAULT_DEVICES) };
    match v.trim().parse::<u32>() {
        Ok(n) if n <= MAX_DEVICES => Ok(n),
        _ => Err(fail(
            "FRAMEBUS_FAKE_CUDA_DEVICES",
            super::door::BAD_SETTING,
            format!("FRAMEBUS_FAKE_CUDA_DEVICES={v:?} is not understood: it takes a device count from 0 to {MAX_DEVICES}"),
        )),
    }
}

/// The strict fake door. Every instance shares this process's tables.
#[derive(Debug)]
pub struct FakeDoor {
    devices: u32,
}

impl FakeDoor {
    /// A fake with `devices` devices (at most [`MAX_DEVICES`]).
    pub fn new(devices: u32) -> FakeDoor {
        FakeDoor { devices: devices.min(MAX_DEVICES) }
    }

    /// A fake with `FRAMEBUS_FAKE_CUDA_DEVICES` devices ([`DEFAULT_DEVICES`] when unset).
    pub fn from_env() -> DoorResult<FakeDoor> {
        let value = std::env::var_os("FRAMEBUS_FAKE_CUDA_DEVICES").map(|v| v.to_string_lossy().into_owned());
        Ok(FakeDoor::new(device_count_setting(value.as_deref())?))
    }

    fn check_device(&self, call: &'static str, device: u32) -> DoorResult<()> {
        if device >= self.devices {
            return Err(fail(
                call,
                INVALID_DEVICE,
                format!("device {device} does not exist: the fake has {} (FRAMEBUS_FAKE_CUDA_DEVICES)", self.devices),
            ));
        }
        Ok(())
    }

    /// The host address of a device range for a copy: inside one live mapping on `device`.
    fn device_range(&self, t: &Tables, call: &'static str, device: u32, ptr: u64, bytes: u64, side: &str) -> DoorResult<u64> {
        match find(t, ptr, bytes) {
            Some((_, d)) if d == device => Ok(ptr),
            Some((_, d)) => Err(fail(call, INVALID_VALUE, format!("{side} {ptr:#x} is memory of device {d}, not of device {device}"))),
            None => Err(fail(
                call,
                INVALID_VALUE,
                format!("{side} range {ptr:#x}+{bytes} is not inside one live allocation or opened handle of this process"),
            )),
        }
    }

    fn event<'t>(&self, t: &'t Tables, call: &'static str, device: u32, event: Event) -> DoorResult<&'t EventEntry> {
        self.check_device(call, device)?;
        match t.events.get(&event.0) {
            Some(e) if e.device == device => Ok(e),
            Some(e) => Err(fail(call, INVALID_HANDLE, format!("event {} belongs to device {}, not {device}", event.0, e.device))),
            None if event.0 != 0 && event.0 < NEXT_ID.load(Ordering::Relaxed) => {
                Err(fail(call, INVALID_HANDLE, format!("event {} was destroyed (or is not this process's)", event.0)))
            }
            None => Err(fail(call, INVALID_HANDLE, format!("event {} was never created or opened", event.0))),
        }
    }

    /// The recorded event, or NOT_READY if it never was recorded (CUDA would treat it as
    /// complete, which hides an ordering bug).
    fn recorded<'t>(&self, t: &'t Tables, call: &'static str, device: u32, event: Event) -> DoorResult<&'t EventEntry> {
        let e = self.event(t, call, device, event)?;
        if e.records().load(Ordering::Acquire) == 0 {
            return Err(fail(call, NOT_READY, format!("event {} was never recorded, so there is nothing to wait for", event.0)));
        }
        Ok(e)
    }
}

impl Door for FakeDoor {
    fn kind(&self) -> DoorKind {
        DoorKind::Fake
    }

    fn driver_version(&self) -> DoorResult<i32> {
        Ok(DRIVER_VERSION)
    }

    fn device_count(&self) -> DoorResult<u32> {
        Ok(self.devices)
    }

    fn device_info(&self, device: u32) -> DoorResult<DeviceInfo> {
        self.check_device("cuDeviceGet", device)?;
        let mut uuid = *b"fbfake-cuda-dev\0";
        uuid[12..16].copy_from_slice(&device.to_be_bytes());
        Ok(DeviceInfo {
            ordinal: device,
            name: format!("framebus fake CUDA device {device}"),
            uuid,
            total_memory: TOTAL_MEMORY,
            compute_capability: (8, 6),
        })
    }

    fn alloc(&self, device: u32, bytes: u64) -> DoorResult<u64> {
        const CALL: &str = "cuMemAlloc";
        self.check_device(CALL, device)?;
        if bytes == 0 {
            return Err(fail(CALL, INVALID_VALUE, "cannot allocate 0 bytes"));
        }
        if bytes > TOTAL_MEMORY {
            return Err(fail(CALL, OUT_OF_MEMORY, format!("{bytes} bytes is more than the fake device's {TOTAL_MEMORY}")));
        }
        let mut t = tables();
        let me = ProcessId::current();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let oom = |e: std::io::Error| fail(CALL, OUT_OF_MEMORY, format!("{bytes} bytes of fake device memory: {e}"));
        let file = memfd(&object_name("mem", me.pid, me.start, id, device), bytes).map_err(oom)?;
        let map = Mapping::map(&file, bytes).map_err(oom)?;
        let ptr = map.base;
        t.allocations.insert(ptr, Allocation { map, device, id, file });
        Ok(ptr)
    }

    fn free(&self, device: u32, ptr: u64) -> DoorResult<()> {
        const CALL: &str = "cuMemFree";
        self.check_device(CALL, device)?;
        let mut t = tables();
        match t.allocations.get(&ptr) {
            Some(a) if a.device == device => {
                let a = t.allocations.remove(&ptr).expect("just found");
                a.map.unmap();
                drop(a.file);
                Ok(())
            }
            Some(a) => Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} was allocated on device {}, not {device}", a.device))),
            None if t.openings.contains_key(&ptr) => {
                Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} was opened from another process's handle: close it, do not free it")))
            }
            None => Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} is not a live allocation of this process (freed already?)"))),
        }
    }

    fn export_memory(&self, device: u32, ptr: u64) -> DoorResult<IpcHandle> {
        const CALL: &str = "cuIpcGetMemHandle";
        self.check_device(CALL, device)?;
        let t = tables();
        match t.allocations.get(&ptr) {
            Some(a) if a.device == device => {
                let me = ProcessId::current();
                let h = Handle { pid: me.pid, start: me.start, fd: a.file.as_raw_fd(), id: a.id, size: a.map.len, device };
                Ok(h.encode(MEM_MAGIC))
            }
            Some(a) => Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} was allocated on device {}, not {device}", a.device))),
            None => Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} is not the start of a live allocation of this process"))),
        }
    }

    fn open_memory(&self, device: u32, handle: &IpcHandle) -> DoorResult<u64> {
        const CALL: &str = "cuIpcOpenMemHandle";
        self.check_device(CALL, device)?;
        let h = Handle::decode(handle, MEM_MAGIC).ok_or_else(|| fail(CALL, INVALID_HANDLE, "not a memory handle of the fake door"))?;
        if h.device != device {
            return Err(fail(CALL, INVALID_DEVICE, format!("the handle's memory is on device {}, not {device}", h.device)));
        }
        let me = ProcessId::current();
        if h.pid == me.pid && h.start == me.start {
            return Err(fail(CALL, INVALID_CONTEXT, "a process cannot open the handle of its own allocation"));
        }
        let mut t = tables();
        let key = (h.pid, h.start, h.id);
        if t.openings.values().any(|o| o.key == key) {
            return Err(fail(CALL, ALREADY_MAPPED, "this handle is already open in this process: close it first"));
        }
        let file = open_owned(CALL, "mem", &h)?;
        let map = Mapping::map(&file, h.size).map_err(|e| fail(CALL, OUT_OF_MEMORY, format!("mapping the handle: {e}")))?;
        let ptr = map.base;
        t.openings.insert(ptr, Opening { map, device, key });
        Ok(ptr)
    }

    fn close_memory(&self, device: u32, ptr: u64) -> DoorResult<()> {
        const CALL: &str = "cuIpcCloseMemHandle";
        self.check_device(CALL, device)?;
        let mut t = tables();
        match t.openings.get(&ptr) {
            Some(o) if o.device == device => {
                t.openings.remove(&ptr).expect("just found").map.unmap();
                Ok(())
            }
            Some(o) => Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} was opened on device {}, not {device}", o.device))),
            None => Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} is not an opened memory handle of this process"))),
        }
    }

    fn create_event(&self, device: u32) -> DoorResult<Event> {
        const CALL: &str = "cuEventCreate";
        self.check_device(CALL, device)?;
        let mut t = tables();
        let me = ProcessId::current();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let oom = |e: std::io::Error| fail(CALL, OUT_OF_MEMORY, format!("fake event: {e}"));
        let file = memfd(&object_name("event", me.pid, me.start, id, device), EVENT_BYTES as u64).map_err(oom)?;
        let map = Mapping::map(&file, EVENT_BYTES as u64).map_err(oom)?;
        // SAFETY: the fresh mapping is EVENT_BYTES long and nobody else knows it yet.
        unsafe { std::ptr::copy_nonoverlapping(EVENT_MAGIC.as_ptr(), map.base as *mut u8, 8) };
        t.events.insert(id, EventEntry { map, device, id, file: Some(file) });
        Ok(Event(id))
    }

    fn export_event(&self, device: u32, event: Event) -> DoorResult<IpcHandle> {
        const CALL: &str = "cuIpcGetEventHandle";
        let t = tables();
        let e = self.event(&t, CALL, device, event)?;
        let Some(file) = &e.file else {
            return Err(fail(CALL, INVALID_VALUE, "an event opened from another process's handle cannot be exported again"));
        };
        let me = ProcessId::current();
        let h = Handle { pid: me.pid, start: me.start, fd: file.as_raw_fd(), id: e.id, size: EVENT_BYTES as u64, device };
        Ok(h.encode(EVENT_MAGIC))
    }

    fn open_event(&self, device: u32, handle: &IpcHandle) -> DoorResult<Event> {
        const CALL: &str = "cuIpcOpenEventHandle";
        self.check_device(CALL, device)?;
        let h = Handle::decode(handle, EVENT_MAGIC).ok_or_else(|| fail(CALL, INVALID_HANDLE, "not an event handle of the fake door"))?;
        if h.device != device {
            return Err(fail(CALL, INVALID_DEVICE, format!("the handle's event is on device {}, not {device}", h.device)));
        }
        let me = ProcessId::current();
        if h.pid == me.pid && h.start == me.start {
            return Err(fail(CALL, INVALID_CONTEXT, "a process cannot open the handle of its own event: use the event"));
        }
        let mut t = tables();
        let file = open_owned(CALL, "event", &h)?;
        let map = Mapping::map(&file, EVENT_BYTES as u64).map_err(|e| fail(CALL, OUT_OF_MEMORY, format!("mapping the event: {e}")))?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        t.events.insert(id, EventEntry { map, device, id: h.id, file: None });
        Ok(Event(id))
    }

    fn destroy_event(&self, device: u32, event: Event) -> DoorResult<()> {
        const CALL: &str = "cuEventDestroy";
        let mut t = tables();
        self.event(&t, CALL, device, event)?;
        let e = t.events.remove(&event.0).expect("just found");
        e.map.unmap();
        drop(e.file);
        Ok(())
    }

    fn record(&self, device: u32, event: Event, _stream: u64) -> DoorResult<()> {
        let t = tables();
        self.event(&t, "cuEventRecord", device, event)?.records().fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn wait(&self, device: u32, _stream: u64, event: Event) -> DoorResult<()> {
        let t = tables();
        self.recorded(&t, "cuStreamWaitEvent", device, event).map(|_| ())
    }

    fn query(&self, device: u32, event: Event) -> DoorResult<bool> {
        let t = tables();
        self.recorded(&t, "cuEventQuery", device, event).map(|_| true)
    }

    fn synchronize_event(&self, device: u32, event: Event) -> DoorResult<()> {
        let t = tables();
        self.recorded(&t, "cuEventSynchronize", device, event).map(|_| ())
    }

    fn copy_device_to_device(&self, device: u32, dst: u64, src: u64, bytes: u64, _stream: u64) -> DoorResult<()> {
        const CALL: &str = "cuMemcpyDtoDAsync";
        self.check_device(CALL, device)?;
        let t = tables();
        self.device_range(&t, CALL, device, dst, bytes, "destination")?;
        self.device_range(&t, CALL, device, src, bytes, "source")?;
        if bytes > 0
            && src < dst + bytes
            && dst < src + bytes
            && find(&t, src, bytes).map(|m| m.0.base) == find(&t, dst, bytes).map(|m| m.0.base)
        {
            return Err(fail(CALL, INVALID_VALUE, "source and destination ranges overlap"));
        }
        // SAFETY: both ranges lie inside live mappings of this process (checked above with the
        // tables locked, so neither can be unmapped meanwhile); overlap within one mapping is
        // refused, and `copy` tolerates two mappings of one memfd.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes as usize) };
        Ok(())
    }

    // The door's signature takes the host pointer in a safe method; its contract (readable or
    // writable for `bytes` bytes) is on the trait.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn copy_host_to_device(&self, device: u32, dst: u64, src: *const u8, bytes: u64, _stream: u64) -> DoorResult<()> {
        const CALL: &str = "cuMemcpyHtoDAsync";
        self.check_device(CALL, device)?;
        if src.is_null() && bytes > 0 {
            return Err(fail(CALL, INVALID_VALUE, "null host source"));
        }
        let t = tables();
        self.device_range(&t, CALL, device, dst, bytes, "destination")?;
        // SAFETY: the destination lies inside a live mapping (checked, tables locked); the caller
        // guarantees `src` is readable for `bytes` bytes (the door's contract).
        unsafe { std::ptr::copy(src, dst as *mut u8, bytes as usize) };
        Ok(())
    }

    // The door's signature takes the host pointer in a safe method; its contract (readable or
    // writable for `bytes` bytes) is on the trait.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn copy_device_to_host(&self, device: u32, dst: *mut u8, src: u64, bytes: u64, _stream: u64) -> DoorResult<()> {
        const CALL: &str = "cuMemcpyDtoHAsync";
        self.check_device(CALL, device)?;
        if dst.is_null() && bytes > 0 {
            return Err(fail(CALL, INVALID_VALUE, "null host destination"));
        }
        let t = tables();
        self.device_range(&t, CALL, device, src, bytes, "source")?;
        // SAFETY: the source lies inside a live mapping (checked, tables locked); the caller
        // guarantees `dst` is writable for `bytes` bytes (the door's contract).
        unsafe { std::ptr::copy(src as *const u8, dst, bytes as usize) };
        Ok(())
    }

    fn synchronize_stream(&self, device: u32, _stream: u64) -> DoorResult<()> {
        self.check_device("cuStreamSynchronize", device)
    }

    fn host_alloc(&self, device: u32, bytes: u64) -> DoorResult<u64> {
        const CALL: &str = "cuMemHostAlloc";
        self.check_device(CALL, device)?;
        if bytes == 0 {
            return Err(fail(CALL, INVALID_VALUE, "cannot allocate 0 bytes"));
        }
        let layout = host_layout(bytes).ok_or_else(|| fail(CALL, OUT_OF_MEMORY, format!("{bytes} bytes of page-locked memory")))?;
        // SAFETY: the layout has a non-zero size (checked above) and a valid alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(fail(CALL, OUT_OF_MEMORY, format!("{bytes} bytes of page-locked memory")));
        }
        let mut t = tables();
        t.host.insert(ptr as u64, bytes);
        t.host_made += 1;
        Ok(ptr as u64)
    }

    fn host_free(&self, device: u32, ptr: u64) -> DoorResult<()> {
        const CALL: &str = "cuMemFreeHost";
        self.check_device(CALL, device)?;
        let mut t = tables();
        let Some(bytes) = t.host.remove(&ptr) else {
            return Err(fail(CALL, INVALID_VALUE, format!("{ptr:#x} is not page-locked memory this process allocated (freed already?)")));
        };
        let layout = host_layout(bytes).expect("allocated with this layout");
        // SAFETY: `ptr` came from alloc_zeroed with this very layout (the table says so) and was
        // removed from the table, so it is freed once.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }

    fn create_stream(&self, device: u32) -> DoorResult<u64> {
        self.check_device("cuStreamCreate", device)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        tables().streams.insert(id, device);
        Ok(id)
    }

    fn destroy_stream(&self, device: u32, stream: u64) -> DoorResult<()> {
        const CALL: &str = "cuStreamDestroy";
        self.check_device(CALL, device)?;
        let mut t = tables();
        match t.streams.get(&stream) {
            Some(&d) if d == device => {
                t.streams.remove(&stream);
                Ok(())
            }
            Some(&d) => Err(fail(CALL, INVALID_HANDLE, format!("stream {stream} belongs to device {d}, not {device}"))),
            None => Err(fail(CALL, INVALID_HANDLE, format!("stream {stream} was not created by this process (destroyed already?)"))),
        }
    }

    fn pointer_device(&self, ptr: u64) -> DoorResult<Option<u32>> {
        let t = tables();
        Ok(find(&t, ptr, 1).map(|(_, d)| d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_refuse_other_magic() {
        let h = Handle { pid: 7, start: 9, fd: 3, id: 11, size: 4096, device: 1 };
        let enc = h.encode(MEM_MAGIC);
        assert_eq!(Handle::decode(&enc, MEM_MAGIC), Some(h));
        assert_eq!(Handle::decode(&enc, EVENT_MAGIC), None);
        let mut bad = enc;
        bad.0[63] = 1;
        assert_eq!(Handle::decode(&bad, MEM_MAGIC), None);
    }

    #[test]
    fn device_count_comes_from_the_setting() {
        assert_eq!(device_count_setting(None), Ok(DEFAULT_DEVICES));
        assert_eq!(device_count_setting(Some("4")), Ok(4));
        assert_eq!(device_count_setting(Some("0")), Ok(0));
        for bad in ["", "-1", "two", "65"] {
            let e = device_count_setting(Some(bad)).expect_err(bad);
            assert_eq!(e.name, super::super::door::BAD_SETTING.1);
            assert!(e.detail.contains("from 0 to 64"), "{e}");
            assert!(e.to_string().starts_with("FRAMEBUS_FAKE_CUDA_DEVICES=") && !e.to_string().contains("failed with"), "{e}");
        }
    }

    #[test]
    fn ranges_are_inside_one_mapping() {
        let m = Mapping { base: 4096, len: 100 };
        assert!(m.contains(4096, 100));
        assert!(m.contains(4195, 1));
        assert!(!m.contains(4195, 2));
        assert!(!m.contains(4095, 1));
        assert!(!m.contains(4096, u64::MAX));
    }
}
