//! What keeps a writer from claiming a slot, in words, for the message of a write that timed
//! out: each slot and what holds it (the newest frame, a view or a kept loan array of which
//! process, a frame a lossless reader has not read).

use super::handle::Stream;
use super::layout::{state_seq, unpack_published, WRITING};
use super::monitor::role_name;
use crate::process::ProcessId;
use crate::sync::atomic::Ordering;

impl Stream {
    /// One clause per slot saying why the writer cannot take it, and what to do.
    pub(super) fn why_no_free_slot(&self) -> String {
        let (latest, latest_slot) = unpack_published(self.header().published.load(Ordering::SeqCst));
        let me = ProcessId::current().pid;
        let mut clauses = Vec::new();
        for i in 0..self.geometry.slot_count {
            let state = self.slot(i).state.load(Ordering::SeqCst);
            let seq = state_seq(state);
            let mut holders = Vec::new();
            if latest > 0 && i == latest_slot {
                holders.push(format!("holds the newest frame ({latest})"));
            }
            if state & WRITING != 0 {
                holders.push("is being written".to_owned());
            }
            for r in 0..self.readers_hwm() {
                let e = self.reader(r);
                let pid = e.pid.load(Ordering::SeqCst);
                if pid == 0 {
                    continue;
                }
                let who = if pid == me { "this process".to_owned() } else { format!("process {pid}") };
                if e.pinned.load(Ordering::SeqCst) & (1 << i) != 0 {
                    if e.kept.load(Ordering::Relaxed) & (1 << i) != 0 {
                        holders.push(format!("is pinned by a kept loan array of {who} (a finished loan's array still referenced; it lets go when that process writes or waits)"));
                    } else {
                        holders.push(format!("is pinned by a view in {who} ({} handle)", role_name(e.role.load(Ordering::Relaxed))));
                    }
                }
                if super::fork::holds_frames(e) && seq > 0 && seq > e.consumed.load(Ordering::SeqCst) {
                    holders.push(format!("holds frame {seq}, not yet read by a lossless reader in {who}"));
                }
            }
            if holders.is_empty() {
                holders.push("was free at the last look".to_owned());
            }
            clauses.push(format!("slot {i} {}", holders.join(" and ")));
        }
        format!(
            "{}. Release views (frame.release() or leave their with block, and drop arrays taken from them), let lossless readers catch up, or create the stream with more slots",
            clauses.join("; ")
        )
    }
}
