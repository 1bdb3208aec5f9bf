//! `Loan`: a writable array in the next free slot. Filling it and leaving the `with` block
//! publishes the frame without a copy; an exception inside the block discards it.

use std::sync::{Arc, Mutex};

use framebus::{FrameInfo, WriteGuard};
use numpy::npyffi::{NPY_ARRAY_ALIGNED, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE};
use pyo3::prelude::*;

use crate::array::FrameSpec;
use crate::errors::{error_class, CoreError};

type Guard = WriteGuard<Arc<framebus::Stream>>;

/// The base object of every loaned array of one handle: it keeps the handle's mapping (and so
/// the arrays' memory) alive after the loan ends and after the stream's `close()`. One per
/// handle, made on its first loan, so a loan's arrays allocate no holder of their own.
#[pyclass(name = "_Mapping", module = "framebus._native", frozen)]
pub struct PyMapping {
    _stream: Arc<framebus::Stream>,
}

impl PyMapping {
    /// A holder of `stream`'s mapping.
    pub fn new(stream: Arc<framebus::Stream>) -> PyMapping {
        PyMapping { _stream: stream }
    }
}

/// A claimed slot with its per-frame values, published by commit() or on a clean `with` exit.
///
/// The loan and its arrays do not hold each other (the arrays hold only the mapping), so a loan
/// ends as soon as it is committed, aborted or dropped: a loan dropped unpublished is discarded
/// at once and frees the write lock, without waiting for the cycle collector.
#[pyclass(name = "Loan", module = "framebus._native", frozen)]
pub struct PyLoan {
    /// The claimed slot and the arrays' base, until commit/abort/drop.
    open: Mutex<Option<(Guard, Py<PyMapping>)>>,
    spec: FrameSpec,
    payload: *mut u8,
    name: Arc<str>,
    values: LoanValues,
    /// The sequence number the frame gets: the explicit one, or the next one.
    seq: u64,
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

impl PyLoan {
    /// Wraps a claimed slot. Allocates nothing but the Python object (and a copy of `meta`).
    pub fn new(name: &Arc<str>, spec: FrameSpec, base: Py<PyMapping>, guard: Guard, values: LoanValues) -> PyLoan {
        let seq = values.seq.unwrap_or(guard.seq());
        PyLoan { payload: guard.payload_ptr(), seq, open: Mutex::new(Some((guard, base))), spec, name: Arc::clone(name), values }
    }

    fn take_guard(&self) -> Option<Guard> {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).take().map(|(g, _)| g)
    }

    fn finished(&self, py: Python<'_>) -> PyErr {
        match error_class(py, "StreamClosedError") {
            Ok(cls) => PyErr::from_type(cls, (format!("the loan of frame {} on stream {:?} was already committed or discarded", self.seq, self.name),)),
            Err(e) => e,
        }
    }
}

#[pymethods]
impl PyLoan {
    /// The writable array in shared memory (fill it, then commit). Do not use it after commit.
    #[getter]
    fn array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let base = match &*self.open.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((_, base)) => base.clone_ref(py),
            None => return Err(self.finished(py)),
        };
        // SAFETY: `payload` is the claimed slot's frame bytes (frame_bytes long) inside the
        // mapping that `base` keeps alive for as long as the array lives. Writes are allowed:
        // the slot is claimed (no reader sees it) until commit.
        unsafe { self.spec.wrap(py, self.payload, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE, Some(base.into_any())) }
    }

    /// Sequence number the frame gets when committed.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Publishes the frame (its sequence number is `seq`). Returns None: a returned int would
    /// be one more allocation per frame, and `seq` is known from the claim on.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let guard = self.take_guard().ok_or_else(|| self.finished(py))?;
        guard.commit(&self.values.info()).map_err(CoreError)?;
        Ok(())
    }

    /// Discards the frame: readers never see it. Idempotent.
    fn abort(&self) {
        drop(self.take_guard());
    }

    fn __enter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.array(py)
    }

    #[pyo3(signature = (exc_type = None, _exc = None, _tb = None))]
    fn __exit__(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>, _exc: Option<&Bound<'_, PyAny>>, _tb: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abort();
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
