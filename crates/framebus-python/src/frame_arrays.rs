//! The arrays of one frame of a variable-shape stream, on the Python side: what a write is made
//! of (an array, a dict of named arrays, or a byte payload), and what a read, a view or a loan
//! hands back for a frame's table (an array, a dict, or bytes). Fixed-shape streams never come
//! here. The layout and its checks live in the core (`framebus::ring::frame_table`).

use std::sync::{Arc, Mutex};

use framebus::ring::frame_table::{ArraySpec, FrameTable};
use numpy::npyffi::npy_intp;
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::array::{data_ptr, number_descr, DataPtr, FrameSpec};
use crate::errors::ErrorKind;

/// Frames at least this large are copied out with the GIL released.
const DETACH_BYTES: usize = 256 * 1024;

/// NumPy dtypes by dtype string, so a stream of frames of a few dtypes builds each once.
#[derive(Default)]
pub struct DescrCache(Mutex<Vec<(String, Py<PyArrayDescr>)>>);

impl DescrCache {
    /// The dtype of `dtype` (a string the core validated).
    fn get<'py>(&self, py: Python<'py>, dtype: &str) -> PyResult<Bound<'py, PyArrayDescr>> {
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, d)) = cache.iter().find(|(s, _)| s == dtype) {
            return Ok(d.bind(py).clone());
        }
        let descr = number_descr(py, dtype)?;
        if cache.len() >= 32 {
            cache.remove(0);
        }
        cache.push((dtype.to_owned(), descr.clone().unbind()));
        Ok(descr)
    }
}

/// The last frame table read through a handle (its raw bytes) and its Python side: frames of the
/// same layout as the one before (the common case) skip decoding and building dtypes and shapes.
/// A hit needs the same bytes, which the first decode validated against the same slot size.
#[derive(Default)]
pub struct ReadCache(Mutex<Option<(Vec<u8>, Arc<Parts>)>>);

impl ReadCache {
    /// The arrays of the frame whose payload is `payload`: the cached ones when its table is
    /// byte for byte the last one, else `decode()`d (and cached).
    pub fn parts(
        &self,
        py: Python<'_>,
        descrs: &DescrCache,
        payload: &[u8],
        decode: impl FnOnce() -> PyResult<FrameTable>,
    ) -> PyResult<Arc<Parts>> {
        let raw = raw_table(payload);
        if let Some(raw) = raw {
            if let Some((bytes, parts)) = &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
                if bytes.as_slice() == raw {
                    return Ok(Arc::clone(parts));
                }
            }
        }
        let parts = Arc::new(Parts::from_table(py, descrs, &decode()?)?);
        if let Some(raw) = raw {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((raw.to_vec(), Arc::clone(&parts)));
        }
        Ok(parts)
    }
}

/// The encoded table at the start of `payload` (header and its entries) when its count is in
/// range and its recorded end lies inside `payload`; None otherwise (then it is decoded).
fn raw_table(payload: &[u8]) -> Option<&[u8]> {
    let word = |at: usize, n: usize| payload.get(at..at + n);
    let count = u32::from_ne_bytes(word(4, 4)?.try_into().ok()?) as usize;
    let end = u64::from_ne_bytes(word(16, 8)?.try_into().ok()?);
    if count == 0 || count > framebus::ring::frame_table::MAX_ARRAYS || end > payload.len() as u64 {
        return None;
    }
    payload.get(..128 + 128 * count)
}

/// The table of the last single-array layout (dtype object, shape, byte flag, codec) a handle
/// wrote or loaned, and the Python side of it for loans: a frame of the same layout as the one
/// before skips planning. The dtype is held, so its address cannot be reused by another.
#[derive(Default)]
pub struct LayoutCache(Mutex<Option<CachedLayout>>);

/// A remembered layout: dtype, shape, byte flag, its table and (for loans) its arrays.
type CachedLayout = (Py<PyArrayDescr>, Vec<u64>, bool, Arc<FrameTable>, Option<Arc<Parts>>);

