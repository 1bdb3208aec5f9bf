//! What this process reaches of device streams' memory and events, shared by all its handles.
//!
//! CUDA lets a process open an inter-process memory handle once (until it closes it), and a
//! process cannot open a handle it exported itself; so every handle of every stream in this
//! process goes through these tables: memory and events this process made are found by their
//! exported handle, and a handle opened once is shared until its last user is gone.
//!
//! Memory and slot events a process allocated for the streams it created stay allocated after
//! its handles are closed (readers in other processes still use them) until the stream is
//! unlinked: [`sweep_owned`] frees those whose segment is gone. They go with the process anyway.

use std::sync::{Arc, Mutex, Weak};

use super::door::{Door, DoorResult, Event, IpcHandle};
use crate::process::ProcessId;

/// Device memory this process reaches: allocated here, or opened from another process's handle.
pub struct Memory {
    door: &'static dyn Door,
    device: u32,
    ptr: u64,
    owned: bool,
    pid: u32,
}

impl Memory {
    /// The memory's address in this process.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // A copy inherited through fork() is the parent's to give back.
        if self.pid != ProcessId::current().pid {
            return;
        }
        let _ = if self.owned { self.door.free(self.device, self.ptr) } else { self.door.close_memory(self.device, self.ptr) };
    }
}

/// An event this process created or opened.
pub struct EventRef {
    door: &'static dyn Door,
    device: u32,
    event: Event,
    pid: u32,
}

impl EventRef {
    pub fn event(&self) -> Event {
        self.event
    }
}

impl Drop for EventRef {
    fn drop(&mut self) {
        if self.pid == ProcessId::current().pid {
            let _ = self.door.destroy_event(self.device, self.event);
        }
    }
}

/// A handle this process exported or opened, and what it reaches.
struct Entry<T> {
    pid: u32,
    handle: IpcHandle,
    item: Weak<T>,
}

struct Tables {
    memory: Vec<Entry<Memory>>,
    events: Vec<Entry<EventRef>>,
    /// Allocations (and their slot events) of streams this process created, kept alive until
    /// the stream's segment is gone: (segment identity, path, memory, events).
    owned: Vec<Owned>,
}

/// What a created stream's device section refers to, kept alive for other processes.
pub struct Owned {
    pub identity: (u64, u64),
    pub path: String,
    pub pid: u32,
    pub memory: Arc<Memory>,
    pub events: Vec<Arc<EventRef>>,
}

static TABLES: Mutex<Tables> = Mutex::new(Tables { memory: Vec::new(), events: Vec::new(), owned: Vec::new() });

fn tables() -> std::sync::MutexGuard<'static, Tables> {
    TABLES.lock().unwrap_or_else(|e| e.into_inner())
}

fn find<T>(list: &mut Vec<Entry<T>>, pid: u32, handle: &IpcHandle) -> Option<Arc<T>> {
    list.retain(|e| e.item.strong_count() > 0);
    list.iter().find(|e| e.pid == pid && e.handle == *handle).and_then(|e| e.item.upgrade())
}

/// Allocates `bytes` on `device` and exports the allocation.
pub fn allocate(door: &'static dyn Door, device: u32, bytes: u64) -> DoorResult<(Arc<Memory>, IpcHandle)> {
    let ptr = door.alloc(device, bytes)?;
    let pid = ProcessId::current().pid;
    let memory = Arc::new(Memory { door, device, ptr, owned: true, pid });
    let handle = door.export_memory(device, ptr)?;
    tables().memory.push(Entry { pid, handle, item: Arc::downgrade(&memory) });
    Ok((memory, handle))
}

/// Allocates `bytes` on `device` for this process alone (not exported): a framebus array.
pub fn allocate_private(door: &'static dyn Door, device: u32, bytes: u64) -> DoorResult<Arc<Memory>> {
    let ptr = door.alloc(device, bytes.max(1))?;
    Ok(Arc::new(Memory { door, device, ptr, owned: true, pid: ProcessId::current().pid }))
}

/// The memory an exported handle refers to: this process's own, one already opened here, or
/// opened now.
pub fn open_memory(door: &'static dyn Door, device: u32, handle: &IpcHandle) -> DoorResult<Arc<Memory>> {
    let pid = ProcessId::current().pid;
    let mut t = tables();
    if let Some(found) = find(&mut t.memory, pid, handle) {
        return Ok(found);
    }
    let ptr = door.open_memory(device, handle)?;
    let memory = Arc::new(Memory { door, device, ptr, owned: false, pid });
    t.memory.push(Entry { pid, handle: *handle, item: Arc::downgrade(&memory) });
    Ok(memory)
}

/// Creates an inter-process event on `device` and exports it.
pub fn create_event(door: &'static dyn Door, device: u32) -> DoorResult<(Arc<EventRef>, IpcHandle)> {
    let event = door.create_event(device)?;
    let pid = ProcessId::current().pid;
    let made = Arc::new(EventRef { door, device, event, pid });
    let handle = door.export_event(device, event)?;
    tables().events.push(Entry { pid, handle, item: Arc::downgrade(&made) });
    Ok((made, handle))
}

/// The event an exported handle refers to: this process's own, one opened here, or opened now.
pub fn open_event(door: &'static dyn Door, device: u32, handle: &IpcHandle) -> DoorResult<Arc<EventRef>> {
    let pid = ProcessId::current().pid;
    let mut t = tables();
    if let Some(found) = find(&mut t.events, pid, handle) {
        return Ok(found);
    }
    let event = door.open_event(device, handle)?;
    let opened = Arc::new(EventRef { door, device, event, pid });
    t.events.push(Entry { pid, handle: *handle, item: Arc::downgrade(&opened) });
    Ok(opened)
}

/// Keeps a created stream's memory and events alive until its segment is gone.
pub fn keep_owned(owned: Owned) {
    tables().owned.push(owned);
}

/// Frees the memory and events of streams this process created whose segment was unlinked
/// (the name is gone or names another segment). Returns how many were freed.
pub fn sweep_owned() -> usize {
    use std::os::unix::fs::MetadataExt;
    let pid = ProcessId::current().pid;
    let gone: Vec<Owned> = {
        let mut t = tables();
        let (gone, kept): (Vec<Owned>, Vec<Owned>) =
            t.owned.drain(..).partition(|o| o.pid == pid && std::fs::metadata(&o.path).map_or(true, |m| (m.dev(), m.ino()) != o.identity));
        t.owned = kept;
        gone
    };
    // Dropped outside the lock: freeing goes through the door.
    gone.len()
}

/// Streams this process created whose device memory it still holds.
pub fn owned_count() -> usize {
    let pid = ProcessId::current().pid;
    tables().owned.iter().filter(|o| o.pid == pid).count()
}
