//! Futex wait/wake on a 32-bit word in shared memory (Linux), used for every blocking wait.
//!
//! Waits are always bounded: callers pass a timeout so that they can re-check liveness of peers
//! and let the Python layer look at signals (Ctrl-C) at least every 100 ms.

use std::time::Duration;

use super::atomic::AtomicU32;

/// Blocks while `*word == expected`, for at most `timeout`. Returns early on a wake, a signal,
/// a spurious wake-up or when the word already differs; callers re-check their condition.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    #[cfg(not(loom))]
    {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `word` points to a live, 4-byte aligned u32 (an AtomicU32 has the layout of a
        // u32) for the duration of the call; FUTEX_WAIT (without PRIVATE, so it works across
        // processes sharing the mapping) only reads it, and `ts` outlives the call. Errors (EAGAIN
        // when the value already differs, EINTR, ETIMEDOUT) all mean "return and re-check".
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }
    #[cfg(loom)]
    {
        let _ = (word, expected, timeout);
        loom::thread::yield_now();
    }
}

/// Wakes every process waiting on `word`.
pub fn wake_all(word: &AtomicU32) {
    #[cfg(not(loom))]
    // SAFETY: `word` is a live aligned u32; FUTEX_WAKE does not access memory through it beyond
    // identifying the futex, and an error (none expected) only means nobody was woken.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
    #[cfg(loom)]
    let _ = word;
}
