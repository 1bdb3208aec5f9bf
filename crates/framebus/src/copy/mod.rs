//! How frames are copied on this machine: the kernel (cached memcpy or non-temporal stores), how
//! many threads share a copy of many megabytes, and how the pages of a large ring are prepared
//! (huge pages, prefaulting). The choice is made once per process from what the machine is (CPU
//! architecture and features, cores, the kernel's transparent-huge-page policy for shared
//! memory) and from environment variables read once, and it is visible: [`plan`] returns it and
//! [`Plan::explain`] says it in words (`framebus bench --explain`, `framebus.tuning`).
//!
//! Environment (read once, at the first copy):
//! - `FRAMEBUS_COPY=auto|cached|stream`: the writer's kernel for large frames (`auto`: see
//!   [`choose_write`]: streaming stores from [`STREAM_MIN`] bytes on x86-64, except for a frame
//!   a reader is waiting for that fits in the last-level cache; memcpy elsewhere). Readers copy
//!   with cached stores unless this says `stream`.
//! - `FRAMEBUS_COPY_THREADS=auto|N`: threads sharing one copy of at least [`THREAD_MIN`] bytes
//!   (`auto`: only cores idle the moment the copy starts, at most [`MAX_THREADS`], and only
//!   while this process's own copies have measured faster with helpers than without ([`learn`]);
//!   helpers take chunks from a shared cursor, so one that is not scheduled in time costs
//!   nothing).
//! - `FRAMEBUS_HUGEPAGES=auto|off` and `FRAMEBUS_PREFAULT=auto|off`: see [`pages`].

mod kernels;
pub mod learn;
pub mod pages;
mod threads;

pub use threads::{idle_cores, idle_from_stat};

use std::sync::{Mutex, OnceLock};

pub use kernels::{cached, stream};

/// Frames at least this large are streamed by the writer on x86-64 (`auto`). On the 2-core EPYC
/// VM a 6.2 MB (1080p RGB) copy into a /dev/shm mapping runs at about 21 GB/s streamed against
/// about 12 GB/s through memcpy; below a few MiB the frame is likely still in a cache when the
/// reader gets to it, so memcpy wins.
pub const STREAM_MIN: usize = 4 << 20;
/// Copies at least this large may be shared between threads.
pub const THREAD_MIN: usize = 16 << 20;
/// Most threads one copy uses (`auto`; an explicit `FRAMEBUS_COPY_THREADS` may ask for more).
pub const MAX_THREADS: usize = 4;
/// Last-level cache assumed where sysfs does not say (a small one: frames above half of it are
/// streamed).
pub const DEFAULT_LLC: usize = 8 << 20;
/// Where the sizes of this CPU's caches are listed (`index*/level`, `type`, `size`).
pub const CACHE_DIR: &str = "/sys/devices/system/cpu/cpu0/cache";

/// Which stores a copy uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// memcpy: the destination ends up in the copying core's caches.
    Cached,
    /// Non-temporal stores: the destination goes to memory, the caches keep their contents.
    Stream,
}

impl Kernel {
    /// Lower-case name, as the environment variable spells it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Cached => "cached",
            Kernel::Stream => "stream",
        }
    }
}

/// How many threads share a large copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// Decided per copy from the cores idle at that moment (never more than are idle).
    Auto,
    /// Exactly this many (1: the calling thread alone).
    Fixed(usize),
}