impl LayoutCache {
    /// The cached table (and parts) for one array of `descr` and `shape`, if it is the last one.
    pub fn get(&self, descr: &Bound<'_, PyArrayDescr>, shape: &[u64], bytes: bool) -> Option<(Arc<FrameTable>, Option<Arc<Parts>>)> {
        match &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((d, sh, b, t, parts)) if d.as_ptr() == descr.as_ptr() && sh.as_slice() == shape && *b == bytes => {
                Some((Arc::clone(t), parts.clone()))
            }
            _ => None,
        }
    }

    /// Remembers the layout of one array.
    pub fn put(&self, descr: &Bound<'_, PyArrayDescr>, shape: &[u64], bytes: bool, table: Arc<FrameTable>, parts: Option<Arc<Parts>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((descr.clone().unbind(), shape.to_vec(), bytes, table, parts));
    }
}

/// One array of a frame: its name, spec and offset in the slot payload.
pub struct Part {
    pub name: String,
    pub spec: FrameSpec,
    pub offset: usize,
    pub bytes: bool,
}

/// The arrays of one frame, as its table describes them.
pub struct Parts {
    pub parts: Vec<Part>,
    /// Written as a dict (read back as one).
    pub named: bool,
    pub codec: String,
}

/// The spec of one array (`FrameSpec` with a cached dtype).
fn part_spec(py: Python<'_>, cache: &DescrCache, dtype: &str, shape: &[u64]) -> PyResult<FrameSpec> {
    let descr = cache.get(py, dtype)?;
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let frame_bytes = dims.iter().product::<usize>() * descr.itemsize();
    Ok(FrameSpec {
        dtype: descr.unbind(),
        shape_tuple: PyTuple::new(py, dims.iter())?.unbind(),
        dims: dims.iter().map(|&d| d as npy_intp).collect(),
        shape: dims.into(),
        frame_bytes,
    })
}

impl Parts {
    /// The Python side of a validated table.
    pub fn from_table(py: Python<'_>, cache: &DescrCache, table: &FrameTable) -> PyResult<Parts> {
        let parts = table
            .arrays
            .iter()
            .map(|a| {
                Ok(Part {
                    name: a.name.clone(),
                    spec: part_spec(py, cache, &a.dtype, &a.shape)?,
                    offset: a.offset as usize,
                    bytes: a.bytes,
                })
            })
            .collect::<PyResult<Vec<Part>>>()?;
        Ok(Parts { parts, named: table.named, codec: table.codec.clone() })
    }

    /// The only array of a frame that is not a dict.
    pub fn single(&self) -> Option<&Part> {
        match (self.named, self.parts.as_slice()) {
            (false, [one]) => Some(one),
            _ => None,
        }
    }

    /// Shape of a single-array frame, None for a dict frame.
    pub fn shape<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyTuple>> {
        self.single().map(|p| p.spec.shape_tuple.bind(py).clone())
    }

    /// Dtype of a single-array frame, None for a dict frame.
    pub fn dtype<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArrayDescr>> {
        self.single().map(|p| p.spec.dtype.bind(py).clone())
    }

