//! A reader waiting on a stream whose name was taken by a new segment (a producer that restarted
//! and created the stream anew), or removed with no handle left that writes it, is told so
//! (`Error::Replaced`) whatever its deadline; a stream whose name was removed while a handle that
//! writes it lives goes on, and an ended one still ends. Each wait runs on a thread of its own
//! and must end within a generous bound: a wait that would never end fails the test instead of
//! hanging it.

use std::sync::Arc;
use std::time::Duration;

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

fn name(tag: &str) -> String {
    format!("t-replaced-{}-{tag}", std::process::id())
}

fn create(name: &str, len: u64) -> Stream {
    Stream::create(name, &StreamSpec::new("|u1", 1, vec![len]), &CreateOptions::default()).expect("create")
}

fn write(s: &Stream, value: u8) -> u64 {
    let frame = vec![value; s.spec().frame_bytes().unwrap_or(0) as usize];
    s.write(&frame, &FrameInfo::default(), Deadline::after(Some(Duration::from_secs(10))), &mut || true).expect("write")
}

/// Starts a wait for the next frame on `r` without a deadline (and one with 30 s); returns the
/// receivers of both results.
fn start_waits(r: &Arc<Stream>) -> Vec<std::sync::mpsc::Receiver<framebus::Result<u64>>> {
    [Deadline::never(), Deadline::after(Some(Duration::from_secs(30)))]
        .into_iter()
        .map(|deadline| {
            let r = r.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(r.wait_for(r.seen_seq(), deadline, &mut || true));
            });
            rx
        })
        .collect()
}

fn outcome(rx: std::sync::mpsc::Receiver<framebus::Result<u64>>) -> framebus::Result<u64> {
    rx.recv_timeout(Duration::from_secs(10)).expect("the wait did not end: it would have waited forever")
}

#[test]
fn a_name_taken_by_a_new_stream_ends_the_wait() {
    let n = name("new");
    let w = create(&n, 8);
    write(&w, 1);
    let r = Arc::new(Stream::open(&n, ReaderMode::Lossless).expect("open"));
    let waits = start_waits(&r);
    std::thread::sleep(Duration::from_millis(200)); // both are waiting (not asserted)
    framebus::unlink(&n).expect("unlink");
    let fresh = create(&n, 4); // a restarted producer; its writer is alive
    for rx in waits {
        match outcome(rx) {
            Err(e @ Error::Replaced { unlinked: false, .. }) => {
                let text = e.to_string();
                assert!(text.contains("replaced by a new stream of the same name") && text.contains("open it again"), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }
    drop((w, fresh));
    framebus::unlink(&n).expect("unlink");
}

#[test]
fn a_name_removed_with_no_writer_left_ends_the_wait() {
    let n = name("gone");
    let w = create(&n, 8);
    write(&w, 1);
    let r = Arc::new(Stream::open(&n, ReaderMode::Latest).expect("open"));
    drop(w); // closed without end()
    let waits = start_waits(&r);
    framebus::unlink(&n).expect("unlink");
    for rx in waits {
        match outcome(rx) {
            Err(e @ Error::Replaced { unlinked: true, .. }) => assert!(e.to_string().contains("was unlinked"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_name_removed_while_its_writer_lives_goes_on_and_an_end_still_ends() {
    let n = name("lives");
    let w = create(&n, 8);
    write(&w, 1);
    let r = Arc::new(Stream::open(&n, ReaderMode::Lossless).expect("open"));
    framebus::unlink(&n).expect("unlink");
    let waits = start_waits(&r);
    std::thread::sleep(Duration::from_millis(700)); // several looks at the name (not asserted)
    write(&w, 2);
    for rx in waits {
        assert_eq!(outcome(rx).expect("the frame written after the unlink"), 2);
    }
    r.read_new(Deadline::immediate(), &mut || true, |f| f.seq).expect("read");
    let waits = start_waits(&r);
    w.end();
    for rx in waits {
        assert!(matches!(outcome(rx), Err(Error::Ended { .. })));
    }
}
