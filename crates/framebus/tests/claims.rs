//! One claim at a time, pinned commits and aborts, the end of the sequence range, and closed
//! handles that stop holding the writer back (issue #21's state machine, without Python).

use std::sync::Arc;
use std::time::Duration;

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec, MAX_SEQ};

struct Name(String);

impl Drop for Name {
    fn drop(&mut self) {
        let _ = framebus::unlink(&self.0);
    }
}

fn stream(tag: &str, slots: u32) -> (Name, Arc<Stream>) {
    let name = Name(format!("claims-{tag}-{}", std::process::id()));
    let mut spec = StreamSpec::new("|u1", 1, vec![8]);
    spec.slots = slots;
    let s = Stream::create(&name.0, &spec, &CreateOptions::default()).unwrap();
    (name, Arc::new(s))
}

fn soon() -> Deadline {
    Deadline::after(Some(Duration::from_millis(200)))
}

fn write(s: &Stream, byte: u8) -> Result<u64, Error> {
    s.write(&[byte; 8], &FrameInfo::default(), soon(), &mut || true)
}

#[test]
fn a_second_claim_in_the_same_thread_is_refused() {
    let (_n, s) = stream("second", 4);
    let mut g = s.begin_loan(soon(), &mut || true).unwrap();
    assert_eq!(g.seq(), 1);
    assert!(matches!(s.begin_loan(soon(), &mut || true), Err(Error::LoanOpen { seq: 1, .. })));
    assert!(matches!(write(&s, 9), Err(Error::LoanOpen { .. })));
    // An explicit hold of the lock is not a claim: write() under it is fine once the loan ends.
    g.payload_mut().fill(3);
    assert_eq!(g.commit(&FrameInfo::default()).unwrap(), 1);
    s.acquire(soon(), &mut || true).unwrap();
    assert_eq!(write(&s, 4).unwrap(), 2);
    s.release().unwrap();
    assert!(!s.lock_held());
}

/// A kept frame pins its slot until the writer needs it: then the frame becomes the writing
/// process's private copy (the bytes stay exactly the committed ones) and the slot is written.
/// Before, the writer waited for its own kept array forever.
#[test]
fn a_kept_frame_gives_its_slot_to_its_writer_and_keeps_its_bytes() {
    let (n, s) = stream("pinned", 2);
    let reader = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    let mut g = s.begin_loan(soon(), &mut || true).unwrap();
    g.payload_mut().fill(7);
    let kept = g.commit_pinned(&FrameInfo::default(), false).unwrap();
    assert_eq!(kept.seq(), 1);
    assert!(!kept.detached());
    assert!(kept.pins_slot());
    // The reader takes frame 1 (and so holds back the frames it has not taken yet).
    reader.read_latest(|_| ()).unwrap();
    // Slot B takes frame 2; frame 3 needs slot A, which only the kept frame holds.
    assert_eq!(write(&s, 8).unwrap(), 2);
    assert!(kept.pins_slot(), "nothing was evicted while a slot was free");
    assert_eq!(write(&s, 9).unwrap(), 3);
    assert!(!kept.pins_slot());
    assert!(kept.detached(), "the kept bytes are a private copy now");
    assert_eq!(kept.bytes(), &[7; 8]);
    for byte in 10..20 {
        write(&s, byte).unwrap();
        assert_eq!(reader.read_latest(|f| f.payload.to_vec()).unwrap(), vec![byte; 8]);
        assert_eq!(kept.bytes(), &[7; 8]);
    }
    drop(kept);
    for byte in 20..30 {
        write(&s, byte).unwrap();
        assert_eq!(reader.read_latest(|f| f.payload.to_vec()).unwrap(), vec![byte; 8]);
    }
}

