//! NumPy arrays as frame sources and destinations: checks of dtype/shape/layout, raw data
//! pointers, and new arrays of a stream's spec.

use std::sync::Arc;

use numpy::npyffi::{self, npy_intp, NPY_ARRAY_WRITEABLE, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::errors::ErrorKind;

/// A data pointer that may cross into a GIL-detached closure. The array it points into is kept
/// alive by a reference held for the whole call.
#[derive(Clone, Copy)]
pub struct DataPtr(pub *mut u8);

// SAFETY: the pointer is only dereferenced inside the call that holds a strong reference to the
// array (so the buffer cannot be freed); it carries no thread affinity.
unsafe impl Send for DataPtr {}
// SAFETY: as for Send; the closures that share it only read the address.
unsafe impl Sync for DataPtr {}

impl DataPtr {
    /// The address (a method, so closures capture the whole Send/Sync wrapper).
    pub fn get(self) -> *mut u8 {
        self.0
    }
}

/// A stream's frame spec on the Python side. Cloning it (`clone_ref`) allocates nothing, so
/// every frame and loan can carry one.
pub struct FrameSpec {
    pub dtype: Py<PyArrayDescr>,
    pub shape: Arc<[usize]>,
    pub dims: Arc<[npy_intp]>,
    pub shape_tuple: Py<PyTuple>,
    pub frame_bytes: usize,
}

impl FrameSpec {
    /// Another handle on the same spec (no allocation).
    pub fn clone_ref(&self, py: Python<'_>) -> FrameSpec {
        FrameSpec {
            dtype: self.dtype.clone_ref(py),
            shape: self.shape.clone(),
            dims: self.dims.clone(),
            shape_tuple: self.shape_tuple.clone_ref(py),
            frame_bytes: self.frame_bytes,
        }
    }

    /// Builds the spec from the core's dtype string and shape.
    pub fn new(py: Python<'_>, dtype: &str, shape: &[u64]) -> PyResult<FrameSpec> {
        let descr = number_descr(py, dtype)?;
        let shape: Arc<[usize]> = shape.iter().map(|&d| d as usize).collect();
        let frame_bytes = shape.iter().product::<usize>() * descr.itemsize();
        Ok(FrameSpec {
            dtype: descr.unbind(),
            dims: shape.iter().map(|&d| d as npy_intp).collect(),
            shape_tuple: PyTuple::new(py, shape.iter())?.unbind(),
            shape,
            frame_bytes,
        })
    }

    /// Whether `arr` has exactly this spec and is C-contiguous (usable without conversion).
    pub fn matches(&self, py: Python<'_>, arr: &Bound<'_, PyUntypedArray>) -> bool {
        arr.shape() == &self.shape[..] && arr.is_c_contiguous() && arr.dtype().is_equiv_to(self.dtype.bind(py))
    }

    /// `value` as a C-contiguous array of this spec: itself when it already is one, else the
    /// result of `framebus._convert.as_frame`, which raises ValueError/TypeError naming what
    /// is wrong (the conversion copies).
    pub fn source<'py>(&self, py: Python<'py>, name: &str, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
        if let Ok(arr) = value.cast::<PyUntypedArray>() {
            if self.matches(py, arr) {
                return Ok(arr.clone());
            }
        }
        static AS_FRAME: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let f = AS_FRAME.get_or_try_init(py, || py.import("framebus._convert")?.getattr("as_frame").map(Bound::unbind))?;
        let out = f.bind(py).call1((value, self.dtype.bind(py), self.shape_tuple.bind(py), name))?;
        Ok(out.cast_into::<PyUntypedArray>()?)
    }

    /// Checks that `out` is a writable C-contiguous array of this spec.
    pub fn destination<'py>(&self, py: Python<'py>, name: &str, out: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let problem = match out.cast::<PyUntypedArray>() {
            Ok(arr) if !self.matches(py, arr) => {
                format!("out has shape {:?} and dtype {} (C-contiguous: {})", arr.shape(), arr.dtype(), arr.is_c_contiguous())
            }
            // SAFETY: as_array_ptr returns the live PyArrayObject behind `arr`.
            Ok(arr) if unsafe { (*arr.as_array_ptr()).fields.flags } & NPY_ARRAY_WRITEABLE == 0 => "out is read-only".to_owned(),
            Ok(arr) => return Ok(arr.clone()),
            Err(_) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "out must be a numpy.ndarray of shape {:?} and dtype {} for stream {name:?}, got {}",
                    self.shape,
                    self.dtype.bind(py),
                    out.get_type().name()?
                )))
            }
        };
        let msg = format!(
            "{problem}; stream {name:?} needs a writable C-contiguous numpy array of shape {:?} and dtype {} (for example numpy.empty({:?}, {:?}))",
            self.shape,
            self.dtype.bind(py),
            self.shape_tuple.bind(py),
            self.dtype.bind(py).to_string()
        );
        Err(PyErr::from_type(ErrorKind::InvalidArgument.class(py)?, (msg,)))
    }

    /// A new C-contiguous array of zeros of this spec.
    pub fn zeros<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let arr = py.import("numpy")?.call_method1("zeros", (self.shape_tuple.bind(py), self.dtype.bind(py)))?;
        Ok(arr.cast_into::<PyUntypedArray>()?)
    }

    /// A new, uninitialised C-contiguous array of this spec.
    pub fn empty<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyUntypedArray>> {
        // SAFETY: a NULL data pointer makes NumPy allocate and own the buffer; no base.
        let obj = unsafe { self.wrap(py, std::ptr::null_mut(), 0, None)? };
        Ok(obj.cast_into::<PyUntypedArray>()?)
    }

    /// A C-contiguous array of this spec over `data` (NULL: NumPy allocates), with NumPy
    /// `flags` and, when given, `base` as the object that keeps `data` alive.
    ///
    /// # Safety
    /// A non-NULL `data` must point to at least `frame_bytes` bytes that stay valid (and, with
    /// NPY_ARRAY_WRITEABLE, writable) for as long as `base` is alive.
    pub unsafe fn wrap<'py>(
        &self,
        py: Python<'py>,
        data: *mut u8,
        flags: std::os::raw::c_int,
        base: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let descr = self.dtype.clone_ref(py).into_ptr();
        // NumPy takes the dimensions as a mutable pointer; a stack copy avoids an allocation.
        let mut dims: [npy_intp; framebus::ring::layout::MAX_NDIM] = [0; framebus::ring::layout::MAX_NDIM];
        let ndim = self.dims.len().min(framebus::ring::layout::MAX_NDIM);
        dims[..ndim].copy_from_slice(&self.dims[..ndim]);
        // SAFETY: PyArray_NewFromDescr steals the reference to `descr` (taken above), reads
        // `dims` (ndim entries, alive for the call); with NULL strides the array is C order; the
        // caller vouches for `data`. A NULL result means a Python exception is set.
        let raw = unsafe {
            PY_ARRAY_API.PyArray_NewFromDescr(
                py,
                npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
                descr.cast(),
                ndim as i32,
                dims.as_mut_ptr(),
                std::ptr::null_mut(),
                data.cast(),
                flags,
                std::ptr::null_mut(),
            )
        };
        // SAFETY: raw is a new reference or NULL with an exception set.
        let array = unsafe { Bound::from_owned_ptr_or_err(py, raw)? };
        if let Some(base) = base {
            // SAFETY: array is a new ndarray without a base; SetBaseObject steals `base`.
            if unsafe { PY_ARRAY_API.PyArray_SetBaseObject(py, raw.cast(), base.into_ptr()) } != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(array)
    }
}

