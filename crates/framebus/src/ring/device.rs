//! Device streams: the ring's slots in device memory.
//!
//! The host segment keeps the ring exactly as for a host stream (state words, sequence numbers,
//! pins, the reader table, metadata); only the frames live elsewhere: one device allocation of
//! `slot_count` frames, made by the creator and opened by every other process through its
//! inter-process handle. Ordering between processes never blocks a host thread:
//!
//! - each slot has a *ready* event. A writer copies (or lets the caller render) into the slot on
//!   the caller's CUDA stream, records the slot's event on that stream, then commits on the host;
//!   a reader that pinned the frame makes its own CUDA stream wait for the event before it
//!   touches the frame. The commit follows the record, so the event a reader waits for is the
//!   frame's (the slot is pinned, so no later record happens while it is in use).
//! - each reader entry has a *release* event. A reader records it on its CUDA stream when it lets
//!   a device frame go; a writer makes its CUDA stream wait for every attached reader's release
//!   event before it writes into a slot, so a reader's kernels still reading an unpinned slot
//!   finish before the next frame overwrites it. Events complete in stream order, so the last
//!   release covers every earlier one of that reader (on that CUDA stream).
//!
//! Every call goes through the door (`gpu::door`), so all of this runs against the fake in CI.

use std::sync::{Arc, Mutex};

use super::handle::Stream;
use super::layout::{self, DeviceHeader, ReleaseEvent, IPC_HANDLE_BYTES};
use super::writer::{FrameInfo, WriteGuard};
use crate::error::{Error, Result};
use crate::gpu::door::{Door, DoorError, IpcHandle};
use crate::gpu::registry::{self, EventRef, Memory};
use crate::process::{fork_generation, ProcessId};
use crate::sync::atomic::Ordering;
use crate::sync::deadline::Deadline;

/// Alignment of each slot's frame in the device allocation (CUDA allocations are 256-byte
/// aligned; 512 keeps every slot aligned for vector loads).
pub const DEVICE_PITCH_ALIGN: u64 = 512;

/// Where a frame written into a device stream comes from.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// Device memory of this process (a tensor's data pointer) on the stream's device.
    Device(u64),
    /// Host memory: `len` readable bytes at the pointer, until the call returns.
    Host(*const u8),
}

/// Where a frame read from a device stream goes.
#[derive(Clone, Copy, Debug)]
pub enum Dest {
    Device(u64),
    Host(*mut u8),
}

/// A handle's way to its stream's device memory and events.
pub struct DeviceSlots {
    door: &'static dyn Door,
    /// This process's ordinal of the stream's device.
    device: u32,
    memory: Arc<Memory>,
    pitch: u64,
    frame_bytes: u64,
    ready: Vec<Arc<EventRef>>,
    owner: ProcessId,
    /// This handle's release event, once it let a device frame go, and the version it was
    /// published under.
    release: Mutex<Option<Arc<EventRef>>>,
    /// Other handles' release events this handle opened: (entry, version, event).
    releases_seen: Mutex<Vec<(u32, u64, Arc<EventRef>)>>,
    /// `fork_generation()` and pid of the process that made or opened these (a forked child's
    /// copy reaches nothing through them: a CUDA context does not survive fork()).
    generation: u64,
    opener: u32,
}

fn door_error<'a>(stream: &'a Stream, op: &'static str) -> impl Fn(DoorError) -> Error + 'a {
    move |source| Error::Device { name: Some(stream.name.clone()), op, source }
}

fn unavailable(stream: &str, reason: impl Into<String>) -> Error {
    Error::DeviceUnavailable { name: Some(stream.to_owned()), reason: reason.into(), door: None }
}

/// The door of this process, or why there is none, for stream `name`.
pub fn door_for(name: &str) -> Result<&'static dyn Door> {
    crate::gpu::door().map_err(|e| Error::DeviceUnavailable {
        name: Some(name.to_owned()),
        reason: format!("it keeps its frames in GPU memory, and {e}"),
        door: Some(e),
    })
}

