//! The shared-memory layout of a stream, version 2 (host streams) and 3 (device streams). This
//! file is the single definition of the format; docs/layout.md describes it for people. Any
//! change to a struct here that moves a field bumps the version, and readers refuse versions
//! they do not know.
//!
//! ```text
//! offset 0             Header                          (HEADER_BYTES)
//! readers_offset       ReaderEntry x max_readers       (128 bytes each)
//! slots_offset         SlotDesc    x slot_count        (192 bytes each)
//! device_offset        device section                  (device streams only, device_bytes)
//! payload_offset       payload     x slot_count        (slot_stride each, a multiple of 4096)
//!                      each payload: frame bytes, then up to meta_capacity metadata bytes
//!                      (variable-shape streams: the frame bytes start with the frame's
//!                      table of arrays, see `frame_table`; device streams keep their frames
//!                      in device memory, so their payload holds only the metadata, or the
//!                      frame's host copy and then the metadata with `FLAG_CPU_MIRROR`)
//! ```
//!
//! Words that change after creation are atomics (through `sync::atomic`), everything else is
//! written once by the creator before it stores `ready` with release ordering.

use crate::sync::atomic::{AtomicU32, AtomicU64};

/// First bytes of every segment.
pub const MAGIC: [u8; 8] = *b"FRAMEBUS";
/// Layout version this build reads and writes.
/// Version 2 added variable-shape streams (`FLAG_VARIABLE`, a table at the start of each
/// frame); a version-1 reader refuses such a segment by this number.
pub const VERSION: u32 = 2;
/// `Header::flags` bit 0: a variable-shape stream. Its spec records `|u1` of shape
/// `[capacity]`, `frame_bytes` is `frame_table::TABLE_BYTES + capacity`, and every frame starts
/// with its own table of arrays.
pub const FLAG_VARIABLE: u32 = 1;
/// `Header::flags` bit 1: a device stream. Its frames live in device memory allocated by the
/// creator; the device section after the slot descriptors holds the memory's and the events'
/// inter-process handles. `Header::device` is the creator's device ordinal plus one.
pub const FLAG_DEVICE: u32 = 2;
/// `Header::flags` bit 2 (device streams only): every frame is also copied into its host slot,
/// so readers without a GPU read the stream as a host stream.
pub const FLAG_CPU_MIRROR: u32 = 4;
/// `Header::flags` bit 3 (fixed host streams): a copy write may rewrite the newest frame's slot
/// once every reader has taken that frame, and readers that look for the newest frame during
/// such a write wait for it (writer.rs, reader.rs). Builds that do not know the bit refuse the
/// segment, so every handle of such a stream knows the rule.
pub const FLAG_REWRITES_NEWEST: u32 = 8;
/// Every flag this build understands; a segment with any other bit set is refused.
pub const KNOWN_FLAGS: u32 = FLAG_VARIABLE | FLAG_DEVICE | FLAG_CPU_MIRROR | FLAG_REWRITES_NEWEST;
/// Layout version of a device stream. Host streams keep [`VERSION`], so builds that know only
/// version 2 go on reading them, and refuse device streams by this number.
pub const DEVICE_VERSION: u32 = 3;
/// Value of `Header::ready` once the creator has finished.
pub const READY: u32 = 0x5245_4459; // "READY"
/// Payload alignment (a page).
pub const PAGE: u64 = 4096;
/// Most slots a stream may have (pins are a 64-bit mask per reader).
pub const MAX_SLOTS: u32 = 64;
/// Most reader entries a stream may have.
pub const MAX_READERS: u32 = 4096;
/// Most dimensions of a frame.
pub const MAX_NDIM: usize = 8;
/// Bytes of the dtype descriptor string (NumPy `dtype.str`, for example `<f4`, `|u1`).
pub const DTYPE_LEN: usize = 32;
/// Largest metadata capacity per frame.
pub const MAX_META: u32 = 1 << 20;

/// Largest frame sequence number (`Header::published` keeps the slot in its low 8 bits).
pub const MAX_SEQ: u64 = (1 << 56) - 1;

/// `SlotDesc::state` bit set while the writer fills the slot.
pub const WRITING: u64 = 1;

/// Packs a slot state: sequence of the frame it holds (0 = never written) and the writing bit.
pub const fn slot_state(seq: u64, writing: bool) -> u64 {
    (seq << 1) | writing as u64
}

/// Sequence of the frame a slot state refers to.
pub const fn state_seq(state: u64) -> u64 {
    state >> 1
}