    /// Names of a dict frame's arrays, None for a single-array frame.
    pub fn names<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        if !self.named {
            return Ok(None);
        }
        Ok(Some(PyTuple::new(py, self.parts.iter().map(|p| p.name.as_str()))?))
    }

    /// Codec of an encoded packet, None for none.
    pub fn codec(&self) -> Option<&str> {
        (!self.codec.is_empty()).then_some(self.codec.as_str())
    }

    /// What a reader (or a loan) sees over the slot payload at `base`: the single array, or a
    /// dict of the named arrays, each with `holder` as its base object.
    ///
    /// # Safety
    /// `base` must point to the payload of the slot the table was read from (every part lies
    /// inside it), kept mapped (and, with NPY_ARRAY_WRITEABLE, writable) while `holder` lives.
    pub unsafe fn wrap_value<'py>(
        &self,
        py: Python<'py>,
        base: *mut u8,
        flags: std::os::raw::c_int,
        holder: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(p) = self.single() {
            // SAFETY: the caller's contract; the part lies inside the slot.
            return unsafe { p.spec.wrap(py, base.add(p.offset), flags, Some(holder)) };
        }
        // SAFETY: the caller's contract.
        let arrays = unsafe { self.wrap_all_parts(py, base, flags, &holder)? };
        self.assemble(py, arrays)
    }

    /// Arrays over the slot payload at `base` with NumPy `flags`, each with `holder` as its
    /// base object.
    ///
    /// # Safety
    /// As for `wrap_value`.
    unsafe fn wrap_all_parts<'py>(
        &self,
        py: Python<'py>,
        base: *mut u8,
        flags: std::os::raw::c_int,
        holder: &Py<PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.parts
            .iter()
            // SAFETY: the validated table puts every part inside the slot (caller's contract).
            .map(|p| unsafe { p.spec.wrap(py, base.add(p.offset), flags, Some(holder.clone_ref(py))) })
            .collect()
    }

    /// What a reader sees: the single array, or a dict of the named arrays.
    pub fn assemble<'py>(&self, py: Python<'py>, arrays: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        if !self.named {
            if let Some(a) = arrays.into_iter().next() {
                return Ok(a);
            }
            return Ok(py.None().into_bound(py));
        }
        let d = PyDict::new(py);
        for (p, a) in self.parts.iter().zip(arrays) {
            d.set_item(&p.name, a)?;
        }
        Ok(d.into_any())
    }

    /// A copy of the frame at `base` (pinned by the caller): the array, the dict of arrays, or
    /// bytes for a byte payload; into `out` (an array, or a dict of arrays for a dict frame)
    /// when given.
    pub fn copy_out<'py>(
        &self,
        py: Python<'py>,
        base: *const u8,
        out: Option<&Bound<'py, PyAny>>,
        stream: &str,
        seq: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let (Some(p), Some(o)) = (self.single(), out) {
            // One array into `out`: the common case, without the bookkeeping below.
            let arr = destination(py, p, o).map_err(|why| out_error(py, stream, seq, &why, self))?;
            let (dst, n) = (data_ptr(&arr), p.spec.frame_bytes);
            // SAFETY: the validated table puts the part inside the pinned slot.
            let src = DataPtr(unsafe { base.add(p.offset) } as *mut u8);
            // SAFETY: dst is `out`'s C-contiguous buffer of n bytes (checked), alive for the
            // call; src lies in the pinned slot.
            let copy = move || unsafe { std::ptr::copy_nonoverlapping(src.get(), dst.get(), n) };
            if n >= DETACH_BYTES {
                py.detach(copy);
            } else {
                copy();
            }
            return Ok(o.clone());
        }
        let mut copies: Vec<(DataPtr, DataPtr, usize)> = Vec::with_capacity(self.parts.len());
        let mut values: Vec<Bound<'py, PyAny>> = Vec::with_capacity(self.parts.len());
        let mut total = 0usize;
        for p in &self.parts {
            // SAFETY: the validated table puts the part inside the pinned slot.
            let src = DataPtr(unsafe { base.add(p.offset) } as *mut u8);
            let n = p.spec.frame_bytes;
            total += n;
            let target = match out {
                None => None,
                Some(o) if !self.named => Some(o.clone()),
                Some(o) => match o.cast::<PyDict>() {
                    Ok(d) => Some(
                        d.get_item(&p.name)?.ok_or_else(|| out_error(py, stream, seq, &format!("out has no array {:?}", p.name), self))?,
                    ),
                    Err(_) => return Err(out_error(py, stream, seq, "out must be a dict of arrays for a frame of named arrays", self)),
                },
            };
            if let Some(t) = target {
                let arr = destination(py, p, &t).map_err(|why| out_error(py, stream, seq, &why, self))?;
                copies.push((src, data_ptr(&arr), n));
                values.push(arr.into_any());
            } else if p.bytes {
                // SAFETY: `src` holds `n` bytes of the pinned slot.
                let b = PyBytes::new(py, unsafe { std::slice::from_raw_parts(src.get(), n) });
                if !self.named {
                    return Ok(b.into_any());
                }
                values.push(b.into_any()); // a byte payload among named arrays: bytes as written
            } else {
                let arr = p.spec.empty(py)?;
                copies.push((src, data_ptr(&arr), n));
                values.push(arr.into_any());
            }
        }
        let copy = move || {
            for (src, dst, n) in copies {
                // SAFETY: dst is a C-contiguous buffer of n bytes kept alive by `values`;
                // src lies in the pinned slot.
                unsafe { std::ptr::copy_nonoverlapping(src.get(), dst.get(), n) };
            }
        };
        if total >= DETACH_BYTES {
            py.detach(copy);
        } else {
            copy();
        }
        match out {
            Some(o) => Ok(o.clone()),
            None => self.assemble(py, values),
        }
    }
}

