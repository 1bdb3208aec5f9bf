//! The strict fake behind the GPU door: each refusal it shares with CUDA (or adds where CUDA's
//! leniency would hide a protocol bug), memory and events shared across forked processes, stale
//! handles, and that nothing leaks over many cycles.
//!
//! The fake's tables and counts are per process, so every test holds SERIAL (which also keeps
//! any other test thread out of the fake while one forks). Children run a closure and leave with
//! `_exit` (status 0 when it returned without panicking).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

use framebus::gpu::door::{Door, DoorError, DoorKind, Event, IpcHandle, IPC_HANDLE_BYTES};
use framebus::gpu::fake::{fake_counts, fake_read, fake_write, FakeCounts, FakeDoor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn fake() -> FakeDoor {
    FakeDoor::new(2)
}

fn zero() -> FakeCounts {
    FakeCounts::default()
}

fn plus(a: FakeCounts, b: FakeCounts) -> FakeCounts {
    FakeCounts {
        allocations: a.allocations + b.allocations,
        openings: a.openings + b.openings,
        events: a.events + b.events,
        ..FakeCounts::default()
    }
}

/// The error's CUDA-like name, panicking on success.
fn name<T: std::fmt::Debug>(r: Result<T, DoorError>) -> String {
    r.expect_err("the fake should have refused this").name
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe() just returned these two descriptors, owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn send(fd: &OwnedFd, bytes: &[u8]) {
    // SAFETY: writes `bytes` (a live slice) to an open descriptor.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(n, bytes.len() as isize);
}

fn recv<const N: usize>(fd: &OwnedFd) -> [u8; N] {
    let mut b = [0u8; N];
    let mut got = 0;
    while got < N {
        // SAFETY: reads into the unfilled tail of a live local buffer from an open descriptor.
        let n = unsafe { libc::read(fd.as_raw_fd(), b[got..].as_mut_ptr().cast(), N - got) };
        assert!(n > 0, "the other process went away");
        got += n as usize;
    }
    b
}

fn send_handle(fd: &OwnedFd, h: &IpcHandle) {
    send(fd, &h.0);
}

fn recv_handle(fd: &OwnedFd) -> IpcHandle {
    IpcHandle(recv::<IPC_HANDLE_BYTES>(fd))
}

/// Forks a child that runs `body` and exits 0 if it returned without panicking.
fn fork(body: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the caller holds SERIAL, so no other thread of this test binary is inside the fake
    // (whose lock the child takes); the child runs only the closure and then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_ok();
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

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

#[test]
fn describes_its_devices() {
    let _s = serial();
    let d = fake();
    assert_eq!(d.kind(), DoorKind::Fake);
    assert_eq!(d.driver_version(), Ok(13000));
    assert_eq!(d.device_count(), Ok(2));
    let info = d.device_info(1).expect("device 1");
    assert_eq!(info.name, "framebus fake CUDA device 1");
    assert_ne!(info.uuid, d.device_info(0).expect("device 0").uuid);
    assert!(info.total_memory > 0);
    assert_eq!(name(d.device_info(2)), "CUDA_ERROR_INVALID_DEVICE");
    assert_eq!(FakeDoor::new(3).device_count(), Ok(3));
}

#[test]
fn copies_bytes_in_and_out_and_knows_its_pointers() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let a = d.alloc(1, 64).expect("alloc");
    let b = d.alloc(1, 64).expect("alloc");
    let data: Vec<u8> = (0..64).collect();
    d.copy_host_to_device(1, a, data.as_ptr(), 64, 0).expect("h2d");
    d.copy_device_to_device(1, b, a + 16, 48, 0).expect("d2d");
    let mut out = vec![0u8; 48];
    d.copy_device_to_host(1, out.as_mut_ptr(), b, 48, 0).expect("d2h");
    assert_eq!(out, data[16..]);
    assert_eq!(fake_read(a, 64), Some(data.clone()));
    assert!(fake_write(a + 60, &[9, 9, 9, 9]));
    assert!(!fake_write(a + 61, &[9, 9, 9, 9]), "past the end");
    assert_eq!(d.pointer_device(a + 63), Ok(Some(1)));
    assert_eq!(d.pointer_device(data.as_ptr() as u64), Ok(None));
    assert_eq!(fake_counts(), plus(base, FakeCounts { allocations: 2, ..zero() }));
    d.free(1, a).expect("free");
    d.free(1, b).expect("free");
    assert_eq!(d.pointer_device(a), Ok(None));
    assert_eq!(fake_counts(), base);
}

#[test]
fn refuses_device_ordinals_past_the_count_and_the_wrong_device() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    assert_eq!(name(d.alloc(2, 64)), "CUDA_ERROR_INVALID_DEVICE");
    assert_eq!(name(d.create_event(7)), "CUDA_ERROR_INVALID_DEVICE");
    assert_eq!(name(FakeDoor::new(1).alloc(1, 64)), "CUDA_ERROR_INVALID_DEVICE");
    assert_eq!(name(d.alloc(0, 0)), "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(name(d.alloc(0, u64::MAX)), "CUDA_ERROR_OUT_OF_MEMORY");
    let a = d.alloc(0, 64).expect("alloc");
    let x = [0u8; 8];
    assert_eq!(name(d.copy_host_to_device(1, a, x.as_ptr(), 8, 0)), "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(name(d.free(1, a)), "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(name(d.export_memory(1, a)), "CUDA_ERROR_INVALID_VALUE");
    d.free(0, a).expect("free");
    assert_eq!(fake_counts(), base);
}

#[test]
fn refuses_copies_outside_one_live_allocation() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let a = d.alloc(0, 4096).expect("alloc");
    let b = d.alloc(0, 4096).expect("alloc");
    let host = vec![0u8; 8192];
    let mut out = vec![0u8; 8192];
    let bad = |r: Result<(), DoorError>| assert_eq!(name(r), "CUDA_ERROR_INVALID_VALUE");
    bad(d.copy_host_to_device(0, a + 4090, host.as_ptr(), 7, 0)); // past the end
    bad(d.copy_device_to_host(0, out.as_mut_ptr(), a, 4097, 0));
    bad(d.copy_device_to_host(0, out.as_mut_ptr(), a.wrapping_sub(1), 2, 0)); // before the start
    bad(d.copy_device_to_device(0, b, a, 8192, 0)); // spans two allocations even if adjacent
    bad(d.copy_device_to_device(0, a + 8, a, 16, 0)); // overlapping
    bad(d.copy_host_to_device(0, host.as_ptr() as u64, host.as_ptr(), 8, 0)); // host memory
    bad(d.copy_host_to_device(0, a, std::ptr::null(), 8, 0));
    d.copy_device_to_device(0, a + 16, a, 16, 0).expect("disjoint ranges of one allocation");
    d.free(0, a).expect("free");
    // A freed allocation: free twice, copy to and from it, export it.
    bad(d.free(0, a));
    bad(d.copy_host_to_device(0, a, host.as_ptr(), 8, 0));
    bad(d.copy_device_to_host(0, out.as_mut_ptr(), a, 8, 0));
    bad(d.copy_device_to_device(0, b, a, 8, 0));
    assert_eq!(name(d.export_memory(0, a)), "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(fake_read(a, 1), None);
    assert_eq!(name(d.export_memory(0, b + 1)), "CUDA_ERROR_INVALID_VALUE", "not the allocation's start");
    assert_eq!(name(d.close_memory(0, b)), "CUDA_ERROR_INVALID_VALUE", "close_memory of a pointer not opened");
    d.free(0, b).expect("free");
    assert_eq!(fake_counts(), base);
}

#[test]
fn refuses_its_own_handle_and_garbage() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let a = d.alloc(0, 256).expect("alloc");
    let h = d.export_memory(0, a).expect("export");
    assert_eq!(name(d.open_memory(0, &h)), "CUDA_ERROR_INVALID_CONTEXT");
    assert_eq!(name(d.open_memory(0, &IpcHandle([0; IPC_HANDLE_BYTES]))), "CUDA_ERROR_INVALID_HANDLE");
    let e = d.create_event(0).expect("event");
    let eh = d.export_event(0, e).expect("export event");
    assert_eq!(name(d.open_event(0, &eh)), "CUDA_ERROR_INVALID_CONTEXT");
    assert_eq!(name(d.open_memory(0, &eh)), "CUDA_ERROR_INVALID_HANDLE", "an event handle is not a memory handle");
    assert_eq!(name(d.open_event(0, &h)), "CUDA_ERROR_INVALID_HANDLE");
    d.destroy_event(0, e).expect("destroy");
    d.free(0, a).expect("free");
    assert_eq!(fake_counts(), base);
}

#[test]
fn events_must_be_recorded_before_waits_and_live_when_used() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let e = d.create_event(1).expect("event");
    assert_eq!(name(d.wait(1, 0, e)), "CUDA_ERROR_NOT_READY");
    assert_eq!(name(d.query(1, e)), "CUDA_ERROR_NOT_READY");
    assert_eq!(name(d.synchronize_event(1, e)), "CUDA_ERROR_NOT_READY");
    assert_eq!(name(d.record(0, e, 0)), "CUDA_ERROR_INVALID_HANDLE", "an event of device 1 recorded on device 0");
    d.record(1, e, 0).expect("record");
    assert_eq!(d.query(1, e), Ok(true));
    d.wait(1, 0, e).expect("wait");
    d.synchronize_event(1, e).expect("synchronize");
    assert_eq!(fake_counts(), plus(base, FakeCounts { events: 1, ..zero() }));
    d.destroy_event(1, e).expect("destroy");
    for r in [d.record(1, e, 0), d.wait(1, 0, e), d.destroy_event(1, e), d.query(1, e).map(|_| ())] {
        assert_eq!(name(r), "CUDA_ERROR_INVALID_HANDLE");
    }
    assert_eq!(name(d.export_event(1, e)), "CUDA_ERROR_INVALID_HANDLE");
    assert_eq!(name(d.query(1, Event(u64::MAX))), "CUDA_ERROR_INVALID_HANDLE");
    assert_eq!(fake_counts(), base);
}

#[test]
fn another_process_opens_memory_once_and_sees_the_bytes() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let a = d.alloc(1, 1 << 16).expect("alloc");
    let data: Vec<u8> = (0..1u32 << 16).map(|i| (i % 251) as u8).collect();
    d.copy_host_to_device(1, a, data.as_ptr(), data.len() as u64, 0).expect("h2d");
    let h = d.export_memory(1, a).expect("export");
    let (done_r, done_w) = pipe();
    let expected = data.clone();
    let child = fork(move || {
        let d = fake();
        assert_eq!(fake_counts(), zero(), "a forked child starts with empty tables");
        assert_eq!(name(d.open_memory(0, &h)), "CUDA_ERROR_INVALID_DEVICE");
        let p = d.open_memory(1, &h).expect("open");
        assert_eq!(name(d.open_memory(1, &h)), "CUDA_ERROR_ALREADY_MAPPED");
        assert_eq!(d.pointer_device(p), Ok(Some(1)));
        let mut out = vec![0u8; expected.len()];
        d.copy_device_to_host(1, out.as_mut_ptr(), p, out.len() as u64, 0).expect("d2h");
        assert_eq!(out, expected);
        assert_eq!(name(d.free(1, p)), "CUDA_ERROR_INVALID_VALUE", "an opened pointer is closed, not freed");
        assert_eq!(name(d.export_memory(1, p)), "CUDA_ERROR_INVALID_VALUE");
        d.copy_host_to_device(1, p + 100, [7u8; 4].as_ptr(), 4, 0).expect("h2d");
        assert_eq!(fake_counts(), FakeCounts { openings: 1, ..zero() });
        assert_eq!(name(d.close_memory(0, p)), "CUDA_ERROR_INVALID_VALUE");
        d.close_memory(1, p).expect("close");
        assert_eq!(name(d.close_memory(1, p)), "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(name(d.copy_device_to_host(1, out.as_mut_ptr(), p, 4, 0)), "CUDA_ERROR_INVALID_VALUE");
        // Closed, it may be opened again.
        let p = d.open_memory(1, &h).expect("open again");
        d.close_memory(1, p).expect("close");
        assert_eq!(fake_counts(), zero());
        send(&done_w, &[1]);
    });
    recv::<1>(&done_r);
    join(child);
    assert_eq!(fake_read(a + 100, 4), Some(vec![7; 4]), "the child's write is seen here");
    d.free(1, a).expect("free");
    assert_eq!(fake_counts(), base);
}

#[test]
fn a_forked_child_cannot_free_or_close_what_its_parent_holds() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let a = d.alloc(0, 64).expect("alloc");
    let e = d.create_event(0).expect("event");
    let child = fork(move || {
        let d = fake();
        assert_eq!(name(d.free(0, a)), "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(name(d.export_memory(0, a)), "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(name(d.copy_device_to_host(0, [0u8; 8].as_mut_ptr(), a, 8, 0)), "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(name(d.destroy_event(0, e)), "CUDA_ERROR_INVALID_HANDLE");
        assert_eq!(name(d.record(0, e, 0)), "CUDA_ERROR_INVALID_HANDLE");
        assert_eq!(d.pointer_device(a), Ok(None));
        assert_eq!(fake_counts(), zero());
    });
    join(child);
    assert_eq!(fake_counts(), plus(base, FakeCounts { allocations: 1, events: 1, ..zero() }));
    d.record(0, e, 0).expect("still the parent's");
    d.destroy_event(0, e).expect("destroy");
    d.free(0, a).expect("free");
    assert_eq!(fake_counts(), base);
}

#[test]
fn a_handle_whose_owner_freed_it_or_exited_fails_cleanly() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    // Freed by its owner (this process) before another process opens it; a new allocation may
    // take the same descriptor number, and must not be opened through the old handle.
    let a = d.alloc(0, 4096).expect("alloc");
    let h = d.export_memory(0, a).expect("export");
    d.free(0, a).expect("free");
    let b = d.alloc(0, 4096).expect("alloc again");
    let e = d.create_event(0).expect("event");
    let eh = d.export_event(0, e).expect("export event");
    d.destroy_event(0, e).expect("destroy");
    let child = fork(move || {
        let d = fake();
        assert_eq!(name(d.open_memory(0, &h)), "CUDA_ERROR_INVALID_HANDLE");
        assert_eq!(name(d.open_event(0, &eh)), "CUDA_ERROR_INVALID_HANDLE", "destroyed by its owner");
        // Forged handles of the live allocation's descriptor: wrong id, wrong size, wrong owner.
        for (at, value) in [(24usize, 0xEEu8), (32, 0x01), (12, 0x55), (20, 0x7F)] {
            let mut f = h;
            f.0[at] ^= value;
            assert_eq!(name(d.open_memory(0, &f)), "CUDA_ERROR_INVALID_HANDLE", "forged at byte {at}");
        }
        assert_eq!(fake_counts(), zero());
    });
    join(child);
    d.free(0, b).expect("free");

    // The owner allocates, exports, and exits without freeing.
    let (handle_r, handle_w) = pipe();
    let owner = fork(move || {
        let d = fake();
        let a = d.alloc(0, 4096).expect("alloc");
        let e = d.create_event(0).expect("event");
        d.record(0, e, 0).expect("record");
        send_handle(&handle_w, &d.export_memory(0, a).expect("export"));
        send_handle(&handle_w, &d.export_event(0, e).expect("export event"));
    });
    let h = recv_handle(&handle_r);
    let eh = recv_handle(&handle_r);
    join(owner);
    assert_eq!(name(d.open_memory(0, &h)), "CUDA_ERROR_INVALID_HANDLE");
    assert_eq!(name(d.open_event(0, &eh)), "CUDA_ERROR_INVALID_HANDLE");
    assert_eq!(fake_counts(), base);
}

#[test]
fn events_recorded_in_one_process_are_waited_on_in_another() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let e = d.create_event(0).expect("event");
    let h = d.export_event(0, e).expect("export");
    let (to_child_r, to_child_w) = pipe();
    let (to_parent_r, to_parent_w) = pipe();
    let child = fork(move || {
        let d = fake();
        assert_eq!(name(d.open_event(1, &h)), "CUDA_ERROR_INVALID_DEVICE");
        let opened = d.open_event(0, &h).expect("open event");
        assert_eq!(name(d.wait(0, 0, opened)), "CUDA_ERROR_NOT_READY", "not recorded yet in any process");
        assert_eq!(name(d.export_event(0, opened)), "CUDA_ERROR_INVALID_VALUE", "an opened event is not exported again");
        send(&to_parent_w, &[1]);
        recv::<1>(&to_child_r); // the parent recorded it
        assert_eq!(d.query(0, opened), Ok(true));
        d.wait(0, 0, opened).expect("wait");
        d.synchronize_event(0, opened).expect("synchronize");
        d.record(0, opened, 0).expect("an opened event may be recorded");
        d.destroy_event(0, opened).expect("destroy");
        assert_eq!(name(d.query(0, opened)), "CUDA_ERROR_INVALID_HANDLE");
        assert_eq!(fake_counts(), zero());
    });
    recv::<1>(&to_parent_r);
    d.record(0, e, 0).expect("record");
    send(&to_child_w, &[1]);
    join(child);
    assert_eq!(d.query(0, e), Ok(true));
    d.destroy_event(0, e).expect("destroy");
    assert_eq!(fake_counts(), base);
}