/// Kept frames of several loans, the same slot kept again after an eviction, and another
/// handle of the same process keeping frames: the writer never waits, and every kept frame
/// keeps its bytes.
#[test]
fn many_kept_frames_never_block_the_writer() {
    let (n, s) = stream("many", 2);
    let other = Arc::new(Stream::open(&n.0, ReaderMode::Latest).unwrap());
    let reader = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    let mut kept = Vec::new();
    for round in 0u8..40 {
        let by = if round % 3 == 0 { &other } else { &s };
        let mut g = by.begin_loan(soon(), &mut || true).unwrap();
        g.payload_mut().fill(round);
        kept.push((round, g.commit_pinned(&FrameInfo::default(), round % 2 == 0).unwrap()));
        write(&s, 200).unwrap();
        assert_eq!(reader.read_latest(|f| f.payload.to_vec()).unwrap(), vec![200; 8]);
        if round % 5 == 4 {
            kept.remove(0);
        }
    }
    for (round, k) in &kept {
        assert_eq!(k.bytes(), &[*round; 8]);
    }
}

/// A slot pinned by a view (not a kept frame) is not taken: the write times out and says what
/// holds each slot.
#[test]
fn a_write_blocked_by_a_view_says_what_holds_each_slot() {
    let (n, s) = stream("blocked", 2);
    let reader = Arc::new(Stream::open(&n.0, ReaderMode::Latest).unwrap());
    write(&s, 1).unwrap();
    let view = reader.pin_latest().unwrap();
    write(&s, 2).unwrap();
    let err = write(&s, 3).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::NoFreeSlot { .. }), "{text}");
    assert!(text.contains("slot 0 is pinned by a view in this process"), "{text}");
    assert!(text.contains("slot 1 holds the newest frame (2)"), "{text}");
    drop(view);
    assert_eq!(write(&s, 3).unwrap(), 3);
}

/// Memory of a loan that outlives its commit (a writable alias the caller kept) writes into
/// pages private to the writing handle: another handle sees exactly the committed bytes, and once
/// the kept slot is dropped the writer's next frames in that slot reach everyone again.
#[test]
fn writes_through_a_kept_loan_after_commit_stay_private() {
    let (n, s) = stream("detached", 2);
    let reader = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    let mut g = s.begin_loan(soon(), &mut || true).unwrap();
    g.payload_mut().fill(7);
    let alias = g.payload_ptr();
    let kept = g.commit_pinned(&FrameInfo::default(), true).unwrap();
    assert!(kept.detached());
    // SAFETY: the slot's pages stay mapped (privately) while `kept` lives; this stands for a
    // stale writable NumPy view or memoryview of the loan's array.
    unsafe { std::ptr::write_bytes(alias, 99, 8) };
    assert_eq!(reader.read_latest(|f| f.payload.to_vec()).unwrap(), vec![7; 8]);
    assert_eq!(kept.bytes(), &[99; 8], "the writing handle sees its own copy");
    drop(kept);
    // Both slots rewritten: the kept slot is shared again.
    for byte in [8, 9, 10] {
        write(&s, byte).unwrap();
        assert_eq!(reader.read_latest(|f| f.payload.to_vec()).unwrap(), vec![byte; 8]);
    }
}

#[test]
fn a_pinned_abort_keeps_the_empty_slot_until_dropped() {
    let (n, s) = stream("abort", 2);
    // A reader that has read (frame 1) but not frame 2 keeps the writer off frame 2's slot.
    let reader = Stream::open(&n.0, ReaderMode::Latest).unwrap();
    write(&s, 1).unwrap();
    reader.read_latest(|_| ()).unwrap();
    write(&s, 2).unwrap();
    let g = s.begin_loan(soon(), &mut || true).unwrap();
    let kept = g.abort_pinned();
    assert_eq!(kept.seq(), 0);
    assert!(!s.lock_held());
    // The newest frame's slot and the kept slot: the kept (empty) slot is given up.
    assert_eq!(write(&s, 3).unwrap(), 3);
    assert!(!kept.pins_slot());
    drop(kept);
    assert_eq!(write(&s, 4).unwrap(), 4);
}