/// Packs `Header::published`: sequence of the newest committed frame and its slot.
pub const fn published(seq: u64, slot: u32) -> u64 {
    (seq << 8) | slot as u64
}

/// Unpacks `Header::published` into (sequence, slot).
pub const fn unpack_published(word: u64) -> (u64, u32) {
    (word >> 8, (word & 0xff) as u32)
}

/// Reader modes stored in `ReaderEntry::mode`.
pub mod mode {
    /// Reads return the newest frame; skipped frames are counted.
    pub const LATEST: u32 = 0;
    /// The writer never overwrites a frame this reader has not consumed.
    pub const LOSSLESS: u32 = 1;
    /// The handle was closed while views or loan exports of it still pin slots: it exerts no
    /// backpressure; only its pins remain until the last view is gone.
    pub const CLOSED: u32 = 2;
    /// Reserved at fork() for a forked child's copy of a lossless handle (ring/fork.rs): holds
    /// frames after `consumed` like a lossless entry until `reserved_until_s`, then none; the
    /// child's first use turns it into its lossless entry.
    pub const RESERVED: u32 = 3;
}

/// Segment header. Identity and geometry are immutable after `ready`; the rest are atomics.
#[repr(C, align(64))]
pub struct Header {
    // -- identity: 0..64
    pub magic: [u8; 8],
    pub version: u32,
    /// `READY` once initialised (futex word openers wait on).
    pub ready: AtomicU32,
    pub header_bytes: u32,
    pub reader_entry_bytes: u32,
    pub slot_desc_bytes: u32,
    pub flags: u32,
    pub total_bytes: u64,
    pub creator_pid: u32,
    /// Device streams: the creator's device ordinal plus one; 0 for host streams.
    pub device: u32,
    pub creator_start: u64,
    pub created_ns: u64,
    // -- geometry: 64..256
    pub slot_count: u32,
    pub max_readers: u32,
    pub frame_bytes: u64,
    pub slot_stride: u64,
    pub meta_capacity: u32,
    pub ndim: u32,
    pub shape: [u64; MAX_NDIM],
    pub itemsize: u32,
    pub _pad1: u32,
    pub dtype: [u8; DTYPE_LEN],
    pub readers_offset: u64,
    pub slots_offset: u64,
    pub payload_offset: u64,
    /// FNV-1a of bytes 0..CHECKSUM_END with `ready` read as zero; detects a damaged header.
    pub checksum: u64,
    pub _reserved: [u64; 3],
    // -- publication: 256..320
    /// `published(seq, slot)` of the newest committed frame; (0, 0) before the first write.
    pub published: AtomicU64,
    /// Futex word readers wait on; incremented after every commit.
    pub notify: AtomicU32,
    /// Readers blocked on `notify`; the writer skips the wake syscall when zero.
    pub waiters: AtomicU32,
    /// Futex word writers wait on for a slot; incremented when a reader releases one.
    pub released: AtomicU32,
    /// Writers blocked on `released`.
    pub writer_waiters: AtomicU32,
    /// Entries `0..readers_hwm` of the reader table have ever been used.
    pub readers_hwm: AtomicU32,
    /// 1 once the writer ended the stream (`Stream::end`): readers that have read every frame
    /// stop waiting with `Ended`. The next commit clears it (a restarted producer).
    pub ended: AtomicU32,
    pub _pad2: [u32; 8],
    // -- write lock: 320..384
    /// `(tid << 32) | pid` of the lock holder, 0 when free.
    pub lock_owner: AtomicU64,
    /// Start time of the holder's process (0 while being set).
    pub lock_owner_start: AtomicU64,
    /// Re-entrant depth of the holder.
    pub lock_depth: AtomicU32,
    /// Futex word lock waiters sleep on; incremented on every release.
    pub lock_futex: AtomicU32,
    pub lock_waiters: AtomicU32,
    /// How many times a lock held by a dead process was taken over.
    pub lock_recoveries: AtomicU32,
    pub _pad3: [u64; 4],
    // -- counters: 384..448
    pub frames_written: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Writes abandoned by a writer that died or raised mid-write.
    pub aborted_writes: AtomicU64,
    /// Pid of the process that last took the write lock afresh (the writer `top` shows).
    pub writer_pid: AtomicU32,
    pub _pad4: u32,
    /// Start time of that process (pid reuse cannot fool the liveness check).
    pub writer_start: AtomicU64,
    /// Times a writer found no free slot and had to wait.
    pub write_waits: AtomicU64,
    /// Nanoseconds writers spent waiting for a free slot.
    pub write_wait_ns: AtomicU64,
}

