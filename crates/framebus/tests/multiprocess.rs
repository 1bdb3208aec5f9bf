//! Multi-process tests of the core: the test binary re-executes itself (`current_exe`) with
//! `FRAMEBUS_TEST_ROLE` naming what the child does (write, read, hold the lock, ...), so that
//! writers and readers really live in separate processes, and writers and lock holders can be
//! SIGKILLed at the worst moment.
//!
//! Children talk to the parent by stdout lines prefixed `FBT:` and read commands from stdin.
//! Timeouts are generous upper bounds so that nothing hangs, never performance thresholds.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::OnceLock;
use std::time::Duration;

use framebus::{Acquired, CreateOptions, Deadline, Error, FrameInfo, FrameRef, ReaderMode, Stream, StreamSpec};

const ROLE: &str = "FRAMEBUS_TEST_ROLE";
const STREAM: &str = "FRAMEBUS_TEST_STREAM";
const ARG: &str = "FRAMEBUS_TEST_ARG";
/// Upper bound for any one wait.
const LONG: Duration = Duration::from_secs(60);
/// u32 words per frame (1 MiB frames: a writer spends most of its loop inside write()).
const WORDS: usize = 256 * 1024;

// -- frames whose content derives from their id ------------------------------------------------

/// Distinct frame contents; frame `id` holds pattern `id % PATTERNS`.
const PATTERNS: u64 = 16;

/// (bytes, checksum) of every pattern, computed once per process.
fn patterns() -> &'static [(Vec<u8>, [u8; 8])] {
    static P: OnceLock<Vec<(Vec<u8>, [u8; 8])>> = OnceLock::new();
    P.get_or_init(|| {
        (0..PATTERNS)
            .map(|p| {
                let bytes: Vec<u8> =
                    (0..WORDS as u32).flat_map(|i| (i ^ (p as u32 + 1).wrapping_mul(2_654_435_761)).to_le_bytes()).collect();
                let sum = fnv(&bytes).to_le_bytes();
                (bytes, sum)
            })
            .collect()
    })
}

/// FNV-1a over 8-byte words (cheap enough in debug builds).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.chunks(8).fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
        let word = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        (h ^ word).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether a frame is exactly the one its frame id says, with that content's checksum as
/// metadata (a torn frame mixes two patterns and matches neither).
fn intact(f: &FrameRef<'_>) -> bool {
    let (bytes, sum) = &patterns()[(f.frame_id as u64 % PATTERNS) as usize];
    f.payload == bytes.as_slice() && f.meta == sum
}

fn spec() -> StreamSpec {
    StreamSpec { slots: 4, ..StreamSpec::new("<u4", 4, vec![WORDS as u64]) }
}

fn write_frame(s: &Stream, id: u64, deadline: Deadline) -> framebus::Result<u64> {
    let (data, sum) = &patterns()[(id % PATTERNS) as usize];
    s.write(data, &FrameInfo { frame_id: Some(id as i64), meta: sum, timestamp_ns: None, seq: None }, deadline, &mut || true)
}

fn long() -> Deadline {
    Deadline::after(Some(LONG))
}

// -- child processes --------------------------------------------------------------------------

/// Entry point of every child: runs the role named in the environment and exits. In the
/// parent (no role set) this test does nothing.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let name = std::env::var(STREAM).expect("stream name");
    let arg = std::env::var(ARG).unwrap_or_default();
    let code = match std::panic::catch_unwind(|| run_role(&role, &name, &arg)) {
        Ok(()) => 0,
        Err(_) => 101,
    };
    std::process::exit(code);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "FBT:{line}").unwrap();
    out.flush().unwrap();
}

fn hear() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    line.trim().to_owned()
}