impl DeviceSlots {
    /// Allocates the device memory and events of a new stream and fills in its device section
    /// (before the segment is marked ready).
    pub(super) fn create(stream: &Stream, ordinal: u32) -> Result<DeviceSlots> {
        let door = door_for(&stream.name)?;
        let count = door.device_count().map_err(door_error(stream, "counting devices"))?;
        if ordinal >= count {
            return Err(Error::InvalidArgument(format!(
                "stream {:?}: there is no CUDA device {ordinal}: this process sees {count} device(s) (0..{}); check device= and CUDA_VISIBLE_DEVICES",
                stream.name,
                count.saturating_sub(1)
            )));
        }
        let info = door.device_info(ordinal).map_err(door_error(stream, "reading the device's properties"))?;
        registry::sweep_owned();
        let frame_bytes = stream.spec.frame_bytes().unwrap_or(0);
        let pitch =
            layout::align_up(frame_bytes.max(1), DEVICE_PITCH_ALIGN).ok_or_else(|| Error::InvalidArgument("frame too large".into()))?;
        let bytes =
            pitch.checked_mul(u64::from(stream.geometry.slot_count)).ok_or_else(|| Error::InvalidArgument("frames too large".into()))?;
        let (memory, memory_handle) =
            registry::allocate(door, ordinal, bytes).map_err(door_error(stream, "allocating device memory for the slots"))?;
        let mut ready = Vec::with_capacity(stream.geometry.slot_count as usize);
        let mut handles = Vec::with_capacity(ready.capacity());
        for _ in 0..stream.geometry.slot_count {
            let (event, handle) = registry::create_event(door, ordinal).map_err(door_error(stream, "creating the slots' events"))?;
            ready.push(event);
            handles.push(handle);
        }
        let owner = ProcessId::current();
        // SAFETY: the creator is the only one writing the device section before `ready` is
        // stored (openers wait for it), and the section lies inside the mapping (validated
        // geometry).
        unsafe {
            let h = &mut *stream.device_section().cast::<DeviceHeader>();
            h.door = door.kind().code();
            h.uuid = info.uuid;
            h.frame_bytes = frame_bytes;
            h.pitch = pitch;
            h.alloc_bytes = bytes;
            h.owner_pid = owner.pid;
            h.owner_start = owner.start;
            h.memory = memory_handle.0;
            for (i, handle) in handles.iter().enumerate() {
                std::ptr::copy_nonoverlapping(handle.0.as_ptr(), stream.slot_event_handle(i as u32).cast_mut(), IPC_HANDLE_BYTES);
            }
            h.state.store(layout::DEVICE_LIVE, Ordering::Release);
        }
        let (dev, ino) = stream.segment.identity()?;
        registry::keep_owned(registry::Owned {
            identity: (dev, ino),
            path: crate::shm::name::path(&stream.name),
            pid: owner.pid,
            memory: memory.clone(),
            events: ready.clone(),
        });
        Ok(DeviceSlots {
            door,
            device: ordinal,
            memory,
            pitch,
            frame_bytes,
            ready,
            owner,
            release: Mutex::new(None),
            releases_seen: Mutex::new(Vec::new()),
            generation: fork_generation(),
            opener: ProcessId::current().pid,
        })
    }

