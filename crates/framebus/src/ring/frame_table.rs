//! The per-frame table of a variable-shape stream (layout version 2, `Header::flags` bit 0).
//!
//! Every slot payload of such a stream starts with a table of `TABLE_BYTES` (one page): a
//! 128-byte table header and up to `MAX_ARRAYS` 128-byte entries, one per array of the frame
//! (name, NumPy dtype string, shape, offset, byte count, a bytes flag). The arrays follow the
//! table, each 64-byte aligned, the first one at `TABLE_BYTES` (page aligned). The table lives in
//! the payload, so reader processes see it through the same read-only mapping as the data.
//!
//! The writer lays a frame out with [`plan`] (every limit checked before a slot is claimed) and
//! writes the table with [`FrameTable::encode`]; a reader decodes it with [`decode`], which
//! validates every field against the slot's capacity and refuses anything it cannot trust: a
//! damaged table is an error, never a misread.
//!
//! ```text
//! table header (128 bytes)
//!   0   magic      b"FBT1"
//!   4   count      arrays in the frame, 1..=MAX_ARRAYS
//!   8   flags      bit 0 NAMED: the frame was written as a mapping of names to arrays
//!   12  _pad
//!   16  data_end   end of the last array, from the start of the payload (the frame's length)
//!   24  codec      ASCII codec of an encoded packet (NUL padded), empty for none
//!   40  reserved
//! entry i (128 bytes, at 128 + 128 * i)
//!   0   name       UTF-8, NUL padded, at most MAX_NAME bytes
//!   32  dtype      NumPy dtype.str (for example "<f4"), NUL padded
//!   40  ndim       0..=MAX_NDIM
//!   44  flags      bit 0 BYTES: a byte payload (then dtype is "|u1" and ndim is 1)
//!   48  offset     from the start of the payload, a multiple of 64, at least TABLE_BYTES
//!   56  nbytes     product(shape) * itemsize
//!   64  shape      MAX_NDIM x u64 (entries past ndim are zero)
//! ```

use super::layout::{MAX_NDIM, PAGE};
use super::spec::check_dtype;

/// Bytes of the table at the start of every slot payload (the first array is page aligned).
pub const TABLE_BYTES: u64 = PAGE;
/// Bytes of the table header.
const HEAD_BYTES: usize = 128;
/// Bytes of one entry.
const ENTRY_BYTES: usize = 128;
/// Most arrays one frame may carry.
pub const MAX_ARRAYS: usize = (TABLE_BYTES as usize - HEAD_BYTES) / ENTRY_BYTES;
/// Most bytes of an array name (UTF-8).
pub const MAX_NAME: usize = 32;
/// Most bytes of a dtype string in an entry.
const DTYPE_BYTES: usize = 8;
/// Most bytes of a codec name.
pub const MAX_CODEC: usize = 16;
/// Alignment of every array after the first.
pub const ARRAY_ALIGN: u64 = 64;
/// Magic of a table.
const MAGIC: [u8; 4] = *b"FBT1";
/// Table flag: the frame was written as a mapping (read back as a dict).
pub const NAMED: u32 = 1;
/// Entry flag: a byte payload.
pub const BYTES: u32 = 1;

/// One array of a frame: where it is and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayDesc {
    pub name: String,
    /// NumPy dtype string, a plain number type (see `spec::check_dtype`).
    pub dtype: String,
    pub itemsize: u32,
    pub shape: Vec<u64>,
    /// Offset from the start of the slot payload.
    pub offset: u64,
    pub nbytes: u64,
    /// A byte payload (read back as bytes rather than an array).
    pub bytes: bool,
}

/// The table of one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameTable {
    pub arrays: Vec<ArrayDesc>,
    /// Written as a mapping of names to arrays.
    pub named: bool,
    /// Codec of an encoded packet (empty for none).
    pub codec: String,
    /// End of the last array from the start of the payload: the frame's length.
    pub data_end: u64,
}

/// What a writer asks for: one array of a frame to lay out.
#[derive(Clone, Copy, Debug)]
pub struct ArraySpec<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [u64],
    pub bytes: bool,
}

/// Element width of a dtype string, checked to be a plain number type.
pub fn dtype_itemsize(dtype: &str) -> Result<u32, String> {
    let width = dtype.get(2..).and_then(|d| d.parse::<u32>().ok()).unwrap_or(0);
    check_dtype(dtype, width)?;
    Ok(width)
}

