//! How long a waiter spins before it sleeps on a futex, learned per handle.
//!
//! Spinning wins when the other side answers within microseconds and has a core of its own (a
//! ping-pong on an idle machine: no system call on either side). It loses when processes
//! outnumber cores: the spinner burns the time slice its peer needs, and the kernel stops
//! treating it as a sleeper that deserves a quick wake-up. A fixed spin is therefore wrong on
//! one machine or the other. The budget here doubles whenever the awaited event came within the
//! longest spin we allow (spinning would have caught it, or did), and halves whenever it did
//! not, so a handle spins while spinning pays and sleeps at once when it does not. A small floor
//! keeps probing cheap.
//!
//! A budget at the floor cannot learn on its own that spinning pays again: a wait that sleeps
//! includes the futex wake-up (tens of microseconds on a VM), so it looks late even when the
//! event came a few microseconds after the call. So a handle at the floor spins the full budget
//! on every `PROBE_EVERY`-th wait, and one wait that spinning caught (or would have) restores the
//! full budget at once. Without the probe a ping-pong that once fell to the floor stayed there:
//! rounds of the same 128x128 ping-pong ran at either about 15k or about 40k round trips/s.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The longest a waiter ever spins.
pub const MAX_SPIN: Duration = Duration::from_micros(40);
/// The shortest budget: a few hundred loop turns, cheap next to one futex round trip.
pub const MIN_SPIN: Duration = Duration::from_micros(2);

/// At the floor, one wait in this many spins the full budget (a probe).
pub const PROBE_EVERY: u32 = 8;

/// A per-handle spin budget in nanoseconds (relaxed atomics: a hint, not a protocol).
#[derive(Debug)]
pub struct AdaptiveSpin {
    budget_ns: AtomicU32,
    /// Waits started while at the floor (for the probes).
    floor_waits: AtomicU32,
}

impl Default for AdaptiveSpin {
    fn default() -> Self {
        AdaptiveSpin { budget_ns: AtomicU32::new(MAX_SPIN.as_nanos() as u32), floor_waits: AtomicU32::new(0) }
    }
}

impl AdaptiveSpin {
    /// How long the next wait should spin.
    pub fn budget(&self) -> Duration {
        let b = self.budget_ns.load(Ordering::Relaxed);
        if b <= MIN_SPIN.as_nanos() as u32 && self.floor_waits.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE_EVERY) {
            return MAX_SPIN;
        }
        Duration::from_nanos(u64::from(b))
    }

    /// Records how long a wait took until the event came (`waited`), whether or not it slept:
    /// within MAX_SPIN restores the full budget, later halves it.
    pub fn record(&self, waited: Duration) {
        let b = self.budget_ns.load(Ordering::Relaxed);
        let next = if waited <= MAX_SPIN { MAX_SPIN.as_nanos() as u32 } else { b / 2 };
        let next = next.clamp(MIN_SPIN.as_nanos() as u32, MAX_SPIN.as_nanos() as u32);
        self.budget_ns.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_the_maximum() {
        assert_eq!(AdaptiveSpin::default().budget(), MAX_SPIN);
    }

    #[test]
    fn shrinks_to_the_floor_when_events_come_late() {
        let s = AdaptiveSpin::default();
        for _ in 0..32 {
            s.record(Duration::from_millis(5));
        }
        let floor = (0..PROBE_EVERY).filter(|_| s.budget() == MIN_SPIN).count();
        assert_eq!(floor as u32, PROBE_EVERY - 1, "all but the probe spin the minimum");
    }

    #[test]
    fn one_event_that_spinning_catches_restores_the_full_budget() {
        let s = AdaptiveSpin::default();
        for _ in 0..32 {
            s.record(Duration::from_millis(5));
        }
        s.record(Duration::from_micros(10));
        assert_eq!(s.budget(), MAX_SPIN);
    }

    #[test]
    fn at_the_floor_every_eighth_wait_probes_with_the_full_budget() {
        let s = AdaptiveSpin::default();
        for _ in 0..32 {
            s.record(Duration::from_millis(5));
        }
        let budgets: Vec<Duration> = (0..2 * PROBE_EVERY).map(|_| s.budget()).collect();
        assert_eq!(budgets.iter().filter(|&&b| b == MAX_SPIN).count(), 2);
        assert!(budgets.iter().all(|&b| b == MAX_SPIN || b == MIN_SPIN));
    }

    #[test]
    fn one_late_event_halves_the_budget() {
        let s = AdaptiveSpin::default();
        s.record(Duration::from_millis(1));
        assert_eq!(s.budget(), MAX_SPIN / 2);
    }
}
