//! What a stream holds: the frame spec (dtype, shape) and the ring geometry chosen at creation.

use super::layout::{Geometry, DTYPE_LEN, MAX_META, MAX_NDIM, MAX_READERS, MAX_SLOTS};
use crate::error::{Error, Result};

/// Parameters of a new stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    /// NumPy dtype descriptor string (`dtype.str`), for example `<f4` or `|u1`.
    pub dtype: String,
    /// Bytes per element.
    pub itemsize: u32,
    /// Frame shape (1 to 8 dimensions, each at least 1).
    pub shape: Vec<u64>,
    /// Frames in the ring (2 to 64).
    pub slots: u32,
    /// Bytes of user metadata each frame can carry.
    pub meta_capacity: u32,
    /// Handles that may be attached at once.
    pub max_readers: u32,
    /// A variable-shape stream: `shape` is `[capacity]` of `|u1` (bytes of array data per
    /// frame) and every frame carries its own table of arrays (see `frame_table`).
    pub variable: bool,
    /// A device stream: its frames live in the memory of this device (None: a host stream).
    pub device: Option<DeviceSpec>,
}

/// Where a device stream keeps its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// CUDA device ordinal, as the creating process numbers its devices.
    pub ordinal: u32,
    /// Every frame is also copied into its host slot, for readers without a GPU.
    pub cpu_mirror: bool,
}

/// Most device ordinals a stream may name.
pub const MAX_DEVICE: u32 = 1024;

impl StreamSpec {
    /// A spec with the default ring (4 slots, 256 metadata bytes, 64 handles).
    pub fn new(dtype: impl Into<String>, itemsize: u32, shape: Vec<u64>) -> StreamSpec {
        StreamSpec { dtype: dtype.into(), itemsize, shape, slots: 4, meta_capacity: 256, max_readers: 64, variable: false, device: None }
    }

    /// A variable-shape stream whose frames may hold up to `capacity` bytes of arrays each
    /// (the default ring otherwise).
    pub fn variable(capacity: u64) -> StreamSpec {
        StreamSpec { variable: true, ..StreamSpec::new("|u1", 1, vec![capacity]) }
    }

    /// Bytes of one frame (for a variable-shape stream: its table and capacity).
    pub fn frame_bytes(&self) -> Option<u64> {
        let data = self.shape.iter().try_fold(u64::from(self.itemsize), |acc, &d| acc.checked_mul(d))?;
        if self.variable {
            data.checked_add(super::frame_table::TABLE_BYTES)
        } else {
            Some(data)
        }
    }

    /// Bytes the host slots hold of each frame: the whole frame, except for a device stream
    /// without a CPU mirror (its frames live in device memory only).
    pub fn host_frame_bytes(&self) -> Option<u64> {
        match self.device {
            Some(DeviceSpec { cpu_mirror: false, .. }) => Some(0),
            _ => self.frame_bytes(),
        }
    }

    /// Checks every field and lays out the segment.
    pub fn geometry(&self) -> Result<Geometry> {
        let bad = |msg: String| Err(Error::InvalidArgument(msg));
        if self.shape.is_empty() || self.shape.len() > MAX_NDIM {
            return bad(format!("shape must have 1 to {MAX_NDIM} dimensions, got {:?}", self.shape));
        }
        if self.shape.contains(&0) {
            return bad(format!("shape dimensions must be positive, got {:?}", self.shape));
        }
        if self.itemsize == 0 {
            return bad("dtype itemsize must be positive".into());
        }
        check_dtype(&self.dtype, self.itemsize).map_err(Error::InvalidArgument)?;
        if self.variable && (self.dtype != "|u1" || self.shape.len() != 1) {
            return bad(format!(
                "a variable-shape stream is recorded as |u1 of shape [capacity], got {} of shape {:?}",
                self.dtype, self.shape
            ));
        }
        if !(2..=MAX_SLOTS).contains(&self.slots) {
            return bad(format!("slots must be between 2 and {MAX_SLOTS}, got {}", self.slots));
        }
        if self.meta_capacity > MAX_META {
            return bad(format!("meta_capacity must be at most {MAX_META} bytes, got {}", self.meta_capacity));
        }
        if !(1..=MAX_READERS).contains(&self.max_readers) {
            return bad(format!("max_readers must be between 1 and {MAX_READERS}, got {}", self.max_readers));
        }
        let frame_bytes = self.frame_bytes().filter(|&b| b <= isize::MAX as u64 / 128).ok_or_else(|| match self.variable {
            true => Error::InvalidArgument(format!("a capacity of {} bytes per frame is too large", self.shape[0])),
            false => Error::InvalidArgument(format!("a frame of shape {:?} and itemsize {} is too large", self.shape, self.itemsize)),
        })?;
        if let Some(device) = self.device {
            if self.variable {
                return bad("a device stream holds frames of one shape: variable-shape streams (capacity=) live in host memory".into());
            }
            if self.dtype.starts_with('>') && self.itemsize > 1 {
                return bad(format!(
                    "a device stream cannot hold big-endian dtype {}: CUDA devices are little-endian (use {})",
                    numpy_name(&self.dtype),
                    self.dtype.replacen('>', "<", 1)
                ));
            }
            if device.ordinal >= MAX_DEVICE {
                return bad(format!("device ordinal must be below {MAX_DEVICE}, got {}", device.ordinal));
            }
        }
        let host_bytes = if self.device.is_some_and(|d| !d.cpu_mirror) { 0 } else { frame_bytes };
        Geometry::with_device(self.slots, self.max_readers, host_bytes, self.meta_capacity, self.device.is_some())
            .filter(|g| g.total_bytes <= isize::MAX as u64 / 2)
            .ok_or_else(|| Error::InvalidArgument(format!("{} slots of {frame_bytes} bytes are too large", self.slots)))
    }
}

