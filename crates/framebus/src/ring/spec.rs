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
            return bad(format!("shape must have 1 to {MAX_NDIM} dimensions, got {}", shape_text(&self.shape)));
        }
        if self.variable && self.shape == [0] {
            return bad("capacity must be a positive number of bytes, got 0".into());
        }
        if self.shape.contains(&0) {
            return bad(format!("shape dimensions must be positive, got {}", shape_text(&self.shape)));
        }
        if number_width(&self.dtype).is_err() {
            return bad(format!("unsupported dtype {:?}: streams hold bool, integer, float or complex elements (NumPy number types such as uint8, float32, complex64)", numpy_name(&self.dtype)));
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
        let frame_bytes = self.frame_bytes().filter(|&b| b <= MAX_FRAME_BYTES).ok_or_else(|| match self.variable {
            true => Error::InvalidArgument(format!(
                "capacity {} is larger than a frame may be ({} bytes of arrays; a frame may have at most {MAX_FRAME_BYTES} bytes with its table)",
                self.shape[0],
                MAX_FRAME_BYTES - super::frame_table::TABLE_BYTES
            )),
            false => {
                let bytes = self.shape.iter().try_fold(u128::from(self.itemsize), |acc, &d| acc.checked_mul(u128::from(d)));
                let bytes = bytes.map_or_else(|| "at least 2**128".to_owned(), |b| b.to_string());
                Error::InvalidArgument(format!(
                    "a frame of shape {} and dtype {} would have {bytes} bytes; a frame may have at most {MAX_FRAME_BYTES} bytes",
                    shape_text(&self.shape),
                    numpy_name(&self.dtype)
                ))
            }
        })?;
        if let Some(device) = self.device {
            if self.variable {
                return bad("a device stream holds frames of one shape: variable-shape streams (capacity=) live in host memory; create it with shape= and dtype=".into());
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

/// The most bytes a frame may have (a variable-shape stream's frame: its table and capacity).
/// Every offset into a segment then fits an `isize` with room to spare.
pub const MAX_FRAME_BYTES: u64 = isize::MAX as u64 / 128;

/// `dims` as Python writes a tuple: `(5,)`, `(2, 3)`, `()`.
pub fn shape_text<T: std::fmt::Display>(dims: &[T]) -> String {
    match dims {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// A fixed-shape stream's shape as a caller gave it (each dimension any integer, saturated to
/// `i128` by the caller; `shown` is the shape as the caller wrote it, for the messages), checked
/// against what a stream can hold: 1 to [`MAX_NDIM`] dimensions, each positive, at most
/// [`MAX_FRAME_BYTES`] elements in all (the frame's bytes are checked with its dtype when the
/// stream is created).
pub fn checked_shape(dims: &[i128], shown: &str) -> Result<Vec<u64>> {
    let bad = |msg: String| Err(Error::InvalidArgument(msg));
    if dims.is_empty() || dims.len() > MAX_NDIM {
        return bad(format!("shape must have 1 to {MAX_NDIM} dimensions, got {shown}"));
    }
    if dims.iter().any(|&d| d <= 0) {
        return bad(format!("shape dimensions must be positive, got {shown}"));
    }
    // A dimension at i128::MAX may stand for any larger int (the caller saturates).
    let elements = dims.iter().try_fold(1u128, |acc, &d| if d == i128::MAX { None } else { acc.checked_mul(d as u128) });
    match elements {
        Some(n) if n <= u128::from(MAX_FRAME_BYTES) => Ok(dims.iter().map(|&d| d as u64).collect()),
        n => bad(format!(
            "shape {shown} has {} elements; a frame may have at most {MAX_FRAME_BYTES} bytes",
            n.map_or_else(|| "at least 2**127".to_owned(), |n| n.to_string())
        )),
    }
}

/// A variable-shape stream's capacity (bytes of arrays per frame) as a caller gave it: positive
/// and small enough that a frame with its table stays within [`MAX_FRAME_BYTES`].
pub fn checked_capacity(capacity: i128, shown: &str) -> Result<u64> {
    let most = MAX_FRAME_BYTES - super::frame_table::TABLE_BYTES;
    match capacity {
        c if c <= 0 => Err(Error::InvalidArgument(format!("capacity must be a positive number of bytes, got {shown}"))),
        c if c > i128::from(most) => {
            Err(Error::InvalidArgument(format!("capacity {shown} is larger than a frame may be ({most} bytes of arrays)")))
        }
        c => Ok(c as u64),
    }
}

impl StreamSpec {
    /// Checks `size` (the bytes of one frame a caller expects, saturated to `i128`; `shown` as
    /// written) against this spec: a cross-check for callers that know the frame size (as
    /// pyshmem's `size=`). A variable-shape stream takes none.
    pub fn check_size(&self, size: i128, shown: &str) -> Result<()> {
        if self.variable {
            return Err(Error::InvalidArgument("size= cross-checks a fixed shape; a stream created with capacity= takes no size".into()));
        }
        self.geometry()?;
        let bytes = self.frame_bytes().unwrap_or(u64::MAX);
        if i128::from(bytes) != size {
            return Err(Error::InvalidArgument(format!(
                "size={shown} does not match shape {} and dtype {} ({bytes} bytes); omit size or fix it",
                shape_text(&self.shape),
                numpy_name(&self.dtype)
            )));
        }
        Ok(())
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
    let width = number_width(dtype)?;
    if width != itemsize {
        return Err(format!("dtype {dtype:?} has {width}-byte elements but the itemsize is {itemsize}"));
    }
    Ok(())
}

/// The element width of `dtype` if it is a plain NumPy number type string (see
/// [`check_dtype`]), else what it is not.
fn number_width(dtype: &str) -> std::result::Result<u32, String> {
    let expected = "a NumPy number type string such as \"<f4\" or \"|u1\" (byte order <, >, | or =, kind b, i, u, f or c, width in bytes)";
    match dtype.as_bytes() {
        [order, kind, digits @ ..]
            if b"<>|=".contains(order) && (1..=2).contains(&digits.len()) && digits[0] != b'0' && digits.iter().all(u8::is_ascii_digit) =>
        {
            let n = digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0'));
            if !widths(*kind).contains(&n) {
                return Err(format!("dtype {dtype:?} is not {expected}"));
            }
            Ok(n)
        }
        _ if dtype.len() >= DTYPE_LEN => Err(format!("dtype {dtype:?} is longer than {} bytes; it must be {expected}", DTYPE_LEN - 1)),
        _ => Err(format!("dtype {dtype:?} is not {expected}")),
    }
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
    fn shapes_capacities_and_sizes_as_callers_give_them() {
        assert_eq!(checked_shape(&[2, 3], "(2, 3)").unwrap(), vec![2, 3]);
        let msg = |r: Result<Vec<u64>>| r.unwrap_err().to_string();
        assert_eq!(msg(checked_shape(&[], "()")), "shape must have 1 to 8 dimensions, got ()");
        assert_eq!(msg(checked_shape(&[1; 9], "x")), "shape must have 1 to 8 dimensions, got x");
        assert_eq!(msg(checked_shape(&[2, -1], "(2, -1)")), "shape dimensions must be positive, got (2, -1)");
        assert_eq!(msg(checked_shape(&[0], "(0,)")), "shape dimensions must be positive, got (0,)");
        assert!(msg(checked_shape(&[1 << 40, 1 << 40], "s"))
            .starts_with("shape s has 1208925819614629174706176 elements; a frame may have at most"));
        assert!(msg(checked_shape(&[i128::MAX, 4], "s")).contains("at least 2**127 elements"));
        assert!(msg(checked_shape(&[i128::MAX], "s")).contains("at least 2**127 elements"));
        assert!(checked_shape(&[MAX_FRAME_BYTES as i128], "s").is_ok());
        assert_eq!(checked_capacity(16, "16").unwrap(), 16);
        assert_eq!(checked_capacity(-1, "-1").unwrap_err().to_string(), "capacity must be a positive number of bytes, got -1");
        assert!(checked_capacity(1 << 70, "2**70").unwrap_err().to_string().starts_with("capacity 2**70 is larger than a frame may be"));
        let spec = StreamSpec::new("<f4", 4, vec![2, 3]);
        assert!(spec.check_size(24, "24").is_ok());
        assert_eq!(
            spec.check_size(25, "25").unwrap_err().to_string(),
            "size=25 does not match shape (2, 3) and dtype float32 (24 bytes); omit size or fix it"
        );
        assert!(StreamSpec::variable(16).check_size(16, "16").unwrap_err().to_string().contains("takes no size"));
        assert_eq!(shape_text(&[5u64]), "(5,)");
        let err = StreamSpec::new("<U4", 16, vec![2]).geometry().unwrap_err().to_string();
        assert!(err.starts_with("unsupported dtype \"<U4\": streams hold bool, integer, float or complex elements"), "{err}");
        let err = StreamSpec::new("<f4", 4, vec![1 << 40, 1 << 40]).geometry().unwrap_err().to_string();
        assert!(
            err.starts_with("a frame of shape (1099511627776, 1099511627776) and dtype float32 would have 4835703278458516698824704 bytes"),
            "{err}"
        );
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