fn run_role(role: &str, name: &str, arg: &str) {
    match role {
        // Writes frames 0..=last after "go".
        "writer" => {
            let last: u64 = arg.parse().unwrap();
            let s = Stream::open(name, ReaderMode::Latest).unwrap();
            say("ready");
            hear();
            for id in 0..=last {
                write_frame(&s, id, long()).unwrap();
            }
            say(&format!("wrote {}", s.latest_seq()));
        }
        // Reads until frame `last`, checking each one; reports "ok <frames> <missed> <bad>".
        "reader" => {
            let (mode, last) = arg.split_once(':').unwrap();
            let mode = if mode == "lossless" { ReaderMode::Lossless } else { ReaderMode::Latest };
            let last: i64 = last.parse().unwrap();
            let s = Stream::open(name, mode).unwrap();
            say("ready");
            let (mut prev, mut frames, mut bad) = (-1i64, 0u64, 0u64);
            while prev < last {
                let (id, seq, ok) = s.read_new(long(), &mut || true, |f| (f.frame_id, f.seq, intact(f))).unwrap();
                let in_order = id > prev && (mode == ReaderMode::Latest || id == prev + 1);
                if !ok || !in_order || seq != id as u64 + 1 {
                    bad += 1;
                }
                prev = id;
                frames += 1;
            }
            say(&format!("ok {frames} {} {bad}", s.missed().1));
        }
        // Writes back to back forever (to be killed).
        "writer_loop" => {
            let s = Stream::open(name, ReaderMode::Latest).unwrap();
            let mut id: u64 = arg.parse().unwrap();
            write_frame(&s, id, long()).unwrap();
            say("writing");
            loop {
                id += 1;
                write_frame(&s, id, long()).unwrap();
            }
        }
        // Claims a slot, scribbles half a frame into it and stops there (to be killed).
        "stuck_writer" => {
            let s = Stream::open(name, ReaderMode::Latest).unwrap();
            let mut guard = s.begin_write(long(), &mut || true).unwrap();
            let half = guard.payload_mut().len() / 2;
            guard.payload_mut()[..half].fill(0xAB);
            say(&format!("claimed {}", guard.slot()));
            hear();
            std::process::abort();
        }
        // Takes the lock and keeps it (to be killed).
        "holder" => {
            let s = Stream::open(name, ReaderMode::Latest).unwrap();
            s.acquire(long(), &mut || true).unwrap();
            say("locked");
            hear();
        }
        // Waits for the lock; reports how it got it.
        "waiter" => {
            let s = Stream::open(name, ReaderMode::Latest).unwrap();
            say("waiting");
            let how = s.acquire(long(), &mut || true).unwrap();
            let text = match how {
                Acquired::Recovered { dead_pid } => format!("recovered {dead_pid}"),
                other => format!("{other:?}"),
            };
            write_frame(&s, 4242, long()).unwrap();
            s.release().unwrap();
            say(&text);
        }
        // Attaches (lossless or latest) and never reads.
        "idle_reader" => {
            let mode = if arg == "lossless" { ReaderMode::Lossless } else { ReaderMode::Latest };
            let _s = Stream::open(name, mode).unwrap();
            say("attached");
            hear();
        }
        // Creates a stream, writes one frame and exits without unlinking it.
        "creator" => {
            let s = Stream::create(name, &spec(), &CreateOptions::default()).unwrap();
            write_frame(&s, 77, long()).unwrap();
            say("created");
        }
        other => panic!("unknown role {other}"),
    }
}

/// A child process running one role; killed and reaped when dropped.
struct Proc {
    child: Child,
    lines: Receiver<String>,
}

