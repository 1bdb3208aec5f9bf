//! A handle on one stream: creating or opening the segment, checking its header, the accessors
//! for the shared structs, and closing.

use std::sync::atomic::AtomicU64 as LocalU64;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::layout::{self, Geometry, Header, ReaderEntry, SlotDesc, HEADER_BYTES, MAGIC, READY, VERSION};
use super::spec::StreamSpec;
use crate::error::{Error, Result};
use crate::process::ProcessId;
use crate::shm::{self, name, Mapping, Segment};
use crate::sync::atomic::Ordering;
use crate::sync::futex;

/// How long open() waits for a creator that is still initialising the segment.
pub const OPEN_READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Options of [`Stream::create`].
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Permission bits of the segment, applied exactly (umask-proof).
    pub mode: u32,
    /// Reuse an existing stream of the same spec, or replace a stale one, instead of failing.
    pub exist_ok: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions { mode: 0o600, exist_ok: false }
    }
}

/// How a handle reaches a device stream's frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceAccess {
    /// Through the GPU when this process has the stream's device; a stream with a CPU mirror is
    /// read from the mirror otherwise.
    Auto,
    /// Through the GPU, or fail.
    Device,
    /// From the CPU mirror only (fails for a device stream without one).
    Host,
}

/// Reader mode of a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReaderMode {
    /// Reads return the newest frame; frames skipped are counted.
    Latest,
    /// The writer never overwrites a frame this handle has not consumed.
    Lossless,
}

/// A handle's own pins: how many per slot, and since when (wall-clock ns) each slot is pinned,
/// so the age monitors show is that of the oldest pin still held, not of a run of pins that
/// never dropped to none (a consumer that takes the next view before releasing the last).
pub(super) struct PinCounts {
    pub(super) count: [u32; layout::MAX_SLOTS as usize],
    pub(super) since_ns: [u64; layout::MAX_SLOTS as usize],
}

impl Default for PinCounts {
    fn default() -> PinCounts {
        PinCounts { count: [0; layout::MAX_SLOTS as usize], since_ns: [0; layout::MAX_SLOTS as usize] }
    }
}

/// One attached handle on a stream. Dropping it detaches (the segment stays until unlinked).
pub struct Stream {
    pub(super) name: String,
    pub(super) segment: Segment,
    pub(super) map: Mapping,
    pub(super) geometry: Geometry,
    pub(super) spec: StreamSpec,
    /// This handle's reader entry and the process it belongs to (see owner.rs).
    pub(super) entry: super::owner::Owner,
    pub(super) mode: ReaderMode,
    /// Pins this handle holds per slot (the shared bit is set while the count is non-zero), and
    /// when each slot's pins began.
    pub(super) pins: Mutex<PinCounts>,
    /// Sequence of the newest frame this handle has seen (latest mode).
    pub(super) seen: LocalU64,
    pub(super) missed_last: LocalU64,
    pub(super) missed_total: LocalU64,
    /// How long this handle's waits spin before sleeping (learned; see sync/spin.rs).
    pub(super) spin: crate::sync::spin::AdaptiveSpin,
    /// Times this handle took over a lock whose holder had died.
    pub(super) lock_recoveries: LocalU64,
    /// Read-only mapping of the payloads, for views (made on first use).
    pub(super) ro_payloads: OnceLock<Mapping>,
    /// Write-lock holds taken through this handle: (holder token, depth). Released on close.
    pub(super) holds: Mutex<(u64, u32)>,
    /// Where the handle reaches each slot (windows.rs).
    pub(super) windows: super::windows::SlotWindows,
    /// Kept frames of finished loans (kept.rs).
    pub(super) kept: Mutex<super::kept::KeptTable>,
    /// A device stream's memory and events as this process reaches them (device.rs); None for
    /// host streams, peek handles and handles on the CPU mirror only.
    pub(super) device: Option<super::device::DeviceSlots>,
    /// When waits last looked whether frames can still come (watch.rs).
    pub(super) watch: super::watch::Watch,
}

