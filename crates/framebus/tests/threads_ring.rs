//! One writer thread and three reader threads (two latest, one lossless), each with its own
//! handle on a real segment, moving checksummed frames: no reader sees a torn frame and the
//! lossless reader sees every frame. Run under ThreadSanitizer by scripts/sanitizers.sh, this
//! checks that the payload copies are ordered by the slot protocol's atomics (a missing
//! release/acquire shows up as a data race between the writer's copy and a reader's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

const FRAME: usize = 64 * 1024;

fn frames() -> u64 {
    std::env::var("FRAMEBUS_THREAD_FRAMES").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

/// Word i of frame `id` is `i * GOLDEN ^ key(id)`: every word depends on the frame.
fn fill(buf: &mut [u8], id: u64) {
    let key = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key).to_ne_bytes());
    }
}

fn intact(buf: &[u8], id: u64) -> bool {
    let mut want = vec![0u8; buf.len()];
    fill(&mut want, id);
    want == buf
}

struct Name(String);

impl Drop for Name {
    fn drop(&mut self) {
        let _ = framebus::unlink(&self.0);
    }
}

#[test]
fn writer_and_readers_on_threads_never_tear() {
    let name = Name(format!("threads-{}", std::process::id()));
    let mut spec = StreamSpec::new("|u1", 1, vec![FRAME as u64]);
    spec.slots = 4;
    let writer = Stream::create(&name.0, &spec, &CreateOptions::default()).unwrap();
    let total = frames();
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for mode in [ReaderMode::Latest, ReaderMode::Latest, ReaderMode::Lossless] {
        let s = Arc::new(Stream::open(&name.0, mode).unwrap());
        let done = Arc::clone(&done);
        readers.push(std::thread::spawn(move || {
            let (mut seen, mut torn, mut last) = (0u64, 0u64, 0u64);
            loop {
                let r = s.read_new(Deadline::after(Some(Duration::from_millis(50))), &mut || true, |f| {
                    (f.seq, f.frame_id, intact(f.payload, f.frame_id as u64))
                });
                match r {
                    Ok((seq, _, ok)) => {
                        seen += 1;
                        torn += u64::from(!ok);
                        if mode == ReaderMode::Lossless {
                            assert_eq!(seq, last + 1, "the lossless reader skipped a frame");
                        }
                        last = seq;
                    }
                    Err(Error::Timeout { .. }) if done.load(Ordering::SeqCst) => return (mode, seen, torn, last),
                    Err(Error::Timeout { .. }) => {}
                    Err(e) => panic!("read_new: {e}"),
                }
                // Views too: pin the newest frame and check it in place.
                if let Ok(p) = s.pin_latest() {
                    let f = p.frame();
                    torn += u64::from(!intact(f.payload, f.frame_id as u64));
                }
            }
        }));
    }
    let mut buf = vec![0u8; FRAME];
    for id in 1..=total {
        fill(&mut buf, id);
        writer
            .write(
                &buf,
                &FrameInfo { frame_id: Some(id as i64), ..FrameInfo::default() },
                Deadline::after(Some(Duration::from_secs(60))),
                &mut || true,
            )
            .unwrap();
    }
    done.store(true, Ordering::SeqCst);
    for r in readers {
        let (mode, seen, torn, last) = r.join().unwrap();
        assert_eq!(torn, 0, "{mode:?} reader saw torn frames");
        assert!(seen > 0);
        if mode == ReaderMode::Lossless {
            assert_eq!((seen, last), (total, total), "the lossless reader lost frames");
        }
    }
}
