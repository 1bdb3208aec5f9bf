//! Deadlines of blocking calls, cut into slices of at most 100 ms so that waits re-check peers'
//! liveness and the caller's interrupt check (Ctrl-C in Python) regularly.

use std::time::{Duration, Instant};

/// Longest single sleep of any wait.
pub const WAIT_SLICE: Duration = Duration::from_millis(100);

/// When a blocking call gives up; `None` waits forever.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Option<Instant>,
    timeout: Option<Duration>,
    /// A first attempt made before the real wait (its timeout is not reported to anyone).
    probe: bool,
}

impl Deadline {
    /// A deadline `timeout` from now (None: never).
    pub fn after(timeout: Option<Duration>) -> Deadline {
        Deadline { at: timeout.map(|t| Instant::now().checked_add(t).unwrap_or_else(far_future)), timeout, probe: false }
    }

    /// Already expired: a blocking call makes one attempt and does not wait.
    pub fn immediate() -> Deadline {
        Deadline { at: Some(Instant::now()), timeout: Some(Duration::ZERO), probe: false }
    }

    /// As `immediate`, for an attempt made before waiting with the real deadline: a call that
    /// times out under it may leave out the costly details of its message.
    pub fn probe() -> Deadline {
        Deadline { probe: true, ..Deadline::immediate() }
    }

    /// Whether this is a [`Deadline::probe`].
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// No deadline.
    pub fn never() -> Deadline {
        Deadline { at: None, timeout: None, probe: false }
    }

    /// The next sleep: at most WAIT_SLICE, or None once the deadline has passed.
    pub fn slice(&self) -> Option<Duration> {
        match self.at {
            None => Some(WAIT_SLICE),
            Some(at) => {
                let now = Instant::now();
                (now < at).then(|| (at - now).min(WAIT_SLICE))
            }
        }
    }

    /// The timeout in seconds, for messages.
    pub fn seconds(&self) -> f64 {
        self.timeout.map_or(f64::INFINITY, |t| t.as_secs_f64())
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 86_400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_bounded_and_expire() {
        assert_eq!(Deadline::never().slice(), Some(WAIT_SLICE));
        let d = Deadline::after(Some(Duration::from_millis(20)));
        assert!(d.slice().unwrap() <= Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(d.slice(), None);
        assert_eq!(Deadline::after(Some(Duration::ZERO)).slice(), None);
        assert!(Deadline::after(Some(Duration::MAX)).slice().is_some());
    }
}
