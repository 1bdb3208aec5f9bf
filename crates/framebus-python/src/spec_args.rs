//! Python arguments of a new stream's spec (shape, dtype, capacity, size) into the core's
//! `StreamSpec`. The core decides what a stream may hold (`framebus::ring::checked_shape`,
//! `checked_capacity`, `StreamSpec::geometry`, `StreamSpec::check_size`); here are only the
//! Python conversions and the TypeErrors of values that are no ints or no dtypes.

use framebus::ring::{checked_capacity, checked_shape};
use framebus::StreamSpec;
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString, PyTuple};

use crate::errors::CoreError;

/// `value` as a Python int through `operator.index` (what a shape or size takes: ints and
/// NumPy integers, not bools at the top level, floats or strings); None when it is not one.
fn index<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = value.py();
    if value.is_instance_of::<PyBool>() {
        return Ok(None);
    }
    match py.import(pyo3::intern!(py, "operator"))?.getattr(pyo3::intern!(py, "index"))?.call1((value,)) {
        Ok(i) => Ok(Some(i)),
        Err(e) if e.is_instance_of::<PyTypeError>(py) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A Python int as an i128, saturated: beyond i128's range it becomes i128::MIN or MAX (the
/// core refuses those all the same, and its messages show the value as the caller wrote it).
fn saturated(int: &Bound<'_, PyAny>) -> PyResult<i128> {
    match int.extract::<i128>() {
        Ok(n) => Ok(n),
        Err(e) if e.is_instance_of::<PyOverflowError>(int.py()) => Ok(if int.lt(0)? { i128::MIN } else { i128::MAX }),
        Err(e) => Err(e),
    }
}

/// A fixed-shape stream's shape: an int or a sequence of ints, checked by the core.
pub(crate) fn shape(shape: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let py = shape.py();
    let not_ints = || {
        PyTypeError::new_err(format!(
            "shape must be an int or a sequence of ints, got {}",
            shape.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    let ints = match index(shape)? {
        Some(one) => vec![one],
        None if shape.is_instance_of::<PyBool>() || shape.is_instance_of::<PyString>() => return Err(not_ints()),
        None => {
            let items = shape.try_iter().map_err(|_| not_ints())?;
            let mut ints = Vec::new();
            for item in items {
                ints.push(index(&item?)?.ok_or_else(not_ints)?);
            }
            ints
        }
    };
    let shown = PyTuple::new(py, &ints)?.repr()?.to_string();
    let dims = ints.iter().map(saturated).collect::<PyResult<Vec<i128>>>()?;
    checked_shape(&dims, &shown).map_err(|e| CoreError(e).into())
}

/// `dtype` (anything `numpy.dtype()` takes) as (`dtype.str`, itemsize), unchecked: a TypeError
/// when NumPy cannot make a dtype of it.
fn numpy_dtype(dtype: Option<&Bound<'_, PyAny>>, py: Python<'_>) -> PyResult<(String, u32)> {
    let make = py.import(pyo3::intern!(py, "numpy"))?.getattr(pyo3::intern!(py, "dtype"))?;
    let none = py.None().into_bound(py);
    let given = dtype.unwrap_or(&none);
    let dt = match make.call1((given,)) {
        Ok(dt) => dt,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            return Err(PyTypeError::new_err(format!("dtype {} is not a NumPy dtype: {}", given.repr()?, e.value(py))));
        }
        Err(e) => return Err(e),
    };
    let itemsize = dt.getattr(pyo3::intern!(py, "itemsize"))?.extract::<u64>()?;
    Ok((dt.getattr(pyo3::intern!(py, "str"))?.extract()?, u32::try_from(itemsize).unwrap_or(u32::MAX)))
}

/// A fixed-shape stream's dtype as `dtype.str`, checked by the core (a plain number type).
pub(crate) fn dtype(dtype: Option<&Bound<'_, PyAny>>, py: Python<'_>) -> PyResult<String> {
    let (text, itemsize) = numpy_dtype(dtype, py)?;
    StreamSpec::new(text.clone(), itemsize, vec![1]).geometry().map_err(CoreError)?;
    Ok(text)
}

/// A variable-shape stream's capacity (an int of bytes), checked by the core.
pub(crate) fn capacity(capacity: &Bound<'_, PyAny>) -> PyResult<u64> {
    let Some(int) = index(capacity)? else {
        return Err(PyTypeError::new_err(format!(
            "capacity must be an int of bytes or a string such as '32MiB', got {}",
            capacity.repr()?
        )));
    };
    checked_capacity(saturated(&int)?, &int.str()?.to_string()).map_err(|e| CoreError(e).into())
}

/// The spec of a new stream from `create()`'s arguments: `shape` and `dtype` (one shape and
/// dtype for every frame), or `capacity` (each frame has its own), and `size`, a cross-check of
/// a fixed shape's frame bytes. The ring (slots, readers, ...) takes the core's defaults.
pub(crate) fn spec(
    py: Python<'_>,
    shape_arg: Option<&Bound<'_, PyAny>>,
    dtype_arg: Option<&Bound<'_, PyAny>>,
    capacity_arg: Option<&Bound<'_, PyAny>>,
    size: Option<&Bound<'_, PyAny>>,
) -> PyResult<StreamSpec> {
    let spec = match (shape_arg, capacity_arg) {
        (None, None) => {
            return Err(PyTypeError::new_err(
                "create() needs shape= (every frame has that shape and dtype) or capacity= (bytes per frame; each frame has its own shape and dtype)",
            ))
        }
        (Some(_), Some(_)) => return Err(CoreError(framebus::Error::InvalidArgument("give either shape= or capacity=, not both".into())).into()),
        (None, Some(c)) => StreamSpec::variable(capacity(c)?),
        (Some(s), None) => {
            let dims = shape(s)?;
            let (text, itemsize) = numpy_dtype(dtype_arg, py)?;
            StreamSpec::new(text, itemsize, dims)
        }
    };
    if let Some(size) = size {
        let Some(int) = index(size)? else {
            return Err(PyTypeError::new_err(format!("size must be an int (bytes per frame), got {}", size.repr()?)));
        };
        spec.check_size(saturated(&int)?, &int.str()?.to_string()).map_err(CoreError)?;
    }
    Ok(spec)
}