/// The ranges of a spec's counts and of a segment's permission bits: (field, lowest, highest).
/// The bindings convert these arguments through [`count`], and Python shows the ranges
/// (`framebus doctor --plan`) from here.
pub const COUNT_LIMITS: [(&str, u64, u64); 4] = [
    ("slots", 2, MAX_SLOTS as u64),
    ("meta_capacity", 0, MAX_META as u64),
    ("max_readers", 1, MAX_READERS as u64),
    ("permissions", 0, 0o777),
];

/// `value` of count `field` (one of [`COUNT_LIMITS`]) as a spec stores it. `None` stands for a
/// number too large for an i64; `shown` is the value as the caller wrote it, for the message.
pub fn count(field: &str, value: Option<i64>, shown: &str) -> Result<u32> {
    let (_, low, high) = COUNT_LIMITS.iter().find(|(f, _, _)| *f == field).copied().unwrap_or((field, 0, u64::from(u32::MAX)));
    match value.and_then(|v| u64::try_from(v).ok()) {
        Some(v) if (low..=high).contains(&v) => Ok(v as u32),
        _ if field == "permissions" => Err(Error::InvalidArgument(format!(
            "permissions must be file permission bits between 0o0 and 0o777 (such as 0o600), got {shown}"
        ))),
        _ => Err(Error::InvalidArgument(format!("{field} must be between {low} and {high}, got {shown}"))),
    }
}

/// NumPy's name of a dtype string (`|u1` is "uint8", `<f4` "float32", `|b1` "bool"); a byte
/// order other than this machine's stays explicit (">f4"), as NumPy prints it.
pub fn numpy_name(dtype: &str) -> String {
    let native = if cfg!(target_endian = "little") { b'<' } else { b'>' };
    let (order, kind, digits) = match dtype.as_bytes() {
        [order, kind, digits @ ..] => (*order, *kind, digits),
        _ => return dtype.to_owned(),
    };
    let Ok(width) = std::str::from_utf8(digits).unwrap_or("").parse::<u32>() else { return dtype.to_owned() };
    if !(order == b'|' || order == b'=' || order == native) {
        return dtype.to_owned();
    }
    match kind {
        b'b' if width == 1 => "bool".to_owned(),
        b'i' => format!("int{}", width * 8),
        b'u' => format!("uint{}", width * 8),
        b'f' => format!("float{}", width * 8),
        b'c' => format!("complex{}", width * 8),
        _ => dtype.to_owned(),
    }
}

/// Byte widths NumPy gives each kind of number: bool, signed and unsigned integers, floats
/// (`f12`/`c24` are 32-bit x86's long double, `f16`/`c32` other platforms').
fn widths(kind: u8) -> &'static [u32] {
    match kind {
        b'b' => &[1],
        b'i' | b'u' => &[1, 2, 4, 8],
        b'f' => &[2, 4, 8, 12, 16],
        b'c' => &[8, 16, 24, 32],
        _ => &[],
    }
}

