//! Creating, opening and mapping the shared-memory object behind a stream.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::name;
use crate::error::{Error, Result};

/// An open shared-memory object (file descriptor) with its name.
pub struct Segment {
    fd: OwnedFd,
    name: String,
}

/// A shared mapping of a segment; unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Mapping is a plain address range of MAP_SHARED memory; it owns no thread-bound state
// and all concurrent access to its contents goes through atomics or the stream protocol.
unsafe impl Send for Mapping {}
// SAFETY: see Send; shared references only expose the raw pointer.
unsafe impl Sync for Mapping {}

fn io_error(op: &'static str, name: &str, err: io::Error) -> Error {
    let path = name::path(name);
    match err.raw_os_error() {
        Some(libc::ENOENT) => Error::NotFound { name: name.to_owned(), path },
        Some(libc::EEXIST) => Error::AlreadyExists { name: name.to_owned(), path },
        Some(code @ (libc::EACCES | libc::EPERM)) => Error::PermissionDenied { op, path, errno: code },
        _ => Error::Io { op, name: name.to_owned(), path, source: err },
    }
}

impl Segment {
    /// Creates a new segment of `len` bytes with exactly `mode` (applied with fchmod, so the
    /// umask cannot widen or narrow it) and allocates all of it now, so that a full /dev/shm is
    /// reported here rather than as SIGBUS on first touch. Fails with AlreadyExists if the name
    /// is taken. On any failure after creation the name is unlinked again.
    pub fn create(stream: &str, len: u64, mode: u32) -> Result<Segment> {
        let cname = c_name(stream)?;
        // SAFETY: cname is a valid NUL-terminated string; shm_open has no other preconditions.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC, 0o600) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            if let Some(e) = not_segment(stream) {
                return Err(e); // the name is taken by something that is no segment
            }
            return Err(io_error("create", stream, err));
        }
        // SAFETY: fd was just returned by shm_open and is owned by nobody else.
        let seg = Segment { fd: unsafe { OwnedFd::from_raw_fd(fd) }, name: stream.to_owned() };
        let fail = |e: Error| {
            let _ = unlink(stream);
            Err(e)
        };
        // SAFETY: fd is a valid open descriptor.
        if unsafe { libc::fchmod(fd, mode as libc::mode_t) } != 0 {
            return fail(io_error("set the mode of", stream, io::Error::last_os_error()));
        }
        // SAFETY: fd is a valid descriptor of a shared-memory object opened for writing.
        let rc = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        if rc != 0 {
            let reason = io::Error::from_raw_os_error(rc).to_string();
            let _ = unlink(stream); // gives the partly allocated pages back before measuring
            let free = free_bytes();
            return fail(Error::NoSpace { name: stream.to_owned(), path: name::path(stream), bytes: len, free, errno: rc, reason });
        }
        Ok(seg)
    }

    /// Opens an existing segment for reading and writing. An entry under the name that is not
    /// a regular file (a FIFO, socket, directory, device file or symbolic link) is refused with
    /// NotSegment: checked with lstat before opening it (O_NONBLOCK, so that even a FIFO
    /// cannot block) and with fstat after.
    pub fn open(stream: &str) -> Result<Segment> {
        let cname = c_name(stream)?;
        if let Some(e) = not_segment(stream) {
            return Err(e);
        }
        // SAFETY: cname is a valid NUL-terminated string.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK, 0) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(not_segment(stream).unwrap_or_else(|| io_error("open", stream, err)));
        }
        // SAFETY: fd was just returned by shm_open and is owned by nobody else.
        let seg = Segment { fd: unsafe { OwnedFd::from_raw_fd(fd) }, name: stream.to_owned() };
        if let Some(kind) = super::kind::not_regular_mode(seg.fstat()?.st_mode) {
            return Err(Error::NotSegment { name: stream.to_owned(), path: name::path(stream), kind });
        }
        Ok(seg)
    }

    fn fstat(&self) -> Result<libc::stat> {
        // SAFETY: an all-zero stat is a valid value to be overwritten by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open and st is a valid out pointer.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io_error("stat", &self.name, io::Error::last_os_error()));
        }
        Ok(st)
    }

    /// Current size of the segment in bytes.
    pub fn size(&self) -> Result<u64> {
        // SAFETY: an all-zero stat is a valid value to be overwritten by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open and st is a valid out pointer.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io_error("stat", &self.name, io::Error::last_os_error()));
        }
        Ok(st.st_size as u64)
    }

    /// Maps `len` bytes from offset 0, readable and writable, shared with other processes.
    pub fn map(&self, len: usize) -> Result<Mapping> {
        self.map_range(0, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps `len` bytes from `offset` (a page multiple) read-only.
    pub fn map_read_only(&self, offset: u64, len: usize) -> Result<Mapping> {
        self.map_range(offset, len, libc::PROT_READ)
    }

    fn map_range(&self, offset: u64, len: usize, prot: libc::c_int) -> Result<Mapping> {
        if len == 0 {
            return Err(Error::Corrupt { name: self.name.clone(), path: name::path(&self.name), reason: "zero-length segment".into() });
        }
        // SAFETY: mapping a valid fd with a fresh address chosen by the kernel cannot alias any
        // Rust object; the result is checked for MAP_FAILED.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, self.fd.as_raw_fd(), offset as libc::off_t) };
        if ptr == libc::MAP_FAILED {
            return Err(io_error("map", &self.name, io::Error::last_os_error()));
        }
        // SAFETY: ptr..ptr + len is the whole mapping just made, not yet handed to anyone.
        unsafe { crate::copy::plan().pages.prepare(ptr.cast(), len, prot & libc::PROT_WRITE != 0) };
        Ok(Mapping { ptr: ptr.cast(), len })
    }

    /// Replaces the pages at `addr..addr + len` of a read-write shared mapping of this segment
    /// (which maps file offset `offset` there) with a private copy-on-write mapping of the same
    /// bytes: a private page shows the object's bytes until this process writes it, and the
    /// write goes to a copy only this process sees. The shared pages, with their page-table
    /// entries, are moved aside (`mremap` with `MREMAP_DONTUNMAP`, Linux 5.13+ for shared
    /// memory) and returned, so [`Segment::reattach`] can move them back without faulting them
    /// in again; None where the kernel cannot move them (they are then mapped afresh).
    ///
    /// # Safety
    /// `addr`, `offset` and `len` must be page multiples, and `addr..addr + len` must lie inside
    /// a live read-write `MAP_SHARED` mapping of this segment that maps `offset..offset + len`
    /// there. No Rust reference into the range may be alive, and nothing may rely on the
    /// range's bytes being shared until it is reattached.
    pub unsafe fn detach(&self, addr: *mut u8, offset: u64, len: usize) -> Result<Option<Mapping>> {
        // SAFETY: moving the range's pages to a new address chosen by the kernel; with
        // DONTUNMAP the range itself stays mapped (to the same file pages, faulted in again on
        // access), so no address of it is ever left unmapped.
        let moved = unsafe { libc::mremap(addr.cast(), len, len, libc::MREMAP_MAYMOVE | libc::MREMAP_DONTUNMAP) };
        let parked = (moved != libc::MAP_FAILED).then(|| Mapping { ptr: moved.cast(), len });
        // SAFETY: the caller's contract: the range maps this file range and nothing borrows it.
        if let Err(e) = unsafe { self.map_over(addr, offset, len, libc::MAP_PRIVATE) } {
            drop(parked); // the range is still the shared mapping: nothing to restore
            return Err(e);
        }
        Ok(parked)
    }

    /// Undoes [`Segment::detach`]: the range is the shared mapping again, with the pages moved
    /// aside put back (or, without them, mapped afresh and prepared like a fresh mapping, since
    /// the writer is about to write them). Private copies made meanwhile are dropped.
    ///
    /// # Safety
    /// As for `detach`, with `addr..addr + len` the range `detach` made private and `parked`
    /// what it returned.
    pub unsafe fn reattach(&self, addr: *mut u8, offset: u64, len: usize, parked: Option<Mapping>) -> Result<()> {
        if let Some(parked) = parked {
            // SAFETY: `parked` maps exactly this file range (moved from `addr` by detach);
            // moving it over the private range replaces that range in one step.
            let back = unsafe { libc::mremap(parked.ptr.cast(), len, len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, addr) };
            if back != libc::MAP_FAILED {
                std::mem::forget(parked); // its pages now live at `addr`
                return Ok(());
            }
        }
        // SAFETY: as above; the range maps this file range privately and nothing borrows it.
        unsafe { self.map_over(addr, offset, len, libc::MAP_SHARED)? };
        // SAFETY: the range was just mapped again and nothing borrows it.
        unsafe { crate::copy::plan().pages.restore(addr, len) };
        Ok(())
    }

    /// A second read-write shared mapping of `offset..offset + len` (a page-aligned slot): a
    /// window through which a handle reaches a slot whose usual address is taken by a kept
    /// frame's private copy (see `ring/kept.rs`). Prepared like the writer's own mapping.
    pub fn map_window(&self, offset: u64, len: usize) -> Result<Mapping> {
        self.map_range(offset, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Makes `addr..addr + len`, a read-write range that maps this segment's bytes at `offset`
    /// (shared, or privately after [`Segment::detach`]), this process's own: mapped privately
    /// if it was shared, then every page copied now (`MADV_POPULATE_WRITE` breaks
    /// copy-on-write for a private mapping in one call; where the kernel lacks it, one write
    /// of each page's first byte does the same). Afterwards no byte of the range changes when
    /// the segment does, and every byte reads as it did before. Pages written privately before
    /// (a stale alias's writes) keep their contents.
    ///
    /// # Safety
    /// As for `detach`. The range's bytes may be read (not written) by other threads meanwhile:
    /// every address stays mapped to the same bytes throughout.
    pub unsafe fn make_private(&self, addr: *mut u8, offset: u64, len: usize, already_private: bool) -> Result<()> {
        if !already_private {
            // SAFETY: the caller's contract: the range maps this file range and nothing borrows it.
            unsafe { self.map_over(addr, offset, len, libc::MAP_PRIVATE)? };
        }
        // SAFETY: populating for writing changes no byte; it only gives each page a private copy.
        if unsafe { libc::madvise(addr.cast(), len, libc::MADV_POPULATE_WRITE) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(io_error("copy the pages of", &self.name, err));
        }
        for page in (0..len).step_by(4096) {
            // SAFETY: the range is mapped read-write (privately) and page-aligned; an atomic add
            // of zero rewrites a byte with its own value, which makes the kernel copy the page.
            unsafe { std::sync::atomic::AtomicU8::from_ptr(addr.add(page)).fetch_add(0, std::sync::atomic::Ordering::Relaxed) };
        }
        Ok(())
    }

    /// Maps `offset..offset + len` of the segment shared again at `addr`, dropping the private
    /// pages [`Segment::make_private`] made there (a window given back for reuse).
    ///
    /// # Safety
    /// As for `detach`: the range maps this file range (privately) and nothing uses it.
    pub unsafe fn share_again(&self, addr: *mut u8, offset: u64, len: usize) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.map_over(addr, offset, len, libc::MAP_SHARED)? };
        // SAFETY: the range was just mapped again and nothing uses it.
        unsafe { crate::copy::plan().pages.restore(addr, len) };
        Ok(())
    }

    /// Maps `offset..offset + len` of this segment at `addr` (MAP_FIXED) with `share`.
    ///
    /// # Safety
    /// `addr..addr + len` must already map the same file range and nothing may borrow it.
    unsafe fn map_over(&self, addr: *mut u8, offset: u64, len: usize, share: libc::c_int) -> Result<()> {
        let map_at = |share: libc::c_int| {
            // SAFETY: the caller guarantees the range maps this very file range and nothing
            // borrows it, so replacing it in place with another mapping of the same bytes
            // leaves every address valid.
            unsafe {
                libc::mmap(
                    addr.cast(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | share,
                    self.fd.as_raw_fd(),
                    offset as libc::off_t,
                )
            }
        };
        if map_at(share) == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            // The failures a process can cause (the mapping count limit) are reported before
            // anything is replaced; should the kernel have dropped the old pages anyway, map the
            // shared ones back so that the range is never left unmapped.
            map_at(libc::MAP_SHARED);
            return Err(io_error("remap", &self.name, err));
        }
        Ok(())
    }

    /// (device, inode) of the object, to tell a segment from a newer one of the same name.
    pub fn identity(&self) -> Result<(u64, u64)> {
        // SAFETY: as in len().
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as in len().
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io_error("stat", &self.name, io::Error::last_os_error()));
        }
        Ok((st.st_dev, st.st_ino))
    }

    /// Owner uid and permission bits of the segment.
    pub fn owner_and_mode(&self) -> Result<(u32, u32)> {
        // SAFETY: as in len().
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as in len().
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io_error("stat", &self.name, io::Error::last_os_error()));
        }
        Ok((st.st_uid, st.st_mode & 0o7777))
    }
}

