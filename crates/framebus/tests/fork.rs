//! A handle belongs to one process: a copy that reaches a forked child registers a reader entry
//! of its own there on first use, and nothing the child does through inherited handles, pins
//! or lock holds touches the parent's.
//!
//! Each child runs a closure and leaves with `_exit` (status 0 when it returns true), without
//! running destructors of the parent's objects unless the closure drops them itself. Timeouts
//! are generous upper bounds so that nothing hangs, never performance thresholds.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

const LONG: Duration = Duration::from_secs(30);

fn long() -> Deadline {
    Deadline::after(Some(LONG))
}

/// A stream name unique to this test process; removed when dropped.
struct Name(String);

impl Name {
    fn new() -> Name {
        static N: AtomicU32 = AtomicU32::new(0);
        Name(format!("rs-fork-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = framebus::unlink(&self.0);
    }
}

fn create(name: &Name) -> Stream {
    let spec = StreamSpec { slots: 4, ..StreamSpec::new("<i8", 8, vec![1]) };
    Stream::create(&name.0, &spec, &CreateOptions::default()).expect("create")
}

fn write(s: &Stream, id: i64) {
    s.write(&id.to_le_bytes(), &FrameInfo { frame_id: Some(id), ..Default::default() }, long(), &mut || true).expect("write");
}

/// A pipe: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe() just returned these two descriptors, owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn signal(fd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    // SAFETY: writes one byte from a live local to an open descriptor.
    assert_eq!(unsafe { libc::write(fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) }, 1);
}

fn wait_signal(fd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    // SAFETY: reads at most one byte into a live local buffer from an open descriptor.
    assert_eq!(unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 1) }, 1, "the other process went away");
}

/// Forks a child that runs `body` and exits with 0 if it returned true; returns its pid.
fn fork(body: impl FnOnce() -> bool) -> libc::pid_t {
    // SAFETY: the child runs only this test's closure, which uses framebus handles no other
    // thread of the test touches (so no lock is held across the fork), and then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(false);
        // SAFETY: leaves the child at once, without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

fn join(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for a child this test forked; status is a valid out pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child failed (status {status})");
}

/// Reads frames with read_new until `count` or the end of the stream: their ids and the
/// handle's total missed count.
fn read_all(r: &Stream, count: usize) -> (Vec<i64>, u64) {
    let mut got = Vec::new();
    while got.len() < count {
        match r.read_new(long(), &mut || true, |f| f.frame_id) {
            Ok(id) => got.push(id),
            Err(Error::Ended { .. }) => break,
            Err(e) => panic!("read_new: {e}"),
        }
    }
    (got, r.missed().1)
}

#[test]
fn forked_child_takes_its_own_lossless_entry_and_gets_every_frame_after_the_parent_closes() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    let (ready_r, ready_w) = pipe();
    let child = fork(|| {
        assert!(r.is_inherited());
        r.seen_seq(); // first use here: the handle registers an entry of its own
        assert!(!r.is_inherited());
        signal(&ready_w);
        read_all(&r, 10) == ((0..10).collect(), 0)
    });
    wait_signal(&ready_r);
    assert_eq!(w.ownercount(), 3, "the writer, the parent's reader and the child's own entry");
    drop(r); // the parent has no use for its copy
    for id in 0..10 {
        write(&w, id);
    }
    w.end();
    join(child);
}

#[test]
fn a_lossless_child_counts_the_frames_reclaimed_before_it_registered() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    let (go_r, go_w) = pipe();
    let child = fork(|| {
        wait_signal(&go_r);
        let (got, missed) = read_all(&r, 10);
        // Frames 0..k were reclaimed while no entry of this process held them: each is counted,
        // and every frame after the gap comes in order.
        let first = got.first().copied().unwrap_or(10);
        first > 0 && missed == first as u64 && got == (first..10).collect::<Vec<_>>()
    });
    drop(r);
    for id in 0..10 {
        write(&w, id);
    }
    w.end();
    signal(&go_w);
    join(child);
}

