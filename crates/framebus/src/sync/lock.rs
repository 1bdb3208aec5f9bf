//! The cross-process write lock: a word holding `(tid << 32) | pid` of its owner, re-entrant for
//! the owning thread, with futex waits and takeover of a lock whose owner died.

use super::atomic::{AtomicU32, AtomicU64, Ordering};
use super::futex;
use crate::process::{current_ids, ProcessId};

use super::deadline::Deadline;

/// The lock's words inside the segment header.
pub struct LockWords<'a> {
    pub owner: &'a AtomicU64,
    pub owner_start: &'a AtomicU64,
    pub depth: &'a AtomicU32,
    pub futex: &'a AtomicU32,
    pub waiters: &'a AtomicU32,
    pub recoveries: &'a AtomicU32,
}

/// How the lock was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// It was free.
    Fresh,
    /// The calling thread already held it; the depth went up.
    Reentrant,
    /// Its holder (this pid) had died; the lock was taken over.
    Recovered { dead_pid: u32 },
}

/// Why a lock operation did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockError {
    /// The deadline passed.
    Timeout,
    /// The caller's interrupt check asked to stop.
    Interrupted,
    /// release() by a thread that does not hold the lock.
    NotOwner,
}

/// Identity of the calling thread as stored in the owner word.
pub fn my_token() -> u64 {
    let (pid, tid) = current_ids();
    (u64::from(tid) << 32) | u64::from(pid)
}

fn token_pid(token: u64) -> u32 {
    token as u32
}

fn token_tid(token: u64) -> u32 {
    (token >> 32) as u32
}