/// `out` as a destination of part `p`: a writable C-contiguous array of its shape and dtype.
fn destination<'py>(py: Python<'py>, p: &Part, out: &Bound<'py, PyAny>) -> Result<Bound<'py, PyUntypedArray>, String> {
    let Ok(arr) = out.cast::<PyUntypedArray>() else {
        return Err(format!("out must be a numpy.ndarray, got {}", out.get_type().name().map(|n| n.to_string()).unwrap_or_default()));
    };
    if !p.spec.matches(py, arr) {
        return Err(format!("out has shape {:?} and dtype {} (C-contiguous: {})", arr.shape(), arr.dtype(), arr.is_c_contiguous()));
    }
    // SAFETY: as_array_ptr returns the live PyArrayObject behind `arr`.
    if unsafe { (*arr.as_array_ptr()).fields.flags } & numpy::npyffi::NPY_ARRAY_WRITEABLE == 0 {
        return Err("out is read-only".into());
    }
    Ok(arr.clone())
}

fn out_error(py: Python<'_>, stream: &str, seq: u64, why: &str, parts: &Parts) -> PyErr {
    let holds: Vec<String> =
        parts.parts.iter().map(|p| format!("{:?}: shape {:?} dtype {}", p.name, p.spec.shape, p.spec.dtype.bind(py))).collect();
    let msg = format!(
        "{why}; frame {seq} of stream {stream:?} holds {}; nothing was copied (pass out=None to get a new array)",
        holds.join(", ")
    );
    match ErrorKind::InvalidArgument.class(py) {
        Ok(cls) => PyErr::from_type(cls, (msg,)),
        Err(e) => e,
    }
}

/// NumPy `dtype.str` of a plain number dtype, None for anything else (objects, records,
/// strings, subarrays).
pub fn number_dtype_str(descr: &Bound<'_, PyArrayDescr>) -> Option<String> {
    if descr.has_object() || descr.has_fields() || descr.has_subarray() || !b"biufc".contains(&descr.kind()) {
        return None;
    }
    let order = match descr.byteorder() {
        b'=' if cfg!(target_endian = "little") => '<',
        b'=' => '>',
        o => o as char,
    };
    let order = if descr.itemsize() == 1 { '|' } else { order };
    Some(format!("{order}{}{}", descr.kind() as char, descr.itemsize()))
}

/// One array of a write: name, the C-contiguous array, its dtype string, shape, bytes flag.
pub struct SourcePart<'py> {
    pub name: String,
    pub array: Bound<'py, PyUntypedArray>,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: bool,
}

