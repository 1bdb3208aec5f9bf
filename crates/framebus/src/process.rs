//! Process identity: a pid plus the process start time, so that a recycled pid is never mistaken
//! for the process that took a lock, a reader entry or created a stream.

use std::sync::atomic::{AtomicU64, Ordering};

/// A process as recorded in shared memory: pid and start time (clock ticks since boot, from
/// `/proc/<pid>/stat`). `start == 0` means "unknown" and is matched on the pid alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    /// Kernel process id.
    pub pid: u32,
    /// Start time of the process in clock ticks after boot.
    pub start: u64,
}

/// Caches `(pid << 0)` and start time of this process; refreshed after a fork (pid changes).
static CACHED_PID: AtomicU64 = AtomicU64::new(0);
static CACHED_START: AtomicU64 = AtomicU64::new(0);

impl ProcessId {
    /// This process.
    pub fn current() -> ProcessId {
        // SAFETY: getpid has no preconditions and cannot fail.
        let pid = unsafe { libc::getpid() } as u32;
        if CACHED_PID.load(Ordering::Acquire) == u64::from(pid) {
            return ProcessId { pid, start: CACHED_START.load(Ordering::Acquire) };
        }
        let start = start_time(pid).unwrap_or(0);
        CACHED_START.store(start, Ordering::Release);
        CACHED_PID.store(u64::from(pid), Ordering::Release);
        ProcessId { pid, start }
    }

    /// Whether this exact process (same pid and, when known, same start time) is still running.
    /// A zombie (killed but not yet reaped) counts as dead.
    pub fn is_alive(&self) -> bool {
        if self.pid == 0 {
            return false;
        }
        match stat(self.pid) {
            None => false,
            Some((state, start)) => {
                if state == 'Z' || state == 'X' {
                    return false;
                }
                self.start == 0 || start == self.start
            }
        }
    }
}

/// The calling thread's kernel thread id.
pub fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Start time (clock ticks after boot) of `pid`, or None if it does not exist.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// Reads (state, starttime) from `/proc/<pid>/stat`. The command name (field 2) may contain
/// spaces and parentheses, so fields are counted from the last ')'.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3) comes field 4; starttime is field 22.
    let start = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
        assert_eq!(parse_stat(line), Some(('S', 424242)));
    }

    #[test]
    fn current_process_is_alive_and_a_dead_one_is_not() {
        let me = ProcessId::current();
        assert!(me.start > 0);
        assert!(me.is_alive());
        assert!(!ProcessId { pid: me.pid, start: me.start + 1 }.is_alive());
        assert!(!ProcessId { pid: 0, start: 0 }.is_alive());
    }
}