/// Checks a name: at most `MAX_NAME` bytes, no NUL (so it survives the NUL padding).
fn check_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_NAME {
        return Err(format!("array name {name:?} is {} bytes long; names may have at most {MAX_NAME} bytes (UTF-8)", name.len()));
    }
    if name.contains('\0') {
        return Err(format!("array name {name:?} contains a NUL character"));
    }
    Ok(())
}

/// Checks a codec name: at most `MAX_CODEC` ASCII letters, digits, `_`, `-` or `.`.
pub fn check_codec(codec: &str) -> Result<(), String> {
    if codec.len() > MAX_CODEC || !codec.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
        return Err(format!("codec {codec:?} must be at most {MAX_CODEC} ASCII letters, digits, '_', '-' or '.' (for example \"h264\")"));
    }
    Ok(())
}

/// How messages name an array: by its name, or "the array" for the one array of an unnamed
/// frame.
fn label(name: &str) -> String {
    if name.is_empty() {
        "the array".to_owned()
    } else {
        format!("array {name:?}")
    }
}

/// Bytes of an array of `shape` and `itemsize`, None when the product overflows.
fn array_bytes(shape: &[u64], itemsize: u32) -> Option<u64> {
    shape.iter().try_fold(u64::from(itemsize), |acc, &d| acc.checked_mul(d))
}

