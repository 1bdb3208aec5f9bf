//! Property tests of the per-frame table of variable-shape streams (layout version 2): random
//! frames are laid out, encoded and decoded back; then tables are damaged (random bytes, single
//! fields set to interesting values), in memory and in a real segment that a reader then reads.
//! Decoding must give `Ok` with a table whose every array lies inside the frame and whose sizes
//! agree with its shape and dtype, or a clear `Err`; a panic or a misread fails the property.
//!
//! Cases per property: `FRAMEBUS_FUZZ_CASES` (default 64, `make stress` runs thousands).

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use framebus::ring::frame_table::{self, ArraySpec, FrameTable, MAX_ARRAYS, TABLE_BYTES};
use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, Stream, StreamSpec};
use proptest::prelude::*;
use proptest::test_runner::Config;

static NEXT: AtomicU64 = AtomicU64::new(0);
const CAPACITY: u64 = 1 << 14;
const SLOT: u64 = TABLE_BYTES + CAPACITY;
const DTYPES: &[&str] = &["|u1", "|i1", "<u2", ">i2", "<i4", "<f4", "<f8", "|b1", "<c8", "<c16", "<f2"];

fn config() -> Config {
    let cases = std::env::var("FRAMEBUS_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    Config { cases, failure_persistence: None, max_shrink_iters: 64, ..Config::default() }
}

/// (name, dtype, shape, bytes) of the arrays of a random frame.
type Arrays = Vec<(String, &'static str, Vec<u64>, bool)>;

fn arrays_strategy() -> impl Strategy<Value = Arrays> {
    let one = ("[a-z]{0,8}|\u{e9}t\u{e9}", 0..DTYPES.len(), prop::collection::vec(0u64..6, 0..4), any::<bool>());
    prop::collection::vec(one, 1..6).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (name, d, shape, bytes))| match bytes {
                true => (format!("{name}{i}"), "|u1", vec![shape.iter().sum::<u64>() * 7], true),
                false => (format!("{name}{i}"), DTYPES[d], shape, false),
            })
            .collect()
    })
}

fn specs(arrays: &Arrays) -> Vec<ArraySpec<'_>> {
    arrays.iter().map(|(n, d, s, b)| ArraySpec { name: n, dtype: d, shape: s, bytes: *b }).collect()
}

/// What a decoded table must satisfy, whatever bytes it came from.
fn check_invariants(t: &FrameTable, slot: u64) -> Result<(), TestCaseError> {
    prop_assert!((1..=MAX_ARRAYS).contains(&t.arrays.len()));
    prop_assert!(t.data_end >= TABLE_BYTES && t.data_end <= slot);
    let mut end = TABLE_BYTES;
    for a in &t.arrays {
        prop_assert_eq!(frame_table::dtype_itemsize(&a.dtype), Ok(a.itemsize));
        let n = a.shape.iter().try_fold(u64::from(a.itemsize), |acc, &d| acc.checked_mul(d));
        prop_assert_eq!(n, Some(a.nbytes));
        prop_assert!(a.offset >= end && a.offset % 64 == 0);
        end = a.offset + a.nbytes;
        prop_assert!(end <= t.data_end);
        prop_assert!(a.name.len() <= frame_table::MAX_NAME);
    }
    Ok(())
}

/// One way of damaging an encoded table.
#[derive(Clone, Debug)]
enum Damage {
    Byte { at: usize, value: u8 },
    Field { at: usize, width: usize, value: u64 },
}

fn interesting() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(31),
        Just(32),
        Just(63),
        Just(64),
        Just(TABLE_BYTES),
        Just(TABLE_BYTES + 64),
        Just(SLOT),
        Just(SLOT + 1),
        Just(u64::from(u32::MAX)),
        Just(u64::MAX),
        Just(u64::MAX / 2),
        Just(1 << 32),
        any::<u64>()
    ]
}

fn damage_strategy() -> impl Strategy<Value = Damage> {
    // Fields sit at multiples of 4 (u32) and 8 (u64) in the header and entries.
    prop_oneof![
        (0usize..1024, any::<u8>()).prop_map(|(at, value)| Damage::Byte { at, value }),
        (0usize..128, prop_oneof![Just(4usize), Just(8)], interesting()).prop_map(|(i, width, value)| Damage::Field {
            at: i * 8,
            width,
            value
        }),
    ]
}

fn apply(buf: &mut [u8], damage: &[Damage]) {
    for d in damage {
        match *d {
            Damage::Byte { at, value } => buf[at] = value,
            Damage::Field { at, width, value } => buf[at..at + width].copy_from_slice(&value.to_ne_bytes()[..width]),
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any frame that fits is laid out aligned after the table and decodes to the same table.
    #[test]
    fn planned_tables_round_trip(arrays in arrays_strategy(), named in any::<bool>()) {
        let t = frame_table::plan(&specs(&arrays), named, "", SLOT).expect("fits");
        check_invariants(&t, SLOT)?;
        let mut buf = vec![0x5au8; t.data_end as usize];
        t.encode(&mut buf);
        prop_assert_eq!(frame_table::decode(&buf, SLOT), Ok(t));
    }

    /// A damaged table decodes to a table that stays inside the frame, or to an error.
    #[test]
    fn damaged_tables_never_misread(arrays in arrays_strategy(), damage in prop::collection::vec(damage_strategy(), 1..4)) {
        let t = frame_table::plan(&specs(&arrays), true, "", SLOT).expect("fits");
        let mut buf = vec![0u8; SLOT as usize];
        t.encode(&mut buf);
        apply(&mut buf, &damage);
        if let Ok(decoded) = frame_table::decode(&buf, SLOT) {
            check_invariants(&decoded, SLOT)?;
        }
        // Truncated frames are refused, never read past.
        let _ = frame_table::decode(&buf[..damage.len() * 100], SLOT);
    }

    /// In a real segment: a reader of a frame whose table was damaged in shared memory gets the
    /// frame (when the damage left a valid table) or a Corrupt error; never a panic.
    #[test]
    fn damaged_tables_in_a_segment(arrays in arrays_strategy(), damage in prop::collection::vec(damage_strategy(), 1..4)) {
        let name = format!("fuzz-table-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let w = Stream::create(&name, &StreamSpec::variable(CAPACITY), &CreateOptions::default()).expect("create");
        let r = Stream::open(&name, ReaderMode::Latest).expect("open");
        let t = w.plan_frame(&specs(&arrays), true, "").expect("fits");
        let data: Vec<Vec<u8>> = t.arrays.iter().map(|a| vec![0xabu8; a.nbytes as usize]).collect();
        let parts: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        w.write_arrays(&t, &parts, &FrameInfo::default(), Deadline::never(), &mut || true).expect("write");
        let slot = r.read_latest(|f| f.slot).expect("read");
        let mut table = vec![0u8; TABLE_BYTES as usize];
        let file = std::fs::OpenOptions::new().read(true).write(true).open(format!("/dev/shm/framebus.{name}")).expect("file");
        let at = r.geometry().payload_offset + u64::from(slot) * r.geometry().slot_stride;
        file.read_exact_at(&mut table, at).expect("read table");
        apply(&mut table, &damage);
        file.write_all_at(&table, at).expect("damage");
        let got = r.read_latest(|f| r.frame_table(f).map(|t| (t, f.payload.len() as u64)));
        drop((w, r));
        let _ = framebus::unlink(&name);
        match got.expect("pinned") {
            Ok((t, len)) => {
                check_invariants(&t, SLOT)?;
                prop_assert!(t.data_end <= len);
            }
            Err(Error::Corrupt { reason, .. }) => prop_assert!(reason.contains("frame 1")),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}
