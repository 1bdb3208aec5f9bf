//! Preparing the pages of a large ring. A fresh mapping costs one page fault per 4 KiB page the
//! first time each process touches it (the writer faults on every page of a slot it writes for
//! the first time, a reader on every 16th: fault-around): a 2160p RGB slot is about 6,000
//! faults, which made the first pass over each slot 5-10x slower than the next on the 2-core
//! EPYC VM (`write` 16 ms cold, 1.5 ms warm). So mappings of [`PAGES_MIN`] bytes or more are
//! populated when they are mapped (`MADV_POPULATE_WRITE`, Linux 5.14+; skipped where the kernel
//! lacks it), and, where the kernel allows transparent huge pages for shared memory only on
//! request (`shmem_enabled` = `advise`), asked for huge pages first (`MADV_HUGEPAGE`), which
//! divides the faults and TLB misses by 512.

/// Mappings at least this large are prepared.
pub const PAGES_MIN: usize = 8 << 20;
/// The kernel's policy for transparent huge pages in shared memory.
pub const SHMEM_THP: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// What is done to mappings of at least `min_bytes`.
#[derive(Clone, Debug)]
pub struct PagePlan {
    /// The kernel's shmem THP policy (the bracketed word of [`SHMEM_THP`]), or "unknown".
    pub shmem_thp: String,
    /// Whether `MADV_HUGEPAGE` is asked for.
    pub advise_huge: bool,
    /// Whether large rings get huge pages at all (asked for, or the kernel gives them anyway).
    pub huge: bool,
    /// Whether mappings are populated when mapped.
    pub prefault: bool,
    /// See [`PAGES_MIN`].
    pub min_bytes: usize,
}

impl PagePlan {
    /// Decides from the kernel's policy; `huge_ok`/`prefault_ok` are false when the environment
    /// switched them off.
    pub fn decide(huge_ok: bool, prefault_ok: bool) -> PagePlan {
        let policy = std::fs::read_to_string(SHMEM_THP).ok().and_then(|s| bracketed(&s)).unwrap_or_else(|| "unknown".to_owned());
        let advise_huge = huge_ok && policy == "advise";
        let huge = huge_ok && matches!(policy.as_str(), "advise" | "always" | "within_size" | "force");
        PagePlan { shmem_thp: policy, advise_huge, huge, prefault: prefault_ok && cfg!(target_os = "linux"), min_bytes: PAGES_MIN }
    }

    /// One line for `explain`.
    pub fn explain(&self) -> String {
        format!(
            "rings of {} MiB or more: huge pages {} (shmem_enabled: {}), {}",
            self.min_bytes >> 20,
            if self.huge { "yes" } else { "no" },
            self.shmem_thp,
            if self.prefault { "prefaulted when mapped" } else { "faulted on first touch (prefault off)" }
        )
    }

    /// Prepares `len` bytes at `ptr` that were just mapped again in place (a kept loan's slot
    /// given back to the writer), whatever their size: the writer writes them next.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be a range of a writable mapping owned by the caller that nothing
    /// else uses while this runs.
    pub unsafe fn restore(&self, ptr: *mut u8, len: usize) {
        #[cfg(target_os = "linux")]
        {
            if self.advise_huge && len >= self.min_bytes {
                // SAFETY: as in prepare; the advice changes only how the range is backed.
                unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
            }
            if self.prefault {
                // SAFETY: as in prepare; populating changes no byte.
                unsafe { libc::madvise(ptr.cast(), len, libc::MADV_POPULATE_WRITE) };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (ptr, len);
    }

    /// Prepares a fresh mapping of `len` bytes at `ptr` (does nothing below `min_bytes`). Advice
    /// the kernel refuses is skipped: it only ever costs speed, never correctness.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be one whole mapping owned by the caller, not yet shared with other
    /// threads of this process.
    pub unsafe fn prepare(&self, ptr: *mut u8, len: usize, writable: bool) {
        if len < self.min_bytes {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            if self.advise_huge {
                // SAFETY: the range is the caller's whole mapping (contract above); MADV_HUGEPAGE
                // changes only how the kernel backs it, never its contents.
                unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
            }
            if self.prefault {
                let advice = if writable { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
                // SAFETY: as above; populating maps the object's existing pages (allocated by
                // fallocate at creation) without changing a byte.
                unsafe { libc::madvise(ptr.cast(), len, advice) };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (ptr, writable);
    }
}

fn bracketed(s: &str) -> Option<String> {
    let start = s.find('[')? + 1;
    let end = start + s[start..].find(']')?;
    Some(s[start..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_selected_policy() {
        assert_eq!(bracketed("always within_size advise [never] deny force\n").as_deref(), Some("never"));
        assert_eq!(bracketed("no brackets"), None);
        let p = PagePlan::decide(false, false);
        assert!(!p.huge && !p.advise_huge && !p.prefault);
    }
}