/// The decisions of this process, made once.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `std::env::consts::ARCH`.
    pub arch: &'static str,
    /// CPU features detected at run time that bear on the choice.
    pub features: Vec<&'static str>,
    /// Logical CPUs this process may run on.
    pub cpus: usize,
    /// Writer (`write()`) kernel for frames of at least `stream_min` bytes when no reader is
    /// waiting for the frame (see [`choose_write`]).
    pub write_large: Kernel,
    /// Whether the writer's kernel is chosen per frame ([`choose_write`]): false when
    /// `FRAMEBUS_COPY` fixed it, or where there is no streaming kernel.
    pub write_auto: bool,
    /// Size of the last-level cache in bytes (from sysfs), None where unknown.
    pub llc: Option<usize>,
    /// Frames below this size are always copied with memcpy.
    pub stream_min: usize,
    /// Reader (`read`, `read_new(out=)`, `read_into`) kernel, at every size.
    pub read: Kernel,
    /// Threads for copies of at least `thread_min` bytes.
    pub threads: Threads,
    /// See [`THREAD_MIN`].
    pub thread_min: usize,
    /// Page preparation of large rings.
    pub pages: pages::PagePlan,
    /// Where each decision came from, and any environment value that was ignored (and why).
    pub notes: Vec<String>,
}

static PLAN: OnceLock<Plan> = OnceLock::new();

/// This process's plan (decided at the first call).
pub fn plan() -> &'static Plan {
    PLAN.get_or_init(|| Plan::decide(&|k| std::env::var(k).ok()))
}

