//! `Loan`: a writable array in the next free slot. Filling it and leaving the `with` block
//! publishes the frame without a copy; an exception inside the block discards it.

use std::sync::{Arc, Mutex};

use framebus::{FrameInfo, WriteGuard};
use numpy::npyffi::{NPY_ARRAY_ALIGNED, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE};
use pyo3::prelude::*;

use crate::array::FrameSpec;
use crate::errors::{error_class, CoreError};

type Guard = WriteGuard<Arc<framebus::Stream>>;

struct State {
    guard: Option<Guard>,
    array: Option<Py<PyAny>>,
}

/// A claimed slot with its per-frame values, published by commit() or on a clean `with` exit.
#[pyclass(name = "Loan", module = "framebus._native", frozen)]
pub struct PyLoan {
    state: Mutex<State>,
    name: String,
    frame_id: Option<i64>,
    meta: Vec<u8>,
    timestamp_ns: Option<u64>,
    seq: u64,
}

impl PyLoan {
    /// Wraps a claimed slot and makes its writable array.
    pub fn new(py: Python<'_>, name: &str, spec: &FrameSpec, guard: Guard, frame_id: Option<i64>, meta: Vec<u8>, timestamp_ns: Option<u64>) -> PyResult<Py<PyLoan>> {
        let ptr = guard.payload_ptr();
        let seq = guard.seq();
        let loan = Py::new(py, PyLoan { state: Mutex::new(State { guard: Some(guard), array: None }), name: name.to_owned(), frame_id, meta, timestamp_ns, seq })?;
        // SAFETY: `ptr` is the claimed slot's frame bytes, inside the mapping the guard's Arc
        // keeps alive and writable until the loan ends; the loan object is the array's base.
        let array = unsafe { spec.wrap(py, ptr, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE, Some(loan.clone_ref(py).into_any()))? };
        loan.get().state.lock().unwrap_or_else(|p| p.into_inner()).array = Some(array.unbind());
        Ok(loan)
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
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match (&st.guard, &st.array) {
            (Some(_), Some(a)) => Ok(a.bind(py).clone()),
            _ => Err(self.finished(py)),
        }
    }

    /// Sequence number the frame gets when committed.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Publishes the frame; returns its sequence number.
    fn commit(&self, py: Python<'_>) -> PyResult<u64> {
        let (guard, array) = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            (st.guard.take(), st.array.take())
        };
        drop(array);
        let guard = guard.ok_or_else(|| self.finished(py))?;
        let info = FrameInfo { frame_id: self.frame_id, meta: &self.meta, timestamp_ns: self.timestamp_ns };
        Ok(guard.commit(&info).map_err(CoreError)?)
    }

    /// Discards the frame: readers never see it. Idempotent.
    fn abort(&self) {
        let taken = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            (st.guard.take(), st.array.take())
        };
        drop(taken);
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
        let open = self.state.lock().unwrap_or_else(|p| p.into_inner()).guard.is_some();
        format!("<framebus.Loan {:?} seq={} {}>", self.name, self.seq, if open { "open" } else { "finished" })
    }
}
