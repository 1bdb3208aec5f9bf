//! How frames are copied on this machine: the kernel (cached memcpy or non-temporal stores), how
//! many threads share a copy of many megabytes, and how the pages of a large ring are prepared
//! (huge pages, prefaulting). The choice is made once per process from what the machine is (CPU
//! architecture and features, cores, the kernel's transparent-huge-page policy for shared
//! memory) and from environment variables read once, and it is visible: [`plan`] returns it and
//! [`Plan::explain`] says it in words (`framebus bench --explain`, `framebus.tuning`).
//!
//! Environment (read once, at the first copy):
//! - `FRAMEBUS_COPY=auto|cached|stream`: the writer's kernel for large frames (`auto`: streaming
//!   stores from [`STREAM_MIN`] bytes on x86-64, memcpy elsewhere). Readers copy with cached
//!   stores unless this says `stream`.
//! - `FRAMEBUS_COPY_THREADS=auto|N`: threads sharing one copy of at least [`THREAD_MIN`] bytes
//!   (`auto`: only cores that are idle when the copy starts, at most [`MAX_THREADS`]).
//! - `FRAMEBUS_HUGEPAGES=auto|off` and `FRAMEBUS_PREFAULT=auto|off`: see [`pages`].

mod kernels;
pub mod pages;
mod threads;

pub use threads::idle_cores;

use std::sync::OnceLock;

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
    /// Writer (`write()`) kernel for frames of at least `stream_min` bytes.
    pub write_large: Kernel,
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
                let want = if allowed.is_empty() { "auto or a whole number >= 1".to_owned() } else { format!("auto, {}", allowed.join(", ")) };
                notes.push(format!("{key}={v:?} ignored: expected {want}"));
                None
            }
        };
        let copy = setting("FRAMEBUS_COPY", &["cached", "stream"]);
        let threads = setting("FRAMEBUS_COPY_THREADS", &[]);
        let huge = setting("FRAMEBUS_HUGEPAGES", &["off"]);
        let prefault = setting("FRAMEBUS_PREFAULT", &["off"]);
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
            stream_min: STREAM_MIN,
            read,
            threads,
            thread_min: THREAD_MIN,
            pages: pages::PagePlan::decide(huge.is_none(), prefault.is_none()),
            notes,
        }
    }

    /// The writer's kernel for a frame of `len` bytes.
    pub fn write_kernel(&self, len: usize) -> Kernel {
        if len >= self.stream_min { self.write_large } else { Kernel::Cached }
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
            Threads::Auto => format!("auto: copies of {} or more use the calling thread plus idle cores (at most {MAX_THREADS} threads; {} CPUs here)", mib(self.thread_min), self.cpus),
            Threads::Fixed(n) => format!("{n} for copies of {} or more", mib(self.thread_min)),
        };
        let mut lines = vec![
            format!("machine: {} ({}), {} CPUs", self.arch, if self.features.is_empty() { "no features detected".to_owned() } else { self.features.join(" ") }, self.cpus),
            format!("write(): memcpy below {}, {} from {} on", mib(self.stream_min), self.write_large.name(), mib(self.stream_min)),
            format!("read()/read_new(out=)/read_into(): {} (the destination is used soon after)", self.read.name()),
            format!("threads per copy: {threads}"),
            self.pages.explain(),
        ];
        lines.extend(self.notes.iter().map(|n| format!("note: {n}")));
        lines.join("\n")
    }
}

/// Copies a frame into a slot (the writer's side): the plan's kernel for its size, shared
/// between threads when it is large and cores are idle.
pub fn copy_frame(dst: &mut [u8], src: &[u8]) {
    let p = plan();
    run(p.write_kernel(src.len()), p, dst, src);
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
    let n = p.threads_for(src.len(), &threads::idle_cores);
    if n <= 1 {
        f(dst, src);
    } else {
        threads::split(n, f, dst, src);
    }
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
        assert_eq!(p.write_kernel(STREAM_MIN - 1), Kernel::Cached);
        let large = if cfg!(target_arch = "x86_64") { Kernel::Stream } else { Kernel::Cached };
        assert_eq!(p.write_kernel(STREAM_MIN), large);
        assert_eq!(p.read, Kernel::Cached);
        assert!(p.notes.is_empty());
    }

    #[test]
    fn environment_overrides_and_bad_values_are_noted() {
        let p = Plan::decide(&env(&[("FRAMEBUS_COPY", "cached"), ("FRAMEBUS_COPY_THREADS", "3")]));
        assert_eq!(p.write_kernel(64 << 20), Kernel::Cached);
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