impl Plan {
    /// Decides from the machine and `env` (a lookup, so tests can pass their own).
    pub fn decide(env: &dyn Fn(&str) -> Option<String>) -> Plan {
        let mut notes = Vec::new();
        let mut setting = |key: &str, allowed: &[&str]| -> Option<String> {
            let v = env(key)?.trim().to_ascii_lowercase();
            if v.is_empty() || v == "auto" {
                return None;
            }
            if allowed.contains(&v.as_str()) || (allowed.is_empty() && v.parse::<usize>().is_ok_and(|n| n >= 1)) {
                notes.push(format!("{key}={v} (from the environment)"));
                Some(v)
            } else {
                let want =
                    if allowed.is_empty() { "auto or a whole number >= 1".to_owned() } else { format!("auto, {}", allowed.join(", ")) };
                notes.push(format!("{key}={v:?} ignored: expected {want}"));
                None
            }
        };
        let copy = setting("FRAMEBUS_COPY", &["cached", "stream"]);
        let threads = setting("FRAMEBUS_COPY_THREADS", &[]);
        let huge = setting("FRAMEBUS_HUGEPAGES", &["off"]);
        let prefault = setting("FRAMEBUS_PREFAULT", &["off"]);
        let write_auto = copy.is_none() && kernels::HAS_STREAM;
        let (write_large, read) = match copy.as_deref() {
            Some("cached") => (Kernel::Cached, Kernel::Cached),
            Some("stream") if kernels::HAS_STREAM => (Kernel::Stream, Kernel::Stream),
            Some("stream") => {
                notes.push(format!("no streaming-store kernel on {}: cached copies", std::env::consts::ARCH));
                (Kernel::Cached, Kernel::Cached)
            }
            _ if kernels::HAS_STREAM => (Kernel::Stream, Kernel::Cached),
            _ => (Kernel::Cached, Kernel::Cached),
        };
        let threads = match threads.and_then(|t| t.parse::<usize>().ok()) {
            Some(n) => Threads::Fixed(n),
            None => Threads::Auto,
        };
        Plan {
            arch: std::env::consts::ARCH,
            features: kernels::cpu_features(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            write_large,
            write_auto,
            llc: llc_from_sysfs(),
            stream_min: STREAM_MIN,
            read,
            threads,
            thread_min: THREAD_MIN,
            pages: pages::PagePlan::decide(huge.is_none(), prefault.is_none()),
            notes,
        }
    }

    /// The writer's kernel for a frame of `len` bytes; `readers_waiting` is how many readers
    /// are blocked waiting for the next frame (None where the caller does not know; see
    /// [`choose_write`]).
    pub fn write_kernel(&self, len: usize, readers_waiting: Option<u32>) -> Kernel {
        if len < self.stream_min {
            Kernel::Cached
        } else if self.write_auto {
            choose_write(len, self.llc.unwrap_or(DEFAULT_LLC), readers_waiting)
        } else {
            self.write_large
        }
    }

    /// Threads for a copy of `len` bytes, given the cores idle now (`idle` is only asked for
    /// copies large enough to share).
    pub fn threads_for(&self, len: usize, idle: &dyn Fn() -> usize) -> usize {
        if len < self.thread_min {
            return 1;
        }
        // At least 4 MiB per thread: below that the start-up costs more than it saves.
        let by_size = (len / (4 << 20)).max(1);
        match self.threads {
            Threads::Fixed(n) => n.min(by_size),
            Threads::Auto => (1 + idle()).min(MAX_THREADS).min(by_size),
        }
    }

    /// The plan in words, one decision a line.
    pub fn explain(&self) -> String {
        let mib = |b: usize| format!("{} MiB", b >> 20);
        let threads = match self.threads {
            Threads::Auto => format!(
                "auto: copies of {} or more may use the calling thread plus idle cores (at most {MAX_THREADS} threads; {} CPUs here), where this process has measured that helpers make its copies at least {:.0}% faster (1 copy in {} checks again)",
                mib(self.thread_min),
                self.cpus,
                (1.0 - learn::MARGIN) * 100.0,
                learn::EXPLORE_EVERY
            ),
            Threads::Fixed(n) => format!("{n} for copies of {} or more", mib(self.thread_min)),
        };
        let mut lines = vec![
            format!(
                "machine: {} ({}), {} CPUs",
                self.arch,
                if self.features.is_empty() { "no features detected".to_owned() } else { self.features.join(" ") },
                self.cpus
            ),
            if self.write_auto {
                format!(
                    "write(): memcpy below {}, streaming stores from {} on, except memcpy for a frame a reader is waiting for that fits twice in the last-level cache ({})",
                    mib(self.stream_min),
                    mib(self.stream_min),
                    self.llc.map_or_else(|| format!("unknown, {} assumed", mib(DEFAULT_LLC)), mib)
                )
            } else {
                format!("write(): memcpy below {}, {} from {} on", mib(self.stream_min), self.write_large.name(), mib(self.stream_min))
            },
            format!("read()/read_new(out=)/read_into(): {} (the destination is used soon after)", self.read.name()),
            format!("threads per copy: {threads}"),
            self.pages.explain(),
        ];
        lines.extend(self.notes.iter().map(|n| format!("note: {n}")));
        lines.join("\n")
    }
}

/// The writer's kernel for a large frame (`auto`, x86-64) given the last-level cache size and
/// how many readers are blocked waiting for it (the header's `waiters`; None: unknown).
///
/// Streaming stores send the frame to memory and skip the read-for-ownership of each line: the
/// fastest way to fill a slot nobody reads at once (a back-to-back writer ahead of its readers).
/// But a reader already waiting reads the frame right away, and memcpy leaves it in the shared
/// last-level cache for that read, as long as the frame and the reader's copy of it both fit:
/// `2 * len <= llc`. The rest of the ring does not matter (measured on the 2-core EPYC VM, 32
/// MiB L3: a 1080p lock-step ping-pong was faster with memcpy on a 4-slot ring, 25 MB of slots,
/// as on a 2-slot one). So: memcpy when a reader waits and the frame fits twice, else stream.
pub fn choose_write(len: usize, llc: usize, readers_waiting: Option<u32>) -> Kernel {
    match readers_waiting {
        Some(w) if w > 0 && len.saturating_mul(2) <= llc => Kernel::Cached,
        _ => Kernel::Stream,
    }
}

/// Bytes in a sysfs cache size such as `32768K`, `1M` or `512`.
pub fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let mult = match unit {
        "" => 1,
        "K" | "k" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The last-level cache: the size of the highest-level data or unified cache among `(level,
/// type, size)` entries as sysfs lists them.
pub fn llc_from(entries: &[(String, String, String)]) -> Option<usize> {
    entries
        .iter()
        .filter(|(_, kind, _)| matches!(kind.trim(), "Unified" | "Data"))
        .filter_map(|(level, _, size)| Some((level.trim().parse::<u32>().ok()?, parse_cache_size(size)?)))
        .max()
        .map(|(_, size)| size)
}

fn llc_from_sysfs() -> Option<usize> {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    let entries: Vec<_> = std::fs::read_dir(CACHE_DIR)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let d = e.path();
            Some((read(d.join("level"))?, read(d.join("type"))?, read(d.join("size"))?))
        })
        .collect();
    llc_from(&entries)
}

