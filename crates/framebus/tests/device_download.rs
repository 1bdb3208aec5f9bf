//! `DeviceDownload` against the strict fake door: a device stream without a CPU mirror read on
//! the host. The bytes and what was published with them arrive; one page-locked buffer and one
//! CUDA stream serve every frame and are given back; the reader entry says it downloads; the
//! release event it records lets the writer go on; a dead owner is reported by pid.
//!
//! The door is chosen once per process from FRAMEBUS_CUDA, set before the first use; the fake's
//! counts are per process, so every test holds the lock of `fake_door::serial`.

use std::time::Duration;

use framebus::gpu::fake::fake_counts;
use framebus::ring::Source;
use framebus::{CreateOptions, Deadline, DeviceDownload, DeviceStream, Error, FrameInfo, ReaderMode, StreamSpec};

mod fake_door;
use fake_door::{serial, soon};

fn name(tag: &str) -> String {
    fake_door::name("devdl", tag)
}

fn spec(slots: u32) -> StreamSpec {
    fake_door::device_spec(slots, vec![4, 6])
}

fn frame(seq: u64) -> Vec<u8> {
    (0..24u64).map(|i| ((i * 3 + seq * 7) % 251) as u8).collect()
}

fn write(w: &DeviceStream, seq: u64) -> u64 {
    let bytes = frame(seq);
    let meta = format!("m{seq}");
    let info = FrameInfo { frame_id: Some(seq as i64 * 10), meta: meta.as_bytes(), ..FrameInfo::default() };
    w.write(Source::Host(bytes.as_ptr()), 0, &info, soon(), &mut || true).expect("write")
}

#[test]
fn downloads_bytes_and_metadata_into_one_reused_page_locked_buffer() {
    let _g = serial();
    let n = name("bytes");
    let w = DeviceStream::create(&n, &spec(3), &CreateOptions::default()).expect("create");
    let before = fake_counts();
    {
        let r = DeviceStream::open(&n, ReaderMode::Lossless).expect("open");
        let mut dl = DeviceDownload::new(r).expect("downloader");
        assert!(matches!(dl.latest(), Err(Error::Empty { .. })), "nothing written yet");
        for seq in 1..=20 {
            assert_eq!(write(&w, seq), seq);
            let got = dl.next(soon(), &mut || true).expect("next");
            assert_eq!((got.seq, got.frame_id, got.meta.clone()), (seq, seq as i64 * 10, format!("m{seq}").into_bytes()));
            assert!(got.timestamp_ns > 0);
            assert_eq!(dl.bytes(), &frame(seq)[..], "frame {seq}");
        }
        write(&w, 21);
        write(&w, 22);
        let newest = dl.latest().expect("latest");
        assert_eq!(newest.seq, 22);
        assert_eq!(dl.bytes(), &frame(22)[..]);
        let during = fake_counts();
        assert_eq!(during.host_allocations_made - before.host_allocations_made, 1, "one page-locked buffer for every frame");
        assert_eq!((during.host_allocations, during.streams), (before.host_allocations + 1, before.streams + 1));
        // The entry is marked as a download; its role is still what it was.
        let snap = w.ring().snapshot().expect("snapshot");
        let entry = snap.readers.iter().find(|r| r.download).expect("a download entry");
        assert_eq!(framebus::ring::monitor::role_name(entry.role), "handle");
    }
    let after = fake_counts();
    assert_eq!((after.host_allocations, after.streams), (before.host_allocations, before.streams), "given back on drop");
    // The release events recorded after the copies order the writer: it goes on writing.
    for seq in 23..=30 {
        write(&w, seq);
    }
    assert!(w.ring().snapshot().expect("snapshot").readers.iter().all(|r| !r.download));
    drop(w);
    framebus::unlink(&n).expect("unlink");
}

#[test]
fn set_role_keeps_the_download_mark() {
    let _g = serial();
    let n = name("role");
    let w = DeviceStream::create(&n, &spec(2), &CreateOptions::default()).expect("create");
    let dl = DeviceDownload::new(DeviceStream::open(&n, ReaderMode::Latest).expect("open")).expect("downloader");
    dl.ring().set_role(framebus::ring::layout::role::RECORD, "out.mkv");
    let snap = w.ring().snapshot().expect("snapshot");
    let entry = snap.readers.iter().find(|r| r.download).expect("still a download");
    assert_eq!(framebus::ring::monitor::role_name(entry.role), "record");
    assert_eq!(entry.label, "out.mkv");
    drop(dl);
    drop(w);
    framebus::unlink(&n).expect("unlink");
}

#[test]
fn a_dead_owner_is_reported_by_pid() {
    let _g = serial();
    let n = name("owner");
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let stream = n.clone();
    // SAFETY: the test holds SERIAL, so no other test thread is inside framebus while forking;
    // the child only creates, writes, says so and sleeps until killed.
    let owner = unsafe { libc::fork() };
    assert!(owner >= 0);
    if owner == 0 {
        let w = DeviceStream::create(&stream, &spec(2), &CreateOptions::default()).expect("create");
        write(&w, 1);
        // SAFETY: writes one byte from a live local to the pipe's write end.
        unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) };
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let mut b = 0u8;
    // SAFETY: reads one byte into a live local from the pipe's read end.
    assert_eq!(unsafe { libc::read(fds[0], (&mut b as *mut u8).cast(), 1) }, 1);
    let mut dl = DeviceDownload::new(DeviceStream::open(&n, ReaderMode::Latest).expect("open")).expect("downloader");
    assert_eq!(dl.latest().expect("the frame while the owner lives").seq, 1);
    // SAFETY: kills and reaps our own child.
    unsafe {
        libc::kill(owner, libc::SIGKILL);
        libc::waitpid(owner, std::ptr::null_mut(), 0);
    }
    for result in [dl.latest(), dl.next(Deadline::never(), &mut || true)] {
        match result {
            Err(Error::DeviceUnavailable { reason, .. }) => assert!(reason.contains(&format!("pid {owner}")), "{reason}"),
            other => panic!("expected DeviceUnavailable, got {other:?}"),
        }
    }
    drop(dl);
    // SAFETY: closes the pipe's two descriptors, ours alone.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let _ = framebus::unlink(&n);
}
