//! One descriptor seen from its writer thread: configuration (pipe size, whether vmsplice is
//! usable), the count of bytes put into it, and the loop that writes one job in chunks of the
//! pipe size, retrying EINTR and EAGAIN and falling back from vmsplice to write(2).

use std::io;
use std::os::fd::RawFd;

use super::sys::{self, Identity};
use super::Options;

/// Chunk size for descriptors that are not pipes.
const FILE_CHUNK: usize = 4 << 20;

/// How a failed write reads in an error: the call that failed and its error.
pub(crate) type WriteFailure = (&'static str, io::Error);

/// What the pipe's reader has done with the bytes put into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drain {
    /// The reader has consumed this many bytes of the descriptor's stream.
    Consumed(u64),
    /// No reader is left: bytes still in the pipe will never be read.
    ReaderGone,
}

pub(crate) struct Output {
    pub fd: RawFd,
    identity: Identity,
    options: Options,
    /// vmsplice is used for this descriptor (asked for, a pipe, and not refused by the kernel).
    pub splice: bool,
    pub pipe_size: Option<usize>,
    chunk: usize,
    /// Bytes put into the descriptor by this writer: the stream offset that Draining jobs
    /// compare against `put - unread`.
    pub put: u64,
    /// Of which through vmsplice.
    pub spliced: u64,
}

impl Output {
    /// Inspects and configures `fd`; fails when it is not open for writing.
    pub fn new(fd: RawFd, options: &Options) -> io::Result<Output> {
        let identity = sys::identity(fd)?;
        if !sys::writable(fd)? {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let mut out =
            Output { fd, identity, options: options.clone(), splice: false, pipe_size: None, chunk: FILE_CHUNK, put: 0, spliced: 0 };
        out.configure();
        Ok(out)
    }

    fn configure(&mut self) {
        self.pipe_size = if self.identity.fifo {
            match self.options.pipe_size {
                Some(0) => sys::pipe_size(self.fd),
                Some(want) => sys::grow_pipe(self.fd, want),
                None => match sys::max_pipe_size() {
                    Some(max) => sys::grow_pipe(self.fd, max),
                    None => sys::pipe_size(self.fd),
                },
            }
        } else {
            None
        };
        self.splice = self.options.vmsplice && self.identity.fifo && self.pipe_size.is_some();
        self.chunk = self.pipe_size.unwrap_or(FILE_CHUNK).max(4096);
    }

    /// Re-inspects the descriptor before a job that follows an idle period: when its number now
    /// names another file (closed and reused), the new file is configured afresh. Only called
    /// when no job is Draining, so resetting the stream offset loses nothing.
    pub fn refresh(&mut self) {
        if let Ok(id) = sys::identity(self.fd) {
            if id != self.identity {
                self.identity = id;
                self.put = 0;
                self.spliced = 0;
                self.configure();
            }
        }
    }

    /// How far the reader has got (only meaningful for pipes).
    pub fn drain(&self) -> Drain {
        let mut p = libc::pollfd { fd: self.fd, events: 0, revents: 0 };
        // SAFETY: one pollfd, valid for the call; a zero timeout never blocks. POLLERR on the
        // write end of a pipe means it has no reader left.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        if rc > 0 && p.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return Drain::ReaderGone;
        }
        match sys::unread(self.fd) {
            Ok(n) => Drain::Consumed(self.put.saturating_sub(n as u64)),
            // Cannot tell: claim no progress (the safe side).
            Err(_) => Drain::Consumed(0),
        }
    }

