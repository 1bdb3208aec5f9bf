//! Whether helper threads make this process's large copies faster, learned from the copies
//! themselves.
//!
//! A core that looks idle does not make a helper pay. On a 2-core VM copies of 32 MiB in a loop
//! ran no faster on two threads than on one, and in a lock-step ping-pong the idle core is the
//! partner's, asleep until the frame is published: waking it for a helper made the hop slower
//! (docs/benchmarks.md). On a server where one core cannot draw the memory's bandwidth alone,
//! helpers pay. No rule of thumb covers both, so each process
//! times its own copies under two policies, per kernel: one thread (copy alone, look at
//! nothing) and share (look for idle cores, share the copy if any is idle). It keeps the cost
//! per byte of each policy's recent copies, the look included, measures each [`WARMUP`] times
//! (copying alone meanwhile, except one copy in [`TRY_SHARE_EVERY`] that follows the share
//! policy), then follows the share policy only while it has measured at least [`MARGIN`]
//! cheaper, and keeps checking the other policy on one copy in [`EXPLORE_EVERY`] so that a
//! change of load moves the choice. A helper is never a
//! correctness matter: either way the same bytes are copied.

/// Copies made each way before the measured choice is trusted.
pub const WARMUP: u32 = 4;
/// Until sharing has [`WARMUP`] costs, one eligible copy in this many tries it; the others go
/// alone. A process that makes few large copies (a short pipeline stage) pays for at most one
/// shared try in this many, not for half its copies.
pub const TRY_SHARE_EVERY: u32 = 8;
/// One eligible copy in this many tries the way not chosen, to keep its figure current.
pub const EXPLORE_EVERY: u32 = 32;
/// Sharing is chosen only when it takes at most this fraction of the time per byte of copying
/// alone: noise on a busy machine must not make a coin toss of the choice.
pub const MARGIN: f64 = 0.9;
/// Recent copies a figure is the median of (one slow copy, a page fault or a preemption, does
/// not move it).
const WINDOW: usize = 8;

/// The recent costs of copies made one way, nanoseconds per byte.
#[derive(Clone, Copy, Debug)]
struct Recent {
    costs: [f64; WINDOW],
    count: u32,
}

impl Recent {
    const fn new() -> Self {
        Recent { costs: [0.0; WINDOW], count: 0 }
    }

    fn add(&mut self, cost: f64) {
        self.costs[self.count as usize % WINDOW] = cost;
        self.count = self.count.saturating_add(1);
    }

    /// Median of the last [`WINDOW`] costs (None before the first).
    fn median(&self) -> Option<f64> {
        let n = (self.count as usize).min(WINDOW);
        if n == 0 {
            return None;
        }
        let mut v = self.costs;
        let v = &mut v[..n];
        v.sort_by(f64::total_cmp);
        Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
    }
}

/// What one kernel's copies taught: their costs alone and shared, and how many eligible copies
/// have asked.
#[derive(Clone, Copy, Debug)]
pub struct Learner {
    alone: Recent,
    shared: Recent,
    asked: u32,
}

impl Default for Learner {
    fn default() -> Self {
        Self::new()
    }
}

impl Learner {
    /// Nothing learned yet.
    pub const fn new() -> Self {
        Learner { alone: Recent::new(), shared: Recent::new(), asked: 0 }
    }

    /// Whether the next large copy follows the sharing policy (find the idle cores, share the
    /// copy if there are any) rather than the one-thread policy (copy alone, ask nothing):
    /// during the warm-up every [`TRY_SHARE_EVERY`]th copy shares, until sharing has [`WARMUP`]
    /// costs (one-thread copies get theirs meanwhile); then the faster by [`MARGIN`], except on
    /// every [`EXPLORE_EVERY`]th copy, which goes the other way.
    pub fn share_next(&mut self) -> bool {
        self.asked = self.asked.wrapping_add(1);
        if self.alone.count < WARMUP || self.shared.count < WARMUP {
            return self.shared.count < WARMUP && self.asked.is_multiple_of(TRY_SHARE_EVERY);
        }
        let explore = self.asked.is_multiple_of(EXPLORE_EVERY);
        self.sharing_pays() != explore
    }

    /// Whether sharing has measured faster, by the margin (false until both ways are measured).
    pub fn sharing_pays(&self) -> bool {
        match (self.alone.median(), self.shared.median()) {
            (Some(a), Some(s)) if self.alone.count >= WARMUP && self.shared.count >= WARMUP => s <= a * MARGIN,
            _ => false,
        }
    }

