//! `Frame`: a zero-copy, read-only view of one committed frame, pinned in its slot.
//!
//! The pin lives in a small `_Pin` object that is the `base` of the NumPy array handed out, so
//! the slot stays pinned (the writer skips it) for as long as the array or anything derived
//! from it is alive, even after `release()`, the end of the `with` block, or `close()` of the
//! stream. An array never shows another frame and never points at unmapped memory.

use std::sync::{Arc, Mutex};

use framebus::Pinned;
use numpy::npyffi::{NPY_ARRAY_ALIGNED, NPY_ARRAY_C_CONTIGUOUS};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::array::FrameSpec;
use crate::errors::{CoreError, ErrorKind};
use crate::frame_arrays::Parts;
use crate::header::{PyArrayHeader, PyFrameHeader, Record};

/// Holds a pin; the base object of a frame's arrays.
#[pyclass(name = "_Pin", module = "framebus._native", frozen)]
pub struct PyPin {
    pinned: Pinned,
}

struct State {
    /// The pin until an array is made; then it moves into `holder`.
    pinned: Option<Pinned>,
    holder: Option<Py<PyPin>>,
    array: Option<Py<PyAny>>,
    released: bool,
}

/// One frame, pinned: see the module documentation.
#[pyclass(name = "Frame", module = "framebus._native", extends = PyFrameHeader, frozen)]
pub struct PyFrame {
    state: Mutex<State>,
    name: Arc<str>,
    seq: u64,
    frame_id: i64,
    spec: FrameSpec,
    /// The frame's own arrays (variable-shape streams); None: one array of `spec`.
    parts: Option<Arc<Parts>>,
}

impl PyFrame {
    /// Wraps a pinned frame of a stream with spec `spec`: the Python object's initializer, the
    /// frame under its header (shape, dtype, nbytes, device, seq, timestamp_ns, frame_id; the
    /// metadata stays in the slot until asked for). Allocates nothing but the Python object
    /// itself (name and spec are shared).
    pub fn new(py: Python<'_>, name: &Arc<str>, spec: &FrameSpec, pinned: Pinned) -> PyClassInitializer<PyFrame> {
        PyFrame::build(py, name, spec, None, pinned)
    }

    /// Wraps a pinned frame of a variable-shape stream, with the arrays its table describes.
    pub fn with_parts(py: Python<'_>, name: &Arc<str>, parts: Arc<Parts>, pinned: Pinned) -> PyClassInitializer<PyFrame> {
        PyFrame::build(py, name, &parts.parts[0].spec, Some(parts.clone()), pinned)
    }

    fn build(py: Python<'_>, name: &Arc<str>, spec: &FrameSpec, parts: Option<Arc<Parts>>, pinned: Pinned) -> PyClassInitializer<PyFrame> {
        let f = pinned.frame();
        let record = Record { seq: f.seq, timestamp_ns: f.timestamp_ns, frame_id: f.frame_id, meta: &[] };
        let (seq, frame_id) = (f.seq, f.frame_id);
        let array = match &parts {
            Some(p) => PyArrayHeader::host(py, p.single().map(|part| &part.spec), p.parts.iter().map(|part| part.spec.frame_bytes).sum()),
            None => PyArrayHeader::host(py, Some(spec), spec.frame_bytes),
        };
        PyFrameHeader::frame(array, record).add_subclass(PyFrame {
            state: Mutex::new(State { pinned: Some(pinned), holder: None, array: None, released: false }),
            name: Arc::clone(name),
            seq,
            frame_id,
            spec: spec.clone_ref(py),
            parts,
        })
    }

    fn several_error(&self, py: Python<'_>) -> PyErr {
        let names = self.parts.as_ref().map(|p| p.parts.iter().map(|a| a.name.clone()).collect::<Vec<_>>()).unwrap_or_default();
        match ErrorKind::InvalidArgument.class(py) {
            Ok(cls) => PyErr::from_type(
                cls,
                (format!("frame {} of stream {:?} holds several arrays {names:?}; use frame.arrays[name]", self.seq, self.name),),
            ),
            Err(e) => e,
        }
    }