/// Copies a frame into a slot (the writer's side) when the caller does not know whether a
/// reader is waiting: the plan's kernel for its size, shared between threads when it is large
/// and cores are idle.
pub fn copy_frame(dst: &mut [u8], src: &[u8]) {
    let p = plan();
    run(p.write_kernel(src.len(), None), p, dst, src);
}

/// Large writes after one that found a reader asleep during which a reader counts as waiting
/// even when none is asleep yet (see [`waiting_hint`]).
pub const WAITING_MEMORY: u8 = 8;

/// Whether to treat a large frame as waited for, and the new memory, from this thread's memory
/// of recent large writes and the readers asleep now. A reader that takes every frame at once
/// is asleep for most writes but not all: in a lock-step ping-pong it is sometimes still on its
/// way into the wait (a quarter of 1080p writes on the 2-core VM), and those frames should not
/// be streamed past the cache either. A writer ahead of its readers finds nobody asleep, and
/// after [`WAITING_MEMORY`] such writes streams again.
pub fn waiting_hint(memory: u8, readers_waiting: u32) -> (u32, u8) {
    if readers_waiting > 0 {
        (readers_waiting, WAITING_MEMORY)
    } else if memory > 0 {
        (1, memory - 1)
    } else {
        (0, 0)
    }
}

