//! A copy write may rewrite the newest frame's slot once every reader has taken that frame (a
//! reader in lock-step with its writer then finds each frame in the slot the previous one left,
//! still in the CPU caches). Readers that look for the newest frame meanwhile wait for the new
//! one; a rewrite that is given up leaves no newest frame, never a torn or stale one.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

struct Name(String);

impl Drop for Name {
    fn drop(&mut self) {
        let _ = framebus::unlink(&self.0);
    }
}

fn stream(tag: &str, slots: u32) -> (Name, Arc<Stream>) {
    let name = Name(format!("rewrite-{tag}-{}", std::process::id()));
    // Frames of REWRITE_MIN bytes: smaller ones never rewrite the newest frame's slot.
    let mut spec = StreamSpec::new("|u1", 1, vec![framebus::REWRITE_MIN]);
    spec.slots = slots;
    let s = Stream::create(&name.0, &spec, &CreateOptions::default()).unwrap();
    (name, Arc::new(s))
}

fn long() -> Deadline {
    Deadline::after(Some(Duration::from_secs(20)))
}

fn write(s: &Stream, byte: u8) -> u64 {
    s.write(
        &vec![byte; framebus::REWRITE_MIN as usize],
        &FrameInfo { frame_id: Some(byte as i64), ..FrameInfo::default() },
        long(),
        &mut || true,
    )
    .unwrap()
}

/// (seq, slot, every byte equal to the first) of the frame read_new returns.
fn take(r: &Stream) -> (u64, u32, u8) {
    r.read_new(long(), &mut || true, |f| {
        assert!(f.payload.iter().all(|&b| b == f.payload[0]), "a torn frame");
        (f.seq, f.slot, f.payload[0])
    })
    .unwrap()
}

#[test]
fn a_reader_in_step_gets_every_frame_in_one_slot() {
    let (n, w) = stream("step", 4);
    let r = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    let l = Stream::open(&n.0, ReaderMode::Lossless).unwrap();
    write(&w, 1);
    let (_, first, _) = take(&r);
    take(&l);
    for byte in 2..40u8 {
        write(&w, byte);
        let (seq, slot, got) = take(&r);
        assert_eq!((seq, got), (byte as u64, byte));
        assert_eq!(slot, first, "frame {seq} went to slot {slot}, not the slot every reader had finished with");
        assert_eq!(take(&l).2, byte);
    }
}

#[test]
fn a_reader_that_has_not_taken_the_newest_frame_keeps_it() {
    let (n, w) = stream("behind", 4);
    let fast = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    let slow = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    write(&w, 1);
    let (_, slot1, _) = take(&fast);
    take(&slow);
    write(&w, 2);
    let (_, slot2, _) = take(&fast); // the slow reader has not taken frame 2
    write(&w, 3);
    let (seq, slot3, _) = take(&fast);
    assert_eq!(seq, 3);
    assert_ne!(slot3, slot2, "frame 2, which a reader had not taken, was overwritten");
    assert_eq!(slot2, slot1);
    // Frame 3 is the newest, and the slow reader still finds it whole.
    assert_eq!(slow.read_latest(|f| (f.seq, f.payload[0])).unwrap(), (3, 3));
}

#[test]
fn a_view_of_the_newest_frame_and_a_loan_never_rewrite_it() {
    let (n, w) = stream("view", 4);
    let r = Arc::new(Stream::open(&n.0, ReaderMode::Latest).unwrap());
    write(&w, 1);
    let view = r.pin_latest().unwrap();
    write(&w, 2);
    assert_ne!(view.slot(), r.read_latest(|f| f.slot).unwrap());
    assert!(view.frame().payload.iter().all(|&b| b == 1));
    drop(view);
    // Every reader took frame 2; a loan still takes another slot (it may stay open for long).
    let newest = r.read_latest(|f| f.slot).unwrap();
    let mut g = w.begin_loan(long(), &mut || true).unwrap();
    assert_ne!(g.slot(), newest);
    g.payload_mut().fill(3);
    g.commit(&FrameInfo::default()).unwrap();
}