impl Stream {
    /// Creates a stream. With `exist_ok`, an existing stream of the same spec is opened instead,
    /// and a stale one (creator dead, nobody attached) of any spec is replaced.
    pub fn create(stream: &str, spec: &StreamSpec, options: &CreateOptions) -> Result<Stream> {
        name::validate(stream)?;
        let geometry = spec.geometry()?;
        if options.mode & !0o777 != 0 {
            return Err(Error::InvalidArgument(format!("mode must be permission bits like 0o600, got {:#o}", options.mode)));
        }
        for _ in 0..3 {
            match Segment::create(stream, geometry.total_bytes, options.mode) {
                Ok(segment) => return Stream::initialise(stream, segment, spec, geometry),
                Err(Error::AlreadyExists { .. }) if options.exist_ok => match Stream::open(stream, ReaderMode::Latest) {
                    Ok(existing) if existing.is_stale_except_me() => {
                        drop(existing);
                        let _ = shm::unlink(stream);
                    }
                    Ok(existing) => {
                        let mine = StreamSpec { max_readers: existing.spec.max_readers, ..spec.clone() };
                        if existing.spec != mine {
                            return Err(Error::SpecMismatch {
                                name: stream.into(),
                                existing: describe(&existing.spec),
                                requested: describe(spec),
                            });
                        }
                        return Ok(existing);
                    }
                    Err(Error::NotFound { .. }) => {}
                    Err(Error::NotReady { .. } | Error::Corrupt { .. } | Error::IncompatibleVersion { .. }) if !creator_alive(stream) => {
                        let _ = shm::unlink(stream);
                    }
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
        Err(Error::AlreadyExists { name: stream.into(), path: name::path(stream) })
    }

    fn initialise(stream: &str, segment: Segment, spec: &StreamSpec, g: Geometry) -> Result<Stream> {
        let map = match segment.map(g.total_bytes as usize) {
            Ok(m) => m,
            Err(e) => {
                let _ = shm::unlink(stream);
                return Err(e);
            }
        };
        let me = ProcessId::current();
        // SAFETY: the mapping is at least HEADER_BYTES long (the geometry puts the header first),
        // page aligned, freshly zeroed by fallocate, and no other process reads the identity
        // fields before `ready` is stored below (openers wait for it), so this exclusive
        // reference is the only access for now.
        let h = unsafe { &mut *map.as_ptr().cast::<Header>() };
        h.version = VERSION;
        h.header_bytes = HEADER_BYTES as u32;
        h.reader_entry_bytes = std::mem::size_of::<ReaderEntry>() as u32;
        h.slot_desc_bytes = std::mem::size_of::<SlotDesc>() as u32;
        h.total_bytes = g.total_bytes;
        h.creator_pid = me.pid;
        h.creator_start = me.start;
        if let Some(device) = spec.device {
            h.version = layout::DEVICE_VERSION;
            h.device = device.ordinal + 1;
            h.flags |= layout::FLAG_DEVICE;
            if device.cpu_mirror {
                h.flags |= layout::FLAG_CPU_MIRROR;
            }
        }
        h.created_ns = now_ns();
        h.slot_count = g.slot_count;
        h.max_readers = g.max_readers;
        h.frame_bytes = g.frame_bytes;
        h.slot_stride = g.slot_stride;
        h.meta_capacity = g.meta_capacity;
        h.ndim = spec.shape.len() as u32;
        h.shape[..spec.shape.len()].copy_from_slice(&spec.shape);
        h.itemsize = spec.itemsize;
        h.dtype[..spec.dtype.len()].copy_from_slice(spec.dtype.as_bytes());
        h.readers_offset = g.readers_offset;
        h.slots_offset = g.slots_offset;
        h.payload_offset = g.payload_offset;
        if spec.variable {
            h.flags |= layout::FLAG_VARIABLE;
        } else if spec.device.is_none() {
            h.flags |= layout::FLAG_REWRITES_NEWEST;
        }
        h.magic = MAGIC;
        // SAFETY: the first HEADER_BYTES of the mapping are the header written just above.
        let image = unsafe { std::slice::from_raw_parts(map.as_ptr(), HEADER_BYTES) };
        let checksum = layout::header_checksum(image);
        // SAFETY: as above; still the only access.
        unsafe { (*map.as_ptr().cast::<Header>()).checksum = checksum };
        let mut stream = match Stream::assemble(stream, segment, map, spec.clone(), g, Some(ReaderMode::Latest)) {
            Ok(s) => s,
            Err(e) => {
                let _ = shm::unlink(stream);
                return Err(e);
            }
        };
        if let Some(device) = spec.device {
            match super::device::DeviceSlots::create(&stream, device.ordinal) {
                Ok(slots) => stream.device = Some(slots),
                Err(e) => {
                    let _ = stream.unlink();
                    return Err(e);
                }
            }
        }
        stream.header().ready.store(READY, Ordering::Release);
        futex::wake_all(&stream.header().ready);
        Ok(stream)
    }

    /// Opens an existing stream and attaches this handle in `mode` (a device stream through
    /// the GPU, or its CPU mirror where this process cannot reach the GPU).
    pub fn open(stream: &str, mode: ReaderMode) -> Result<Stream> {
        Stream::open_with(stream, mode, DeviceAccess::Auto)
    }

    /// Opens an existing stream, choosing how a device stream's frames are reached.
    pub fn open_with(stream: &str, mode: ReaderMode, access: DeviceAccess) -> Result<Stream> {
        let (segment, map, spec, geometry) = Stream::map_validated(stream, OPEN_READY_TIMEOUT)?;
        let Some(device) = spec.device else {
            return match access {
                DeviceAccess::Device => {
                    Err(Error::WrongMemory { name: stream.into(), what: "it is a host stream, its frames are not in GPU memory".into() })
                }
                _ => Stream::assemble(stream, segment, map, spec, geometry, Some(mode)),
            };
        };
        if access == DeviceAccess::Host && !device.cpu_mirror {
            return Err(Error::WrongMemory { name: stream.into(), what: format!("its frames are only in GPU memory (cuda:{}; it has no CPU mirror): open it with the GPU, or create it with cpu_mirror=True", device.ordinal) });
        }
        let mut s = Stream::assemble(stream, segment, map, spec, geometry, Some(mode))?;
        if access != DeviceAccess::Host {
            match super::device::DeviceSlots::open(&s) {
                Ok(slots) => s.device = Some(slots),
                Err(Error::DeviceUnavailable { .. }) if access == DeviceAccess::Auto && device.cpu_mirror => {}
                Err(e) => return Err(e),
            }
        }
        Ok(s)
    }

    /// Opens a stream to look at it without attaching (no reader entry is taken): for `ls`,
    /// `gc` and monitoring. Reads work; nothing here may write.
    /// A segment still being created is reported as `NotReady` at once.
    pub fn peek(stream: &str) -> Result<Stream> {
        let (segment, map, spec, geometry) = Stream::map_validated(stream, Duration::ZERO)?;
        Stream::assemble(stream, segment, map, spec, geometry, None)
    }

    /// Opens, waits for `ready` (at most `wait`), validates the header and maps the whole
    /// segment.
    fn map_validated(stream: &str, wait: Duration) -> Result<(Segment, Mapping, StreamSpec, Geometry)> {
        name::validate(stream)?;
        let segment = Segment::open(stream)?;
        let path = name::path(stream);
        let corrupt = |reason: String| Error::Corrupt { name: stream.into(), path: path.clone(), reason };
        let deadline = Instant::now() + wait;
        // The creator sizes the segment right after creating it; wait out that short window.
        let len = loop {
            let len = segment.size()?;
            if len >= HEADER_BYTES as u64 {
                break len;
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    name: stream.into(),
                    path,
                    hint: "; its creator died or is stuck before sizing it: unlink it or run `framebus gc`",
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let probe = segment.map(HEADER_BYTES)?;
        // SAFETY: the mapping is HEADER_BYTES long and page aligned, so it holds one Header; all
        // fields are plain integers or atomics, valid for any bit pattern.
        let header = unsafe { &*probe.as_ptr().cast::<Header>() };
        loop {
            let ready = header.ready.load(Ordering::Acquire);
            if ready == READY {
                break;
            }
            if ready != 0 {
                return Err(corrupt(format!("ready word is {ready:#x}")));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::NotReady {
                    name: stream.into(),
                    path,
                    hint: "; its creator died or is stuck while creating it: unlink it or run `framebus gc`",
                });
            }
            futex::wait(&header.ready, 0, (deadline - now).min(Duration::from_millis(50)));
        }
        if header.magic != MAGIC {
            return Err(corrupt("bad magic".into()));
        }
        let device = header.flags & layout::FLAG_DEVICE != 0;
        if header.version != VERSION && header.version != layout::DEVICE_VERSION {
            return Err(Error::IncompatibleVersion { name: stream.into(), path, found: header.version, supported: VERSION });
        }
        if (header.version == layout::DEVICE_VERSION) != device {
            return Err(corrupt(format!("layout version {} does not match its device flag", header.version)));
        }
        if header.flags & !layout::KNOWN_FLAGS != 0 {
            return Err(corrupt(format!(
                "it uses features this framebus does not know (flags {:#x}); open it with the framebus that made it",
                header.flags
            )));
        }
        // SAFETY: the probe mapping covers HEADER_BYTES.
        let image = unsafe { std::slice::from_raw_parts(probe.as_ptr(), HEADER_BYTES) };
        if layout::header_checksum(image) != header.checksum {
            return Err(corrupt("header checksum mismatch".into()));
        }
        let (spec, geometry) = validate_header(header, len).map_err(corrupt)?;
        drop(probe);
        let map = segment.map(geometry.total_bytes as usize)?;
        Ok((segment, map, spec, geometry))
    }

    fn assemble(
        stream: &str,
        segment: Segment,
        map: Mapping,
        spec: StreamSpec,
        geometry: Geometry,
        mode: Option<ReaderMode>,
    ) -> Result<Stream> {
        let mut s = Stream {
            name: stream.to_owned(),
            segment,
            map,
            geometry,
            spec,
            entry: super::owner::Owner::detached(),
            mode: mode.unwrap_or(ReaderMode::Latest),
            pins: Mutex::new(PinCounts::default()),
            seen: LocalU64::new(0),
            missed_last: LocalU64::new(0),
            missed_total: LocalU64::new(0),
            spin: Default::default(),
            lock_recoveries: LocalU64::new(0),
            ro_payloads: OnceLock::new(),
            holds: Mutex::new((0, 0)),
            windows: Default::default(),
            kept: Default::default(),
            device: None,
            watch: Default::default(),
        };
        if let Some(mode) = mode {
            let index = s.register(mode)?;
            s.entry = s.entry.bound(index);
        }
        Ok(s)
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Frame spec and ring geometry.
    pub fn spec(&self) -> &StreamSpec {
        &self.spec
    }

    /// Byte layout of the segment.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// This handle's reader mode.
    pub fn mode(&self) -> ReaderMode {
        self.mode
    }

    /// The shared-memory object (for extra mappings).
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// The header in shared memory.
    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is geometry.total_bytes >= HEADER_BYTES long, page aligned, lives
        // as long as self, and Header is valid for any bit pattern.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    /// Slot descriptor `i` (i < slot_count).
    pub(super) fn slot(&self, i: u32) -> &SlotDesc {
        assert!(i < self.geometry.slot_count);
        // SAFETY: validated geometry puts slot_count descriptors at slots_offset inside the
        // mapping, 64-byte aligned; SlotDesc is valid for any bit pattern.
        unsafe {
            &*self.map.as_ptr().add(self.geometry.slots_offset as usize + i as usize * std::mem::size_of::<SlotDesc>()).cast::<SlotDesc>()
        }
    }

    /// Reader entry `i` (i < max_readers).
    pub(super) fn reader(&self, i: u32) -> &ReaderEntry {
        assert!(i < self.geometry.max_readers);
        // SAFETY: validated geometry puts max_readers entries at readers_offset inside the
        // mapping, 64-byte aligned; ReaderEntry is valid for any bit pattern.
        unsafe {
            &*self
                .map
                .as_ptr()
                .add(self.geometry.readers_offset as usize + i as usize * std::mem::size_of::<ReaderEntry>())
                .cast::<ReaderEntry>()
        }
    }

    /// Start of slot `i`'s payload (frame bytes, then metadata) in this handle's read-write view:
    /// its place in the mapping, or the window it is reached through while a kept frame's
    /// private copy occupies that place (windows.rs).
    pub(super) fn payload(&self, i: u32) -> *mut u8 {
        assert!(i < self.geometry.slot_count);
        match self.windows.current(i) {
            Some(window) => window,
            None => self.home_range(i).0,
        }
    }

    /// This handle's own reader entry.
    /// (In a forked child, registered first: see owner.rs; every public path that gets here
    /// adopts the handle first, so the panic below is only for a full table on a path that
    /// did not.)
    pub(super) fn my_entry(&self) -> &ReaderEntry {
        let index = self.adopt().unwrap_or_else(|e| panic!("framebus: {e}"));
        assert!(index != u32::MAX, "a peek handle has no reader entry");
        self.reader(index)
    }

    /// Creator of the stream.
    pub fn creator(&self) -> ProcessId {
        let h = self.header();
        ProcessId { pid: h.creator_pid, start: h.creator_start }
    }

    /// Whether the creator has died and no live handle other than this one is attached.
    pub fn is_stale_except_me(&self) -> bool {
        !self.creator().is_alive() && self.attached().iter().all(|(i, p)| Some(*i) == self.owned_index() || !p.is_alive())
    }

    /// Removes the stream's name if it still refers to this handle's segment (a stream created
    /// anew under the same name is left alone). Returns whether the name was removed.
    pub fn unlink(&self) -> Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::symlink_metadata(name::path(&self.name)) else { return Ok(false) };
        if (meta.dev(), meta.ino()) != self.segment.identity()? {
            return Ok(false);
        }
        match shm::unlink(&self.name) {
            Ok(()) => {
                crate::gpu::registry::sweep_owned();
                Ok(true)
            }
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Frames skipped by the last read (latest mode) and in total on this handle.
    pub fn missed(&self) -> (u64, u64) {
        (self.missed_last.load(Ordering::Relaxed), self.missed_total.load(Ordering::Relaxed))
    }

    /// How many dead lock holders this handle has taken over from.
    pub fn lock_recoveries(&self) -> u64 {
        self.lock_recoveries.load(Ordering::Relaxed)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // A handle inherited through fork() and never used here: its holds and entry are the
        // parent's (see owner.rs); an entry reserved for it at fork is this process's to free.
        if self.is_inherited() {
            self.release_fork_reservation();
            return;
        }
        self.release_all_holds();
        self.device_detach();
        if self.is_attached() {
            self.unregister();
        }
    }
}

/// Checks identity/geometry fields of a header against each other and the file size.
fn validate_header(h: &Header, file_len: u64) -> std::result::Result<(StreamSpec, Geometry), String> {
    if h.header_bytes as usize != HEADER_BYTES
        || h.reader_entry_bytes as usize != std::mem::size_of::<ReaderEntry>()
        || h.slot_desc_bytes as usize != std::mem::size_of::<SlotDesc>()
    {
        return Err("struct sizes do not match this layout version".into());
    }
    let ndim = h.ndim as usize;
    if ndim == 0 || ndim > layout::MAX_NDIM {
        return Err(format!("ndim {ndim} out of range"));
    }
    let dtype_len = h.dtype.iter().position(|&b| b == 0).ok_or("dtype is not terminated")?;
    let dtype = std::str::from_utf8(&h.dtype[..dtype_len]).map_err(|_| "dtype is not text")?.to_owned();
    let spec = StreamSpec {
        dtype,
        itemsize: h.itemsize,
        shape: h.shape[..ndim].to_vec(),
        slots: h.slot_count,
        meta_capacity: h.meta_capacity,
        max_readers: h.max_readers,
        variable: h.flags & layout::FLAG_VARIABLE != 0,
        device: match h.flags & layout::FLAG_DEVICE {
            0 if h.device == 0 && h.flags & layout::FLAG_CPU_MIRROR == 0 => None,
            0 => return Err("host stream with device fields set".into()),
            _ if h.device == 0 => return Err("device stream without a device".into()),
            _ => Some(super::spec::DeviceSpec { ordinal: h.device - 1, cpu_mirror: h.flags & layout::FLAG_CPU_MIRROR != 0 }),
        },
    };
    let expected = spec.geometry().map_err(|e| e.to_string())?;
    if expected != Geometry::of(h) {
        return Err("geometry fields are inconsistent".into());
    }
    if expected.total_bytes != file_len {
        return Err(format!("segment is {file_len} bytes, header says {}", expected.total_bytes));
    }
    Ok((spec, expected))
}

/// Whether the creator recorded in a (possibly half-initialised) segment is alive; true if it
/// cannot be told, so that nothing live is ever removed.
fn creator_alive(stream: &str) -> bool {
    crate::recovery::peek_creator(stream).is_none_or(|p| p.pid != 0 && p.is_alive())
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A spec in words for messages, with NumPy's dtype names: "dtype uint8 shape (4, 3), slots 4,
/// meta_capacity 256".
pub fn describe(spec: &StreamSpec) -> String {
    let ring = format!("slots {}, meta_capacity {}", spec.slots, spec.meta_capacity);
    if spec.variable {
        return format!("variable shape, capacity {} bytes per frame, {ring}", spec.shape[0]);
    }
    let dims: Vec<String> = spec.shape.iter().map(u64::to_string).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    format!("dtype {} shape {shape}, {ring}", super::spec::numpy_name(&spec.dtype))
}
