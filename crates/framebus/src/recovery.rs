//! Finding streams in /dev/shm, telling stale ones (creator dead, nobody attached) from live
//! ones, and removing the stale ones.

use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::process::ProcessId;
use crate::ring::layout::{Header, HEADER_BYTES};
use crate::ring::{ReaderMode, Stream, StreamSpec};
use crate::shm::{self, name, Segment};
use crate::sync::atomic::Ordering;

/// A segment younger than this whose creator is unknown may still be being created.
const CREATION_GRACE: Duration = Duration::from_secs(5);

/// Why a segment could not be read, for callers that decide on it (`StreamInfo::problem` is
/// the text for people).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// Not initialised: its creator is still setting it up, or died or got stuck doing so (then
    /// `gc` removes it once it is stale).
    NotReady,
    /// A layout version this framebus cannot read.
    Incompatible,
    /// Damaged, or no framebus stream.
    Corrupt,
    /// Any other failure to read it.
    Other,
}

impl ProblemKind {
    /// Every kind, in the order of their codes' documentation.
    pub const ALL: [ProblemKind; 4] = [ProblemKind::NotReady, ProblemKind::Incompatible, ProblemKind::Corrupt, ProblemKind::Other];

    /// The kind's code as the bindings pass it on ("not_ready", "incompatible", "corrupt", "other").
    pub fn code(self) -> &'static str {
        match self {
            ProblemKind::NotReady => "not_ready",
            ProblemKind::Incompatible => "incompatible",
            ProblemKind::Corrupt => "corrupt",
            ProblemKind::Other => "other",
        }
    }

    /// The kind of the error that kept a segment from being read.
    pub fn of(e: &Error) -> ProblemKind {
        match e {
            Error::NotReady { .. } => ProblemKind::NotReady,
            Error::IncompatibleVersion { .. } => ProblemKind::Incompatible,
            Error::Corrupt { .. } | Error::NotSegment { .. } => ProblemKind::Corrupt,
            _ => ProblemKind::Other,
        }
    }
}

/// What `framebus ls` shows about one stream.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub name: String,
    pub path: String,
    /// None when the segment could not be read (see `problem`).
    pub spec: Option<StreamSpec>,
    /// Why the segment could not be read, if it could not.
    pub problem: Option<String>,
    /// The same as a code to decide on.
    pub problem_kind: Option<ProblemKind>,
    pub creator_pid: u32,
    pub creator_alive: bool,
    /// Live attached handles, and how many of them are lossless readers.
    pub attached: usize,
    pub lossless: usize,
    pub latest_seq: u64,
    pub frames_written: u64,
    pub bytes_written: u64,
    pub total_bytes: u64,
    pub lock_holder: Option<u32>,
    pub uid: u32,
    pub mode: u32,
    /// Creator dead and nobody alive attached: `gc` removes it.
    pub stale: bool,
}

/// Pid/start of the creator recorded in a segment, even one not (yet) marked ready.
pub fn peek_creator(stream: &str) -> Option<ProcessId> {
    let seg = Segment::open(stream).ok()?;
    if seg.size().ok()? < HEADER_BYTES as u64 {
        return Some(ProcessId { pid: 0, start: 0 });
    }
    let map = seg.map(HEADER_BYTES).ok()?;
    // SAFETY: the mapping holds HEADER_BYTES, page aligned; Header is valid for any bits.
    let h = unsafe { &*map.as_ptr().cast::<Header>() };
    Some(ProcessId { pid: h.creator_pid, start: h.creator_start })
}

fn segment_age(path: &str) -> Option<Duration> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    SystemTime::now().duration_since(meta.modified().ok()?).ok()
}

/// Describes one stream without attaching to it. An entry under the name that is no segment
/// (not a regular file) is NotSegment: never opened.
pub fn info(stream: &str) -> Result<StreamInfo> {
    let path = name::path(stream);
    let (uid, mode) = Segment::open(stream)?.owner_and_mode()?;
    let mut out = StreamInfo {
        name: stream.to_owned(),
        path: path.clone(),
        spec: None,
        problem: None,
        problem_kind: None,
        creator_pid: 0,
        creator_alive: false,
        attached: 0,
        lossless: 0,
        latest_seq: 0,
        frames_written: 0,
        bytes_written: 0,
        total_bytes: 0,
        lock_holder: None,
        uid,
        mode,
        stale: false,
    };
    match Stream::peek(stream) {
        Ok(s) => {
            let h = s.header();
            let creator = s.creator();
            let live: Vec<_> = s.attached().into_iter().filter(|(_, p)| p.is_alive()).collect();
            out.lossless = live.iter().filter(|(i, _)| s.entry_mode(*i) == ReaderMode::Lossless).count();
            out.attached = live.len();
            out.creator_pid = creator.pid;
            out.creator_alive = creator.is_alive();
            out.latest_seq = s.latest_seq();
            out.frames_written = h.frames_written.load(Ordering::Relaxed);
            out.bytes_written = h.bytes_written.load(Ordering::Relaxed);
            out.total_bytes = s.geometry().total_bytes;
            out.lock_holder = s.lock_holder();
            out.stale = !out.creator_alive && out.attached == 0;
            out.spec = Some(s.spec().clone());
        }
        Err(e @ (Error::NotFound { .. } | Error::PermissionDenied { .. })) => return Err(e),
        Err(e) => {
            let creator = peek_creator(stream).unwrap_or(ProcessId { pid: 0, start: 0 });
            out.creator_pid = creator.pid;
            out.creator_alive = if creator.pid == 0 { segment_age(&path).is_none_or(|a| a < CREATION_GRACE) } else { creator.is_alive() };
            out.stale = !out.creator_alive && matches!(e, Error::NotReady { .. });
            out.problem = Some(e.to_string());
            out.problem_kind = Some(ProblemKind::of(&e));
        }
    }
    Ok(out)
}

/// Names of all framebus streams in /dev/shm, sorted.
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(name::SHM_DIR)
        .map(|dir| dir.filter_map(|e| e.ok()?.file_name().to_str().and_then(name::from_file_name).map(str::to_owned)).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Describes every stream this user can see; streams that vanish meanwhile, and entries that
/// are no segments (not regular files: see `shm::kind`), are skipped.
pub fn list() -> Vec<StreamInfo> {
    names().iter().filter_map(|n| info(n).ok()).collect()
}

/// Removes stale streams (creator dead, nobody alive attached; or never initialised by a dead
/// creator). Live streams are never touched, nor is anything that is not a regular file (a
/// FIFO, socket, directory, device file or symbolic link named like a stream): `list` skips
/// those and `shm::unlink` refuses them. Returns the names removed (or that would be, with
/// `dry_run`).
pub fn gc(dry_run: bool) -> Vec<String> {
    let mut removed = Vec::new();
    for info in list() {
        if !info.stale {
            continue;
        }
        if dry_run || shm::unlink(&info.name).is_ok() {
            removed.push(info.name);
        }
    }
    removed
}