/// What a write of `value` to a variable-shape stream is made of: a C-contiguous array (used
/// as it is, else converted by `framebus._convert.frame_parts`, which copies and raises
/// TypeError/ValueError naming what is wrong), a dict of named arrays, or a byte payload
/// (bytes, bytearray, memoryview; one uint8 array flagged as bytes).
pub fn source<'py>(py: Python<'py>, value: &Bound<'py, PyAny>, stream: &str) -> PyResult<(Vec<SourcePart<'py>>, bool)> {
    if let Ok(arr) = value.cast::<PyUntypedArray>() {
        if arr.is_c_contiguous() {
            if let Some(dtype) = number_dtype_str(&arr.dtype()) {
                let shape = arr.shape().iter().map(|&d| d as u64).collect();
                return Ok((vec![SourcePart { name: String::new(), array: arr.clone(), dtype, shape, bytes: false }], false));
            }
        }
    }
    static FRAME_PARTS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = FRAME_PARTS.get_or_try_init(py, || py.import("framebus._convert")?.getattr("frame_parts").map(Bound::unbind))?;
    let (parts, named): (Vec<(String, Bound<'py, PyAny>, bool)>, bool) = f.bind(py).call1((value, stream))?.extract()?;
    let parts = parts
        .into_iter()
        .map(|(name, array, bytes)| {
            let array = array.cast_into::<PyUntypedArray>()?;
            let dtype = number_dtype_str(&array.dtype()).ok_or_else(|| not_a_number_type(&name, &array.dtype()))?;
            let shape = array.shape().iter().map(|&d| d as u64).collect();
            Ok(SourcePart { name, array, dtype, shape, bytes })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok((parts, named))
}

/// The core's view of a write's arrays (borrowing `parts`).
pub fn specs<'a>(parts: &'a [SourcePart<'_>]) -> Vec<ArraySpec<'a>> {
    parts.iter().map(|p| ArraySpec { name: &p.name, dtype: &p.dtype, shape: &p.shape, bytes: p.bytes }).collect()
}

/// What a loan lays out: (name, dtype string, shape, bytes) per array and whether it is a dict,
/// from `loan(shape=, dtype=)`, `loan(nbytes=)` or `loan(arrays={name: (shape, dtype)})`.
pub type LoanLayout = (Vec<(String, String, Vec<u64>, bool)>, bool);

/// The layout arguments of `loan()`: shape, dtype, nbytes, arrays.
pub type LoanArgs<'a, 'py> =
    (Option<&'a Bound<'py, PyAny>>, Option<&'a Bound<'py, PyAny>>, Option<&'a Bound<'py, PyAny>>, Option<&'a Bound<'py, PyAny>>);

/// One array of a loan as `framebus._convert.loan_layout` gives it: name, dtype, dimensions
/// (Python ints), whether it is a byte payload.
type LoanPart<'py> = (String, Bound<'py, PyArrayDescr>, Vec<Bound<'py, PyAny>>, bool);

/// The TypeError of an array (`name`, "" for a frame of one array) whose dtype no frame holds.
fn not_a_number_type(name: &str, dtype: &Bound<'_, PyArrayDescr>) -> PyErr {
    let what = if name.is_empty() { "the frame".to_owned() } else { format!("array {name:?}") };
    PyTypeError::new_err(format!("{what} has dtype {dtype}; frames hold bool, integer, float or complex arrays (or bytes)"))
}

/// Parses a loan's layout arguments (through `framebus._convert.loan_layout`, which raises
/// TypeError/ValueError for arguments that do not fit together or are of the wrong type): a
/// dtype no frame holds is a TypeError, a dimension outside 0..2**64-1 a ValueError; the
/// core checks the rest when it lays the frame out.
pub fn loan_layout(
    py: Python<'_>,
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    nbytes: Option<&Bound<'_, PyAny>>,
    arrays: Option<&Bound<'_, PyAny>>,
) -> PyResult<LoanLayout> {
    static LOAN_LAYOUT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = LOAN_LAYOUT.get_or_try_init(py, || py.import("framebus._convert")?.getattr("loan_layout").map(Bound::unbind))?;
    let (parts, named): (Vec<LoanPart<'_>>, bool) = f.bind(py).call1((shape, dtype, nbytes, arrays))?.extract()?;
    let mut out = Vec::with_capacity(parts.len());
    for (name, descr, dims, bytes) in parts {
        let dtype = number_dtype_str(&descr).ok_or_else(|| not_a_number_type(&name, &descr))?;
        let what = if bytes { "nbytes" } else { "a loan's shape dimension" };
        let dims = dims
            .iter()
            .map(|d| d.extract::<u64>().map_err(|e| crate::args::out_of_range(d, e, what, "0 to 2**64-1")))
            .collect::<PyResult<Vec<u64>>>()?;
        out.push((name, dtype, dims, bytes));
    }
    Ok((out, named))
}