    fn released_error(&self, py: Python<'_>) -> PyErr {
        match ErrorKind::StreamClosed.class(py) {
            Ok(cls) => PyErr::from_type(
                cls,
                (format!(
                    "frame {} of stream {:?} was released; use .array inside the with block, or keep a reference to the array (it keeps the frame pinned)",
                    self.seq, self.name
                ),),
            ),
            Err(e) => e,
        }
    }

    fn with_pinned<R>(&self, py: Python<'_>, f: impl FnOnce(&Pinned) -> R) -> PyResult<R> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.released {
            return Err(self.released_error(py));
        }
        match (&st.pinned, &st.holder) {
            (Some(p), _) => Ok(f(p)),
            (None, Some(h)) => Ok(f(&h.bind(py).get().pinned)),
            (None, None) => Err(self.released_error(py)),
        }
    }

    /// The read-only array (made once, then cached).
    fn make_array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.released {
            return Err(self.released_error(py));
        }
        if let Some(a) = &st.array {
            return Ok(a.bind(py).clone());
        }
        let pinned = st.pinned.take().ok_or_else(|| self.released_error(py))?;
        let (ptr, _len) = match pinned.read_only_payload() {
            Ok(p) => p,
            Err(e) => {
                st.pinned = Some(pinned);
                return Err(CoreError(e).into());
            }
        };
        let holder = Py::new(py, PyPin { pinned })?;
        let flags = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED;
        let array = match &self.parts {
            // SAFETY: `ptr` is the start of the pinned slot in the read-only mapping, which the
            // pin (every array's base) keeps mapped and unchanged; the validated table puts each
            // array inside the slot; read-only flags.
            Some(parts) => unsafe { parts.wrap_value(py, ptr as *mut u8, flags, holder.clone_ref(py).into_any())? },
            // SAFETY: `ptr` points to the frame's bytes in the read-only mapping, which the pin
            // (the array's base) keeps mapped and unchanged for the array's whole life; read-only flags.
            None => unsafe { self.spec.wrap(py, ptr as *mut u8, flags, Some(holder.clone_ref(py).into_any()))? },
        };
        st.holder = Some(holder);
        st.array = Some(array.clone().unbind());
        Ok(array)
    }

    /// The frame's one array (the only one of a dict of one); InvalidArgumentError for a
    /// frame of several named arrays. What `array`, the buffer protocol, `__array__` and DLPack
    /// export.
    fn single_array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.make_array(py)?;
        match value.cast::<PyDict>() {
            Ok(d) if d.len() == 1 => Ok(d.values().get_item(0)?),
            Ok(_) => Err(self.several_error(py)),
            Err(_) => Ok(value),
        }
    }

    /// The pin holder of the frame's arrays (made with them).
    fn holder(&self, py: Python<'_>) -> PyResult<Py<PyPin>> {
        self.make_array(py)?;
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.holder.as_ref().map(|h| h.clone_ref(py)).ok_or_else(|| self.released_error(py))
    }

    /// Calls the method `name` of the frame's one array with `other` (the array behaviour of a
    /// frame: operators, indexing, iteration).
    fn delegate<'py>(&self, py: Python<'py>, name: &str, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.call_method1(name, (other,))
    }
}

