//! The writers of a process, one per descriptor number: started on first use, replaced after
//! they failed or after fork() (a child never uses its parent's writer threads, which do not
//! exist in it), and flushed together at exit.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::PipeError;
use super::writer::Writer;
use super::{Options, Payload};
use crate::sync::deadline::Deadline;

/// The writers of this process, by descriptor.
pub struct Registry<K: Payload> {
    writers: Mutex<HashMap<RawFd, Arc<Writer<K>>>>,
    options: Mutex<Options>,
}

impl<K: Payload> Default for Registry<K> {
    fn default() -> Self {
        Registry { writers: Mutex::new(HashMap::new()), options: Mutex::new(Options::default()) }
    }
}

impl<K: Payload> Registry<K> {
    fn map(&self) -> MutexGuard<'_, HashMap<RawFd, Arc<Writer<K>>>> {
        self.writers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Options used for writers started from now on.
    pub fn options(&self) -> Options {
        self.options.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes the options of writers started from now on.
    pub fn set_options(&self, options: Options) -> Result<(), PipeError> {
        options.validate()?;
        *self.options.lock().unwrap_or_else(|p| p.into_inner()) = options;
        Ok(())
    }

    /// The writer of `fd`, started if there is none (or only one inherited through fork()).
    pub fn writer(&self, fd: RawFd) -> Result<Arc<Writer<K>>, PipeError> {
        let mut map = self.map();
        if let Some(w) = map.get(&fd) {
            if w.pid() == std::process::id() {
                return Ok(Arc::clone(w));
            }
            // Inherited through fork(): its thread does not exist here, and its keepers belong
            // to the parent's jobs. Forget it without touching its state.
            if let Some(w) = map.remove(&fd) {
                std::mem::forget(w);
            }
        }
        let w = Arc::new(Writer::spawn(fd, &self.options())?);
        map.insert(fd, Arc::clone(&w));
        Ok(w)
    }

    /// The writer of `fd`, if one runs.
    pub fn get(&self, fd: RawFd) -> Option<Arc<Writer<K>>> {
        self.map().get(&fd).filter(|w| w.pid() == std::process::id()).cloned()
    }

    /// Forgets `writer` (if it still is the one of its descriptor); its thread finishes what is
    /// queued and exits.
    pub fn remove(&self, writer: &Arc<Writer<K>>) {
        let mut map = self.map();
        if map.get(&writer.fd()).is_some_and(|w| Arc::ptr_eq(w, writer)) {
            map.remove(&writer.fd());
        }
    }

    /// Every writer of this process, by descriptor.
    pub fn all(&self) -> Vec<Arc<Writer<K>>> {
        let pid = std::process::id();
        let mut all: Vec<_> = self.map().values().filter(|w| w.pid() == pid).cloned().collect();
        all.sort_by_key(|w| w.fd());
        all
    }

    /// At exit: waits for every queued write as long as the writers make progress, giving up
    /// once none was made for `stall` (a reader that stopped reading must not hang the exit).
    /// Returns (fd, pending jobs, pending bytes) of the writers given up on.
    pub fn flush_at_exit(&self, stall: Duration, check: &mut dyn FnMut() -> bool) -> Vec<(RawFd, usize, u64)> {
        let writers = self.all();
        let progress = |ws: &[Arc<Writer<K>>]| ws.iter().map(|w| w.stats().bytes).sum::<u64>();
        let mut last = progress(&writers);
        let mut since = Instant::now();
        loop {
            let mut waiting = false;
            for w in &writers {
                match w.sync(Deadline::after(Some(Duration::from_millis(50))), check) {
                    Err(PipeError::Timeout { .. }) => waiting = true,
                    Err(PipeError::Interrupted) => return leftovers(&writers),
                    _ => {}
                }
            }
            if !waiting {
                return Vec::new();
            }
            let now = progress(&writers);
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= stall {
                return leftovers(&writers);
            }
        }
    }
}

fn leftovers<K: Payload>(writers: &[Arc<Writer<K>>]) -> Vec<(RawFd, usize, u64)> {
    writers.iter().map(|w| (w.fd(), w.stats())).filter(|(_, s)| s.pending > 0).map(|(fd, s)| (fd, s.pending, s.pending_bytes)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::sys::tests::TestPipe;
    use super::*;

    #[test]
    fn one_writer_per_descriptor_and_replacement_after_removal() {
        let p = TestPipe::new();
        let reg: Registry<Vec<u8>> = Registry::default();
        let a = reg.writer(p.1).unwrap();
        let b = reg.writer(p.1).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(reg.all().len(), 1);
        reg.remove(&a);
        assert!(reg.get(p.1).is_none());
        let c = reg.writer(p.1).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(reg.writer(-5).is_err());
        assert!(reg.set_options(Options { queue: 0, ..Options::default() }).is_err());
    }

    #[test]
    fn exit_flush_gives_up_on_a_stalled_reader() {
        let p = TestPipe::new();
        let reg: Registry<Vec<u8>> = Registry::default();
        reg.set_options(Options { pipe_size: Some(0), ..Options::default() }).unwrap();
        let w = reg.writer(p.1).unwrap();
        let size = 4 * super::super::sys::pipe_size(p.1).unwrap();
        w.push(vec![1u8; size], Deadline::never(), &mut || true, drop).map_err(|_| "push").unwrap();
        let left = reg.flush_at_exit(Duration::from_millis(200), &mut || true);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, p.1);
        // The pipe is closed while the writer is blocked: it fails with EPIPE, never hangs.
        drop(p);
        assert!(w.sync(Deadline::never(), &mut || true).is_err());
    }
}
