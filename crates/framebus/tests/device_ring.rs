//! The ring's device slots against the strict fake door, across forked processes: a reader's
//! release event orders the writer's next write into its slot, a reader that exited does not
//! stop the writer, handles of one process share one opening, and unlink frees what the creator
//! allocated, and a reader waiting on a stream whose owner died is told so. The fake refuses an event waited for before it was ever recorded, so a release
//! event published before its first record would fail here.
//!
//! The door is chosen once per process from FRAMEBUS_CUDA, set before the first use; the fake's
//! counts are per process, so every test holds the lock of `fake_door::serial`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use framebus::gpu::fake::{fake_counts, fake_read};
use framebus::ring::{DeviceAccess, Source};
use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

mod fake_door;
use fake_door::{serial, soon};

fn name(tag: &str) -> String {
    fake_door::name("devring", tag)
}

fn spec(slots: u32) -> StreamSpec {
    fake_door::device_spec(slots, vec![4, 4])
}

fn write(s: &Stream, value: u8) -> u64 {
    let frame = [value; 16];
    s.write_device(Source::Host(frame.as_ptr()), 0, &FrameInfo::default(), soon(), &mut || true).expect("write")
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe() just returned these two descriptors, owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn send(fd: &OwnedFd, byte: u8) {
    // SAFETY: writes one byte from a live local to an open descriptor.
    assert_eq!(unsafe { libc::write(fd.as_raw_fd(), (&byte as *const u8).cast(), 1) }, 1);
}

fn recv(fd: &OwnedFd) -> u8 {
    let mut b = 0u8;
    // SAFETY: reads one byte into a live local from an open descriptor.
    assert_eq!(unsafe { libc::read(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1) }, 1, "the other process went away");
    b
}

/// Waits until `fd` is readable (or closed), at most `seconds`: a child inherits every
/// descriptor of the parent, the write end too, so it would never see the end of a pipe.
fn wait_readable(fd: &OwnedFd, seconds: i32) {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, seconds * 1000) };
}