/// The data pointer of an array.
pub fn data_ptr(arr: &Bound<'_, PyUntypedArray>) -> DataPtr {
    // SAFETY: as_array_ptr returns the live PyArrayObject behind `arr`; `data` is its buffer.
    DataPtr(unsafe { (*arr.as_array_ptr()).fields.data.cast() })
}

/// The NumPy dtype of a stream's dtype string, or CorruptStreamError (a ValueError) when NumPy
/// cannot parse it or it is not a plain number type. The core accepts only such strings, so this
/// is a second line: a bare TypeError, or an array of objects over frame bytes, must never come
/// out of a damaged header.
pub fn number_descr<'py>(py: Python<'py>, dtype: &str) -> PyResult<Bound<'py, PyArrayDescr>> {
    let refuse = |why: String| -> PyResult<Bound<'py, PyArrayDescr>> {
        Err(PyErr::from_type(
            ErrorKind::CorruptStream.class(py)?,
            (format!("the stream's header records dtype {dtype:?}, {why}; unlink the stream and create it again"),),
        ))
    };
    match PyArrayDescr::new(py, dtype) {
        Ok(descr) if !descr.has_object() && b"biufc".contains(&descr.kind()) && !descr.has_fields() && !descr.has_subarray() => Ok(descr),
        Ok(descr) => refuse(format!("which is {descr}, not a bool, integer, float or complex type")),
        Err(e) => refuse(format!("which this NumPy cannot parse ({})", e.value(py))),
    }
}