/// Bytes covered by `Header::checksum` (identity and geometry, without the checksum itself).
pub const CHECKSUM_END: usize = std::mem::offset_of!(Header, checksum);
/// Size of the header.
pub const HEADER_BYTES: usize = std::mem::size_of::<Header>();

/// One slot: the state word and the per-frame record of the frame it holds.
#[repr(C, align(64))]
pub struct SlotDesc {
    /// `slot_state(seq, writing)`; only the write-lock holder changes it.
    pub state: AtomicU64,
    /// Wall-clock time of the write (ns since the Unix epoch).
    pub timestamp_ns: AtomicU64,
    /// User frame id (i64 bit pattern).
    pub frame_id: AtomicU64,
    /// Payload bytes of the frame.
    pub payload_len: AtomicU64,
    /// Metadata bytes stored after the payload.
    pub meta_len: AtomicU32,
    /// Reserved (zero): a variable-shape stream keeps per-frame shapes in the frame table at the
    /// start of the payload, where readers see them through the read-only mapping.
    pub flags: AtomicU32,
    pub ndim: AtomicU32,
    pub _pad0: u32,
    pub shape: [AtomicU64; MAX_NDIM],
    pub _reserved: [u64; 10],
}

/// One attached handle (reader or writer). Free when `pid == 0`.
#[repr(C, align(64))]
pub struct ReaderEntry {
    pub pid: AtomicU32,
    /// `mode::LATEST`, `mode::LOSSLESS`, `mode::CLOSED` or `mode::RESERVED`.
    pub mode: AtomicU32,
    /// Start time of the process (0 while being set, and in a fork reservation until the
    /// child claims it).
    pub start: AtomicU64,
    /// Bit i set while this handle holds (or is taking) a pin on slot i.
    pub pinned: AtomicU64,
    /// Sequence of the last frame this handle consumed.
    pub consumed: AtomicU64,
    /// Frames this handle skipped (latest mode).
    pub missed: AtomicU64,
    /// Frames this handle read.
    pub reads: AtomicU64,
    /// Wall-clock time (ns) this handle's pins last went from none to some; 0 without pins.
    pub pinned_since_ns: AtomicU64,
    /// Times a writer had to wait for a slot while this (lossless) handle was the furthest behind.
    pub writer_waits: AtomicU64,
    /// What the handle is for (`role::*`), for `framebus top`.
    pub role: AtomicU32,
    /// `mode::RESERVED` only: until when (CLOCK_MONOTONIC seconds) the reservation holds frames
    /// back (0 otherwise).
    pub reserved_until_s: AtomicU32,
    /// A short label (UTF-8, NUL-padded): a bridge endpoint, a file name.
    pub label: [AtomicU64; 6],
    /// Bit i set while a kept loan array of this handle (a finished loan's array still
    /// referenced) pins slot i; a subset of `pinned`, read only for messages and monitors.
    pub kept: AtomicU64,
}

/// Roles stored in `ReaderEntry::role` (shown by `framebus top`).
pub mod role {
    /// An ordinary handle.
    pub const HANDLE: u32 = 0;
    /// The publishing end of a bridge (framebus.net).
    pub const BRIDGE_OUT: u32 = 1;
    /// The subscribing end of a bridge, writing into this stream.
    pub const BRIDGE_IN: u32 = 2;
    /// `framebus record` (frames into FFmpeg through a pipe).
    pub const RECORD: u32 = 3;
    /// `framebus play` (frames from FFmpeg).
    pub const PLAY: u32 = 4;
    /// A monitor (`framebus top`, `hz`, `echo`).
    pub const MONITOR: u32 = 5;
    /// A handle that has written to the stream (set when it takes the write lock).
    pub const WRITER: u32 = 6;
    /// The bits of the role word that hold the role (the values above); the others are flags.
    pub const KIND: u32 = 0xffff;
    /// Flag: the handle copies a device stream's frames to host memory (a `DeviceDownload`).
    pub const DOWNLOAD: u32 = 1 << 16;
    /// Bytes of a label.
    pub const LABEL_BYTES: usize = 48;

    /// Whether a handle of role `value` writes the stream (rather than reads it).
    pub fn writes(value: u32) -> bool {
        matches!(value & KIND, WRITER | BRIDGE_IN | PLAY)
    }
}

pub use crate::gpu::door::IPC_HANDLE_BYTES;

