//! What a waiting reader cannot see in the ring: that no frame can come any more, because the
//! process holding a device stream's GPU memory died, or because the stream's name was removed
//! or now belongs to a new segment (a producer that restarted and created the stream anew).
//!
//! A wait looks at both at its wake-ups (futex waits are cut into slices of at most 100 ms,
//! `sync/deadline.rs`), at most once per `INTERVAL` per handle and only while no new frame is
//! there: one `stat()` of the name, and for a device stream one read of the owner's
//! `/proc/<pid>/stat` (pid and start time, so a recycled pid is not taken for the owner). An idle
//! reader so pays a few system calls a few times a second, and a reader that is kept busy by
//! frames pays nothing.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::handle::Stream;
use super::layout::role;
use crate::error::{Error, Result};

/// Longest time between two looks of one handle.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// A handle's record of its looks.
#[derive(Default)]
pub(super) struct Watch {
    /// When this handle last looked.
    last: Mutex<Option<Instant>>,
    /// (device, inode) of this handle's segment.
    identity: OnceLock<(u64, u64)>,
}

impl Watch {
    /// Whether it is time for another look (and if so, notes it as taken now).
    fn due(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < INTERVAL) {
            return false;
        }
        *last = Some(now);
        true
    }
}

impl Stream {
    /// Called by a wait at a wake-up without a new frame: the error that says why no frame will
    /// come (`DeviceUnavailable` for a device stream whose owner died, `Replaced` for a name
    /// removed or taken by a new segment), at most once per `INTERVAL`; Ok otherwise.
    pub(super) fn check_still_fed(&self) -> Result<()> {
        if !self.watch.due() {
            return Ok(());
        }
        if let Some(gone) = self.device_owner_gone() {
            return Err(gone);
        }
        self.check_name()
    }

    /// `Replaced` when the name now belongs to another segment, or is gone while no live handle
    /// writes the stream (with one, the stream goes on through open handles: frames still come).
    fn check_name(&self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let mine = match self.watch.identity.get() {
            Some(id) => *id,
            None => match self.segment.identity() {
                Ok(id) => *self.watch.identity.get_or_init(|| id),
                Err(_) => return Ok(()),
            },
        };
        // lstat: only the segment itself is this stream (a link to it under the name is not).
        let unlinked = match std::fs::symlink_metadata(crate::shm::name::path(&self.name)) {
            Ok(m) if (m.dev(), m.ino()) == mine => return Ok(()),
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            // Anything else (a permission change of /dev/shm): nothing to tell.
            Err(_) => return Ok(()),
        };
        if unlinked && (role::writes(self.role()) || self.other_writers() > 0) {
            return Ok(());
        }
        Err(Error::Replaced { name: self.name.clone(), unlinked })
    }
}