    /// Opens an existing device stream's memory and events in this process.
    pub(super) fn open(stream: &Stream) -> Result<DeviceSlots> {
        let door = door_for(&stream.name)?;
        let h = stream.device_header();
        if h.door != door.kind().code() {
            let made = match h.door {
                1 => "the CUDA driver",
                2 => "the fake CUDA door (FRAMEBUS_CUDA=fake)",
                _ => "an unknown door",
            };
            return Err(unavailable(
                &stream.name,
                format!("it was made through {made}, and this process uses {} (FRAMEBUS_CUDA selects it)", door.kind().name()),
            ));
        }
        let owner = ProcessId { pid: h.owner_pid, start: h.owner_start };
        if h.state.load(Ordering::Acquire) != layout::DEVICE_LIVE || !owner.is_alive() {
            return Err(unavailable(&stream.name, format!("the process that owned its GPU memory (pid {}) has exited or freed it, so its frames are gone; create the stream again", owner.pid)));
        }
        let frame_bytes = stream.spec.frame_bytes().unwrap_or(u64::MAX);
        let slots = u64::from(stream.geometry.slot_count);
        if h.frame_bytes != frame_bytes
            || h.pitch < frame_bytes
            || !h.pitch.is_multiple_of(DEVICE_PITCH_ALIGN)
            || h.pitch.checked_mul(slots) != Some(h.alloc_bytes)
        {
            return Err(Error::Corrupt {
                name: stream.name.clone(),
                path: crate::shm::name::path(&stream.name),
                reason: "the device section does not match the frame spec".into(),
            });
        }
        let device = local_ordinal(door, &h.uuid).map_err(door_error(stream, "listing devices"))?.ok_or_else(|| {
            unavailable(
                &stream.name,
                format!("its frames are on the GPU with uuid {}, which this process does not see (CUDA_VISIBLE_DEVICES?)", hex(&h.uuid)),
            )
        })?;
        let memory =
            registry::open_memory(door, device, &IpcHandle(h.memory)).map_err(door_error(stream, "opening the slots' device memory"))?;
        let mut ready = Vec::with_capacity(slots as usize);
        for i in 0..stream.geometry.slot_count {
            let mut handle = [0u8; IPC_HANDLE_BYTES];
            // SAFETY: slot i's event handle lies inside the device section, written before
            // `ready` and never changed after.
            unsafe { std::ptr::copy_nonoverlapping(stream.slot_event_handle(i), handle.as_mut_ptr(), IPC_HANDLE_BYTES) };
            ready.push(registry::open_event(door, device, &IpcHandle(handle)).map_err(door_error(stream, "opening the slots' events"))?);
        }
        Ok(DeviceSlots {
            door,
            device,
            memory,
            pitch: h.pitch,
            frame_bytes,
            ready,
            owner,
            release: Mutex::new(None),
            releases_seen: Mutex::new(Vec::new()),
            generation: fork_generation(),
            opener: ProcessId::current().pid,
        })
    }

    /// This process's ordinal of the stream's device.
    pub fn device(&self) -> u32 {
        self.device
    }