/// Start of a device stream's device section (at `Geometry::device_offset`). Written once by
/// the creator before `Header::ready`, except `state`.
#[repr(C, align(64))]
pub struct DeviceHeader {
    /// Which door made the memory and events: 1 the CUDA driver, 2 the fake
    /// (`gpu::door::DoorKind::code`); a process behind the other door refuses the stream.
    pub door: u32,
    /// `DEVICE_LIVE` while the memory is allocated; `DEVICE_FREED` once its owner freed it.
    pub state: AtomicU32,
    /// `cuDeviceGetUuid` of the device (ordinals depend on `CUDA_VISIBLE_DEVICES`).
    pub uuid: [u8; 16],
    /// Bytes of one frame in device memory.
    pub frame_bytes: u64,
    /// Bytes from one slot's frame to the next in the allocation (a multiple of 512).
    pub pitch: u64,
    /// Bytes of the allocation (`pitch * slot_count`).
    pub alloc_bytes: u64,
    /// The process that allocated the memory and owns it (pid, start time).
    pub owner_pid: u32,
    pub _pad0: u32,
    pub owner_start: u64,
    pub _pad1: [u64; 8],
    /// Inter-process handle of the allocation that holds every slot.
    pub memory: [u8; IPC_HANDLE_BYTES],
    pub _reserved: [u64; 8],
}

/// Bytes of the device section's fixed part; then `slot_count` event handles
/// (`IPC_HANDLE_BYTES` each: slot i's *ready* event, recorded after each frame written into it),
/// then `max_readers` [`ReleaseEvent`]s.
pub const DEVICE_HEADER_BYTES: usize = std::mem::size_of::<DeviceHeader>();

/// `DeviceHeader::state` values.
pub const DEVICE_LIVE: u32 = 1;
pub const DEVICE_FREED: u32 = 2;

/// Per reader entry: the event the handle in that entry records on its CUDA stream when it lets
/// a device frame go, so a writer's next frame into that memory waits for the reader's work.
/// A seqlock (`protocol::publish_words` / `read_words`) that only the entry's handle replaces.
#[repr(C, align(64))]
pub struct ReleaseEvent {
    /// 0 while the entry has no event; odd while the handle replaces it; even when set.
    pub version: AtomicU64,
    /// `words[0]`: pid of the handle's process (it must match `ReaderEntry::pid`); then the
    /// event's inter-process handle, 8 bytes a word.
    pub words: [AtomicU64; 1 + IPC_HANDLE_BYTES / 8],
    pub _pad: [u64; 6],
}

/// Bytes of the device section of a device stream with these counts (0 for a host stream).
pub fn device_section_bytes(slot_count: u32, max_readers: u32) -> Option<u64> {
    let slots = u64::from(slot_count).checked_mul(IPC_HANDLE_BYTES as u64)?;
    let readers = u64::from(max_readers).checked_mul(std::mem::size_of::<ReleaseEvent>() as u64)?;
    align_up((DEVICE_HEADER_BYTES as u64).checked_add(slots)?.checked_add(readers)?, PAGE)
}

// Loom's model atomics are larger than the real ones; the layout is only asserted for real builds.
#[cfg(not(loom))]
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
    assert!(size_of::<AtomicU32>() == 4 && align_of::<AtomicU32>() == 4);
    assert!(HEADER_BYTES == 448);
    assert!(offset_of!(Header, slot_count) == 64);
    assert!(offset_of!(Header, checksum) == 224);
    assert!(offset_of!(Header, published) == 256);
    assert!(offset_of!(Header, lock_owner) == 320);
    assert!(offset_of!(Header, frames_written) == 384);
    assert!(size_of::<SlotDesc>() == 192);
    assert!(offset_of!(SlotDesc, shape) == 48);
    assert!(size_of::<ReaderEntry>() == 128);
    assert!(offset_of!(ReaderEntry, pinned_since_ns) == 48);
    assert!(offset_of!(ReaderEntry, reserved_until_s) == 68);
    assert!(offset_of!(ReaderEntry, label) == 72);
    assert!(offset_of!(Header, writer_pid) == 408);
    assert!(offset_of!(Header, device) == 44);
    assert!(DEVICE_HEADER_BYTES == 256);
    assert!(offset_of!(DeviceHeader, memory) == 128);
    assert!(size_of::<ReleaseEvent>() == 128);
    assert!(offset_of!(ReleaseEvent, words) == 8);
};

