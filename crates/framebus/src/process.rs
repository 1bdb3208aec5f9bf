//! Process identity: a pid plus the process start time, so that a recycled pid is never mistaken
//! for the process that took a lock, a reader entry or created a stream.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

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

/// Bumped in the child after every fork(), so identities cached per thread are looked up again
/// there (the forking thread keeps its thread-locals in the child, with a new pid and tid).
static FORK_GENERATION: AtomicU64 = AtomicU64::new(1);
static WATCH_FORKS: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

thread_local! {
    /// (fork generation, pid, tid) of this thread as last looked up.
    static IDS: Cell<(u64, u32, u32)> = const { Cell::new((0, 0, 0)) };
}

/// The calling thread's kernel thread id, through the raw system call: libc's `gettid()` wrapper
/// exists only from glibc 2.30, so calling it would make the extension fail to load on older
/// systems that manylinux2014 wheels promise to support (glibc 2.17 and later).
fn sys_gettid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments, has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// (pid, kernel thread id) of the calling thread. Two system calls the first time on a thread
/// (and after a fork), none afterwards: every write takes and releases the write lock, whose
/// owner word holds both, and glibc caches neither (two syscalls per lookup were more than half
/// the cost of writing a small frame).
pub fn current_ids() -> (u32, u32) {
    let generation = fork_generation();
    IDS.with(|ids| {
        let (seen, pid, tid) = ids.get();
        if seen == generation {
            return (pid, tid);
        }
        // SAFETY: getpid and the raw gettid syscall have no preconditions and cannot fail.
        let (pid, tid) = unsafe { (libc::getpid() as u32, sys_gettid()) };
        ids.set((generation, pid, tid));
        (pid, tid)
    })
}

/// How many fork()s lie between this process and the first process of its line that used
/// framebus: a number that changes in a forked child and nowhere else, so state cached per
/// process (a handle's reader entry, a thread's ids) can tell in one relaxed load that it was
/// inherited. The first call installs the `pthread_atfork` child handler that bumps it.
#[inline]
pub fn fork_generation() -> u64 {
    WATCH_FORKS.call_once(|| {
        // SAFETY: registers a child handler that only does an atomic add, which is allowed in a
        // forked child of a multi-threaded process (async-signal-safe); registration itself has
        // no preconditions. If it failed, ids would be stale only in a forked child that uses
        // framebus without exec, so the result is checked in debug builds.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        debug_assert_eq!(rc, 0);
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

impl ProcessId {
    /// This process.
    pub fn current() -> ProcessId {
        let pid = current_ids().0;
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
    current_ids().1
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

    #[test]
    fn cached_ids_are_per_thread_and_renewed_after_fork() {
        let (pid, tid) = current_ids();
        // SAFETY: plain syscalls with no preconditions.
        assert_eq!((pid, tid), unsafe { (libc::getpid() as u32, sys_gettid()) });
        let other = std::thread::spawn(current_ids).join().unwrap();
        assert_eq!(other.0, pid);
        assert_ne!(other.1, tid);
        // SAFETY: the child only calls async-signal-safe functions (getpid, gettid, _exit) and
        // current_ids, which after fork reads an atomic and a thread-local and makes syscalls.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: plain syscalls with no preconditions.
            let fresh = unsafe { (libc::getpid() as u32, sys_gettid()) };
            let ok = current_ids() == fresh && ProcessId::current().pid != pid;
            // SAFETY: leaves the child at once, without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; status is a valid out pointer.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child saw stale ids");
        assert_eq!(current_ids(), (pid, tid));
    }
}