/// Checks that `dtype` is a plain NumPy number type string, `[<>|=][biufc]N` (as `dtype.str`
/// writes it: `<f4`, `|u1`, `|b1`, `>c16`), whose width `N` is `itemsize`. Anything else (objects,
/// records, strings, text NumPy cannot parse) would make a reader build arrays that are not the
/// frame bytes, or that reach past them.
pub fn check_dtype(dtype: &str, itemsize: u32) -> std::result::Result<(), String> {
    let expected = "a NumPy number type string such as \"<f4\" or \"|u1\" (byte order <, >, | or =, kind b, i, u, f or c, width in bytes)";
    let width = match dtype.as_bytes() {
        [order, kind, digits @ ..]
            if b"<>|=".contains(order) && (1..=2).contains(&digits.len()) && digits[0] != b'0' && digits.iter().all(u8::is_ascii_digit) =>
        {
            let n = digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0'));
            if !widths(*kind).contains(&n) {
                return Err(format!("dtype {dtype:?} is not {expected}"));
            }
            n
        }
        _ if dtype.len() >= DTYPE_LEN => {
            return Err(format!("dtype {dtype:?} is longer than {} bytes; it must be {expected}", DTYPE_LEN - 1))
        }
        _ => return Err(format!("dtype {dtype:?} is not {expected}")),
    };
    if width != itemsize {
        return Err(format!("dtype {dtype:?} has {width}-byte elements but the itemsize is {itemsize}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn numpy_names_and_count_ranges() {
        for (dtype, name) in
            [("|u1", "uint8"), ("<f4", "float32"), ("|b1", "bool"), ("<i8", "int64"), ("<c16", "complex128"), (">f4", ">f4"), ("x", "x")]
        {
            assert_eq!(numpy_name(dtype), name);
        }
        assert_eq!(count("slots", Some(4), "4").unwrap(), 4);
        assert_eq!(count("slots", Some(-1), "-1").unwrap_err().to_string(), "slots must be between 2 and 64, got -1");
        assert_eq!(count("max_readers", None, "10**30").unwrap_err().to_string(), "max_readers must be between 1 and 4096, got 10**30");
        assert!(count("permissions", Some(0o1000), "0o1000").unwrap_err().to_string().contains("permission bits between 0o0 and 0o777"));
        assert_eq!(count("meta_capacity", Some(0), "0").unwrap(), 0);
    }

    use super::*;

    #[test]
    fn validates_fields() {
        let ok = StreamSpec::new("<f4", 4, vec![128, 128]);
        assert_eq!(ok.geometry().unwrap().frame_bytes, 65536);
        assert_eq!(StreamSpec::variable(1000).geometry().unwrap().frame_bytes, 1000 + super::super::frame_table::TABLE_BYTES);
        for bad in [
            StreamSpec { shape: vec![], ..ok.clone() },
            StreamSpec { shape: vec![1, 0], ..ok.clone() },
            StreamSpec { shape: vec![1; 9], ..ok.clone() },
            StreamSpec { slots: 1, ..ok.clone() },
            StreamSpec { slots: 65, ..ok.clone() },
            StreamSpec { max_readers: 0, ..ok.clone() },
            StreamSpec { shape: vec![u64::MAX, 2], ..ok.clone() },
            StreamSpec { dtype: "x".repeat(40), ..ok.clone() },
            StreamSpec { dtype: "|O".into(), itemsize: 8, ..ok.clone() },
            StreamSpec { dtype: "<c16".into(), ..ok.clone() },
            StreamSpec { variable: true, ..ok.clone() },
            StreamSpec::variable(u64::MAX - 10),
        ] {
            assert!(matches!(bad.geometry(), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
    }

    #[test]
    fn accepts_every_number_type_numpy_writes() {
        for (dtype, itemsize) in [
            ("|b1", 1),
            ("|i1", 1),
            ("|u1", 1),
            ("<i2", 2),
            (">u2", 2),
            ("<i4", 4),
            ("=u4", 4),
            ("<i8", 8),
            (">u8", 8),
            ("<f2", 2),
            ("<f4", 4),
            (">f4", 4),
            ("<f8", 8),
            ("<f16", 16),
            ("<c8", 8),
            ("<c16", 16),
            (">c32", 32),
            ("<u1", 1),
        ] {
            assert_eq!(check_dtype(dtype, itemsize), Ok(()), "{dtype}");
        }
    }

    #[test]
    fn refuses_anything_else() {
        for (dtype, itemsize) in [
            ("", 1),
            ("|O", 8),
            ("|O8", 8),
            ("<c16", 8),
            ("<f4", 8),
            ("|u1", 2),
            ("<f3", 3),
            ("|b2", 2),
            ("<i16", 16),
            ("<f04", 4),
            ("<f+4", 4),
            ("<f", 4),
            ("f4", 4),
            ("float32", 4),
            ("<U4", 16),
            ("|S3", 3),
            ("|V8", 8),
            ("<M8", 8),
            ("<m8", 8),
            ("|u1,|u1", 2),
            ("!f4", 4),
            (" <f4", 4),
            ("<f4 ", 4),
            ("<f4\0", 4),
            ("<f\u{e9}", 4),
            ("<f4294967300", 4),
        ] {
            assert!(check_dtype(dtype, itemsize).is_err(), "{dtype:?} with itemsize {itemsize} was accepted");
        }
        let long = "x".repeat(40);
        assert!(check_dtype(&long, 1).unwrap_err().contains("longer than"));
        assert!(check_dtype("<c16", 8).unwrap_err().contains("itemsize is 8"));
    }
}