/// Geometry of a segment, computed from its spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub slot_count: u32,
    pub max_readers: u32,
    pub frame_bytes: u64,
    pub meta_capacity: u32,
    pub slot_stride: u64,
    pub readers_offset: u64,
    pub slots_offset: u64,
    /// Device streams: where the device section starts (page aligned), and its length; for
    /// host streams `device_bytes` is 0 and `device_offset == payload_offset`.
    pub device_offset: u64,
    pub device_bytes: u64,
    pub payload_offset: u64,
    pub total_bytes: u64,
}

/// Rounds `n` up to a multiple of `to` (a power of two); None on overflow.
pub const fn align_up(n: u64, to: u64) -> Option<u64> {
    match n.checked_add(to - 1) {
        Some(v) => Some(v & !(to - 1)),
        None => None,
    }
}

impl Geometry {
    /// Lays out a host segment; None if the sizes overflow.
    pub fn new(slot_count: u32, max_readers: u32, frame_bytes: u64, meta_capacity: u32) -> Option<Geometry> {
        Geometry::with_device(slot_count, max_readers, frame_bytes, meta_capacity, false)
    }

    /// Lays out a segment, with a device section for a device stream (`frame_bytes` is then
    /// what the host slots hold: 0, or the frame's size for a CPU mirror).
    pub fn with_device(slot_count: u32, max_readers: u32, frame_bytes: u64, meta_capacity: u32, device: bool) -> Option<Geometry> {
        let readers_offset = align_up(HEADER_BYTES as u64, 64)?;
        let slots_offset = readers_offset.checked_add(u64::from(max_readers) * std::mem::size_of::<ReaderEntry>() as u64)?;
        let device_offset = align_up(slots_offset.checked_add(u64::from(slot_count) * std::mem::size_of::<SlotDesc>() as u64)?, PAGE)?;
        let device_bytes = if device { device_section_bytes(slot_count, max_readers)? } else { 0 };
        let payload_offset = device_offset.checked_add(device_bytes)?;
        let slot_stride = align_up(frame_bytes.checked_add(u64::from(meta_capacity))?.max(1), PAGE)?;
        let total_bytes = payload_offset.checked_add(slot_stride.checked_mul(u64::from(slot_count))?)?;
        Some(Geometry {
            slot_count,
            max_readers,
            frame_bytes,
            meta_capacity,
            slot_stride,
            readers_offset,
            slots_offset,
            device_offset,
            device_bytes,
            payload_offset,
            total_bytes,
        })
    }

    /// Reads the geometry recorded in a header (the device section is what lies between the
    /// page after the slot descriptors and the payloads).
    pub fn of(header: &Header) -> Geometry {
        let slots_end =
            header.slots_offset.saturating_add(u64::from(header.slot_count).saturating_mul(std::mem::size_of::<SlotDesc>() as u64));
        let device_offset = align_up(slots_end, PAGE).unwrap_or(u64::MAX);
        Geometry {
            device_offset,
            device_bytes: header.payload_offset.saturating_sub(device_offset),
            slot_count: header.slot_count,
            max_readers: header.max_readers,
            frame_bytes: header.frame_bytes,
            meta_capacity: header.meta_capacity,
            slot_stride: header.slot_stride,
            readers_offset: header.readers_offset,
            slots_offset: header.slots_offset,
            payload_offset: header.payload_offset,
            total_bytes: header.total_bytes,
        }
    }
}

/// FNV-1a over the checksummed part of a header image (with `ready` counted as zero).
pub fn header_checksum(bytes: &[u8]) -> u64 {
    let ready = std::mem::offset_of!(Header, ready);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, &b) in bytes[..CHECKSUM_END].iter().enumerate() {
        let b = if (ready..ready + 4).contains(&i) { 0 } else { b };
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_page_aligned() {
        let g = Geometry::new(4, 64, 128 * 128 * 4, 256).unwrap();
        assert_eq!(g.payload_offset % PAGE, 0);
        assert_eq!(g.slot_stride % PAGE, 0);
        assert!(g.slot_stride >= 128 * 128 * 4 + 256);
        assert_eq!(g.total_bytes, g.payload_offset + 4 * g.slot_stride);
    }

    #[test]
    fn overflow_is_refused() {
        assert!(Geometry::new(64, 64, u64::MAX - 10, 0).is_none());
        assert!(Geometry::new(64, 64, u64::MAX / 8, 0).is_none());
    }

    #[test]
    fn state_packing_round_trips() {
        assert_eq!(state_seq(slot_state(77, true)), 77);
        assert_eq!(slot_state(77, true) & WRITING, WRITING);
        assert_eq!(unpack_published(published(1 << 40, 63)), (1 << 40, 63));
    }
}