impl Proc {
    fn spawn(role: &str, name: &str, arg: &str) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["child_entry", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE, role)
            .env(STREAM, name)
            .env(ARG, arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(msg) = line.strip_prefix("FBT:") {
                    if tx.send(msg.to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        Proc { child, lines: rx }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(LONG).unwrap_or_else(|e| panic!("child {} said nothing: {e}", self.pid()))
    }

    fn expect(&self, text: &str) {
        assert_eq!(self.line(), text, "child {}", self.pid());
    }

    fn send(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
    }

    fn sigkill(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own unreaped child,
        // so it cannot have been recycled for another process.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0);
        self.child.wait().unwrap();
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "child {} exited with {status}", self.pid());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A unique stream name, unlinked when dropped.
struct Name(String);

impl Name {
    fn new() -> Name {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = format!("rt-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let _ = framebus::unlink(&n);
        Name(n)
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = framebus::unlink(&self.0);
    }
}

fn create(name: &Name) -> Stream {
    Stream::create(&name.0, &spec(), &CreateOptions::default()).unwrap()
}

fn newest(s: &Stream) -> (i64, u64, bool) {
    s.read_latest(|f| (f.frame_id, f.seq, intact(f))).unwrap()
}

// -- tests ------------------------------------------------------------------------------------

#[test]
fn writer_and_readers_in_separate_processes_check_every_frame() {
    let name = Name::new();
    let owner = create(&name);
    let last = 1499;
    let readers: Vec<Proc> = ["latest", "lossless"].iter().map(|m| Proc::spawn("reader", &name.0, &format!("{m}:{last}"))).collect();
    let mut writer = Proc::spawn("writer", &name.0, &last.to_string());
    for p in readers.iter().chain([&writer]) {
        p.expect("ready");
    }
    assert_eq!(owner.ownercount(), 4);
    writer.send("go");
    writer.expect(&format!("wrote {}", last + 1));
    writer.finish();
    let latest = readers[0].line();
    let lossless = readers[1].line();
    let parts: Vec<u64> = latest.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
    assert_eq!(parts[2], 0, "latest reader saw bad frames: {latest}");
    assert_eq!(parts[0] + parts[1], last as u64 + 1, "latest reader: frames + missed: {latest}");
    assert_eq!(lossless, format!("ok {} 0 0", last + 1));
    for r in readers {
        r.finish();
    }
    assert_eq!(owner.ownercount(), 1);
    assert_eq!(owner.latest_seq(), last as u64 + 1);
}

#[test]
fn writer_killed_at_random_moments_never_exposes_a_torn_frame() {
    let name = Name::new();
    let owner = create(&name);
    let mut next = 0u64;
    let mut held = 0;
    for i in 0..12u64 {
        let mut w = Proc::spawn("writer_loop", &name.0, &next.to_string());
        w.expect("writing");
        std::thread::sleep(Duration::from_micros(1_000 * (i % 4) + 137 * i));
        let pid = w.pid();
        w.sigkill();
        if owner.lock_holder() == Some(pid) {
            held += 1;
        }
        // The newest frame is whole, or gone with the write that was rewriting its slot (the
        // owner had taken it, so the dead writer could reuse its slot): never torn.
        let seq = match owner.read_latest(|f| (f.frame_id, f.seq, intact(f))) {
            Ok((id, seq, ok)) => {
                assert!(ok && seq == id as u64 + 1, "iteration {i}: newest frame {id} (seq {seq}) is torn or mislabelled");
                seq
            }
            Err(Error::NewestLost { .. }) => owner.latest_seq(),
            Err(e) => panic!("iteration {i}: {e}"),
        };
        // The next write repairs whatever the dead writer left.
        let seq = write_frame(&owner, seq, long()).unwrap();
        assert_eq!(owner.lock_holder(), None);
        let (id, s2, ok) = newest(&owner);
        assert!(ok && s2 == seq && id as u64 + 1 == seq);
        next = seq;
    }
    for k in 0..8 {
        write_frame(&owner, next + k, long()).unwrap();
        assert!(newest(&owner).2);
    }
    eprintln!("{held} of 12 writers were killed holding the lock");
}

#[test]
fn writer_killed_with_a_half_written_slot_is_repaired() {
    let name = Name::new();
    let owner = create(&name);
    write_frame(&owner, 0, long()).unwrap();
    write_frame(&owner, 1, long()).unwrap();
    let mut w = Proc::spawn("stuck_writer", &name.0, "");
    let claimed = w.line();
    assert!(claimed.starts_with("claimed "), "{claimed}");
    let pid = w.pid();
    assert_eq!(owner.lock_holder(), Some(pid));
    w.sigkill();
    // Readers still see the last committed frame, intact.
    assert_eq!(newest(&owner), (1, 2, true));
    let reader = Stream::open(&name.0, ReaderMode::Latest).unwrap();
    assert!(matches!(reader.read_new(Deadline::after(Some(Duration::from_millis(20))), &mut || true, |_| ()), Err(Error::Timeout { .. })));
    // The next writer takes the lock over and the abandoned slot becomes usable again.
    match owner.acquire(long(), &mut || true).unwrap() {
        Acquired::Recovered { dead_pid } => assert_eq!(dead_pid, pid),
        other => panic!("expected a recovered lock, got {other:?}"),
    }
    owner.release().unwrap();
    assert_eq!(owner.lock_recoveries(), 1);
    for id in 2..2 + 2 * u64::from(spec().slots) {
        write_frame(&owner, id, long()).unwrap();
        let (got, seq, ok) = reader.read_new(long(), &mut || true, |f| (f.frame_id, f.seq, intact(f))).unwrap();
        assert!(ok && got as u64 == id && seq == id + 1);
    }
}

#[test]
fn lock_holder_killed_is_recovered_by_a_waiting_process() {
    let name = Name::new();
    let owner = create(&name);
    let mut holder = Proc::spawn("holder", &name.0, "");
    holder.expect("locked");
    assert_eq!(owner.lock_holder(), Some(holder.pid()));
    let short = Deadline::after(Some(Duration::from_millis(50)));
    let busy = owner.acquire(short, &mut || true).unwrap_err();
    assert!(matches!(busy, Error::LockBusy { .. }), "{busy}");
    assert!(busy.to_string().contains(&format!("held by process {}", holder.pid())), "{busy}");
    let waiter = Proc::spawn("waiter", &name.0, "");
    waiter.expect("waiting");
    let dead = holder.pid();
    holder.sigkill();
    assert_eq!(waiter.line(), format!("recovered {dead}"));
    waiter.finish();
    assert_eq!(owner.lock_holder(), None);
    assert_eq!(newest(&owner), (4242, 1, true));
    // And the lock works normally afterwards.
    assert_eq!(owner.acquire(long(), &mut || true).unwrap(), Acquired::Fresh);
    owner.release().unwrap();
}

#[test]
fn killed_readers_are_dropped_from_counts_and_backpressure() {
    let name = Name::new();
    let owner = create(&name);
    let mut lossless = Proc::spawn("idle_reader", &name.0, "lossless");
    let mut latest = Proc::spawn("idle_reader", &name.0, "latest");
    lossless.expect("attached");
    latest.expect("attached");
    assert_eq!(owner.ownercount(), 3);
    for id in 0..u64::from(spec().slots) {
        write_frame(&owner, id, long()).unwrap();
    }
    let short = Deadline::after(Some(Duration::from_millis(50)));
    assert!(matches!(write_frame(&owner, 99, short), Err(Error::NoFreeSlot { .. })), "the lossless reader should hold the writer back");
    latest.sigkill();
    assert_eq!(owner.ownercount(), 2);
    lossless.sigkill();
    assert_eq!(owner.ownercount(), 1);
    for id in 4..20 {
        write_frame(&owner, id, long()).unwrap();
    }
    assert_eq!(newest(&owner), (19, 20, true));
}

#[test]
fn stream_outlives_its_creator_and_is_then_stale() {
    let name = Name::new();
    let creator = Proc::spawn("creator", &name.0, "");
    creator.expect("created");
    creator.finish();
    let info = framebus::recovery::info(&name.0).unwrap();
    assert!(!info.creator_alive && info.stale && info.attached == 0);
    let s = Stream::open(&name.0, ReaderMode::Latest).unwrap();
    assert_eq!(newest(&s), (77, 1, true));
    assert!(!framebus::recovery::info(&name.0).unwrap().stale, "a stream with a live handle is not stale");
    drop(s);
    // exist_ok replaces a stale stream, even of another spec.
    let other = StreamSpec::new("|u1", 1, vec![10]);
    let s = Stream::create(&name.0, &other, &CreateOptions { exist_ok: true, ..CreateOptions::default() }).unwrap();
    assert_eq!(s.spec().shape, vec![10]);
    assert_eq!(s.latest_seq(), 0);
}