impl LockWords<'_> {
    /// Whether the calling thread holds the lock.
    pub fn held_by_me(&self) -> bool {
        self.owner.load(Ordering::Acquire) == my_token()
    }

    /// Current holder's pid, if any.
    pub fn holder_pid(&self) -> Option<u32> {
        match self.owner.load(Ordering::Acquire) {
            0 => None,
            t => Some(token_pid(t)),
        }
    }

    /// Whether the lock is held by a thread or process that is gone (the next `acquire` takes
    /// it over).
    pub fn holder_gone(&self) -> bool {
        match self.owner.load(Ordering::Acquire) {
            0 => false,
            t => !self.holder_alive(t),
        }
    }

    /// One attempt: take the lock if free, held by us, or held by a dead thread or process.
    pub fn try_acquire(&self) -> Option<Acquired> {
        let me = my_token();
        let current = self.owner.load(Ordering::Acquire);
        if current == me {
            self.depth.fetch_add(1, Ordering::Relaxed);
            return Some(Acquired::Reentrant);
        }
        if current == 0 {
            if self.owner.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.owner_start.store(ProcessId::current().start, Ordering::Release);
                self.depth.store(1, Ordering::Relaxed);
                return Some(Acquired::Fresh);
            }
            return None;
        }
        if !self.holder_alive(current) && self.owner.compare_exchange(current, me, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.owner_start.store(ProcessId::current().start, Ordering::Release);
            self.depth.store(1, Ordering::Relaxed);
            self.recoveries.fetch_add(1, Ordering::Relaxed);
            return Some(Acquired::Recovered { dead_pid: token_pid(current) });
        }
        None
    }

    fn holder_alive(&self, token: u64) -> bool {
        let pid = token_pid(token);
        let me = ProcessId::current();
        if pid == me.pid {
            // Another thread of this process: alive while its task exists.
            return std::path::Path::new(&format!("/proc/self/task/{}", token_tid(token))).exists();
        }
        let start = self.owner_start.load(Ordering::Acquire);
        ProcessId { pid, start }.is_alive()
    }

    /// Takes the lock, waiting until `deadline` (None: forever). `check` runs at least every
    /// 100 ms while waiting and stops the wait when it returns false.
    pub fn acquire(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<Acquired, LockError> {
        loop {
            let seen = self.futex.load(Ordering::Acquire);
            if let Some(how) = self.try_acquire() {
                return Ok(how);
            }
            let Some(slice) = deadline.slice() else { return Err(LockError::Timeout) };
            self.waiters.fetch_add(1, Ordering::SeqCst);
            if self.owner.load(Ordering::SeqCst) != 0 {
                futex::wait(self.futex, seen, slice);
            }
            self.waiters.fetch_sub(1, Ordering::SeqCst);
            if !check() {
                return Err(LockError::Interrupted);
            }
        }
    }

    /// Wakes the threads waiting for the lock without freeing it, so that each looks around
    /// once (a writer waiting for a slot asks them to give up kept frames) and waits again.
    pub fn nudge_waiters(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.futex.fetch_add(1, Ordering::SeqCst);
            futex::wake_all(self.futex);
        }
    }

    /// Drops one level of the calling thread's hold; frees the lock at depth zero.
    pub fn release(&self) -> Result<(), LockError> {
        self.release_token(my_token())
    }

    /// Drops one level of the hold of `token` (a thread identity from `my_token`), for holds
    /// that may end on another thread than the one that took them (a loan collected by the
    /// garbage collector).
    pub fn release_token(&self, token: u64) -> Result<(), LockError> {
        if self.owner.load(Ordering::Acquire) != token {
            return Err(LockError::NotOwner);
        }
        if self.depth.load(Ordering::Relaxed) > 1 {
            self.depth.fetch_sub(1, Ordering::Relaxed);
            return Ok(());
        }
        self.depth.store(0, Ordering::Relaxed);
        self.owner_start.store(0, Ordering::Relaxed);
        self.owner.store(0, Ordering::SeqCst);
        self.futex.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            futex::wake_all(self.futex);
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Words {
        owner: AtomicU64,
        start: AtomicU64,
        depth: AtomicU32,
        futex: AtomicU32,
        waiters: AtomicU32,
        recoveries: AtomicU32,
    }

    impl Words {
        fn new() -> Words {
            Words {
                owner: AtomicU64::new(0),
                start: AtomicU64::new(0),
                depth: AtomicU32::new(0),
                futex: AtomicU32::new(0),
                waiters: AtomicU32::new(0),
                recoveries: AtomicU32::new(0),
            }
        }
        fn lock(&self) -> LockWords<'_> {
            LockWords {
                owner: &self.owner,
                owner_start: &self.start,
                depth: &self.depth,
                futex: &self.futex,
                waiters: &self.waiters,
                recoveries: &self.recoveries,
            }
        }
    }

    #[test]
    fn reentrant_and_released() {
        let w = Words::new();
        let l = w.lock();
        assert_eq!(l.try_acquire(), Some(Acquired::Fresh));
        assert_eq!(l.try_acquire(), Some(Acquired::Reentrant));
        l.release().unwrap();
        assert!(l.held_by_me());
        l.release().unwrap();
        assert!(!l.held_by_me());
        assert_eq!(l.release(), Err(LockError::NotOwner));
    }

    #[test]
    fn other_thread_times_out_then_gets_it() {
        let w = std::sync::Arc::new(Words::new());
        assert_eq!(w.lock().try_acquire(), Some(Acquired::Fresh));
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            let l = w2.lock();
            let r = l.acquire(Deadline::after(Some(Duration::from_millis(50))), &mut || true);
            assert_eq!(r, Err(LockError::Timeout));
            let r = l.acquire(Deadline::never(), &mut || true);
            assert_eq!(r, Ok(Acquired::Fresh));
            l.release().unwrap();
        });
        std::thread::sleep(Duration::from_millis(150));
        w.lock().release().unwrap();
        t.join().unwrap();
    }

    #[test]
    fn dead_holder_is_recovered() {
        let w = Words::new();
        // A pid that cannot exist (above pid_max) stands in for a dead process.
        w.owner.store((7u64 << 32) | 0x7fff_fff0, Ordering::SeqCst);
        w.start.store(12345, Ordering::SeqCst);
        let l = w.lock();
        assert_eq!(l.try_acquire(), Some(Acquired::Recovered { dead_pid: 0x7fff_fff0 }));
        assert_eq!(w.recoveries.load(Ordering::SeqCst), 1);
        l.release().unwrap();
    }
}
