//! The ordered queue of one descriptor: a bounded FIFO of jobs, each moving through
//! Queued -> Writing -> (Draining) -> Done. Only the writer thread moves a job forward; only the
//! caller's thread removes Done jobs (`reap`), so a job's keeper is released where the caller
//! wants it (the Python bindings: with the GIL held). Pure data structure, no I/O, no locking.

use std::collections::VecDeque;

use super::Payload;

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Waiting for the writer thread.
    Queued,
    /// The writer thread is writing it now (its memory is being read).
    Writing,
    /// Fully handed to the pipe with vmsplice; the pipe still references its pages until the
    /// reader has consumed the descriptor's byte stream up to `end`.
    Draining { end: u64 },
    /// Written (or dropped after an error): its keeper may be released.
    Done,
}

pub(crate) struct Job<K> {
    pub keeper: K,
    pub addr: usize,
    pub len: usize,
    pub state: State,
}

/// Jobs of one descriptor in FIFO order. Jobs finish in order, so Done jobs normally form a
/// prefix and `reap` takes them from the front; a Done job behind one still Draining (after a
/// failure, or when vmsplice was turned off mid-stream) waits for it.
pub(crate) struct Queue<K> {
    jobs: VecDeque<Job<K>>,
    limit: usize,
}

impl<K: Payload> Queue<K> {
    /// A queue that holds at most `limit` unfinished jobs (allocated once, here).
    pub fn new(limit: usize) -> Self {
        Queue { jobs: VecDeque::with_capacity(limit.max(1)), limit: limit.max(1) }
    }

    fn unfinished(&self) -> impl Iterator<Item = &Job<K>> {
        self.jobs.iter().filter(|j| j.state != State::Done)
    }

    /// Unfinished jobs.
    pub fn pending(&self) -> usize {
        self.unfinished().count()
    }

    /// Bytes of the unfinished jobs.
    pub fn pending_bytes(&self) -> u64 {
        self.unfinished().map(|j| j.len as u64).sum()
    }

