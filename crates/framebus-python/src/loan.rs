//! `Loan`: a writable array in the next free slot. Filling it and leaving the `with` block
//! publishes the frame without a copy; an exception inside the block discards it.
//!
//! The loan's array keeps its slot: its base is a `_LoanSlot` holder of the loan's own. When the
//! loan ends (commit, abort or drop) while the array, a view of it, or a buffer of it is still
//! referenced (handed to `framebus.pipe`, kept by the caller), the slot stays pinned by the
//! holder until the last of them is gone, and the array turns read-only: a pipe or a reader sees
//! exactly the committed bytes, and the ring never reuses the slot under them. A loan whose
//! array is no longer referenced when it ends pins nothing (one reference count read).

use std::sync::{Arc, Mutex};

use framebus::{FrameInfo, KeptSlot, WriteGuard};
use numpy::npyffi::{PyArrayObject, NPY_ARRAY_ALIGNED, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE};
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;

use crate::array::FrameSpec;
use crate::errors::{CoreError, ErrorKind};
use crate::frame_arrays::Parts;
use crate::header::{PyArrayHeader, PySlotHeader};

type Guard = WriteGuard<Arc<framebus::Stream>>;

/// The base object of a loan's arrays: it keeps the handle's mapping (and so the arrays'
/// memory) alive after the loan ends and after the stream's `close()`, and, once the loan has
/// ended while its arrays were still referenced, the pin that keeps the slot from being reused.
#[pyclass(name = "_LoanSlot", module = "framebus._native", frozen)]
pub struct PyLoanSlot {
    _stream: Arc<framebus::Stream>,
    pin: Mutex<Option<KeptSlot>>,
}

/// A claimed slot with its per-frame values, published by commit() or on a clean `with` exit.
///
/// The loan holds its array (made on first use) and the array holds only its `_LoanSlot`, so
/// there is no reference cycle: a loan ends as soon as it is committed, aborted or dropped, and
/// a loan dropped unpublished is discarded at once and frees the write lock.
#[pyclass(name = "Loan", module = "framebus._native", extends = PySlotHeader, frozen)]
pub struct PyLoan {
    /// The claimed slot, until commit/abort/drop.
    open: Mutex<Option<Guard>>,
    /// The array handed out and its base, made on first use.
    exported: Mutex<Option<(Py<PyAny>, Py<PyLoanSlot>)>>,
    spec: FrameSpec,
    payload: *mut u8,
    name: Arc<str>,
    values: LoanValues,
    /// The sequence number the frame gets: the explicit one, or the next one.
    seq: u64,
    /// The frame's own arrays (variable-shape streams; its table is already in the slot).
    parts: Option<Arc<Parts>>,
    /// `fork_generation()` of the process that claimed the slot: a copy of the loan in a forked
    /// child is not the child's to publish or discard.
    generation: u64,
}

/// The per-frame values given to loan(), attached to the frame at commit.
pub struct LoanValues {
    pub frame_id: Option<i64>,
    pub meta: Vec<u8>,
    pub timestamp_ns: Option<u64>,
    pub seq: Option<u64>,
}

impl LoanValues {
    pub fn info(&self) -> FrameInfo<'_> {
        FrameInfo { frame_id: self.frame_id, meta: &self.meta, timestamp_ns: self.timestamp_ns, seq: self.seq }
    }
}

// SAFETY: `payload` is an address inside the mapping the guard's stream keeps alive; it is only
// turned into an array (under the GIL), never dereferenced here, so moving it between threads is
// sound.
unsafe impl Send for PyLoan {}
// SAFETY: as for Send; shared access only reads the address.
unsafe impl Sync for PyLoan {}

/// How a loan ends.
enum End {
    Commit,
    Abort,
}

impl PyLoan {
    /// Wraps a claimed slot. Allocates nothing but the Python object (and a copy of `meta`).
    pub fn new(name: &Arc<str>, spec: FrameSpec, guard: Guard, values: LoanValues) -> PyLoan {
        let seq = values.seq.unwrap_or(guard.seq());
        PyLoan {
            payload: guard.payload_ptr(),
            seq,
            open: Mutex::new(Some(guard)),
            exported: Mutex::new(None),
            spec,
            name: Arc::clone(name),
            values,
            parts: None,
            generation: framebus::process::fork_generation(),
        }
    }

    /// Lays the loan out as `parts` (a variable-shape frame whose table the slot holds).
    pub fn with_parts(mut self, parts: Arc<Parts>) -> PyLoan {
        self.parts = Some(parts);
        self
    }

