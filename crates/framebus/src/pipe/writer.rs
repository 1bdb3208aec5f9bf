//! The background writer of one descriptor: a thread that takes jobs from the descriptor's
//! queue in order and writes them, and the calls that queue jobs, wait for room and wait for
//! the queue to drain. Waits are cut into slices so callers can check for signals; keepers are
//! only ever released on the caller's thread (`reap`), never on the writer thread.

use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::{hint_for, PipeError};
use super::output::{Drain, Output};
use super::queue::Queue;
use super::{Options, Payload, Stats};
use crate::sync::deadline::{Deadline, WAIT_SLICE};

/// Shortest and longest pause between two looks at a pipe that must drain.
const DRAIN_POLL_MIN: Duration = Duration::from_micros(50);
const DRAIN_POLL_MAX: Duration = Duration::from_millis(5);

/// Keepers handed back per lock taken by `reap`.
const REAP_BATCH: usize = 8;

/// Why a job was not queued; the keeper comes back so the caller releases it.
pub enum PushError<K> {
    /// The queue is full or still holds a job over the same memory: wait (`wait_room`) and
    /// try again.
    Busy(K),
    /// The descriptor failed earlier (or its writer stopped); the error is reported once.
    Failed(PipeError, K),
}

struct Inner<K> {
    queue: Queue<K>,
    error: Option<PipeError>,
    stop: bool,
    alive: bool,
    stats: Stats,
}

struct Shared<K> {
    fd: RawFd,
    inner: Mutex<Inner<K>>,
    /// Writer -> callers: a job finished, an error was stored, the thread ended.
    changed: Condvar,
    /// Callers -> writer: a job was queued, or stop.
    work: Condvar,
}

impl<K> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The writer of one descriptor. Dropping it lets its thread finish the queued jobs and exit;
/// it never blocks.
pub struct Writer<K: Payload> {
    shared: Arc<Shared<K>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pid: u32,
}

