//! What monitors (`framebus top`, `hz`, `echo`, `framebus.stat`) read: the counters the ring
//! keeps, taken from a handle that is not attached, so looking never changes what is seen.
//! Rates come from two snapshots (see `python/framebus/monitor.py`).

use super::handle::{now_ns, Stream};
use super::layout::{mode, role};
use crate::error::Result;
use crate::process::ProcessId;
use crate::sync::atomic::Ordering;

/// The writer side of a stream at one instant.
#[derive(Clone, Debug, Default)]
pub struct WriterStats {
    /// Pid of the process that last took the write lock (0: none yet).
    pub pid: u32,
    /// Whether that process is alive.
    pub alive: bool,
    pub frames_written: u64,
    pub bytes_written: u64,
    pub aborted_writes: u64,
    /// Times a writer had to wait for a free slot, and the nanoseconds it waited.
    pub write_waits: u64,
    pub write_wait_ns: u64,
    /// The newest frame's sequence number and timestamp (0 before the first).
    pub latest_seq: u64,
    pub latest_ns: u64,
    /// Whether the writer ended the stream.
    pub ended: bool,
    /// Pid of the write-lock holder now, if any.
    pub lock_holder: Option<u32>,
}

/// One attached handle at one instant.
#[derive(Clone, Debug, Default)]
pub struct ReaderStats {
    /// Index of its entry in the reader table (with `pid`, identifies the handle).
    pub entry: u32,
    pub pid: u32,
    pub alive: bool,
    /// `mode::LATEST`, `mode::LOSSLESS`, `mode::CLOSED` (or an unknown value, shown as such).
    pub mode: u32,
    /// `role::*` and the label the handle set.
    pub role: u32,
    /// Whether it copies a device stream's frames to host memory (`role::DOWNLOAD`).
    pub download: bool,
    pub label: String,
    pub reads: u64,
    pub missed: u64,
    /// Sequence of the last frame it consumed; `latest_seq - consumed` is its lag.
    pub consumed: u64,
    /// Slots it pins now, and since when (wall-clock ns; 0 without pins).
    pub pinned_slots: u32,
    pub pinned_since_ns: u64,
    /// Writer waits it caused (lossless, furthest behind).
    pub writer_waits: u64,
}

/// A stream's counters at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// When it was taken (wall-clock ns).
    pub taken_ns: u64,
    pub writer: WriterStats,
    pub readers: Vec<ReaderStats>,
}

impl Stream {
    /// The counters of the ring now (any handle, attached or not).
    pub fn snapshot(&self) -> Result<Snapshot> {
        let h = self.header();
        let (latest_seq, latest_ns, _) = self.latest_record()?;
        let pid = h.writer_pid.load(Ordering::Acquire);
        let writer_proc = ProcessId { pid, start: h.writer_start.load(Ordering::Relaxed) };
        let writer = WriterStats {
            pid,
            alive: pid != 0 && writer_proc.is_alive(),
            frames_written: h.frames_written.load(Ordering::Relaxed),
            bytes_written: h.bytes_written.load(Ordering::Relaxed),
            aborted_writes: h.aborted_writes.load(Ordering::Relaxed),
            write_waits: h.write_waits.load(Ordering::Relaxed),
            write_wait_ns: h.write_wait_ns.load(Ordering::Relaxed),
            latest_seq,
            latest_ns,
            ended: self.is_ended(),
            lock_holder: self.lock_holder(),
        };
        let readers = self
            .attached()
            .into_iter()
            .filter(|&(i, _)| Some(i) != self.owned_index())
            .map(|(i, p)| {
                let e = self.reader(i);
                let mut label = [0u8; role::LABEL_BYTES];
                for (chunk, word) in label.chunks_exact_mut(8).zip(&e.label) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
                }
                let len = label.iter().position(|&b| b == 0).unwrap_or(label.len());
                let mask = e.pinned.load(Ordering::Relaxed);
                ReaderStats {
                    entry: i,
                    pid: p.pid,
                    alive: p.is_alive(),
                    mode: e.mode.load(Ordering::Relaxed),
                    role: e.role.load(Ordering::Acquire) & role::KIND,
                    download: e.role.load(Ordering::Relaxed) & role::DOWNLOAD != 0,
                    label: String::from_utf8_lossy(&label[..len]).into_owned(),
                    reads: e.reads.load(Ordering::Relaxed),
                    missed: e.missed.load(Ordering::Relaxed),
                    consumed: e.consumed.load(Ordering::Relaxed),
                    pinned_slots: mask.count_ones(),
                    pinned_since_ns: if mask == 0 { 0 } else { e.pinned_since_ns.load(Ordering::Relaxed) },
                    writer_waits: e.writer_waits.load(Ordering::Relaxed),
                }
            })
            .collect();
        Ok(Snapshot { taken_ns: now_ns(), writer, readers })
    }
}

/// The name of a reader mode value.
pub fn mode_name(value: u32) -> String {
    match value {
        mode::LATEST => "latest".into(),
        mode::LOSSLESS => "lossless".into(),
        mode::CLOSED => "closed".into(),
        mode::RESERVED => "reserved".into(),
        other => format!("unknown ({other})"),
    }
}

/// The name of a role value.
pub fn role_name(value: u32) -> String {
    match value & role::KIND {
        role::HANDLE => "handle".into(),
        role::BRIDGE_OUT => "bridge out".into(),
        role::BRIDGE_IN => "bridge in".into(),
        role::RECORD => "record".into(),
        role::PLAY => "play".into(),
        role::MONITOR => "monitor".into(),
        role::WRITER => "writer".into(),
        other => format!("unknown ({other})"),
    }
}

/// The counters of stream `name`, read without attaching.
pub fn snapshot(name: &str) -> Result<Snapshot> {
    Stream::peek(name)?.snapshot()
}
