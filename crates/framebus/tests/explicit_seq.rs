//! Frames written with explicit sequence numbers (what a bridge does to keep its source's
//! numbers): they must increase, gaps are allowed, a lossless reader still gets every frame in
//! order and counts the gaps as missed, and a refused number writes nothing.

use std::sync::Arc;
use std::time::Duration;

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

struct Name(String);

impl Drop for Name {
    fn drop(&mut self) {
        let _ = framebus::unlink(&self.0);
    }
}

fn stream(tag: &str, slots: u32) -> (Name, Stream) {
    let name = Name(format!("seq-{tag}-{}", std::process::id()));
    let mut spec = StreamSpec::new("|u1", 1, vec![16]);
    spec.slots = slots;
    let s = Stream::create(&name.0, &spec, &CreateOptions::default()).unwrap();
    (name, s)
}

fn write(s: &Stream, byte: u8, seq: Option<u64>) -> Result<u64, Error> {
    let info = FrameInfo { seq, ..FrameInfo::default() };
    s.write(&[byte; 16], &info, Deadline::after(Some(Duration::from_secs(1))), &mut || true)
}

fn read_new(s: &Stream) -> (u64, u8) {
    s.read_new(Deadline::after(Some(Duration::from_secs(1))), &mut || true, |f| (f.seq, f.payload[0])).unwrap()
}

#[test]
fn explicit_numbers_are_kept_and_must_increase() {
    let (_name, s) = stream("inc", 4);
    assert_eq!(write(&s, 1, Some(10)).unwrap(), 10);
    assert_eq!(s.latest_seq(), 10);
    assert_eq!(write(&s, 2, None).unwrap(), 11, "no number given: the next one");
    for bad in [5, 11, 0, framebus::MAX_SEQ + 1] {
        match write(&s, 9, Some(bad)) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("must increase") || msg.contains("largest"), "{msg}"),
            other => panic!("seq {bad}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(s.latest_seq(), 11, "a refused number writes nothing");
    let r = s.read_latest(|f| (f.seq, f.payload[0])).unwrap();
    assert_eq!(r, (11, 2));
    assert_eq!(write(&s, 3, Some(framebus::MAX_SEQ)).unwrap(), framebus::MAX_SEQ);
}

#[test]
fn a_refused_number_at_commit_discards_the_claimed_slot() {
    let (name, s) = stream("commit", 4);
    write(&s, 1, Some(7)).unwrap();
    let guard = s.begin_write(Deadline::never(), &mut || true).unwrap();
    let err = guard.commit(&FrameInfo { seq: Some(7), ..FrameInfo::default() }).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(!s.lock_held(), "the write lock is released");
    let other = Stream::open(&name.0, ReaderMode::Latest).unwrap();
    assert_eq!(other.latest_seq(), 7);
    assert_eq!(write(&s, 2, None).unwrap(), 8);
}

#[test]
fn a_lossless_reader_follows_gaps_in_order() {
    let (name, s) = stream("gaps", 4);
    let r = Arc::new(Stream::open(&name.0, ReaderMode::Lossless).unwrap());
    // Three frames with gaps, all still unread: the reader must take them oldest first.
    write(&s, 1, Some(3)).unwrap();
    write(&s, 2, Some(4)).unwrap();
    write(&s, 3, Some(9)).unwrap();
    assert_eq!(read_new(&r), (3, 1));
    assert_eq!(read_new(&r), (4, 2));
    assert_eq!(read_new(&r), (9, 3));
    assert_eq!(r.missed().1, 2 + 4, "numbers skipped by the writer count as missed");
    // The writer keeps going past the ring's size; the reader loses nothing.
    let reader = std::thread::spawn({
        let r = Arc::clone(&r);
        move || (0..40).map(|_| read_new(&r)).collect::<Vec<_>>()
    });
    for i in 0..40u64 {
        write(&s, i as u8, Some(20 + 3 * i)).unwrap();
    }
    let got = reader.join().unwrap();
    let want: Vec<(u64, u8)> = (0..40u64).map(|i| (20 + 3 * i, i as u8)).collect();
    assert_eq!(got, want);
}