impl Mapping {
    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: zero-length maps are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping created by map_range and not unmapped elsewhere;
        // every borrower of it holds an Arc of its owner, so nothing uses it after this.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// Removes the name of a stream; processes that have it mapped keep working until they unmap.
/// An entry under the name that is not a regular file (see [`Segment::open`]) is left alone:
/// NotSegment.
pub fn unlink(stream: &str) -> Result<()> {
    let cname = c_name(stream)?;
    if let Some(e) = not_segment(stream) {
        return Err(e);
    }
    // SAFETY: cname is a valid NUL-terminated string.
    if unsafe { libc::shm_unlink(cname.as_ptr()) } != 0 {
        return Err(io_error("unlink", stream, io::Error::last_os_error()));
    }
    Ok(())
}

/// NotSegment when the entry under `stream`'s name is there but is not a regular file.
fn not_segment(stream: &str) -> Option<Error> {
    let path = name::path(stream);
    super::kind::not_regular(&path).map(|kind| Error::NotSegment { name: stream.to_owned(), path, kind })
}

fn c_name(stream: &str) -> Result<CString> {
    name::validate(stream)?;
    // validate() rejects NUL, so this cannot fail.
    CString::new(name::shm_name(stream)).map_err(|_| Error::InvalidName { name: stream.to_owned(), reason: "contains NUL" })
}

/// Bytes free in /dev/shm for an unprivileged writer (0 when it cannot be told).
// statvfs's field types differ between targets (u64 on 64-bit Linux, narrower elsewhere).
#[allow(clippy::useless_conversion)]
pub fn free_bytes() -> u64 {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: the path is a NUL-terminated literal and `st` a valid out pointer of the right type.
    if unsafe { libc::statvfs(c"/dev/shm".as_ptr(), st.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: statvfs succeeded, so it filled the struct.
    let st = unsafe { st.assume_init() };
    u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize))
}