    pub fn door(&self) -> &'static dyn Door {
        self.door
    }

    /// Bytes of one frame.
    pub fn frame_bytes(&self) -> u64 {
        self.frame_bytes
    }

    /// Device address of slot `slot`'s frame in this process.
    pub fn slot_ptr(&self, slot: u32) -> u64 {
        self.memory.ptr() + u64::from(slot) * self.pitch
    }

    /// The process that owns the memory.
    pub fn owner(&self) -> ProcessId {
        self.owner
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ordinal under which this process sees the device with `uuid`.
fn local_ordinal(door: &dyn Door, uuid: &[u8; 16]) -> std::result::Result<Option<u32>, DoorError> {
    for i in 0..door.device_count()? {
        if door.device_info(i)?.uuid == *uuid {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

impl Stream {
    /// The device slots of a device stream (None for a host stream, or a device stream opened
    /// for its CPU mirror only).
    pub fn device(&self) -> Option<&DeviceSlots> {
        self.device.as_ref()
    }

    /// This process's CUDA ordinal of a device stream's device, when this handle reaches its
    /// frames through the GPU (None for a host stream or a handle on the CPU mirror).
    pub fn device_ordinal(&self) -> Option<u32> {
        self.device.as_ref().map(|d| d.device)
    }

    /// A device stream's device slots, or the error for a device operation on anything else:
    /// WrongMemory for a host stream or a handle on the CPU mirror, DeviceUnavailable for a
    /// handle inherited through fork() (its GPU memory, events and CUDA context are the
    /// parent's; refused before anything is pinned or copied).
    pub fn device_slots(&self) -> Result<&DeviceSlots> {
        let dev = self.device.as_ref().ok_or_else(|| Error::WrongMemory {
            name: self.name.clone(),
            what: match self.spec.device {
                Some(_) => "this handle reads the stream's CPU mirror only (it was opened without the GPU): open it on a machine with the GPU for device frames".into(),
                None => "it is a host stream: its frames are NumPy arrays in shared memory; create it with device=\"cuda:0\" for frames in GPU memory".into(),
            },
        })?;
        if dev.generation != fork_generation() {
            return Err(unavailable(
                &self.name,
                format!(
                    "this handle reaches its frames through the GPU of the process that opened it (pid {}), and this is a child forked from it: a CUDA context does not survive fork(); open the stream in a process started with spawn (multiprocessing's \"spawn\"), or read its CPU mirror (a stream created with cpu_mirror=True)",
                    dev.opener
                ),
            ));
        }
        Ok(dev)
    }

    /// Start of the device section in the mapping.
    pub(super) fn device_section(&self) -> *mut u8 {
        debug_assert!(self.geometry.device_bytes >= layout::DEVICE_HEADER_BYTES as u64);
        // SAFETY: validated geometry puts the device section inside the mapping.
        unsafe { self.map.as_ptr().add(self.geometry.device_offset as usize) }
    }

    pub(super) fn device_header(&self) -> &DeviceHeader {
        // SAFETY: a device stream's section starts with a DeviceHeader (page aligned, valid
        // for any bit pattern) inside the mapping, which lives as long as self.
        unsafe { &*self.device_section().cast::<DeviceHeader>() }
    }

    /// Slot `i`'s ready-event handle (IPC_HANDLE_BYTES bytes).
    pub(super) fn slot_event_handle(&self, i: u32) -> *const u8 {
        assert!(i < self.geometry.slot_count);
        // SAFETY: the handles follow the DeviceHeader, slot_count of them, inside the section
        // (device_section_bytes counts them).
        unsafe { self.device_section().add(layout::DEVICE_HEADER_BYTES + i as usize * IPC_HANDLE_BYTES) }
    }

    /// Reader entry `i`'s release event record.
    pub(super) fn release_event(&self, i: u32) -> &ReleaseEvent {
        assert!(i < self.geometry.max_readers);
        let offset = layout::DEVICE_HEADER_BYTES
            + self.geometry.slot_count as usize * IPC_HANDLE_BYTES
            + i as usize * std::mem::size_of::<ReleaseEvent>();
        // SAFETY: max_readers records follow the slot handles inside the section, 64-byte
        // aligned (the header and each handle are multiples of 64); valid for any bit pattern.
        unsafe { &*self.device_section().add(offset).cast::<ReleaseEvent>() }
    }

    /// Makes `cuda_stream` wait until every attached reader's work on frames it let go has
    /// finished: called before a frame is written into a slot.
    pub fn device_wait_for_readers(&self, cuda_stream: u64) -> Result<()> {
        let dev = self.device_slots()?;
        let hwm = self.header().readers_hwm.load(Ordering::Acquire).min(self.geometry.max_readers);
        let mut seen = dev.releases_seen.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..hwm {
            let record = self.release_event(i);
            let mut words = [0u64; IPC_HANDLE_BYTES / 8 + 1];
            let Some(version) = super::protocol::read_words(&record.version, &record.words, &mut words) else { continue };
            let pid = words[0] as u32;
            if pid == 0 || self.reader(i).pid.load(Ordering::Relaxed) != pid {
                continue;
            }
            let known = seen.iter().position(|(entry, v, _)| *entry == i && *v == version);
            let event = match known {
                Some(k) => seen[k].2.clone(),
                None => {
                    let mut handle = [0u8; IPC_HANDLE_BYTES];
                    for (w, word) in words[1..].iter().enumerate() {
                        handle[w * 8..w * 8 + 8].copy_from_slice(&word.to_ne_bytes());
                    }
                    let event = match registry::open_event(dev.door, dev.device, &IpcHandle(handle)) {
                        Ok(event) => event,
                        // A reader that exited since: nothing of its work is left to wait for.
                        Err(_) if !self.reader_alive(i, pid) => continue,
                        Err(e) => return Err(door_error(self, "opening a reader's release event")(e)),
                    };
                    seen.retain(|(entry, _, _)| *entry != i);
                    seen.push((i, version, event.clone()));
                    event
                }
            };
            match dev.door.wait(dev.device, cuda_stream, event.event()) {
                Ok(()) => {}
                // A reader that exited since (its event may die with it): nothing of its work
                // is left to wait for.
                Err(_) if !self.reader_alive(i, pid) => seen.retain(|(entry, _, _)| *entry != i),
                Err(e) => return Err(door_error(self, "waiting for a reader's release event")(e)),
            }
        }
        Ok(())
    }

    /// The error for a device stream whose owner (the process holding its GPU memory) has
    /// exited: no frame will come. None while it lives (and for host streams).
    /// A handle on the CPU mirror only is told too: no frame comes to the mirror either.
    pub fn device_owner_gone(&self) -> Option<Error> {
        let owner = self.device_owner()?;
        (!owner.is_alive()).then(|| {
            unavailable(
                &self.name,
                format!(
                    "the process that owned its GPU memory (pid {}) has exited, so no frame will come; create the stream again",
                    owner.pid
                ),
            )
        })
    }

    /// The process that owns a device stream's GPU memory (its creator); None for a host stream.
    pub fn device_owner(&self) -> Option<ProcessId> {
        if let Some(dev) = self.device.as_ref() {
            return Some(dev.owner);
        }
        self.spec.device?;
        // Written by the creator before the segment was marked ready, never changed after.
        let h = self.device_header();
        Some(ProcessId { pid: h.owner_pid, start: h.owner_start })
    }

    fn reader_alive(&self, i: u32, pid: u32) -> bool {
        let entry = self.reader(i);
        entry.pid.load(Ordering::Relaxed) == pid && ProcessId { pid, start: entry.start.load(Ordering::Relaxed) }.is_alive()
    }

    /// Makes `cuda_stream` wait for the frame in pinned slot `slot` to be complete.
    pub fn device_acquire(&self, slot: u32, cuda_stream: u64) -> Result<()> {
        let dev = self.device_slots()?;
        let event = dev.ready.get(slot as usize).ok_or_else(|| Error::InvalidArgument(format!("slot {slot} out of range")))?;
        dev.door.wait(dev.device, cuda_stream, event.event()).map_err(door_error(self, "waiting for the frame's ready event"))
    }

    /// Records this handle's release event on `cuda_stream`: the writer's next frame into a slot
    /// waits for what was queued on `cuda_stream` so far. Call before unpinning a device frame.
    pub fn device_release(&self, cuda_stream: u64) -> Result<()> {
        let dev = self.device_slots()?;
        let Some(index) = self.owned_index() else { return Ok(()) };
        let mut mine = dev.release.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(event) = mine.as_ref() {
            return dev.door.record(dev.device, event.event(), cuda_stream).map_err(door_error(self, "recording the release event"));
        }
        let (event, handle) = registry::create_event(dev.door, dev.device).map_err(door_error(self, "creating a release event"))?;
        // Recorded before it is published: a writer never waits for an event never recorded.
        dev.door.record(dev.device, event.event(), cuda_stream).map_err(door_error(self, "recording the release event"))?;
        let record = self.release_event(index);
        let mut words = [0u64; IPC_HANDLE_BYTES / 8 + 1];
        words[0] = u64::from(ProcessId::current().pid);
        for (w, word) in words[1..].iter_mut().enumerate() {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&handle.0[w * 8..w * 8 + 8]);
            *word = u64::from_ne_bytes(bytes);
        }
        super::protocol::publish_words(&record.version, &record.words, &words);
        *mine = Some(event);
        Ok(())
    }

    /// Clears this handle's release event record (the handle is closing).
    pub(super) fn device_detach(&self) {
        let Some(dev) = self.device.as_ref() else { return };
        let mine = dev.release.lock().unwrap_or_else(|e| e.into_inner()).take();
        if mine.is_some() {
            if let Some(index) = self.owned_index() {
                let record = self.release_event(index);
                record.version.store(0, Ordering::SeqCst);
            }
        }
        dev.releases_seen.lock().unwrap_or_else(|e| e.into_inner()).clear();
        if self.creator().pid == ProcessId::current().pid {
            registry::sweep_owned();
        }
    }

    fn copy_in(&self, dev: &DeviceSlots, slot: u32, src: Source, cuda_stream: u64) -> Result<()> {
        let dst = dev.slot_ptr(slot);
        match src {
            Source::Device(ptr) => dev.door.copy_device_to_device(dev.device, dst, ptr, dev.frame_bytes, cuda_stream),
            Source::Host(ptr) => dev
                .door
                .copy_host_to_device(dev.device, dst, ptr, dev.frame_bytes, cuda_stream)
                // The caller's host memory must stay readable until the copy ran.
                .and_then(|()| dev.door.synchronize_stream(dev.device, cuda_stream)),
        }
        .map_err(door_error(self, "copying the frame into its slot"))
    }

    /// Records slot `slot`'s ready event on `cuda_stream` (the frame's writes are queued on it)
    /// and, for a CPU mirror, copies the frame into the host slot (waiting for it: the host
    /// bytes must be there before the commit publishes them).
    fn finish_device_frame(&self, dev: &DeviceSlots, slot: u32, cuda_stream: u64) -> Result<()> {
        dev.door
            .record(dev.device, dev.ready[slot as usize].event(), cuda_stream)
            .map_err(door_error(self, "recording the frame's ready event"))?;
        if self.spec.device.is_some_and(|d| d.cpu_mirror) {
            dev.door
                .copy_device_to_host(dev.device, self.payload(slot), dev.slot_ptr(slot), dev.frame_bytes, cuda_stream)
                .and_then(|()| dev.door.synchronize_stream(dev.device, cuda_stream))
                .map_err(door_error(self, "copying the frame into the CPU mirror"))?;
        }
        Ok(())
    }

    /// Writes one frame into a device stream: takes a slot (waiting like `write`), queues the
    /// copy on `cuda_stream` after every reader's release, records the slot's ready event and
    /// commits. No host synchronisation for a device source (a host source is waited for).
    pub fn write_device(
        &self,
        src: Source,
        cuda_stream: u64,
        info: &FrameInfo<'_>,
        deadline: Deadline,
        check: &mut dyn FnMut() -> bool,
    ) -> Result<u64> {
        let dev = self.device_slots()?;
        self.check_frame(self.geometry.frame_bytes as usize, info)?;
        let guard = self.begin_write(deadline, check)?;
        self.device_wait_for_readers(cuda_stream)?;
        self.copy_in(dev, guard.slot(), src, cuda_stream)?;
        self.finish_device_frame(dev, guard.slot(), cuda_stream)?;
        guard.commit(info)
    }

    /// Copies the frame in pinned slot `slot` to `dst` on `cuda_stream` (after its ready event)
    /// and records this handle's release event after the copy. A host destination is waited for.
    pub fn read_device_into(&self, slot: u32, dst: Dest, cuda_stream: u64) -> Result<()> {
        let dev = self.device_slots()?;
        self.device_acquire(slot, cuda_stream)?;
        let src = dev.slot_ptr(slot);
        match dst {
            Dest::Device(ptr) => dev.door.copy_device_to_device(dev.device, ptr, src, dev.frame_bytes, cuda_stream),
            Dest::Host(ptr) => dev
                .door
                .copy_device_to_host(dev.device, ptr, src, dev.frame_bytes, cuda_stream)
                .and_then(|()| dev.door.synchronize_stream(dev.device, cuda_stream)),
        }
        .map_err(door_error(self, "copying the frame out of its slot"))?;
        self.device_release(cuda_stream)
    }
}

impl<S: std::ops::Deref<Target = Stream>> WriteGuard<S> {
    /// Device address of the claimed slot's frame (device streams): where a loan renders.
    pub fn device_ptr(&self) -> Result<u64> {
        Ok(self.stream().device_slots()?.slot_ptr(self.slot()))
    }

    /// Before handing the slot to the caller's kernels: makes `cuda_stream` wait for every
    /// reader's work on frames it let go.
    pub fn device_prepare(&self, cuda_stream: u64) -> Result<()> {
        self.stream().device_wait_for_readers(cuda_stream)
    }

    /// Commits a device loan whose writes were queued on `cuda_stream`: records the slot's
    /// ready event there (and fills the CPU mirror), then publishes the frame.
    pub fn commit_device(self, info: &FrameInfo<'_>, cuda_stream: u64) -> Result<u64> {
        {
            let s = self.stream();
            s.finish_device_frame(s.device_slots()?, self.slot(), cuda_stream)?;
        }
        self.commit(info)
    }
}