#[test]
fn a_thousand_open_close_cycles_leak_nothing() {
    let _s = serial();
    let base = fake_counts(); // what a failed test before this one left
    let d = fake();
    let a = d.alloc(0, 1 << 20).expect("alloc");
    let e = d.create_event(0).expect("event");
    let h = d.export_memory(0, a).expect("export");
    let eh = d.export_event(0, e).expect("export event");
    let child = fork(move || {
        let d = fake();
        assert_eq!(fake_counts(), zero()); // first use here: the inherited descriptors are closed
        let fds = open_fds();
        for i in 0..1000u32 {
            let p = d.open_memory(0, &h).expect("open");
            d.copy_host_to_device(0, p, i.to_le_bytes().as_ptr(), 4, 0).expect("h2d");
            d.close_memory(0, p).expect("close");
            let opened = d.open_event(0, &eh).expect("open event");
            d.record(0, opened, 0).expect("record");
            d.destroy_event(0, opened).expect("destroy");
        }
        assert_eq!(fake_counts(), zero());
        assert_eq!(open_fds(), fds, "no descriptor left open");
    });
    join(child);
    assert_eq!(fake_read(a, 4), Some(999u32.to_le_bytes().to_vec()));
    let fds = open_fds();
    for _ in 0..1000 {
        let p = d.alloc(1, 4096).expect("alloc");
        d.free(1, p).expect("free");
        let ev = d.create_event(1).expect("event");
        d.destroy_event(1, ev).expect("destroy");
    }
    assert_eq!(open_fds(), fds);
    d.destroy_event(0, e).expect("destroy");
    d.free(0, a).expect("free");
    assert_eq!(fake_counts(), base);
}

#[test]
fn door_for_picks_a_side_by_name() {
    let _s = serial();
    let fake = framebus::gpu::door_for(Some("fake")).expect("the fake");
    assert_eq!(fake.kind(), DoorKind::Fake);
    let err = framebus::gpu::door_for(Some("gpu")).err().expect("an unknown value");
    // Said as a setting not understood, with what it accepts; not as a CUDA error code.
    let text = err.to_string();
    assert!(
        text.starts_with("FRAMEBUS_CUDA=\"gpu\" is not understood") && text.contains("\"cuda\"") && text.contains("\"fake\""),
        "{text}"
    );
    assert!(!text.contains("CUDA_ERROR") && !text.contains("failed with"), "{text}");
    assert_eq!(err.name, framebus::gpu::door::BAD_SETTING.1);
    // Empty is unset: the driver side (here, without a driver, its clean error).
    let empty = framebus::gpu::door_for(Some("")).map(|d| d.kind());
    assert!(matches!(&empty, Ok(DoorKind::Cuda)) || empty.as_ref().is_err_and(|e| !e.detail.contains("not understood")), "{empty:?}");
}
