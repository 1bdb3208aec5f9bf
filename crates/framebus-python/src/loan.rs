//! `Loan`: a writable array in the next free slot. Filling it and leaving the `with` block
//! publishes the frame without a copy; an exception inside the block discards it.

use std::sync::{Arc, Mutex};

use framebus::{FrameInfo, WriteGuard};
use numpy::npyffi::{NPY_ARRAY_ALIGNED, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE};
use pyo3::prelude::*;

use crate::array::FrameSpec;
use crate::errors::{error_class, CoreError};

type Guard = WriteGuard<Arc<framebus::Stream>>;

/// A claimed slot with its per-frame values, published by commit() or on a clean `with` exit.
///
/// The loan never holds its arrays (they hold it, as their base), so there is no reference
/// cycle: a loan dropped unpublished, with its arrays, is discarded at once and the write lock
/// is freed without waiting for the cycle collector.
#[pyclass(name = "Loan", module = "framebus._native", frozen)]
pub struct PyLoan {
    guard: Mutex<Option<Guard>>,
    /// Held, never read: keeps the mapping alive for arrays that outlive the loan's end (and
    /// the stream's close()), so they always point at valid memory.
    _mapping: Arc<framebus::Stream>,
    spec: FrameSpec,
    payload: *mut u8,
    name: Arc<str>,
    frame_id: Option<i64>,
    meta: Vec<u8>,
    timestamp_ns: Option<u64>,
    seq: u64,
}

// SAFETY: `payload` is an address inside the mapping `_mapping` keeps alive; it is only turned
// into an array (under the GIL), never dereferenced here, so moving it between threads is sound.
unsafe impl Send for PyLoan {}
// SAFETY: as for Send; shared access only reads the address.
unsafe impl Sync for PyLoan {}

impl PyLoan {
    /// Wraps a claimed slot. Allocates nothing but the Python object (and a copy of `meta`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(name: &Arc<str>, spec: FrameSpec, stream: Arc<framebus::Stream>, guard: Guard, frame_id: Option<i64>, meta: Vec<u8>, timestamp_ns: Option<u64>) -> PyLoan {
        PyLoan { payload: guard.payload_ptr(), seq: guard.seq(), guard: Mutex::new(Some(guard)), _mapping: stream, spec, name: Arc::clone(name), frame_id, meta, timestamp_ns }
    }

    fn take_guard(&self) -> Option<Guard> {
        self.guard.lock().unwrap_or_else(|p| p.into_inner()).take()
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
    fn array<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        if this.guard.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Err(this.finished(py));
        }
        // SAFETY: `payload` is the claimed slot's frame bytes (frame_bytes long) inside the
        // mapping `_mapping` keeps alive; the loan is the array's base, so the mapping outlives
        // the array. Writes are allowed: the slot is claimed (no reader sees it) until commit.
        unsafe { this.spec.wrap(py, this.payload, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE, Some(slf.clone().into_any().unbind())) }
    }

    /// Sequence number the frame gets when committed.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Publishes the frame; returns its sequence number.
    fn commit(&self, py: Python<'_>) -> PyResult<u64> {
        let guard = self.take_guard().ok_or_else(|| self.finished(py))?;
        let info = FrameInfo { frame_id: self.frame_id, meta: &self.meta, timestamp_ns: self.timestamp_ns };
        Ok(guard.commit(&info).map_err(CoreError)?)
    }

    /// Discards the frame: readers never see it. Idempotent.
    fn abort(&self) {
        drop(self.take_guard());
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::array(slf)
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
        let open = self.guard.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        format!("<framebus.Loan {:?} seq={} {}>", self.name, self.seq, if open { "open" } else { "finished" })
    }
}
