//! Sharing one large copy between the calling thread and a few helpers, without ever making the
//! caller wait for a helper the scheduler has not run.
//!
//! The copy is cut into [`CHUNK`]-byte chunks handed out by a shared cursor. The caller starts
//! the helpers, then takes chunks itself like any helper; once the cursor is past the end it
//! waits only for chunks a helper has already taken (a few tens of µs each). A helper that the
//! scheduler runs late finds nothing left and exits without touching either buffer, so on a busy
//! machine a copy costs what one thread costs plus the helpers' start (tens of µs), never a
//! time slice spent waiting for a helper to be scheduled at all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes a thread takes from the cursor at a time (a few tens of µs of copying).
pub const CHUNK: usize = 512 << 10;

/// Cores this process's helpers could run on right now: CPUs online less the tasks the kernel
/// counts as runnable this instant (`procs_running` in /proc/stat, the caller included), and
/// never more than the CPUs this process may use less the caller's own. 0 where unknown.
pub fn idle_cores() -> usize {
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::fs::read_to_string("/proc/stat").map_or(0, |s| idle_from_stat(&s, allowed))
}

/// [`idle_cores`] from the text of /proc/stat and the CPUs this process may use (its affinity
/// mask and CPU quota, as `available_parallelism` counts them).
pub fn idle_from_stat(stat: &str, allowed: usize) -> usize {
    let online = stat.lines().filter(|l| l.strip_prefix("cpu").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))).count();
    let running = stat.lines().find_map(|l| l.strip_prefix("procs_running")?.trim().parse::<usize>().ok());
    match running {
        Some(r) if online > 0 => online.saturating_sub(r.max(1)).min(allowed.saturating_sub(1)),
        _ => 0,
    }
}

/// What the caller and its helpers share: the two buffers (as addresses, so a helper outlives
/// the borrow only as a thread that never touches them again), the cursor and the count of
/// chunks copied.
struct Job {
    dst: usize,
    src: usize,
    len: usize,
    chunks: usize,
    kernel: fn(&mut [u8], &[u8]),
    next: AtomicUsize,
    done: AtomicUsize,
}

impl Job {
    /// Takes and copies chunks until none is left; returns how many this thread copied.
    fn work(&self) -> usize {
        let mut copied = 0;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.chunks {
                return copied;
            }
            let start = i * CHUNK;
            let n = CHUNK.min(self.len - start);
            // SAFETY: chunk `i` lies inside both buffers (start + n <= len) and is taken by
            // exactly one thread (the cursor hands out each index once), so this is the only
            // reference to those destination bytes. The buffers are alive: `split` does not
            // return before `done` counts every chunk, including this one (Release below).
            let (d, s) = unsafe {
                (
                    std::slice::from_raw_parts_mut((self.dst + start) as *mut u8, n),
                    std::slice::from_raw_parts((self.src + start) as *const u8, n),
                )
            };
            (self.kernel)(d, s);
            self.done.fetch_add(1, Ordering::Release);
            copied += 1;
        }
    }
}

/// Copies `src` into `dst` with the calling thread and up to `n - 1` helper threads taking
/// [`CHUNK`]-byte chunks from a shared cursor; returns once every byte is copied, and how many
/// chunks the helpers copied (0 when none ran in time, or none could be started).
pub fn split(n: usize, kernel: fn(&mut [u8], &[u8]), dst: &mut [u8], src: &[u8]) -> usize {
    assert_eq!(dst.len(), src.len(), "copy: lengths differ");
    let chunks = src.len().div_ceil(CHUNK);
    if n <= 1 || chunks <= 1 {
        kernel(dst, src);
        return 0;
    }
    let job = Arc::new(Job {
        dst: dst.as_mut_ptr() as usize,
        src: src.as_ptr() as usize,
        len: src.len(),
        chunks,
        kernel,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    for _ in 1..n.min(chunks) {
        let j = Arc::clone(&job);
        // A helper that cannot be started (thread limit) only leaves more chunks to the caller.
        let _ = std::thread::Builder::new().name("framebus-copy".into()).stack_size(64 << 10).spawn(move || {
            j.work();
        });
    }
    // The kernels cannot panic on two chunks of one length, so the caller always gets past its
    // own work to the wait below, which is what keeps the buffers alive for the helpers.
    let mine = job.work();
    // Every chunk is taken; wait for those a helper is still copying (Acquire pairs with the
    // helper's Release, so its bytes are visible before the caller publishes the frame).
    let mut spins = 0u32;
    while job.done.load(Ordering::Acquire) < chunks {
        spins += 1;
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    chunks - mine
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 1000 0 0 0 0 0 0\ncpu0 50 0 25 500 0 0 0 0 0 0\ncpu1 50 0 25 500 0 0 0 0 0 0\nintr 1 2 3\nctxt 99\nprocs_running 1\nprocs_blocked 0\n";

    fn stat(running: usize, cpus: usize) -> String {
        let mut s = String::from("cpu  1 2 3 4\n");
        for i in 0..cpus {
            s.push_str(&format!("cpu{i} 1 2 3 4\n"));
        }
        s + &format!("intr 0\nprocs_running {running}\nprocs_blocked 0\n")
    }

    #[test]
    fn idle_cores_come_from_the_runnable_count_now() {
        // Only the caller runs on a 2-CPU machine: one core for a helper.
        assert_eq!(idle_from_stat(STAT, 2), 1);
        // Two busy processes beside the caller: none.
        assert_eq!(idle_from_stat(&stat(3, 2), 2), 0);
        assert_eq!(idle_from_stat(&stat(9, 2), 2), 0);
        // A large idle machine, but this process may use only 2 CPUs: one helper at most.
        assert_eq!(idle_from_stat(&stat(1, 64), 2), 1);
        assert_eq!(idle_from_stat(&stat(5, 8), 8), 3);
        // A count of 0 (read between two ticks) still counts the caller.
        assert_eq!(idle_from_stat(&stat(0, 4), 4), 3);
    }

    #[test]
    fn unknown_stat_means_no_helpers() {
        assert_eq!(idle_from_stat("", 8), 0);
        assert_eq!(idle_from_stat("cpu0 1 2 3\nprocs_running x\n", 8), 0);
        assert_eq!(idle_from_stat("procs_running 1\n", 8), 0);
    }

    #[test]
    fn the_caller_copies_everything_when_no_helper_runs() {
        let len = 3 * CHUNK + 100;
        let src: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        let mut dst = vec![0u8; len];
        // One thread: no helper, every chunk the caller's.
        assert_eq!(split(1, super::super::cached, &mut dst, &src), 0);
        assert!(dst == src);
        // A job whose cursor is already past the end copies nothing: a late helper's view.
        let job = Job {
            dst: dst.as_mut_ptr() as usize,
            src: src.as_ptr() as usize,
            len,
            chunks: 4,
            kernel: super::super::cached,
            next: AtomicUsize::new(4),
            done: AtomicUsize::new(4),
        };
        assert_eq!(job.work(), 0);
    }
}