impl<K: Payload> Writer<K> {
    /// Starts the writer of `fd`: inspects it (BadDescriptor if it is not open for writing),
    /// enlarges its pipe and starts the thread.
    pub fn spawn(fd: RawFd, options: &Options) -> Result<Writer<K>, PipeError> {
        options.validate()?;
        let out = Output::new(fd, options).map_err(|source| PipeError::BadDescriptor { fd, source })?;
        let stats = Stats { pipe_size: out.pipe_size, vmsplice: out.splice, fifo: out.is_fifo(), ..Stats::default() };
        let shared = Arc::new(Shared {
            fd,
            inner: Mutex::new(Inner { queue: Queue::new(options.queue), error: None, stop: false, alive: true, stats }),
            changed: Condvar::new(),
            work: Condvar::new(),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("framebus-pipe-{fd}"))
            .spawn(move || run(for_thread, out))
            .map_err(|source| PipeError::Spawn { fd, source })?;
        Ok(Writer { shared, thread: Mutex::new(Some(thread)), pid: std::process::id() })
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.shared.fd
    }

    /// Whether the kernel may hold pages of `addr..addr + len` for this descriptor: a job over
    /// that memory is unfinished on a descriptor written with vmsplice (its pipe refers to the
    /// pages themselves until the reader has read them, or will once the job starts).
    pub fn may_hold_pages(&self, addr: *const u8, len: usize) -> bool {
        let inner = self.shared.lock();
        inner.stats.vmsplice && inner.queue.overlaps(addr as usize, len)
    }

    /// The process that started this writer (after fork(), a child must not use its parent's).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Queues `keeper` without waiting. Done jobs are reaped first (their keepers go to
    /// `release`, on this thread, without any lock held).
    pub fn try_push(&self, keeper: K, release: impl FnMut(K)) -> Result<(), PushError<K>> {
        self.reap(release);
        let mut inner = self.shared.lock();
        if let Some(e) = inner.error.take() {
            return Err(PushError::Failed(e, keeper));
        }
        if !inner.alive {
            return Err(PushError::Failed(self.died(&inner), keeper));
        }
        if inner.queue.must_wait(keeper.addr() as usize, keeper.len()) {
            return Err(PushError::Busy(keeper));
        }
        inner.queue.push(keeper);
        drop(inner);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Waits until a job over `addr..addr+len` could be queued (or the descriptor failed, which
    /// the next `try_push` reports). Timeout: PipeError::Timeout; `check` returning false:
    /// PipeError::Interrupted.
    pub fn wait_room(&self, addr: *const u8, len: usize, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<(), PipeError> {
        let addr = addr as usize;
        self.wait(deadline, check, "room in the queue", |i| i.error.is_some() || !i.alive || !i.queue.must_wait(addr, len)).map(drop)
    }

    /// Waits until no unfinished job of this descriptor covers any of `addr..addr+len` (the
    /// memory may be modified then), or the descriptor failed (its jobs were dropped).
    pub fn wait_memory(&self, addr: *const u8, len: usize, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<(), PipeError> {
        let addr = addr as usize;
        self.wait(deadline, check, "writes of that memory", |i| i.error.is_some() || !i.alive || !i.queue.overlaps(addr, len)).map(drop)
    }

    /// Queues `keeper`, waiting for room as long as `deadline` allows. Convenience for Rust
    /// callers that need not drop locks between the attempts.
    pub fn push(
        &self,
        mut keeper: K,
        deadline: Deadline,
        check: &mut dyn FnMut() -> bool,
        mut release: impl FnMut(K),
    ) -> Result<(), PushError<K>> {
        loop {
            match self.try_push(keeper, &mut release) {
                Err(PushError::Busy(k)) => {
                    if let Err(e) = self.wait_room(k.addr(), k.len(), deadline, check) {
                        return Err(PushError::Failed(e, k));
                    }
                    keeper = k;
                }
                r => return r,
            }
        }
    }

    /// Hands the keepers of finished jobs to `release`, oldest first, on this thread and with
    /// no lock held.
    pub fn reap(&self, mut release: impl FnMut(K)) {
        loop {
            let mut batch: [Option<K>; REAP_BATCH] = std::array::from_fn(|_| None);
            let mut n = 0;
            {
                let mut inner = self.shared.lock();
                while n < REAP_BATCH {
                    match inner.queue.pop_done() {
                        Some(k) => batch[n] = Some(k),
                        None => break,
                    }
                    n += 1;
                }
            }
            for k in batch.iter_mut().filter_map(Option::take) {
                release(k);
            }
            if n < REAP_BATCH {
                return;
            }
        }
    }

    /// Waits until every queued job is finished (for vmsplice'd jobs: consumed by the reader).
    /// Reports a stored error once (the queue was dropped).
    pub fn sync(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<(), PipeError> {
        let mut inner = self.wait(deadline, check, "queued writes", |i| i.error.is_some() || !i.alive || i.queue.pending() == 0)?;
        if let Some(e) = inner.error.take() {
            return Err(e);
        }
        if !inner.alive && inner.queue.pending() > 0 {
            return Err(self.died(&inner));
        }
        Ok(())
    }

    /// Takes the stored error, if any, without waiting.
    pub fn take_error(&self) -> Option<PipeError> {
        self.shared.lock().error.take()
    }

    /// Finishes the queued jobs (like `sync`), then stops the thread and joins it. On a
    /// timeout or interruption the writer keeps running; on a write error it is stopped.
    pub fn close(&self, deadline: Deadline, check: &mut dyn FnMut() -> bool) -> Result<(), PipeError> {
        let synced = self.sync(deadline, check);
        if matches!(synced, Err(PipeError::Timeout { .. } | PipeError::Interrupted)) {
            return synced;
        }
        self.stop();
        // The thread exits at once: nothing is pending (or everything was dropped). Join with
        // the same deadline so that a stuck kernel call cannot hang the caller.
        let joined = self.wait(deadline, check, "the writer thread to stop", |i| !i.alive);
        if joined.is_ok() {
            if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = t.join();
            }
        }
        synced.and(joined.map(drop))
    }

    /// Asks the thread to exit once no job is unfinished.
    pub fn stop(&self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
    }

    /// Counters and configuration.
    pub fn stats(&self) -> Stats {
        let inner = self.shared.lock();
        Stats { pending: inner.queue.pending(), pending_bytes: inner.queue.pending_bytes(), ..inner.stats }
    }

    /// Whether the thread is still running.
    pub fn is_alive(&self) -> bool {
        self.shared.lock().alive
    }

    fn died(&self, inner: &Inner<K>) -> PipeError {
        PipeError::Write {
            fd: self.shared.fd,
            op: "the writer thread",
            written: inner.stats.bytes,
            dropped: inner.queue.pending(),
            hint: " (it stopped unexpectedly; this is a framebus bug, please report it)",
            source: std::io::Error::other("writer thread ended"),
        }
    }

    /// Waits until `done(inner)`, in slices; `check` runs at most every WAIT_SLICE.
    fn wait(
        &self,
        deadline: Deadline,
        check: &mut dyn FnMut() -> bool,
        what: &'static str,
        done: impl Fn(&Inner<K>) -> bool,
    ) -> Result<MutexGuard<'_, Inner<K>>, PipeError> {
        let mut inner = self.shared.lock();
        let mut last_check = Instant::now();
        loop {
            if done(&inner) {
                return Ok(inner);
            }
            let Some(slice) = deadline.slice() else {
                return Err(PipeError::Timeout {
                    fd: self.shared.fd,
                    what,
                    seconds: deadline.seconds(),
                    pending: inner.queue.pending(),
                    pending_bytes: inner.queue.pending_bytes(),
                });
            };
            inner = self.shared.changed.wait_timeout(inner, slice).unwrap_or_else(|p| p.into_inner()).0;
            if last_check.elapsed() >= WAIT_SLICE {
                drop(inner);
                if !check() {
                    return Err(PipeError::Interrupted);
                }
                last_check = Instant::now();
                inner = self.shared.lock();
            }
        }
    }
}

impl<K: Payload> Drop for Writer<K> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The writer thread. It never panics across its boundary: a panic is caught, stored as an
/// error and the jobs are dropped (their keepers are released later by a caller).
fn run<K: Payload>(shared: Arc<Shared<K>>, out: Output) {
    let result = catch_unwind(AssertUnwindSafe(|| work(&shared, out)));
    let mut inner = shared.lock();
    if result.is_err() {
        let dropped = inner.queue.fail(true);
        inner.error = Some(PipeError::Write {
            fd: shared.fd,
            op: "the writer thread",
            written: inner.stats.bytes,
            dropped,
            hint: " (it panicked; this is a framebus bug, please report it)",
            source: std::io::Error::other("panic"),
        });
    }
    inner.alive = false;
    drop(inner);
    shared.changed.notify_all();
}

fn work<K: Payload>(shared: &Shared<K>, mut out: Output) {
    super::sys::block_sigpipe();
    let mut poll = DRAIN_POLL_MIN;
    let mut inner = shared.lock();
    loop {
        if inner.queue.has_draining() && settle(&mut inner, &out) {
            shared.changed.notify_all();
            poll = DRAIN_POLL_MIN;
        }
        // Nothing of the stream so far is still in the pipe (the job about to start is the
        // queue's only unfinished kind): the descriptor may name another file by now.
        let settled = !inner.queue.has_draining();
        if let Some((addr, len)) = inner.queue.start_next() {
            if settled {
                out.refresh();
            }
            drop(inner);
            // SAFETY: the job stays Writing (never reaped, so its keeper keeps the memory
            // readable) until finish_writing below; if it was spliced it then stays Draining
            // until `settle` sees the reader past its end, so its pages do not change while the
            // pipe references them.
            let result = unsafe {
                out.write_job(addr, len, |o| {
                    let mut i = shared.lock();
                    if i.queue.has_draining() && settle(&mut i, o) {
                        drop(i);
                        shared.changed.notify_all();
                    }
                })
            };
            inner = shared.lock();
            inner.stats.bytes = out.put;
            inner.stats.spliced = out.spliced;
            inner.stats.vmsplice = out.splice;
            match result {
                Ok(spliced) => {
                    inner.stats.jobs += 1;
                    inner.queue.finish_writing(spliced.then_some(out.put));
                    if spliced {
                        settle(&mut inner, &out);
                    }
                }
                Err((op, source)) => {
                    let errno = source.raw_os_error();
                    // Without a reader nothing in the pipe will be read: spliced pages are free.
                    let dropped = inner.queue.fail(errno == Some(libc::EPIPE));
                    inner.error = Some(PipeError::Write { fd: shared.fd, op, written: out.put, dropped, hint: hint_for(errno), source });
                }
            }
            shared.changed.notify_all();
            continue;
        }
        if inner.stop && inner.queue.pending() == 0 {
            return;
        }
        if inner.queue.has_draining() {
            inner = shared.work.wait_timeout(inner, poll).unwrap_or_else(|p| p.into_inner()).0;
            poll = (poll * 2).min(DRAIN_POLL_MAX);
        } else {
            inner = shared.work.wait(inner).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Finishes the Draining jobs the reader has consumed; true if any finished.
fn settle<K: Payload>(inner: &mut Inner<K>, out: &Output) -> bool {
    match out.drain() {
        Drain::Consumed(c) => inner.queue.drained(c) > 0,
        Drain::ReaderGone => inner.queue.drained(u64::MAX) > 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sys::tests::TestPipe;
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn reader(fd: RawFd) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                // SAFETY: reads into `buf`, valid for its length.
                let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if r <= 0 {
                    return out;
                }
                out.extend_from_slice(&buf[..r as usize]);
            }
        })
    }

    fn patterned(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    fn roundtrip(options: Options) {
        let mut p = TestPipe::new();
        let r = reader(p.0);
        let w: Writer<Vec<u8>> = Writer::spawn(p.1, &options).unwrap();
        let mut expect = Vec::new();
        let mut released = 0usize;
        for k in 0..12u8 {
            let job = patterned(100_000 + 333_333 * (k as usize % 4), k);
            expect.extend_from_slice(&job);
            w.push(job, Deadline::never(), &mut || true, |_| released += 1).map_err(|_| "push").unwrap();
        }
        w.sync(Deadline::never(), &mut || true).unwrap();
        w.reap(|_| released += 1);
        assert_eq!(released, 12, "every keeper comes back once");
        assert_eq!(w.stats().bytes, expect.len() as u64);
        w.close(Deadline::never(), &mut || true).unwrap();
        assert!(!w.is_alive());
        p.close_write();
        let got = r.join().unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "bytes arrive in order and unchanged");
        p.close_read();
    }

    #[test]
    fn ordered_roundtrip_with_vmsplice() {
        roundtrip(Options { vmsplice: true, queue: 3, ..Options::default() });
    }

    #[test]
    fn ordered_roundtrip_with_write() {
        roundtrip(Options { vmsplice: false, queue: 1, ..Options::default() });
    }

    #[test]
    fn broken_pipe_is_reported_once_and_queue_dropped() {
        let mut p = TestPipe::new();
        p.close_read();
        let w: Writer<Vec<u8>> = Writer::spawn(p.1, &Options::default()).unwrap();
        let released = AtomicUsize::new(0);
        let _ = w.push(vec![1u8; 1 << 20], Deadline::never(), &mut || true, |_| {
            released.fetch_add(1, Ordering::Relaxed);
        });
        let e = w.sync(Deadline::never(), &mut || true).unwrap_err();
        assert!(e.is_broken_pipe(), "{e}");
        assert!(e.to_string().contains(&format!("file descriptor {}", p.1)));
        w.sync(Deadline::never(), &mut || true).unwrap();
        w.reap(|_| {
            released.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(released.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn sync_times_out_while_the_reader_stalls_then_finishes() {
        let mut p = TestPipe::new();
        let w: Writer<Vec<u8>> = Writer::spawn(p.1, &Options { pipe_size: Some(0), ..Options::default() }).unwrap();
        // Bigger than any pipe: the writer blocks until the reader reads.
        let size = 4 * super::super::sys::pipe_size(p.1).unwrap();
        let mut keep = Vec::new();
        w.push(vec![7u8; size], Deadline::never(), &mut || true, |k| keep.push(k)).map_err(|_| "push").unwrap();
        let e = w.sync(Deadline::after(Some(Duration::from_millis(30))), &mut || true).unwrap_err();
        assert!(matches!(e, PipeError::Timeout { pending: 1, .. }), "{e}");
        let mut interrupted = 0;
        let e = w.sync(Deadline::after(Some(Duration::from_millis(250))), &mut || {
            interrupted += 1;
            false
        });
        assert!(matches!(e, Err(PipeError::Interrupted) | Err(PipeError::Timeout { .. })));
        let r = reader(p.0);
        w.sync(Deadline::never(), &mut || true).unwrap();
        drop(w);
        p.close_write();
        assert_eq!(r.join().unwrap().len(), size);
        p.close_read();
    }

    #[test]
    fn same_memory_waits_for_its_earlier_write() {
        let mut p = TestPipe::new();
        let w: Writer<Arc<[u8]>> = Writer::spawn(p.1, &Options { pipe_size: Some(0), ..Options::default() }).unwrap();
        let big: Arc<[u8]> = vec![3u8; 1 << 20].into();
        w.try_push(Arc::clone(&big), drop).map_err(|_| "push").unwrap();
        match w.try_push(Arc::clone(&big), drop) {
            Err(PushError::Busy(_)) => {}
            _ => panic!("queueing memory that is still queued must wait"),
        }
        let e = w.wait_room(big.as_ptr(), big.len(), Deadline::after(Some(Duration::from_millis(20))), &mut || true);
        assert!(matches!(e, Err(PipeError::Timeout { .. })));
        let e = w.wait_memory(big[10..].as_ptr(), 5, Deadline::after(Some(Duration::from_millis(20))), &mut || true);
        assert!(matches!(e, Err(PipeError::Timeout { .. })));
        let other = [0u8; 8];
        w.wait_memory(other.as_ptr(), other.len(), Deadline::immediate(), &mut || true).unwrap();
        let r = reader(p.0);
        w.wait_room(big.as_ptr(), big.len(), Deadline::never(), &mut || true).unwrap();
        w.try_push(Arc::clone(&big), drop).map_err(|_| "push").unwrap();
        w.close(Deadline::never(), &mut || true).unwrap();
        // The reader thread is still in read() on the read end: end of file first, then join it,
        // and only then close the read end (closing it under the thread is a race, and the
        // descriptor number could be reused by another test meanwhile).
        p.close_write();
        assert_eq!(r.join().unwrap().len(), 2 << 20);
        p.close_read();
    }

    #[test]
    fn a_reused_descriptor_number_is_configured_afresh() {
        // A caller that never close()s the writer, closes its pipe and gets the same number
        // for a new one (subprocess.Popen after Popen): the new pipe must be enlarged and its
        // stream offsets start again, or vmsplice runs through a 64 KiB pipe.
        let mut first = TestPipe::new();
        let fd = first.1;
        let r = reader(first.0);
        let w: Writer<Vec<u8>> = Writer::spawn(fd, &Options::default()).unwrap();
        let grown = super::super::sys::pipe_size(fd).unwrap();
        w.push(vec![1u8; 3 << 20], Deadline::never(), &mut || true, drop).map_err(|_| "push").unwrap();
        w.sync(Deadline::never(), &mut || true).unwrap();
        let mut second = TestPipe::new();
        // SAFETY: puts the new pipe's write end on the old number, closing the old write end in
        // the same call (closing it first would let a test on another thread take the number);
        // the new pipe's own number is closed after and the old number now belongs to `second`.
        assert_eq!(unsafe { libc::dup2(second.1, fd) }, fd);
        // SAFETY: closes the new pipe's original number, which nothing else uses.
        unsafe { libc::close(second.1) };
        first.1 = -1;
        second.1 = fd;
        assert_eq!(r.join().unwrap().len(), 3 << 20);
        first.close_read();
        assert!(super::super::sys::pipe_size(fd).unwrap() < grown, "a fresh pipe starts small");
        let r = reader(second.0);
        w.push(vec![2u8; 1 << 20], Deadline::never(), &mut || true, drop).map_err(|_| "push").unwrap();
        w.sync(Deadline::never(), &mut || true).unwrap();
        assert_eq!(super::super::sys::pipe_size(fd), Some(grown), "the new pipe was enlarged");
        assert_eq!(w.stats().bytes, 1 << 20, "offsets start again for the new pipe");
        w.close(Deadline::never(), &mut || true).unwrap();
        second.close_write();
        assert_eq!(r.join().unwrap(), vec![2u8; 1 << 20]);
        second.close_read();
    }

    #[test]
    fn bad_descriptors_are_refused() {
        assert!(matches!(Writer::<Vec<u8>>::spawn(-1, &Options::default()), Err(PipeError::BadDescriptor { .. })));
        assert!(matches!(Writer::<Vec<u8>>::spawn(1, &Options { queue: 0, ..Options::default() }), Err(PipeError::InvalidArgument(_))));
    }
}
