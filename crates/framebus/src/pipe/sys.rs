//! Linux specifics of writing to a descriptor: identity (fstat), pipe size (F_GETPIPE_SZ /
//! F_SETPIPE_SZ up to /proc/sys/fs/pipe-max-size), unread bytes (FIONREAD), one write(2) or
//! vmsplice(2) call from raw memory, waiting for room (poll) and SIGPIPE blocking.

use std::io;
use std::os::fd::RawFd;

/// What a descriptor refers to, to notice when its number is reused for another file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub fifo: bool,
}

/// fstat of `fd`.
pub fn identity(fd: RawFd) -> io::Result<Identity> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full `struct stat` into the pointer on success and nothing else.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    Ok(Identity { dev: st.st_dev, ino: st.st_ino, fifo: st.st_mode & libc::S_IFMT == libc::S_IFIFO })
}

/// Whether `fd` was opened for writing (O_WRONLY or O_RDWR).
pub fn writable(fd: RawFd) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no argument and only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_ACCMODE != libc::O_RDONLY)
}

/// /proc/sys/fs/pipe-max-size, the largest pipe an unprivileged process may ask for.
pub fn max_pipe_size() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/fs/pipe-max-size").ok()?.trim().parse().ok()
}

/// The capacity of the pipe `fd` (None when it is not a pipe).
pub fn pipe_size(fd: RawFd) -> Option<usize> {
    // SAFETY: F_GETPIPE_SZ takes no argument; on a non-pipe it fails with EBADF/EINVAL.
    let n = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) };
    (n > 0).then_some(n as usize)
}

/// Enlarges the pipe `fd` towards `want` bytes, halving the request when the kernel refuses
/// (EPERM: over the per-user pipe limit; EBUSY: the pipe holds more than that), never
/// shrinking it. Returns the resulting capacity (None when `fd` is not a pipe).
pub fn grow_pipe(fd: RawFd, want: usize) -> Option<usize> {
    let current = pipe_size(fd)?;
    let mut ask = want;
    while ask > current {
        let ask_c = libc::c_int::try_from(ask).unwrap_or(libc::c_int::MAX);
        // SAFETY: F_SETPIPE_SZ takes an int; failure leaves the pipe unchanged.
        let rc = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, ask_c) };
        if rc > 0 {
            return Some(rc as usize);
        }
        ask /= 2;
    }
    Some(current)
}

/// Bytes written into the pipe `fd` that its reader has not read yet (FIONREAD works on
/// either end of a pipe).
pub fn unread(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD stores one int through the pointer, which is valid for the call.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

/// One write(2) of `len` bytes at `addr`.
///
/// # Safety
/// `addr..addr + len` must be readable memory for the duration of the call.
pub unsafe fn write(fd: RawFd, addr: usize, len: usize) -> io::Result<usize> {
    // SAFETY: the caller guarantees the memory is readable; write(2) only reads it.
    let n = unsafe { libc::write(fd, addr as *const libc::c_void, len) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One vmsplice(2) of `len` bytes at `addr` into the pipe `fd`, without SPLICE_F_GIFT: the
/// pipe takes references to the pages, which the reader copies from later.
///
/// # Safety
/// `addr..addr + len` must be readable memory for the duration of the call, and must stay
/// mapped and unchanged until the reader has consumed these bytes (see docs/design-pipes.md).
pub unsafe fn vmsplice(fd: RawFd, addr: usize, len: usize) -> io::Result<usize> {
    let iov = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    // SAFETY: one iovec, valid for the call, describing memory the caller keeps readable;
    // without SPLICE_F_GIFT the kernel only takes references to the pages.
    let n = unsafe { libc::vmsplice(fd, &iov, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Waits up to `timeout_ms` until `fd` is writable (for a non-blocking descriptor that
/// answered EAGAIN). Errors and timeouts just return; the caller retries the write.
pub fn wait_writable(fd: RawFd, timeout_ms: i32) {
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one pollfd, valid for the call.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}

/// Blocks SIGPIPE in the calling thread, so a write to a pipe without a reader returns EPIPE
/// instead of killing the process whatever its SIGPIPE disposition (Python ignores SIGPIPE,
/// an embedding C program might not). A SIGPIPE raised by this thread then stays pending on
/// it and is discarded with it.
pub fn block_sigpipe() {
    // SAFETY: the sigset is initialised by sigemptyset before use; pthread_sigmask only
    // changes the calling thread's mask.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pipe (read end, write end), closed on drop.
    pub struct TestPipe(pub RawFd, pub RawFd);

    impl TestPipe {
        pub fn new() -> TestPipe {
            let mut fds = [0; 2];
            // SAFETY: pipe2 writes two descriptors into the array.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            TestPipe(fds[0], fds[1])
        }

        pub fn close_read(&mut self) {
            if self.0 >= 0 {
                // SAFETY: closes the read end this struct owns, once.
                unsafe { libc::close(self.0) };
                self.0 = -1;
            }
        }

        /// Closes the write end (a reader thread then sees end of file).
        pub fn close_write(&mut self) {
            if self.1 >= 0 {
                // SAFETY: closes the write end this struct owns, once.
                unsafe { libc::close(self.1) };
                self.1 = -1;
            }
        }
    }

    impl Drop for TestPipe {
        fn drop(&mut self) {
            self.close_read();
            self.close_write();
        }
    }

    #[test]
    fn identity_pipe_size_and_unread() {
        let p = TestPipe::new();
        let id = identity(p.1).unwrap();
        assert!(id.fifo);
        assert!(writable(p.1).unwrap());
        assert!(!writable(p.0).unwrap());
        let before = pipe_size(p.1).unwrap();
        let max = max_pipe_size().unwrap_or(before);
        let after = grow_pipe(p.1, max).unwrap();
        assert!(after >= before && after <= max.max(before), "{before} -> {after} (max {max})");
        let data = [5u8; 100];
        // SAFETY: `data` is readable for the call.
        assert_eq!(unsafe { write(p.1, data.as_ptr() as usize, 100) }.unwrap(), 100);
        assert_eq!(unread(p.1).unwrap(), 100, "FIONREAD on the write end");
        assert_eq!(unread(p.0).unwrap(), 100);
        assert!(identity(-1).is_err());
        assert_eq!(pipe_size(-1), None);
    }

    #[test]
    fn vmsplice_counts_as_unread_until_read() {
        let p = TestPipe::new();
        let data = vec![9u8; 3000];
        // SAFETY: `data` outlives the pipe's use of it: it is read back below before the drop.
        let n = unsafe { vmsplice(p.1, data.as_ptr() as usize, data.len()) }.unwrap();
        assert_eq!(n, 3000);
        assert_eq!(unread(p.1).unwrap(), 3000);
        let mut back = vec![0u8; 3000];
        // SAFETY: reads into a buffer of the given length.
        let r = unsafe { libc::read(p.0, back.as_mut_ptr().cast(), back.len()) };
        assert_eq!(r, 3000);
        assert_eq!(back, data);
        assert_eq!(unread(p.1).unwrap(), 0);
    }

    #[test]
    fn broken_pipe_is_epipe_not_a_signal() {
        block_sigpipe();
        let mut p = TestPipe::new();
        p.close_read();
        let b = [0u8; 4];
        // SAFETY: `b` is readable for the call.
        let e = unsafe { write(p.1, b.as_ptr() as usize, 4) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPIPE));
    }
}