#[test]
fn a_reader_looking_during_a_rewrite_gets_the_new_frame_whole() {
    let (n, w) = stream("during", 2);
    let r = Arc::new(Stream::open(&n.0, ReaderMode::Latest).unwrap());
    write(&w, 1);
    take(&r);
    let newest = r.read_latest(|f| f.slot).unwrap();
    let mut g = w.begin_copy(long(), &mut || true).unwrap();
    assert_eq!(g.slot(), newest, "the claim did not take the slot every reader had finished with");
    let half = framebus::REWRITE_MIN as usize / 2;
    g.payload_mut()[..half].fill(2); // half written
    let (tx, rx) = mpsc::channel();
    let reader = {
        let r = r.clone();
        thread::spawn(move || {
            tx.send(()).unwrap();
            r.read_latest(|f| (f.seq, f.payload.to_vec())).unwrap()
        })
    };
    rx.recv().unwrap();
    thread::sleep(Duration::from_millis(30)); // let it reach the wait (the result holds either way)
    g.payload_mut()[half..].fill(2);
    g.commit(&FrameInfo::default()).unwrap();
    let (seq, bytes) = reader.join().unwrap();
    assert_eq!(seq, 2);
    assert!(bytes.iter().all(|&b| b == 2));
}

#[test]
fn a_rewrite_given_up_leaves_no_newest_frame_until_the_next_one() {
    let (n, w) = stream("abort", 2);
    let r = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    write(&w, 1);
    take(&r);
    let g = w.begin_copy(long(), &mut || true).unwrap();
    drop(g); // given up: frame 1's slot is neither frame 1 nor a new frame any more
    assert!(matches!(r.read_latest(|f| f.seq), Err(Error::NewestLost { .. })));
    assert_eq!(w.latest_record().unwrap().0, 1);
    let waiter = {
        let name = n.0.clone();
        thread::spawn(move || {
            let r2 = Stream::open(&name, ReaderMode::Latest).unwrap();
            take(&r2)
        })
    };
    thread::sleep(Duration::from_millis(30));
    write(&w, 2);
    assert_eq!(waiter.join().unwrap().2, 2);
    assert_eq!(take(&r).0, 2);
}

#[test]
fn a_writer_that_dies_during_a_rewrite_costs_readers_that_frame_not_a_hang() {
    let (n, w) = stream("killed", 2);
    let r = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    write(&w, 1);
    take(&r);
    // The writing handle is a handle like any other for the next writer: it takes frame 1 too.
    w.read_latest(|_| ()).unwrap();
    // SAFETY: the child only claims through its own handle and leaves with _exit; no other
    // thread of this test holds a framebus lock across the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            let child = Stream::open(&n.0, ReaderMode::Latest).unwrap();
            let mut g = child.begin_copy(long(), &mut || true).unwrap();
            g.payload_mut()[..10].fill(9);
            std::mem::forget(g);
            // Killed mid-write: no destructor runs, the lock stays with this dead process.
            // SAFETY: signals this very process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        })
        .is_ok();
        // SAFETY: leaves the child at once (reached only if the claim failed).
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "the child did not reach its claim (status {status})");
    // The child's claim took frame 1's slot (every reader had taken frame 1): a reader neither
    // hangs nor sees the half-written bytes; the frame is gone.
    assert!(matches!(r.read_latest(|f| f.seq), Err(Error::NewestLost { .. })));
    // The next write takes the lock over and the stream goes on.
    write(&w, 3);
    let (seq, _, byte) = take(&r);
    assert_eq!((seq, byte), (2, 3));
}

#[test]
fn a_handle_closed_with_its_rewrite_open_costs_readers_that_frame_not_a_hang() {
    let (n, w) = stream("closed", 2);
    let r = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    write(&w, 1);
    take(&r);
    // The writing handle is a handle like any other for the next writer: it takes frame 1 too.
    w.read_latest(|_| ()).unwrap();
    {
        let other = Stream::open(&n.0, ReaderMode::Latest).unwrap();
        let g = other.begin_copy(long(), &mut || true).unwrap();
        std::mem::forget(g);
        // Closing the handle lets go of the lock; the claim stays open.
    }
    assert!(matches!(r.read_latest(|f| f.seq), Err(Error::NewestLost { .. })));
    write(&w, 3);
    let (seq, _, byte) = take(&r);
    assert_eq!((seq, byte), (2, 3));
}

#[test]
fn a_handle_that_never_read_does_not_hold_the_newest_frame_back() {
    let (n, w) = stream("idle", 4);
    // The creator's own handle hands the name on (as a benchmark driver or a launcher does);
    // the writer and the reader are other handles.
    let writer = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    let r = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    write(&writer, 1);
    let (_, first, _) = take(&r);
    for byte in 2..10u8 {
        write(&writer, byte);
        assert_eq!(take(&r), (byte as u64, first, byte));
    }
    // The idle handle still reads the newest frame whole.
    assert_eq!(w.read_latest(|f| (f.seq, f.payload[0])).unwrap(), (9, 9));
}
