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

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The longest a waiter ever spins.
pub const MAX_SPIN: Duration = Duration::from_micros(40);
/// The shortest budget: a few hundred loop turns, cheap next to one futex round trip.
pub const MIN_SPIN: Duration = Duration::from_micros(2);

/// A per-handle spin budget in nanoseconds (relaxed atomics: a hint, not a protocol).
#[derive(Debug)]
pub struct AdaptiveSpin {
    budget_ns: AtomicU32,
}

impl Default for AdaptiveSpin {
    fn default() -> Self {
        AdaptiveSpin { budget_ns: AtomicU32::new(MAX_SPIN.as_nanos() as u32) }
    }
}

impl AdaptiveSpin {
    /// How long the next wait should spin.
    pub fn budget(&self) -> Duration {
        Duration::from_nanos(u64::from(self.budget_ns.load(Ordering::Relaxed)))
    }

    /// Records how long a wait took until the event came (`waited`), whether or not it slept.
    pub fn record(&self, waited: Duration) {
        let b = self.budget_ns.load(Ordering::Relaxed);
        let next = if waited <= MAX_SPIN { b.saturating_mul(2) } else { b / 2 };
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
        assert_eq!(s.budget(), MIN_SPIN);
    }

    #[test]
    fn grows_back_when_events_come_soon() {
        let s = AdaptiveSpin::default();
        for _ in 0..32 {
            s.record(Duration::from_millis(5));
        }
        for _ in 0..5 {
            s.record(Duration::from_micros(10));
        }
        assert_eq!(s.budget(), MAX_SPIN);
    }

    #[test]
    fn one_late_event_halves_the_budget() {
        let s = AdaptiveSpin::default();
        s.record(Duration::from_millis(1));
        assert_eq!(s.budget(), MAX_SPIN / 2);
    }
}