    /// Whether an unfinished job covers some of `addr..addr+len`.
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        len > 0 && self.unfinished().any(|j| j.len > 0 && addr < j.addr + j.len && j.addr < addr + len)
    }

    /// Whether a job over `addr..addr+len` must wait: the queue is full, or an unfinished job
    /// covers some of the same memory.
    pub fn must_wait(&self, addr: usize, len: usize) -> bool {
        let mut pending = 0;
        for j in self.unfinished() {
            pending += 1;
            if len > 0 && j.len > 0 && addr < j.addr + j.len && j.addr < addr + len {
                return true;
            }
        }
        pending >= self.limit
    }

    /// Appends a job. Callers check `must_wait` first and `reap` before, so the deque never
    /// grows past the capacity allocated in `new` (no allocation in steady state).
    pub fn push(&mut self, keeper: K) {
        let (addr, len) = (keeper.addr() as usize, keeper.len());
        self.jobs.push_back(Job { keeper, addr, len, state: State::Queued });
    }

    /// Removes the oldest job if it is Done and returns its keeper.
    pub fn pop_done(&mut self) -> Option<K> {
        if self.has_done() {
            self.jobs.pop_front().map(|j| j.keeper)
        } else {
            None
        }
    }

    /// Hands every Done job's keeper at the front, oldest first, to `release`.
    #[cfg(test)]
    pub fn reap(&mut self, mut release: impl FnMut(K)) {
        while let Some(k) = self.pop_done() {
            release(k);
        }
    }

    /// Whether Done jobs wait for `reap`.
    pub fn has_done(&self) -> bool {
        self.jobs.front().is_some_and(|j| j.state == State::Done)
    }

    /// Marks the oldest Queued job Writing and returns its memory.
    pub fn start_next(&mut self) -> Option<(usize, usize)> {
        let job = self.jobs.iter_mut().find(|j| j.state == State::Queued)?;
        job.state = State::Writing;
        Some((job.addr, job.len))
    }

    /// Finishes the Writing job: Done, or Draining until the stream passes `end` when its
    /// pages were spliced into the pipe.
    pub fn finish_writing(&mut self, spliced_end: Option<u64>) {
        if let Some(job) = self.jobs.iter_mut().find(|j| j.state == State::Writing) {
            job.state = match spliced_end {
                Some(end) => State::Draining { end },
                None => State::Done,
            };
        }
    }

    /// Marks Done every Draining job whose bytes the reader has consumed (`consumed` bytes of
    /// the descriptor's stream are out of the pipe). Returns how many finished.
    pub fn drained(&mut self, consumed: u64) -> usize {
        let mut n = 0;
        for job in self.jobs.iter_mut() {
            if let State::Draining { end } = job.state {
                if end <= consumed {
                    job.state = State::Done;
                    n += 1;
                }
            }
        }
        n
    }

    /// Whether jobs wait for the reader to drain the pipe.
    pub fn has_draining(&self) -> bool {
        self.jobs.iter().any(|j| matches!(j.state, State::Draining { .. }))
    }

    /// Drops every job not yet (fully) written after a failure; returns how many. Draining jobs
    /// stay Draining unless `release_spliced` (the pipe has no reader left, so its pages will
    /// never be read).
    pub fn fail(&mut self, release_spliced: bool) -> usize {
        let mut n = 0;
        for job in self.jobs.iter_mut() {
            let drop_it = match job.state {
                State::Queued | State::Writing => true,
                State::Draining { .. } => release_spliced,
                State::Done => false,
            };
            if drop_it {
                job.state = State::Done;
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(limit: usize) -> Queue<Vec<u8>> {
        Queue::new(limit)
    }

    #[test]
    fn fifo_order_and_reap_of_done_prefix() {
        let mut q = q(4);
        let a = vec![1u8; 8];
        let b = vec![2u8; 8];
        let (aa, ba) = (a.as_ptr() as usize, b.as_ptr() as usize);
        q.push(a);
        q.push(b);
        assert_eq!(q.pending(), 2);
        assert_eq!(q.pending_bytes(), 16);
        assert_eq!(q.start_next(), Some((aa, 8)));
        assert_eq!(q.start_next(), Some((ba, 8)), "the next Queued job");
        q.finish_writing(None);
        let mut got = Vec::new();
        q.reap(|k| got.push(k[0]));
        assert_eq!(got, vec![1]);
        q.finish_writing(Some(16));
        assert!(q.has_draining());
        assert_eq!(q.drained(15), 0);
        assert_eq!(q.drained(16), 1);
        q.reap(|k| got.push(k[0]));
        assert_eq!(got, vec![1, 2]);
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn full_queue_and_overlapping_memory_must_wait() {
        let mut q = q(2);
        let a = vec![0u8; 100];
        let addr = a.as_ptr() as usize;
        q.push(a);
        assert!(q.must_wait(addr + 50, 10), "overlaps a queued job");
        assert!(!q.must_wait(addr + 100, 10), "adjacent memory does not overlap");
        assert!(!q.must_wait(addr, 0), "an empty job overlaps nothing");
        assert!(q.overlaps(addr + 99, 5) && !q.overlaps(addr + 100, 5));
        q.push(vec![0u8; 1]);
        assert!(q.must_wait(1, 1), "queue full");
        q.start_next();
        q.finish_writing(None);
        assert!(!q.must_wait(addr, 100), "a finished job no longer blocks");
    }

    #[test]
    fn failure_drops_unwritten_jobs_and_keeps_spliced_ones_unless_told() {
        let mut q = q(4);
        for _ in 0..3 {
            q.push(vec![0u8; 4]);
        }
        q.start_next();
        q.finish_writing(Some(4));
        q.start_next();
        assert_eq!(q.fail(false), 2);
        assert_eq!(q.pending(), 1, "the spliced job still waits for the reader");
        assert!(!q.has_done(), "reap starts at the front, where the draining job is");
        assert_eq!(q.fail(true), 1);
        let mut n = 0;
        q.reap(|_| n += 1);
        assert_eq!(n, 3);
    }
}