#[pymethods]
impl PyFrame {
    /// Read-only NumPy view of the frame (zero-copy). Keeps the frame pinned while alive.
    /// A byte payload is a read-only uint8 array (``bytes(frame.array)`` copies it). A frame of
    /// several named arrays raises InvalidArgumentError: use ``arrays``.
    #[getter]
    fn array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)
    }

    /// Read-only zero-copy arrays of the frame by name (a new dict of the same arrays on each
    /// call). A frame written as one array (or a fixed-shape frame) is ``{"": array}``.
    #[getter]
    fn arrays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let value = self.make_array(py)?;
        match value.cast::<PyDict>() {
            Ok(d) => d.copy(),
            Err(_) => {
                let d = PyDict::new(py);
                d.set_item(self.parts.as_ref().and_then(|p| p.single()).map_or("", |p| p.name.as_str()), value)?;
                Ok(d)
            }
        }
    }

    /// Names of the arrays of a frame written as a dict; None otherwise.
    #[getter]
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        match &self.parts {
            Some(p) => p.names(py),
            None => Ok(None),
        }
    }

    /// Names of the arrays of a dict frame that were written as bytes (their views are uint8
    /// arrays; a copying read returns them as bytes); an empty tuple otherwise.
    #[getter]
    fn byte_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let names: Vec<&str> = match &self.parts {
            Some(p) if p.named => p.parts.iter().filter(|part| part.bytes).map(|part| part.name.as_str()).collect(),
            _ => Vec::new(),
        };
        PyTuple::new(py, names)
    }

    /// Whether the frame is a byte payload (written as bytes, bytearray or memoryview).
    #[getter]
    fn is_bytes(&self) -> bool {
        self.parts.as_ref().and_then(|p| p.single()).is_some_and(|p| p.bytes)
    }

    /// The frame's bytes as stored (for a variable-shape stream: its table, then its arrays),
    /// a read-only uint8 array over the pinned slot (zero-copy). For bridges, which send frames
    /// as they are; readers use ``array``/``arrays``.
    #[getter]
    fn _raw<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let holder = self.holder(py)?;
        let (ptr, len) = self.with_pinned(py, |p| p.read_only_payload())?.map_err(CoreError)?;
        let spec = crate::array::FrameSpec::new(py, "|u1", &[len as u64])?;
        // SAFETY: `ptr`/`len` are the pinned frame's bytes in the read-only mapping, kept
        // mapped and unchanged by the pin that `holder` (the array's base) owns; read-only flags.
        unsafe { spec.wrap(py, ptr as *mut u8, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, Some(holder.into_any())) }
    }

    /// Codec of an encoded packet (``write(..., codec=)``), None for none.
    #[getter]
    fn codec(&self) -> Option<&str> {
        self.parts.as_ref().and_then(|p| p.codec())
    }

    /// Metadata bytes of the frame (a copy), read from the pinned slot when asked for (the
    /// header's other values are taken when the frame is made); StreamClosedError once
    /// released.
    #[getter]
    fn meta<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with_pinned(py, |p| PyBytes::new(py, p.frame().meta))?;
        Ok(bytes)
    }

    /// Whether release() was called.
    #[getter]
    fn released(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).released
    }

    /// Ends this frame's use: the slot is unpinned now, or as soon as the last array made
    /// from it is garbage-collected. Idempotent.
    fn release(&self) {
        let (pinned, holder, array) = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.released = true;
            (st.pinned.take(), st.holder.take(), st.array.take())
        };
        drop((pinned, holder, array));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    // Three named parameters rather than `*args`: no tuple is built per `with` block.
    #[pyo3(signature = (_exc_type = None, _exc = None, _tb = None))]
    fn __exit__(&self, _exc_type: Option<&Bound<'_, PyAny>>, _exc: Option<&Bound<'_, PyAny>>, _tb: Option<&Bound<'_, PyAny>>) {
        self.release();
    }

    // -- array behaviour: a frame acts as its read-only array (`frame.mean()`, `frame * 2`,
    // `frame[0, :]`, `np.asarray(frame)`), zero-copy; results are new arrays (NumPy's own).
    // `==`/`!=` stay identity comparisons (frames stay hashable): use `frame.array == x`.

    /// Indexing: the array's `frame[key]` (a read-only view for slices, zero-copy); on a frame
    /// of named arrays, a name gives that array (`frame["boxes"]`).
    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let (Ok(name), Some(_)) = (key.cast::<pyo3::types::PyString>(), self.parts.as_ref().filter(|p| p.named)) {
            return match self.make_array(py)?.cast::<PyDict>() {
                Ok(d) => d.get_item(name)?.ok_or_else(|| {
                    pyo3::exceptions::PyKeyError::new_err(format!(
                        "frame {} of stream {:?} has no array named {:?}; its names are {:?}",
                        self.seq,
                        self.name,
                        name.to_string(),
                        self.parts.as_ref().map(|p| p.parts.iter().map(|a| a.name.clone()).collect::<Vec<_>>()).unwrap_or_default()
                    ))
                }),
                Err(_) => self.delegate(py, "__getitem__", key),
            };
        }
        self.delegate(py, "__getitem__", key)
    }

    /// Hash of the Frame object (identity, as `==` is): `<`, `>`, ... are the array's.
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }

    /// Length of the array's first dimension.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.single_array(py)?.len()
    }

    /// A frame is always true (as before it had array behaviour); test values with
    /// ``frame.array.any()``.
    fn __bool__(&self) -> bool {
        true
    }

    /// Iterates over the array's first dimension.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.single_array(py)?.try_iter()?.into_any())
    }

    /// Attributes the frame does not have itself come from its array (`ndim`, `size`,
    /// `mean()`, `astype()`, `copy()`, ...). Raises StreamClosedError on a released frame.
    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        if name.starts_with('_') {
            return Err(pyo3::exceptions::PyAttributeError::new_err(format!("'Frame' object has no attribute {name:?}")));
        }
        let arr = self.single_array(py)?;
        match arr.getattr(name) {
            Ok(v) => Ok(v),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {
                Err(pyo3::exceptions::PyAttributeError::new_err(format!("'Frame' object (nor its array) has no attribute {name:?}")))
            }
            Err(e) => Err(e),
        }
    }

    fn __add__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__add__", other)
    }

    fn __radd__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__radd__", other)
    }

    fn __sub__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__sub__", other)
    }

    fn __rsub__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rsub__", other)
    }

    fn __mul__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__mul__", other)
    }

    fn __rmul__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rmul__", other)
    }

    fn __matmul__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__matmul__", other)
    }

    fn __rmatmul__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rmatmul__", other)
    }

    fn __truediv__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__truediv__", other)
    }

    fn __rtruediv__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rtruediv__", other)
    }

    fn __floordiv__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__floordiv__", other)
    }

    fn __rfloordiv__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rfloordiv__", other)
    }

    fn __mod__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__mod__", other)
    }

    fn __rmod__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rmod__", other)
    }

    fn __lshift__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__lshift__", other)
    }

    fn __rlshift__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rlshift__", other)
    }

    fn __rshift__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rshift__", other)
    }

    fn __rrshift__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rrshift__", other)
    }

    fn __and__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__and__", other)
    }

    fn __rand__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rand__", other)
    }

    fn __xor__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__xor__", other)
    }

    fn __rxor__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__rxor__", other)
    }

    fn __or__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__or__", other)
    }

    fn __ror__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__ror__", other)
    }

    fn __pow__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>, modulo: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let _ = modulo;
        self.delegate(py, "__pow__", other)
    }

    fn __rpow__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>, modulo: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let _ = modulo;
        self.delegate(py, "__rpow__", other)
    }

    fn __lt__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__lt__", other)
    }

    fn __le__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__le__", other)
    }

    fn __gt__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__gt__", other)
    }

    fn __ge__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.delegate(py, "__ge__", other)
    }

    fn __neg__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.call_method0("__neg__")
    }

    fn __pos__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.call_method0("__pos__")
    }

    fn __abs__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.call_method0("__abs__")
    }

    fn __invert__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.call_method0("__invert__")
    }

    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.getattr("__array_interface__")
    }

    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(&self, py: Python<'py>, dtype: Option<&Bound<'py, PyAny>>, copy: Option<bool>) -> PyResult<Bound<'py, PyAny>> {
        let arr = self.single_array(py)?;
        let np = py.import("numpy")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("dtype", dtype)?;
        kwargs.set_item("copy", copy)?;
        np.getattr("asarray")?.call((arr,), Some(&kwargs)).or_else(|_| np.getattr("array")?.call((self.single_array(py)?,), Some(&kwargs)))
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.getattr("__dlpack__")?.call(args, kwargs)
    }

    fn __dlpack_device__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.single_array(py)?.call_method0("__dlpack_device__")
    }

    /// Buffer protocol: a read-only buffer of the frame (the array's).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        let arr = slf.get().single_array(slf.py())?;
        // SAFETY: `view` is the caller's Py_buffer to fill; the array's own getbuffer fills it
        // and sets view->obj to a new reference of the array, which keeps the pin alive until
        // the consumer releases the buffer.
        if unsafe { ffi::PyObject_GetBuffer(arr.as_ptr(), view, flags) } != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "<framebus.Frame {:?} seq={} frame_id={}{}>",
            self.name,
            self.seq,
            self.frame_id,
            if self.released() { " released" } else { "" }
        )
    }
}