    /// Writes `len` bytes at `addr`, all of them or until an error. `progress` runs after every
    /// chunk (to let Draining jobs finish while this one is written). Returns whether any of
    /// the bytes went through vmsplice (then the job must drain before it is Done).
    ///
    /// # Safety
    /// `addr..addr + len` must stay readable while this runs and, if it returns Ok(true), stay
    /// unchanged until `drain()` reports the stream consumed past this job's end.
    pub unsafe fn write_job(&mut self, addr: usize, len: usize, mut progress: impl FnMut(&Self)) -> Result<bool, WriteFailure> {
        let mut done = 0usize;
        let mut spliced_any = false;
        let mut splice_this_job = self.splice && len >= self.options.splice_min;
        while done < len {
            let n = (len - done).min(self.chunk);
            let at = addr + done;
            let result = if splice_this_job {
                // SAFETY: forwarded from the caller: the memory is readable and stays unchanged
                // until drained; the caller keeps the job Draining until then.
                match unsafe { sys::vmsplice(self.fd, at, n) } {
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EFAULT | libc::ENOMEM)) => {
                        // Pages the kernel cannot reference (device memory, a GL mapping): copy.
                        splice_this_job = false;
                        continue;
                    }
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EPERM | libc::EBADF)) => {
                        // vmsplice is not usable on this descriptor: write(2) from now on (a
                        // real EBADF shows up again from write).
                        self.splice = false;
                        splice_this_job = false;
                        continue;
                    }
                    r => r.map(|k| (k, true)),
                }
            } else {
                // SAFETY: the caller keeps the memory readable for the duration of the call.
                unsafe { sys::write(self.fd, at, n) }.map(|k| (k, false))
            };
            match result {
                Ok((0, _)) => return Err((self.op(splice_this_job), io::Error::from(io::ErrorKind::WriteZero))),
                Ok((k, via_splice)) => {
                    done += k;
                    self.put += k as u64;
                    if via_splice {
                        self.spliced += k as u64;
                        spliced_any = true;
                    }
                    progress(self);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => sys::wait_writable(self.fd, 100),
                Err(e) => return Err((self.op(splice_this_job), e)),
            }
        }
        Ok(spliced_any)
    }

    fn op(&self, splice: bool) -> &'static str {
        if splice {
            "vmsplice"
        } else {
            "write"
        }
    }

    /// Whether the descriptor is a pipe or FIFO.
    pub fn is_fifo(&self) -> bool {
        self.identity.fifo
    }
}

#[cfg(test)]
mod tests {
    use super::super::sys::tests::TestPipe;
    use super::*;

    fn read_all(fd: RawFd, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut got = 0;
        while got < len {
            // SAFETY: reads into the unfilled tail of `out`.
            let r = unsafe { libc::read(fd, out[got..].as_mut_ptr().cast(), len - got) };
            assert!(r > 0, "read returned {r}");
            got += r as usize;
        }
        out
    }

    fn job_through(options: Options) -> (bool, u64, u64) {
        let p = TestPipe::new();
        let mut out = Output::new(p.1, &options).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let reader_fd = p.0;
        let len = data.len();
        let reader = std::thread::spawn(move || read_all(reader_fd, len));
        let mut chunks = 0;
        // SAFETY: `data` lives until after the reader has read everything (joined below).
        let spliced = unsafe { out.write_job(data.as_ptr() as usize, data.len(), |_| chunks += 1) }.unwrap();
        let back = reader.join().unwrap();
        assert_eq!(back, data);
        assert!(chunks >= 1);
        assert_eq!(out.drain(), Drain::Consumed(data.len() as u64));
        (spliced, out.put, out.spliced)
    }

    #[test]
    fn writes_in_chunks_with_and_without_vmsplice() {
        let (spliced, put, via) = job_through(Options { vmsplice: true, ..Options::default() });
        assert!(spliced);
        assert_eq!((put, via), (3_000_000, 3_000_000));
        let (spliced, put, via) = job_through(Options { vmsplice: false, ..Options::default() });
        assert!(!spliced);
        assert_eq!((put, via), (3_000_000, 0));
    }

    #[test]
    fn pipe_is_enlarged_and_files_are_not_spliced() {
        let p = TestPipe::new();
        let out = Output::new(p.1, &Options::default()).unwrap();
        let max = sys::max_pipe_size().unwrap_or(65536);
        assert!(out.pipe_size.unwrap() >= max.min(65536));
        assert!(out.is_fifo());
        let f = std::fs::File::create(std::env::temp_dir().join(format!("framebus-output-test-{}", std::process::id()))).unwrap();
        use std::os::fd::AsRawFd;
        let fo = Output::new(f.as_raw_fd(), &Options::default()).unwrap();
        assert!(!fo.splice && !fo.is_fifo() && fo.pipe_size.is_none());
        let _ = std::fs::remove_file(std::env::temp_dir().join(format!("framebus-output-test-{}", std::process::id())));
        assert!(Output::new(p.0, &Options::default()).is_err(), "the read end is refused");
    }

    #[test]
    fn reader_gone_is_seen_while_draining() {
        let mut p = TestPipe::new();
        let mut out = Output::new(p.1, &Options::default()).unwrap();
        let data = vec![1u8; 200_000];
        // SAFETY: `data` outlives the pipe (dropped at the end of the test, after the pipe).
        let spliced = unsafe { out.write_job(data.as_ptr() as usize, 100_000, |_| {}) }.unwrap();
        assert!(spliced);
        assert_eq!(out.drain(), Drain::Consumed(0));
        p.close_read();
        assert_eq!(out.drain(), Drain::ReaderGone);
        sys::block_sigpipe();
        // SAFETY: as above.
        let e = unsafe { out.write_job(data.as_ptr() as usize, 100_000, |_| {}) }.unwrap_err();
        assert_eq!(e.1.raw_os_error(), Some(libc::EPIPE));
        drop(p);
        drop(data);
    }
}
