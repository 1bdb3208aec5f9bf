//! Python arguments into the values the core takes: timeouts, counts, ids, shapes and metadata.
//! A value out of range is an InvalidArgumentError (a ValueError) naming the argument and its
//! range, a value of the wrong type a TypeError naming it; the ranges of a stream's spec are
//! the core's (`framebus::ring::count`).

use std::time::Duration;

use framebus::Deadline;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{CoreError, ErrorKind};

/// A count argument of `Stream(name, create=True, ...)` (slots, meta_capacity, max_readers,
/// permissions), checked by the core: TypeError unless an int, the core's range message else.
pub(crate) fn spec_count(py: Python<'_>, field: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u32>> {
    let Some(value) = value else { return Ok(None) };
    if value.is_instance_of::<pyo3::types::PyBool>() || !value.hasattr(pyo3::intern!(py, "__index__"))? {
        let shown = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return Err(pyo3::exceptions::PyTypeError::new_err(format!("{field} must be an int, got {shown}")));
    }
    let index = value.call_method0(pyo3::intern!(py, "__index__"))?;
    let shown = match field {
        "permissions" => py.import("builtins")?.getattr("oct")?.call1((&index,))?.str()?.to_string(),
        _ => index.str()?.to_string(),
    };
    framebus::ring::count(field, index.extract::<i64>().ok(), &shown).map(Some).map_err(|e| CoreError(e).into())
}

/// Converts a Python timeout (seconds, None = forever) into a deadline.
pub fn deadline(py: Python<'_>, timeout: Option<f64>) -> PyResult<Deadline> {
    match timeout {
        None => Ok(Deadline::never()),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyErr::from_type(
            ErrorKind::InvalidArgument.class(py)?,
            (format!("timeout must be None or a number of seconds >= 0, got {t}"),),
        )),
        Some(t) => Ok(Duration::try_from_secs_f64(t).map_or(Deadline::never(), |d| Deadline::after(Some(d)))),
    }
}

/// An optional int argument from 0 to 2**64-1 (sequence numbers, timestamps): a negative or
/// too large int is an InvalidArgumentError (a ValueError) naming the argument, rather than the
/// OverflowError of a plain u64; anything that is not an int is a TypeError naming it.
pub fn unsigned(py: Python<'_>, what: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    match v.extract::<u64>() {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => Err(PyErr::from_type(
            ErrorKind::InvalidArgument.class(py)?,
            (format!("{what} must be an int from 0 to 2**64-1, got {}", shown(v)),),
        )),
        Err(_) => Err(PyTypeError::new_err(format!("{what} must be an int or None, got {}", v.get_type().name()?))),
    }
}

/// `value` for an error message, a huge int cut short (its first digits and length).
pub(crate) fn shown(value: &Bound<'_, PyAny>) -> String {
    let text = value.to_string();
    match text.len() {
        n if n > 40 => format!("{}... ({n} digits)", &text[..20]),
        _ => text,
    }
}

/// The error of an int argument that did not extract: an OverflowError (a Python int outside
/// the Rust type) becomes an InvalidArgumentError (a ValueError) naming the argument `what` and
/// its `range`, a TypeError one that names `what`; any other error is returned as it is.
pub fn out_of_range(value: &Bound<'_, PyAny>, err: PyErr, what: &str, range: &str) -> PyErr {
    let py = value.py();
    if err.is_instance_of::<PyTypeError>(py) {
        let kind = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return PyTypeError::new_err(format!("{what} must be an int, got {kind}"));
    }
    if !err.is_instance_of::<PyOverflowError>(py) {
        return err;
    }
    match ErrorKind::InvalidArgument.class(py) {
        Ok(cls) => PyErr::from_type(cls, (format!("{what} must be an int from {range}, got {}", shown(value)),)),
        Err(e) => e,
    }
}

/// A `timeout=` argument (`#[pyo3(from_py_with = seconds)]`): None, or a number of seconds
/// from 0 up to the largest float. An int too large for a float is an InvalidArgumentError
/// (a ValueError) naming the argument and its range, not the OverflowError of a plain f64.
pub fn seconds(value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if value.is_none() {
        return Ok(None);
    }
    match value.extract::<f64>() {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => Err(PyErr::from_type(
            ErrorKind::InvalidArgument.class(value.py())?,
            (format!("timeout must be None or a number of seconds from 0 to about 1.8e308, got {}", shown(value)),),
        )),
        Err(_) => Err(PyTypeError::new_err(format!("timeout must be None or a number of seconds, got {}", value.get_type().name()?))),
    }
}

/// A `frame_id=` argument (`#[pyo3(from_py_with = frame_id_arg)]`): None (keep the previous
/// frame's id) or an int from -2**63 to 2**63-1; out of range: InvalidArgumentError naming the
/// argument and its range, not the OverflowError "C long" of a plain i64.
pub fn frame_id_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if value.is_none() {
        return Ok(None);
    }
    match value.extract::<i64>() {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => Err(PyErr::from_type(
            ErrorKind::InvalidArgument.class(value.py())?,
            (format!("frame_id must be an int from -2**63 to 2**63-1, got {}", shown(value)),),
        )),
        Err(_) => Err(PyTypeError::new_err(format!("frame_id must be an int or None, got {}", value.get_type().name()?))),
    }
}

/// A required unsigned 64-bit argument such as `after=` (`#[pyo3(from_py_with = after_arg)]`).
pub(crate) fn after_arg(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_none() {
        return Err(PyTypeError::new_err("after must be an int (a sequence number), got None"));
    }
    Ok(unsigned(value.py(), "after", Some(value))?.unwrap_or(0))
}

/// Metadata bytes of a write: bytes are borrowed, other buffers are copied.
pub(crate) enum Meta<'py> {
    Borrowed(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl Meta<'_> {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Meta::Borrowed(b) => b.as_bytes(),
            Meta::Owned(v) => v,
        }
    }
}

pub(crate) fn meta_of<'py>(py: Python<'py>, meta: Option<&Bound<'py, PyAny>>) -> PyResult<Meta<'py>> {
    let Some(meta) = meta else { return Ok(Meta::Owned(Vec::new())) };
    if let Ok(b) = meta.cast::<PyBytes>() {
        return Ok(Meta::Borrowed(b.clone()));
    }
    match PyBuffer::<u8>::get(meta) {
        Ok(buf) => Ok(Meta::Owned(buf.to_vec(py)?)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "meta must be bytes-like (bytes, bytearray, memoryview), got {}; encode text with .encode() or serialise with json/msgpack first",
            meta.get_type().name()?
        ))),
    }
}

/// A shape given as an int or a tuple of up to `MAX_NDIM` non-negative ints, on the stack; None for
/// anything else (the slow path then says what is wrong).
pub(crate) fn small_shape(shape: &Bound<'_, PyAny>) -> Option<([u64; framebus::ring::layout::MAX_NDIM], usize)> {
    let mut dims = [0u64; framebus::ring::layout::MAX_NDIM];
    // Type checks first: a failed extraction builds a Python exception (slow).
    if shape.is_instance_of::<pyo3::types::PyInt>() {
        dims[0] = shape.extract::<u64>().ok()?;
        return Some((dims, 1));
    }
    let t = shape.cast::<pyo3::types::PyTuple>().ok()?;
    if t.len() > dims.len() {
        return None;
    }
    for (d, item) in dims.iter_mut().zip(t.iter()) {
        *d = item.extract::<u64>().ok()?;
    }
    Some((dims, t.len()))
}