thread_local! {
    static WAITING: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// [`copy_frame`] for a writer that knows how many readers are blocked waiting for this frame
/// (the header's `waiters`): a frame a waiting reader reads at once stays in the cache where it
/// fits ([`choose_write`], [`waiting_hint`]).
pub fn copy_frame_to(dst: &mut [u8], src: &[u8], readers_waiting: u32) {
    let p = plan();
    let waiting = if src.len() >= p.stream_min {
        WAITING.with(|m| {
            let (w, next) = waiting_hint(m.get(), readers_waiting);
            m.set(next);
            w
        })
    } else {
        readers_waiting
    };
    run(p.write_kernel(src.len(), Some(waiting)), p, dst, src);
}

/// Copies a frame out of a slot into the caller's buffer (the reader's side).
pub fn copy_out(dst: &mut [u8], src: &[u8]) {
    let p = plan();
    run(p.read, p, dst, src);
}

fn run(kernel: Kernel, p: &Plan, dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy: lengths differ");
    let f: fn(&mut [u8], &[u8]) = match kernel {
        Kernel::Cached => cached,
        Kernel::Stream => stream,
    };
    if src.len() < p.thread_min {
        return f(dst, src);
    }
    if p.threads != Threads::Auto {
        let n = p.threads_for(src.len(), &|| 0);
        if n <= 1 {
            f(dst, src);
        } else {
            threads::split(n, f, dst, src);
        }
        return;
    }
    // Auto: share the copy only where this process measured that sharing pays, and ask which
    // cores are idle (a system call) only under the sharing policy.
    let share = with_learner(kernel, |l| l.share_next()).unwrap_or(false);
    let start = std::time::Instant::now();
    let n = if share { p.threads_for(src.len(), &threads::idle_cores) } else { 1 };
    if n <= 1 {
        f(dst, src);
    } else {
        threads::split(n, f, dst, src);
    }
    let nanos = start.elapsed().as_nanos();
    with_learner(kernel, |l| l.record(share, src.len(), nanos));
}

/// What this process's copies taught about helper threads, per kernel ([`learn`]).
static LEARNED: Mutex<[learn::Learner; 2]> = Mutex::new([learn::Learner::new(), learn::Learner::new()]);

/// Runs `f` on `kernel`'s figures, or returns None without waiting when another thread has them
/// (a copy then goes alone and teaches nothing). Never blocking also keeps a child forked while
/// another thread of its parent held the lock from waiting forever on a lock nobody will release.
fn with_learner<T>(kernel: Kernel, f: impl FnOnce(&mut learn::Learner) -> T) -> Option<T> {
    let mut all = match LEARNED.try_lock() {
        Ok(all) => all,
        // A poisoned lock only means a panic elsewhere while holding it; the figures stay usable.
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    Some(f(&mut all[kernel as usize]))
}

/// What this process has measured about helper threads so far, one line per kernel (`auto`
/// threads only; see [`learn`]).
pub fn helpers_learned() -> String {
    // A copy holds the lock for a few instructions: retry a while, but never wait forever (a
    // child forked while its parent's copy held it).
    let mut all = None;
    for _ in 0..1000 {
        match LEARNED.try_lock() {
            Ok(g) => all = Some(*g),
            Err(std::sync::TryLockError::Poisoned(e)) => all = Some(*e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::yield_now();
                continue;
            }
        }
        break;
    }
    let Some(all) = all else {
        return "helper threads: figures not available (held by a thread that is gone)".to_owned();
    };
    [Kernel::Cached, Kernel::Stream]
        .iter()
        .map(|k| format!("{} copies: {}", k.name(), all[*k as usize].describe()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn auto_streams_large_writes_on_x86_only_and_reads_cached() {
        let p = Plan::decide(&env(&[]));
        assert_eq!(p.write_kernel(STREAM_MIN - 1, None), Kernel::Cached);
        let large = if cfg!(target_arch = "x86_64") { Kernel::Stream } else { Kernel::Cached };
        assert_eq!(p.write_kernel(STREAM_MIN, None), large);
        assert_eq!(p.write_kernel(STREAM_MIN, Some(0)), large);
        assert_eq!(p.read, Kernel::Cached);
        assert!(p.notes.is_empty());
    }

    #[test]
    fn environment_overrides_and_bad_values_are_noted() {
        let p = Plan::decide(&env(&[("FRAMEBUS_COPY", "cached"), ("FRAMEBUS_COPY_THREADS", "3")]));
        assert_eq!(p.write_kernel(64 << 20, None), Kernel::Cached);
        assert!(!p.write_auto);
        let forced = Plan::decide(&env(&[("FRAMEBUS_COPY", "stream")]));
        // Forced streaming holds even for a frame a reader waits for.
        assert_eq!(forced.write_kernel(STREAM_MIN, Some(1)), forced.write_large);
        assert_eq!(p.threads, Threads::Fixed(3));
        assert_eq!(p.threads_for(64 << 20, &|| 0), 3);
        assert_eq!(p.threads_for(8 << 20, &|| 0), 1);
        let p = Plan::decide(&env(&[("FRAMEBUS_COPY", "fast"), ("FRAMEBUS_COPY_THREADS", "0")]));
        assert_eq!(p.threads, Threads::Auto);
        assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
        assert!(p.notes[0].contains("ignored") && p.explain().contains("ignored"));
    }

    #[test]
    fn auto_threads_never_exceed_idle_cores() {
        let p = Plan::decide(&env(&[]));
        assert_eq!(p.threads_for(32 << 20, &|| 0), 1);
        assert_eq!(p.threads_for(32 << 20, &|| 1), 2);
        assert_eq!(p.threads_for(256 << 20, &|| 64), MAX_THREADS);
        assert_eq!(p.threads_for(THREAD_MIN - 1, &|| 8), 1);
    }

    #[test]
    fn a_frame_a_reader_waits_for_stays_cached_while_it_fits() {
        let llc = 32 << 20;
        let p1080 = 1920 * 1080 * 3;
        let p2160 = 3840 * 2160 * 3;
        // A reader waiting: the 1080p frame and its copy fit in 32 MiB, the 2160p frame does not.
        assert_eq!(choose_write(p1080, llc, Some(1)), Kernel::Cached);
        assert_eq!(choose_write(p1080, llc, Some(3)), Kernel::Cached);
        assert_eq!(choose_write(p2160, llc, Some(1)), Kernel::Stream);
        // Nobody waiting (a writer ahead of its readers), or unknown: stream.
        assert_eq!(choose_write(p1080, llc, Some(0)), Kernel::Stream);
        assert_eq!(choose_write(p1080, llc, None), Kernel::Stream);
        // A small cache: even a waited-for 1080p frame is streamed; a huge one keeps 2160p.
        assert_eq!(choose_write(p1080, 8 << 20, Some(1)), Kernel::Stream);
        assert_eq!(choose_write(p2160, 256 << 20, Some(1)), Kernel::Cached);
        assert_eq!(choose_write(usize::MAX, llc, Some(1)), Kernel::Stream);
        let mut p = Plan::decide(&env(&[]));
        p.llc = Some(llc);
        if p.write_auto {
            assert_eq!(p.write_kernel(p1080, Some(1)), Kernel::Cached);
            assert_eq!(p.write_kernel(p1080, Some(0)), Kernel::Stream);
            assert_eq!(p.write_kernel(STREAM_MIN - 1, Some(0)), Kernel::Cached);
            p.llc = None; // DEFAULT_LLC: 8 MiB
            assert_eq!(p.write_kernel(p1080, Some(1)), Kernel::Stream);
            assert!(p.explain().contains("reader is waiting"));
        }
    }

    #[test]
    fn a_reader_seen_waiting_counts_for_the_next_few_writes() {
        // Asleep now: waiting, memory refilled.
        assert_eq!(waiting_hint(0, 2), (2, WAITING_MEMORY));
        // Not asleep this time, but it was a write ago: still waiting.
        assert_eq!(waiting_hint(WAITING_MEMORY, 0), (1, WAITING_MEMORY - 1));
        // A writer ahead of its readers: after WAITING_MEMORY writes nobody counts.
        let mut m = WAITING_MEMORY;
        for _ in 0..WAITING_MEMORY {
            let (w, next) = waiting_hint(m, 0);
            assert_eq!(w, 1);
            m = next;
        }
        assert_eq!(waiting_hint(m, 0), (0, 0));
    }

    #[test]
    fn the_last_level_cache_is_read_from_sysfs_entries() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("lots"), None);
        assert_eq!(parse_cache_size("12X"), None);
        let e = |l: &str, t: &str, s: &str| (l.to_owned(), t.to_owned(), s.to_owned());
        let epyc = [e("1", "Data", "48K"), e("1", "Instruction", "32K"), e("2", "Unified", "1024K"), e("3", "Unified", "32768K")];
        assert_eq!(llc_from(&epyc), Some(32 << 20));
        // No L3 (many ARM parts): the L2.
        assert_eq!(llc_from(&epyc[..3]), Some(1 << 20));
        // An instruction cache is never the answer; nothing readable: unknown.
        assert_eq!(llc_from(&[e("4", "Instruction", "64M")]), None);
        assert_eq!(llc_from(&[e("x", "Unified", "1M"), e("2", "Unified", "?")]), None);
    }

    #[test]
    fn a_copy_never_waits_for_the_figures() {
        // As in a child forked while a thread of its parent held them: the copy goes alone.
        let held = LEARNED.lock().unwrap();
        let p = Plan::decide(&env(&[]));
        let src: Vec<u8> = (0..THREAD_MIN + 3).map(|i| (i % 249) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        run(Kernel::Cached, &p, &mut dst, &src);
        assert!(dst == src);
        drop(held);
        assert!(helpers_learned().starts_with("cached copies: "));
    }

    #[test]
    fn shared_copies_are_exact() {
        let len = (17 << 20) + 12345;
        let src: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        for kernel in [cached as fn(&mut [u8], &[u8]), stream] {
            for n in [2, 3, 4] {
                let mut dst = vec![0u8; len];
                threads::split(n, kernel, &mut dst, &src);
                assert!(dst == src, "{n} threads");
            }
        }
    }
}