    /// The Python object's initializer: the loan under its header (shape, dtype, nbytes,
    /// device, seq).
    pub fn init(self, py: Python<'_>) -> PyClassInitializer<PyLoan> {
        let array = match &self.parts {
            Some(p) => PyArrayHeader::host(py, p.single().map(|part| &part.spec), p.parts.iter().map(|part| part.spec.frame_bytes).sum()),
            None => PyArrayHeader::host(py, Some(&self.spec), self.spec.frame_bytes),
        };
        PySlotHeader::loan(array, self.seq).add_subclass(self)
    }

    /// The loan's value: its array, or the dict of a frame of named arrays.
    fn value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let Some(guard) = &*open else {
            return Err(self.finished(py));
        };
        let mut exported = self.exported.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((value, _)) = &*exported {
            return Ok(value.bind(py).clone());
        }
        let holder = Py::new(py, PyLoanSlot { _stream: Arc::clone(guard.stream()), pin: Mutex::new(None) })?;
        let flags = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE;
        let value = match &self.parts {
            // SAFETY: `payload` is the claimed slot, inside the mapping that `holder` (every
            // array's base) keeps alive; the table written at the claim puts each array inside
            // it. Writes are allowed: the slot is claimed until the loan ends, and then the
            // flag is cleared.
            Some(parts) => unsafe { parts.wrap_value(py, self.payload, flags, holder.clone_ref(py).into_any())? },
            // SAFETY: `payload` is the claimed slot's frame bytes (frame_bytes long) inside the
            // mapping that `holder` (the array's base) keeps alive for as long as the array
            // lives. Writes are allowed: the slot is claimed (no reader sees it) until the loan
            // ends, and then the flag is cleared.
            None => unsafe { self.spec.wrap(py, self.payload, flags, Some(holder.clone_ref(py).into_any()))? },
        };
        *exported = Some((value.clone().unbind(), holder));
        Ok(value)
    }

    fn finished(&self, py: Python<'_>) -> PyErr {
        match ErrorKind::StreamClosed.class(py) {
            Ok(cls) => PyErr::from_type(
                cls,
                (format!("the loan of frame {} on stream {:?} was already committed or discarded", self.seq, self.name),),
            ),
            Err(e) => e,
        }
    }

    /// Ends the loan. If its array (or anything made from it) is still referenced, the slot
    /// stays pinned by the array's holder and the array becomes read-only.
    fn end(&self, py: Python<'_>, how: End) -> PyResult<()> {
        let Some(guard) = self.open.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return match how {
                End::Commit => Err(self.finished(py)),
                End::Abort => Ok(()),
            };
        };
        if self.generation != framebus::process::fork_generation() {
            // Inherited through fork(): the claimed slot and the write lock belong to the parent,
            // which may still publish it. Forget the claim here without touching either.
            std::mem::forget(guard);
            return match how {
                End::Commit => Err(PyErr::from_type(
                    ErrorKind::StreamClosed.class(py)?,
                    (format!("this loan on stream {:?} was taken by another process before fork(); only that process can publish or discard it. Take a new loan in this process with stream.loan()", self.name),),
                )),
                End::Abort => Ok(()),
            };
        }
        let exported = self.exported.lock().unwrap_or_else(|p| p.into_inner()).take();
        // The loan holds one reference to the array and one to the holder, the array one to
        // the holder: more means the caller, a pipe or a NumPy view still uses the memory.
        let refs = |o: &Py<PyAny>| {
            // SAFETY: `o` is a live object and the GIL is held; this only reads its count.
            unsafe { pyo3::ffi::Py_REFCNT(o.as_ptr()) }
        };
        // A dict of named arrays (variable-shape loans): its arrays, each referenced by the
        // dict and by the list made here.
        let dict_arrays: Option<Vec<Py<PyAny>>> = match exported.as_ref().map(|(v, _)| v.bind(py).cast::<pyo3::types::PyDict>()) {
            Some(Ok(d)) => Some(d.values().iter().map(Bound::unbind).collect()),
            _ => None,
        };
        let in_use = exported.as_ref().filter(|(value, holder)| match &dict_arrays {
            None => refs(value) > 1 || refs(holder.as_any()) > 2,
            Some(arrays) => refs(value) > 1 || arrays.iter().any(|a| refs(a) > 2) || refs(holder.as_any()) > 1 + arrays.len() as isize,
        });
        // Whether something could still write the memory once the arrays are read-only: a
        // NumPy view made from them (it references the holder), a buffer export ever made of
        // one (memoryview, pipe(), readinto, np.frombuffer: NumPy keeps a record), or more than
        // one reference besides the loan (a name and something else). One name bound to the
        // array (the `with` target) is not: the array itself refuses writes after the end.
        let may_write = exported.as_ref().is_some_and(|(value, holder)| match &dict_arrays {
            None => refs(holder.as_any()) > 2 || refs(value) > 2 || (refs(value) == 2 && buffer_exported(py, value)),
            Some(arrays) => {
                refs(holder.as_any()) > 1 + arrays.len() as isize
                    || refs(value) > 2
                    || arrays.iter().any(|a| refs(a) > 3 || (refs(a) == 3 && buffer_exported(py, a)))
            }
        });
        let Some((value, holder)) = in_use else {
            return match how {
                End::Commit => guard.commit(&self.values.info()).map(drop).map_err(|e| CoreError(e).into()),
                End::Abort => {
                    drop(guard);
                    Ok(())
                }
            };
        };
        for array in dict_arrays.as_deref().unwrap_or(std::slice::from_ref(value)) {
            // SAFETY: `array` is an ndarray this loan made (a live PyArrayObject, the GIL is
            // held); clearing WRITEABLE only narrows what later code may do with it.
            unsafe { (*array.as_ptr().cast::<PyArrayObject>()).fields.flags &= !NPY_ARRAY_WRITEABLE };
        }
        let pin = match how {
            End::Commit => guard.commit_pinned(&self.values.info(), may_write).map_err(CoreError)?,
            End::Abort => guard.abort_pinned(),
        };
        *holder.get().pin.lock().unwrap_or_else(|p| p.into_inner()) = Some(pin);
        Ok(())
    }
}