/// Runs `body` in a forked child, which leaves with `_exit` (0 when `body` returned true).
fn fork(body: impl FnOnce() -> bool) -> libc::pid_t {
    // SAFETY: the test holds SERIAL, so no other test thread is inside framebus while forking;
    // the child only runs `body` and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(false);
        // SAFETY: _exit ends the child without running the parent's destructors twice.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

/// A reader in a child: takes the next frame, checks its bytes through its own opening, lets it
/// go on the default stream (recording its release event), says so, and then `after` happens.
fn read_one_and_release(stream: String, want: u8, told: OwnedFd, go_on: OwnedFd, exit_at_once: bool) -> impl FnOnce() -> bool {
    move || {
        // Latest mode: the writer goes on past this reader (a lossless one would hold it back).
        let r = Arc::new(Stream::open_with(&stream, ReaderMode::Latest, DeviceAccess::Device).expect("open"));
        r.resume_from(0).expect("from the start");
        let pinned = r.wait_pinned(soon(), &mut || true).expect("a frame");
        r.device_acquire(pinned.slot(), 0).expect("wait for the ready event");
        let bytes = fake_read(r.device().expect("device").slot_ptr(pinned.slot()), 16).expect("bytes");
        r.device_release(0).expect("release event");
        drop(pinned);
        send(&told, u8::from(bytes == [want; 16]));
        if !exit_at_once {
            wait_readable(&go_on, 20);
        }
        true
    }
}

#[test]
fn a_readers_release_event_orders_the_writers_next_frame_into_its_slot() {
    let _g = serial();
    let n = name("release");
    let w = Stream::create(&n, &spec(2), &CreateOptions::default()).expect("create");
    write(&w, 1);
    let (told_r, told_w) = pipe();
    let (go_r, go_w) = pipe();
    let child = fork(read_one_and_release(n.clone(), 1, told_w, go_r, false));
    assert_eq!(recv(&told_r), 1, "the reader saw the frame's bytes");
    let before = fake_counts();
    for value in 2..6 {
        write(&w, value); // slot reuse: waits on the reader's (recorded) release event
    }
    let after = fake_counts();
    assert_eq!(after.events, before.events + 1, "the writer opened the reader's release event once");
    send(&go_w, 0);
    assert_eq!(wait(child), 0);
    drop(w);
    framebus::unlink(&n).expect("unlink");
}

#[test]
fn a_reader_that_exited_does_not_stop_the_writer() {
    let _g = serial();
    let n = name("gone");
    let w = Stream::create(&n, &spec(2), &CreateOptions::default()).expect("create");
    write(&w, 7);
    let (told_r, told_w) = pipe();
    let (go_r, _go_w) = pipe();
    let child = fork(read_one_and_release(n.clone(), 7, told_w, go_r, true));
    assert_eq!(recv(&told_r), 1);
    assert_eq!(wait(child), 0);
    for value in 8..12 {
        write(&w, value); // its release event is gone with it: skipped, not an error
    }
    assert_eq!(w.latest_seq(), 5);
    drop(w);
    framebus::unlink(&n).expect("unlink");
}

#[test]
fn handles_of_one_process_share_one_opening_and_give_it_back() {
    let _g = serial();
    let n = name("share");
    let w = Stream::create(&n, &spec(3), &CreateOptions::default()).expect("create");
    let (told_r, told_w) = pipe();
    let stream = n.clone();
    let child = fork(move || {
        let a = Stream::open(&stream, ReaderMode::Latest).expect("open a");
        let b = Stream::open(&stream, ReaderMode::Lossless).expect("open b");
        let both = fake_counts();
        drop(a);
        let one = fake_counts();
        drop(b);
        let none = fake_counts();
        let ok = both.openings == 1 && both.events == 3 && one.openings == 1 && none.openings == 0 && none.events == 0;
        send(&told_w, u8::from(ok));
        true
    });
    assert_eq!(recv(&told_r), 1);
    assert_eq!(wait(child), 0);
    drop(w);
    framebus::unlink(&n).expect("unlink");
}

#[test]
fn unlink_frees_what_the_creator_allocated() {
    let _g = serial();
    let n = name("free");
    let before = fake_counts();
    let w = Stream::create(&n, &spec(4), &CreateOptions::default()).expect("create");
    let made = fake_counts();
    assert_eq!((made.allocations, made.events), (before.allocations + 1, before.events + 4));
    drop(w);
    assert_eq!(fake_counts().allocations, before.allocations + 1, "closing the creator's handle keeps the memory for other processes");
    framebus::unlink(&n).expect("unlink");
    let after = fake_counts();
    assert_eq!((after.allocations, after.events), (before.allocations, before.events));
}

#[test]
fn a_host_open_of_a_device_stream_without_a_mirror_is_refused() {
    let _g = serial();
    let n = name("hostonly");
    let w = Stream::create(&n, &spec(2), &CreateOptions::default()).expect("create");
    let err = Stream::open_with(&n, ReaderMode::Latest, DeviceAccess::Host).err().expect("refused");
    assert!(err.to_string().contains("no CPU mirror"), "{err}");
    drop(w);
    framebus::unlink(&n).expect("unlink");
}

/// What `f` returned on a thread of its own, or None when it had not returned within `bound`
/// (the thread is left behind: a wait that would never have ended).
fn within<T: Send + 'static>(bound: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(bound).ok()
}

#[test]
fn a_waiting_reader_learns_that_the_owner_died_whatever_its_deadline() {
    let _g = serial();
    let n = name("owner");
    let (told_r, told_w) = pipe();
    let stream = n.clone();
    let owner = fork(move || {
        let w = Stream::create(&stream, &spec(2), &CreateOptions::default()).expect("create");
        write(&w, 3);
        send(&told_w, 1);
        loop {
            std::thread::sleep(Duration::from_secs(1)); // until killed
        }
    });
    assert_eq!(recv(&told_r), 1);
    let r = Arc::new(Stream::open_with(&n, ReaderMode::Latest, DeviceAccess::Device).expect("open"));
    let waits: Vec<_> = [Deadline::never(), Deadline::after(Some(Duration::from_secs(30)))]
        .into_iter()
        .map(|deadline| {
            let r = r.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(r.wait_pinned(deadline, &mut || true).err());
            });
            rx
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200)); // both are waiting (not asserted)
                                                    // SAFETY: kills our own child.
    assert_eq!(unsafe { libc::kill(owner, libc::SIGKILL) }, 0);
    wait(owner);
    for rx in waits {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Some(Error::DeviceUnavailable { reason, .. })) => assert!(reason.contains(&format!("pid {owner}")), "{reason}"),
            Ok(other) => panic!("the wait ended with {other:?}"),
            Err(_) => panic!("a reader waited on after the stream's owner was killed"),
        }
    }
    // A wait begun after the death is told too.
    let again = r.clone();
    let late = within(Duration::from_secs(10), move || again.wait_for(again.seen_seq(), Deadline::never(), &mut || true).err());
    assert!(matches!(late, Some(Some(Error::DeviceUnavailable { .. }))), "{late:?}");
    drop(r);
    framebus::unlink(&n).expect("unlink");
}