#[test]
fn a_child_dropping_inherited_pins_handles_and_lock_holds_leaves_the_parents() {
    let name = Name::new();
    let w = Arc::new(create(&name));
    let r = Arc::new(Stream::open(&name.0, ReaderMode::Latest).expect("open"));
    write(&w, 7);
    let view = r.pin_latest().expect("view");
    w.acquire(long(), &mut || true).expect("lock");
    let child = fork(|| {
        // SAFETY: in the child the originals are never used again (it leaves with `_exit`), so
        // these bitwise copies are the only owners of the inherited values in its memory.
        let (view, r, w) = unsafe { (std::ptr::read(&view), std::ptr::read(&r), std::ptr::read(&w)) };
        let held = w.lock_held();
        // The child uses the reader (an entry of its own), then drops everything it inherited.
        let ok = r.read_latest(|f| f.frame_id).ok() == Some(7);
        drop(view);
        drop(r);
        drop(w);
        !held && ok
    });
    join(child);
    assert!(w.lock_held(), "the child released the parent's write lock");
    for id in 100..110 {
        write(&w, id); // never into the slot the parent's view still pins
    }
    assert_eq!(view.frame().frame_id, 7);
    assert_eq!(view.frame().payload, 7i64.to_le_bytes());
    w.release().expect("release");
}

#[test]
fn a_handle_used_in_parent_and_child_is_two_readers() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    let (ready_r, ready_w) = pipe();
    let child = fork(|| {
        r.seen_seq();
        signal(&ready_w);
        read_all(&r, 10) == ((0..10).collect(), 0)
    });
    wait_signal(&ready_r);
    std::thread::scope(|s| {
        s.spawn(|| {
            for id in 0..10 {
                write(&w, id);
            }
        });
        assert_eq!(read_all(&r, 10), ((0..10).collect(), 0));
    });
    join(child);
}

#[test]
fn resume_from_moves_a_fresh_lossless_handle_back() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    write(&w, 0);
    write(&w, 1);
    let copy = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    assert_eq!(copy.position(), 2);
    copy.resume_from(r.position()).expect("resume");
    assert_eq!(read_all(&copy, 2), (vec![0, 1], 0));
    copy.resume_from(5).expect("resume"); // never forward
    assert_eq!(copy.position(), 2);
}

#[test]
fn a_grandchild_takes_an_entry_of_its_own_too() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    let (ready_r, ready_w) = pipe();
    let child = fork(|| {
        r.seen_seq();
        let grandchild = fork(|| {
            r.seen_seq();
            signal(&ready_w);
            read_all(&r, 6) == ((0..6).collect(), 0)
        });
        let mine = read_all(&r, 6) == ((0..6).collect(), 0);
        let mut status = 0;
        // SAFETY: waits for the process this child forked; status is a valid out pointer.
        let joined = unsafe { libc::waitpid(grandchild, &mut status, 0) } == grandchild;
        mine && joined && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    });
    wait_signal(&ready_r);
    assert_eq!(w.ownercount(), 4, "the writer, the parent's reader, the child's and the grandchild's");
    drop(r);
    for id in 0..6 {
        write(&w, id);
    }
    w.end();
    join(child);
}

#[test]
fn a_reservation_made_before_fork_keeps_every_frame_for_a_child_that_has_not_started_reading() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    let (go_r, go_w) = pipe();
    r.prepare_fork();
    let child = fork(|| {
        r.after_fork_child();
        wait_signal(&go_r); // the parent closed its copy and wrote what the ring holds
        read_all(&r, 10) == ((0..10).collect(), 0)
    });
    r.after_fork_parent();
    drop(r); // at once, before the child used its copy
    for id in 0..4 {
        write(&w, id); // fills the ring: the reservation holds every frame
    }
    signal(&go_w);
    for id in 4..10 {
        write(&w, id);
    }
    w.end();
    join(child);
}

#[test]
fn a_reservation_dies_with_a_child_that_never_used_the_handle() {
    let name = Name::new();
    let w = create(&name);
    let r = Stream::open(&name.0, ReaderMode::Lossless).expect("open");
    r.prepare_fork();
    let child = fork(|| {
        r.after_fork_child();
        true // leaves without touching the handle
    });
    r.after_fork_parent();
    join(child);
    drop(r);
    // The dead child's reserved entry is reaped, not waited for: more frames than slots go in.
    for id in 0..10 {
        write(&w, id);
    }
    assert_eq!(w.ownercount(), 1);
}