#[pymethods]
impl PyLoan {
    /// The writable array in shared memory (fill it, then commit). Made once per loan; after
    /// the loan ends it is a read-only view of the published frame that keeps the slot pinned.
    /// A loan of several named arrays raises InvalidArgumentError: use ``arrays``.
    #[getter]
    fn array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.value(py)?;
        if let Ok(d) = value.cast::<pyo3::types::PyDict>() {
            if d.len() == 1 {
                return d.values().get_item(0);
            }
            let cls = ErrorKind::InvalidArgument.class(py)?;
            return Err(PyErr::from_type(
                cls,
                (format!("the loan of frame {} on stream {:?} holds several named arrays; use loan.arrays[name]", self.seq, self.name),),
            ));
        }
        Ok(value)
    }

    /// The writable arrays by name (a new dict of the same arrays on each call); a loan of one
    /// array is ``{"": array}``.
    #[getter]
    fn arrays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let value = self.value(py)?;
        if let Ok(d) = value.cast::<pyo3::types::PyDict>() {
            return d.copy();
        }
        let d = pyo3::types::PyDict::new(py);
        d.set_item("", value)?;
        Ok(d)
    }

    /// Publishes the frame (its sequence number is `seq`). Returns None: a returned int would
    /// be one more allocation per frame, and `seq` is known from the claim on. The array stays
    /// valid as a read-only, pinned view of the published frame while it is referenced.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, End::Commit)
    }

    /// Discards the frame: readers never see it. Idempotent. A still-referenced array keeps
    /// the (empty) slot from reuse until it is gone.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, End::Abort)
    }

    /// The array (or the dict of named arrays) to fill.
    fn __enter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.value(py)
    }

    #[pyo3(signature = (exc_type = None, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abort(py)?;
        } else {
            self.commit(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        format!("<framebus.Loan {:?} seq={} {}>", self.name, self.seq, if open { "open" } else { "finished" })
    }
}

impl Drop for PyLoan {
    fn drop(&mut self) {
        // A loan dropped unpublished is discarded now; if its array outlives it, the slot
        // stays pinned for the array (an object being deallocated runs with the GIL held).
        if self.open.get_mut().is_ok_and(|g| g.is_some()) {
            Python::attach(|py| {
                let _ = self.end(py, End::Abort);
            });
        }
    }
}

/// `PyArrayObject_fields` up to NumPy's `_buffer_info` (appended in NumPy 1.20): the record of
/// the buffer exports (memoryview and the like) ever made of an array, freed with the array.
#[repr(C)]
struct ArrayWithBufferInfo {
    array: PyArrayObject,
    buffer_info: *mut std::ffi::c_void,
}

/// Whether a buffer of `array` (an ndarray a loan made) was ever exported. Assumes so where
/// NumPy is too old to keep the record (before 1.20).
fn buffer_exported(py: Python<'_>, array: &Py<PyAny>) -> bool {
    const NPY_1_20_API_VERSION: u32 = 0x0000_000e;
    // SAFETY: reads NumPy's C-API table (imported by rust-numpy) under the GIL.
    if unsafe { numpy::npyffi::PY_ARRAY_API.PyArray_GetNDArrayCFeatureVersion(py) } < NPY_1_20_API_VERSION {
        return true;
    }
    // SAFETY: `array` is a live base-class ndarray made by this module (not a subclass) and
    // the running NumPy is 1.20 or newer, whose array struct has `_buffer_info` right after
    // `weakreflist`; the GIL is held and the field is only read.
    unsafe { !(*array.as_ptr().cast::<ArrayWithBufferInfo>()).buffer_info.is_null() }
}