/// Lays out a frame of `arrays` in a slot of `slot_bytes` (table included): offsets, sizes and
/// every limit (count, names, dtypes, shapes, capacity) checked. The error says which limit.
pub fn plan(arrays: &[ArraySpec<'_>], named: bool, codec: &str, slot_bytes: u64) -> Result<FrameTable, String> {
    let capacity = slot_bytes.saturating_sub(TABLE_BYTES);
    if arrays.is_empty() {
        return Err("a frame must hold at least one array".into());
    }
    if arrays.len() > MAX_ARRAYS {
        return Err(format!("a frame may hold at most {MAX_ARRAYS} arrays, got {}", arrays.len()));
    }
    check_codec(codec)?;
    if !codec.is_empty() && (named || arrays.len() != 1 || !arrays[0].bytes) {
        return Err(format!("codec {codec:?} names the encoding of a byte payload (write(packet, codec=...) with bytes, bytearray or a memoryview); a frame of arrays has no codec: drop codec="));
    }
    let mut out = Vec::with_capacity(arrays.len());
    let mut end = TABLE_BYTES;
    for (i, a) in arrays.iter().enumerate() {
        check_name(a.name)?;
        if named && arrays[..i].iter().any(|b| b.name == a.name) {
            return Err(format!("array name {:?} appears twice", a.name));
        }
        let itemsize = dtype_itemsize(a.dtype)?;
        if a.shape.len() > MAX_NDIM {
            return Err(format!("{} has {} dimensions; at most {MAX_NDIM} are allowed", label(a.name), a.shape.len()));
        }
        if a.bytes && (a.dtype != "|u1" || a.shape.len() != 1) {
            return Err("a byte payload is one-dimensional |u1 data".into());
        }
        let too_large = || {
            format!("the frame does not fit the stream's capacity of {capacity} bytes per frame ({} of shape {:?} and dtype {}); create the stream with a larger capacity", label(a.name), a.shape, a.dtype)
        };
        let nbytes = array_bytes(a.shape, itemsize).ok_or_else(|| {
            format!(
                "{} of shape {:?} and dtype {} has more than 2**64 bytes (the product of its shape overflows)",
                label(a.name),
                a.shape,
                a.dtype
            )
        })?;
        let offset = if i == 0 { TABLE_BYTES } else { super::layout::align_up(end, ARRAY_ALIGN).ok_or_else(too_large)? };
        end = offset.checked_add(nbytes).filter(|&e| e <= slot_bytes).ok_or_else(too_large)?;
        out.push(ArrayDesc {
            name: a.name.to_owned(),
            dtype: a.dtype.to_owned(),
            itemsize,
            shape: a.shape.to_vec(),
            offset,
            nbytes,
            bytes: a.bytes,
        });
    }
    Ok(FrameTable { arrays: out, named, codec: codec.to_owned(), data_end: end })
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

fn put_padded(buf: &mut [u8], at: usize, width: usize, text: &str) {
    buf[at..at + width].fill(0);
    put(buf, at, text.as_bytes());
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or_default())
}

/// Text up to the first NUL of a padded field; the padding must be all NUL.
fn padded_text(field: &[u8]) -> Option<&str> {
    let len = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    if field[len..].iter().any(|&b| b != 0) {
        return None;
    }
    std::str::from_utf8(&field[..len]).ok()
}

impl FrameTable {
    /// Bytes the encoded table occupies (header and its entries).
    pub fn encoded_len(&self) -> usize {
        HEAD_BYTES + ENTRY_BYTES * self.arrays.len()
    }

    /// Writes the table at the start of `payload` (at least `encoded_len` bytes). The table
    /// must come from `plan` (its fields are not checked again).
    pub fn encode(&self, payload: &mut [u8]) {
        let buf = &mut payload[..self.encoded_len()];
        buf.fill(0);
        put(buf, 0, &MAGIC);
        put(buf, 4, &(self.arrays.len() as u32).to_ne_bytes());
        put(buf, 8, &(if self.named { NAMED } else { 0 }).to_ne_bytes());
        put(buf, 16, &self.data_end.to_ne_bytes());
        put_padded(buf, 24, MAX_CODEC, &self.codec);
        for (i, a) in self.arrays.iter().enumerate() {
            let at = HEAD_BYTES + ENTRY_BYTES * i;
            put_padded(buf, at, MAX_NAME, &a.name);
            put_padded(buf, at + 32, DTYPE_BYTES, &a.dtype);
            put(buf, at + 40, &(a.shape.len() as u32).to_ne_bytes());
            put(buf, at + 44, &(if a.bytes { BYTES } else { 0 }).to_ne_bytes());
            put(buf, at + 48, &a.offset.to_ne_bytes());
            put(buf, at + 56, &a.nbytes.to_ne_bytes());
            for (d, &n) in a.shape.iter().enumerate() {
                put(buf, at + 64 + 8 * d, &n.to_ne_bytes());
            }
        }
    }
}

/// The frame length a table records (its `data_end`), bounded by `slot_bytes`: what a writer
/// stores as the frame's payload length.
pub fn recorded_len(payload: &[u8], slot_bytes: u64) -> u64 {
    if payload.len() < HEAD_BYTES {
        return 0;
    }
    u64_at(payload, 16).clamp(TABLE_BYTES, slot_bytes.max(TABLE_BYTES))
}

/// Reads and validates the table at the start of `payload`, a slot of `slot_bytes` (table
/// included): magic, count, flags, codec, and for every entry a UTF-8 name of at most
/// `MAX_NAME` bytes (unique in a named frame), a plain number dtype, ndim, shape product times
/// itemsize equal to nbytes without overflow, a 64-byte aligned offset after the table, arrays
/// in order without overlap, and every array inside `data_end`, itself inside the slot.
pub fn decode(payload: &[u8], slot_bytes: u64) -> Result<FrameTable, String> {
    if (payload.len() as u64) < TABLE_BYTES {
        return Err(format!("the frame is {} bytes, shorter than its table", payload.len()));
    }
    if payload[..4] != MAGIC {
        return Err("the frame table has no magic".into());
    }
    let count = u32_at(payload, 4) as usize;
    if count == 0 || count > MAX_ARRAYS {
        return Err(format!("the frame table records {count} arrays (1 to {MAX_ARRAYS} allowed)"));
    }
    let flags = u32_at(payload, 8);
    if flags & !NAMED != 0 {
        return Err(format!("the frame table has unknown flags {flags:#x}"));
    }
    let data_end = u64_at(payload, 16);
    if data_end < TABLE_BYTES || data_end > slot_bytes || data_end > payload.len() as u64 {
        return Err(format!("the frame table says the frame ends at byte {data_end}, outside the slot's {slot_bytes} bytes"));
    }
    let codec = padded_text(&payload[24..24 + MAX_CODEC]).ok_or("the frame's codec is not text")?;
    check_codec(codec)?;
    let named = flags & NAMED != 0;
    let mut arrays: Vec<ArrayDesc> = Vec::with_capacity(count);
    let mut end = TABLE_BYTES;
    for i in 0..count {
        let at = HEAD_BYTES + ENTRY_BYTES * i;
        let e = &payload[at..at + ENTRY_BYTES];
        let bad = |what: String| format!("array {i} of the frame table: {what}");
        let name = padded_text(&e[..MAX_NAME]).ok_or_else(|| bad("its name is not UTF-8 text".into()))?;
        if named && arrays.iter().any(|a| a.name == name) {
            return Err(bad(format!("name {name:?} appears twice")));
        }
        let dtype = padded_text(&e[32..32 + DTYPE_BYTES]).ok_or_else(|| bad("its dtype is not text".into()))?;
        let itemsize = dtype_itemsize(dtype).map_err(bad)?;
        let ndim = u32_at(e, 40) as usize;
        if ndim > MAX_NDIM {
            return Err(bad(format!("ndim {ndim} exceeds {MAX_NDIM}")));
        }
        let entry_flags = u32_at(e, 44);
        if entry_flags & !BYTES != 0 {
            return Err(bad(format!("unknown flags {entry_flags:#x}")));
        }
        let bytes = entry_flags & BYTES != 0;
        if bytes && (dtype != "|u1" || ndim != 1) {
            return Err(bad("a byte payload must be one-dimensional |u1".into()));
        }
        let shape: Vec<u64> = (0..ndim).map(|d| u64_at(e, 64 + 8 * d)).collect();
        if (ndim..MAX_NDIM).any(|d| u64_at(e, 64 + 8 * d) != 0) {
            return Err(bad("dimensions past ndim are not zero".into()));
        }
        let offset = u64_at(e, 48);
        let nbytes = u64_at(e, 56);
        if array_bytes(&shape, itemsize) != Some(nbytes) {
            return Err(bad(format!("shape {shape:?} of {dtype} does not make {nbytes} bytes")));
        }
        if offset < end || !offset.is_multiple_of(ARRAY_ALIGN) {
            return Err(bad(format!("offset {offset} overlaps the table or the previous array, or is not {ARRAY_ALIGN}-byte aligned")));
        }
        end = offset
            .checked_add(nbytes)
            .filter(|&x| x <= data_end)
            .ok_or_else(|| bad(format!("{nbytes} bytes at offset {offset} reach past the frame's end ({data_end})")))?;
        arrays.push(ArrayDesc { name: name.to_owned(), dtype: dtype.to_owned(), itemsize, shape, offset, nbytes, bytes });
    }
    Ok(FrameTable { arrays, named, codec: codec.to_owned(), data_end })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: u64 = TABLE_BYTES + (1 << 20);

    fn spec<'a>(name: &'a str, dtype: &'a str, shape: &'a [u64]) -> ArraySpec<'a> {
        ArraySpec { name, dtype, shape, bytes: false }
    }

    fn round_trip(t: &FrameTable) -> FrameTable {
        let mut buf = vec![0xa5u8; t.data_end as usize];
        t.encode(&mut buf);
        decode(&buf, SLOT).unwrap()
    }

    #[test]
    fn lays_out_arrays_aligned_after_the_table() {
        let t = plan(&[spec("image", "|u1", &[3, 5, 3]), spec("boxes", "<f4", &[7, 4]), spec("empty", "<f8", &[0, 4])], true, "", SLOT)
            .unwrap();
        assert_eq!(t.arrays[0].offset, TABLE_BYTES);
        assert_eq!(t.arrays[1].offset, TABLE_BYTES + 64);
        assert_eq!(t.arrays[1].nbytes, 7 * 4 * 4);
        assert_eq!(t.arrays[2].offset, TABLE_BYTES + 64 + 128);
        assert_eq!(t.arrays[2].nbytes, 0);
        assert_eq!(t.data_end, TABLE_BYTES + 192);
        assert_eq!(round_trip(&t), t);
    }

    #[test]
    fn round_trips_bytes_scalars_and_codecs() {
        let t = plan(&[ArraySpec { name: "", dtype: "|u1", shape: &[1000], bytes: true }], false, "h264", SLOT).unwrap();
        assert_eq!(round_trip(&t), t);
        let t = plan(&[spec("", "<c16", &[])], false, "", SLOT).unwrap();
        assert_eq!(t.arrays[0].nbytes, 16);
        assert_eq!(round_trip(&t), t);
    }

    #[test]
    fn plan_refuses_every_limit_with_its_name() {
        let long = "n".repeat(33);
        let many: Vec<ArraySpec<'_>> = (0..=MAX_ARRAYS).map(|_| spec("", "|u1", &[1])).collect();
        let cases: Vec<(Vec<ArraySpec<'_>>, &str)> = vec![
            (vec![], "at least one"),
            (many, "at most 31 arrays"),
            (vec![spec(&long, "|u1", &[1])], "at most 32 bytes"),
            (vec![spec("a", "|O", &[1])], "not a NumPy number type"),
            (vec![spec("a", "<U4", &[1])], "not a NumPy number type"),
            (vec![spec("a", "<f4", &[1 << 40, 1 << 40])], "overflows"),
            (vec![spec("a", "<f4", &[1 << 30, 1 << 20])], "capacity"),
            (vec![spec("a", "<f4", &[u64::MAX, 2])], "overflows"),
            (vec![spec("a", "|u1", &[1 << 20, 2])], "capacity"),
            (vec![spec("a", "|u1", &[1; 9])], "at most 8"),
            (vec![spec("a", "|u1", &[1]), spec("a", "|u1", &[1])], "twice"),
            (vec![ArraySpec { name: "", dtype: "<f4", shape: &[1], bytes: true }], "byte payload"),
        ];
        for (arrays, expect) in cases {
            let err = plan(&arrays, true, "", SLOT).unwrap_err();
            assert!(err.contains(expect), "{err:?} lacks {expect:?}");
        }
        assert!(plan(&[spec("a", "|u1", &[1])], false, "h 264", SLOT).unwrap_err().contains("codec"));
        // Exactly the capacity fits.
        assert!(plan(&[spec("a", "|u1", &[1 << 20])], false, "", SLOT).is_ok());
    }

    #[test]
    fn decode_refuses_damaged_tables() {
        let t = plan(&[spec("image", "|u1", &[8, 8]), spec("boxes", "<f4", &[2, 4])], true, "", SLOT).unwrap();
        let mut good = vec![0u8; t.data_end as usize];
        t.encode(&mut good);
        let e1 = HEAD_BYTES + ENTRY_BYTES;
        let damages: Vec<(usize, Vec<u8>)> = vec![
            (0, b"XXXX".to_vec()),
            (4, 0u32.to_ne_bytes().to_vec()),
            (4, 32u32.to_ne_bytes().to_vec()),
            (8, 2u32.to_ne_bytes().to_vec()),
            (16, (SLOT + 1).to_ne_bytes().to_vec()),
            (16, 100u64.to_ne_bytes().to_vec()),
            (24, vec![0xff]),
            (e1, b"image".to_vec()),
            (e1, vec![0xc3, 0x28]),
            (e1 + 32, b"|O8".to_vec()),
            (e1 + 32, b"<U4".to_vec()),
            (e1 + 40, 9u32.to_ne_bytes().to_vec()),
            (e1 + 44, 2u32.to_ne_bytes().to_vec()),
            (e1 + 44, 1u32.to_ne_bytes().to_vec()),
            (e1 + 48, (TABLE_BYTES + 1).to_ne_bytes().to_vec()),
            (e1 + 48, TABLE_BYTES.to_ne_bytes().to_vec()),
            (e1 + 48, u64::MAX.to_ne_bytes().to_vec()),
            (e1 + 56, 33u64.to_ne_bytes().to_vec()),
            (e1 + 64, (u64::MAX / 2).to_ne_bytes().to_vec()),
            (e1 + 64 + 8 * 3, 1u64.to_ne_bytes().to_vec()),
        ];
        for (at, bytes) in damages {
            let mut buf = good.clone();
            buf[at..at + bytes.len()].copy_from_slice(&bytes);
            assert!(decode(&buf, SLOT).is_err(), "damage at {at} ({bytes:?}) was accepted");
        }
        assert!(decode(&good[..100], SLOT).is_err());
        assert_eq!(decode(&good, SLOT).unwrap(), t);
    }

    #[test]
    fn recorded_len_is_bounded() {
        let mut buf = vec![0u8; HEAD_BYTES];
        buf[16..24].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(recorded_len(&buf, SLOT), SLOT);
        buf[16..24].copy_from_slice(&0u64.to_ne_bytes());
        assert_eq!(recorded_len(&buf, SLOT), TABLE_BYTES);
    }
}