#[test]
fn the_end_of_the_sequence_range_is_refused() {
    let (_n, s) = stream("end", 4);
    let info = FrameInfo { seq: Some(MAX_SEQ), ..FrameInfo::default() };
    assert_eq!(s.write(&[1; 8], &info, soon(), &mut || true).unwrap(), MAX_SEQ);
    assert!(matches!(write(&s, 2), Err(Error::SequenceExhausted { .. })));
    // A claim does not know yet which number it will get; its commit is refused and discards it.
    let g = s.begin_loan(soon(), &mut || true).unwrap();
    assert!(matches!(g.commit(&FrameInfo::default()), Err(Error::SequenceExhausted { .. })));
    assert_eq!(s.latest_seq(), MAX_SEQ);
    assert!(!s.lock_held());
}

#[test]
fn a_closed_lossless_handle_stops_backpressure_and_keeps_its_pin() {
    let (n, s) = stream("closed", 3);
    write(&s, 1).unwrap();
    let reader = Arc::new(Stream::open(&n.0, ReaderMode::Lossless).unwrap());
    write(&s, 2).unwrap();
    let view = reader.wait_pinned(soon(), &mut || true).unwrap();
    assert_eq!(view.seq(), 2);
    reader.end_backpressure();
    drop(reader); // the view keeps the core handle alive
    for i in 3..20 {
        write(&s, i).unwrap();
    }
    assert_eq!(view.frame().payload, &[2; 8]);
}

/// `pin_seq` against a writer racing through a small ring: a pin either fails or holds exactly
/// the frame asked for, whose bytes stay put while pinned (each frame's 8 bytes all equal its
/// sequence number modulo 256).
#[test]
fn pin_seq_never_pins_another_frame() {
    let (n, w) = stream("pinseq", 3);
    let r = Arc::new(Stream::open(&n.0, ReaderMode::Latest).unwrap());
    let writer = {
        let w = w.clone();
        std::thread::spawn(move || {
            for i in 1..=20_000u64 {
                let _ = write(&w, i as u8);
            }
        })
    };
    let (mut hits, mut misses) = (0u32, 0u32);
    while !writer.is_finished() {
        let newest = r.latest_seq();
        for seq in [newest, newest.saturating_sub(1), newest.saturating_sub(2)] {
            match r.pin_seq(seq) {
                Some(p) => {
                    hits += 1;
                    assert_eq!(p.seq(), seq);
                    let first = p.frame().payload.to_vec();
                    std::thread::yield_now();
                    assert_eq!(first, vec![seq as u8; 8], "pinned frame {seq} holds another frame's bytes");
                    assert_eq!(p.frame().payload, &first[..], "pinned frame {seq} changed under its pin");
                }
                None => misses += 1,
            }
        }
    }
    writer.join().unwrap();
    // How many pins win the race depends on the scheduler (none at all on a loaded 2-core
    // machine, where the writer reuses a slot within microseconds); once the writer stops, the
    // newest frame is there to pin.
    let _ = (hits, misses);
    let last = r.latest_seq();
    let p = r.pin_seq(last).expect("the newest frame can always be pinned");
    assert_eq!(p.frame().payload, &[last as u8; 8]);
}

#[test]
fn pin_seq_on_a_lossless_handle_releases_earlier_frames() {
    let (n, w) = stream("pinseq-lossless", 4);
    let r = Arc::new(Stream::open(&n.0, ReaderMode::Lossless).unwrap());
    for b in 1..=4 {
        write(&w, b).unwrap();
    }
    assert!(matches!(write(&w, 5), Err(Error::NoFreeSlot { .. })));
    let p = r.pin_seq(3).unwrap();
    assert_eq!(p.frame().payload, &[3; 8]);
    drop(p);
    assert_eq!(write(&w, 5).unwrap(), 5);
    assert!(r.pin_seq(99).is_none());
}