    /// Records a copy of `bytes` that took `nanos` under the sharing policy (`shared`: the look
    /// for idle cores included, and the copy alone where none was idle) or the one-thread one.
    /// Policies are compared, not outcomes: on a busy machine the look itself costs (a system
    /// call is where the scheduler hands the core to a busy neighbour), and that counts against
    /// sharing.
    pub fn record(&mut self, shared: bool, bytes: usize, nanos: u128) {
        if bytes == 0 {
            return;
        }
        let cost = nanos as f64 / bytes as f64;
        if shared {
            self.shared.add(cost)
        } else {
            self.alone.add(cost)
        }
    }

    /// The figures in words, for `explain`.
    pub fn describe(&self) -> String {
        let gbs = |r: &Recent| {
            r.median()
                .map_or_else(|| "not measured".to_owned(), |c| format!("{:.1} GB/s over {} copies", 1.0 / c, r.count.min(WINDOW as u32)))
        };
        format!(
            "alone {}, with helpers {}: {}",
            gbs(&self.alone),
            gbs(&self.shared),
            if self.alone.count < WARMUP || self.shared.count < WARMUP {
                "still measuring"
            } else if self.sharing_pays() {
                "helpers used"
            } else {
                "one thread"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `copies` eligible copies against a machine where a copy alone costs `alone` ns per
    /// byte and a shared one `shared`; returns how many were shared.
    fn run(l: &mut Learner, copies: u32, alone: f64, shared: f64) -> u32 {
        let mut n = 0;
        for _ in 0..copies {
            let share = l.share_next();
            n += share as u32;
            l.record(share, 1 << 20, ((if share { shared } else { alone }) * (1 << 20) as f64) as u128);
        }
        n
    }

    /// Eligible copies the warm-up takes when every copy could share.
    const WARM: u32 = WARMUP * TRY_SHARE_EVERY;

    #[test]
    fn the_warm_up_copies_alone_and_tries_sharing_on_one_copy_in_eight() {
        let mut l = Learner::new();
        let ways: Vec<bool> = (0..WARM)
            .map(|_| {
                let share = l.share_next();
                l.record(share, 100, 100);
                share
            })
            .collect();
        let shared: Vec<usize> = ways.iter().enumerate().filter(|(_, s)| **s).map(|(i, _)| i + 1).collect();
        assert_eq!(shared, [8, 16, 24, 32]);
        assert!(!l.sharing_pays(), "equal costs: one thread");
    }

    #[test]
    fn helpers_that_do_not_pay_are_used_only_to_check_again() {
        let mut l = Learner::new();
        run(&mut l, WARM, 0.05, 0.05);
        // Sharing is no faster: after the warm-up only one copy in EXPLORE_EVERY shares (the
        // others do not even ask which cores are idle).
        let shared = run(&mut l, 10 * EXPLORE_EVERY, 0.05, 0.06);
        assert_eq!(shared, 10);
        assert!(l.describe().ends_with("one thread"), "{}", l.describe());
    }

    #[test]
    fn helpers_that_pay_are_used_and_a_small_gain_is_not_enough() {
        let mut l = Learner::new();
        run(&mut l, WARM, 0.05, 0.03);
        let shared = run(&mut l, 10 * EXPLORE_EVERY, 0.05, 0.03);
        assert_eq!(shared, 10 * EXPLORE_EVERY - 10);
        assert!(l.describe().ends_with("helpers used"));
        // 5% faster is within the margin: one thread.
        let mut l = Learner::new();
        run(&mut l, WARM + 10 * EXPLORE_EVERY, 0.05, 0.0475);
        assert!(!l.sharing_pays());
    }

    #[test]
    fn a_change_of_load_moves_the_choice() {
        let mut l = Learner::new();
        run(&mut l, WARM + EXPLORE_EVERY, 0.05, 0.03);
        assert!(l.sharing_pays());
        // The other core gets busy: shared copies now cost more. The checks on the way not
        // chosen are not needed here (the chosen way's own copies show it).
        run(&mut l, WINDOW as u32, 0.05, 0.2);
        assert!(!l.sharing_pays());
        // It frees up again: the one-in-EXPLORE_EVERY checks bring sharing back.
        run(&mut l, (WINDOW as u32 + 1) * EXPLORE_EVERY, 0.05, 0.03);
        assert!(l.sharing_pays());
    }

    #[test]
    fn one_slow_copy_does_not_move_the_figure() {
        let mut l = Learner::new();
        run(&mut l, WARM + EXPLORE_EVERY, 0.05, 0.03);
        l.record(true, 1 << 20, 50 << 20); // a preempted copy, 1000x slower
        assert!(l.sharing_pays());
        l.record(false, 0, 1); // an empty copy teaches nothing
        assert!(l.sharing_pays());
    }
}
