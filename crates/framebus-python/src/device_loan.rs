//! `framebus._native.DeviceLoan`: the next free slot of a device stream, handed out as device
//! memory to render or decode into (DLPack and the CUDA Array Interface, writable). The work is
//! queued on the loan's CUDA stream (`loan(stream=...)`); commit records the slot's ready event
//! on that stream and publishes the frame, without waiting on the host. An exception in the
//! `with` block discards the frame.
//!
//! Tensors made from the loan alias the slot: once the loan is committed the memory belongs to
//! the stream (readers read it, later frames overwrite it), so they must not be used after.

use std::sync::{Arc, Mutex};

use framebus::DeviceLoan;
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::PyDict;

use crate::array::FrameSpec;
use crate::dlpack;
use crate::errors::{CoreError, ErrorKind};
use crate::header::{PyArrayHeader, PySlotHeader};
use crate::loan::LoanValues;

type Guard = DeviceLoan;

/// A claimed device slot with its per-frame values, published by commit() or on a clean
/// `with` exit.
#[pyclass(name = "DeviceLoan", module = "framebus._native", extends = PySlotHeader, frozen)]
pub struct PyDeviceLoan {
    open: Mutex<Option<Guard>>,
    name: Arc<str>,
    spec: FrameSpec,
    dtype: String,
    ptr: u64,
    device: u32,
    seq: u64,
    /// The CUDA stream the caller's writes into the slot are queued on.
    stream: u64,
    values: LoanValues,
    generation: u64,
}

impl PyDeviceLoan {
    /// A loan of the claimed slot (`stream` already waits for the readers' release events): the
    /// Python object's initializer, the loan under its header (shape, dtype, nbytes, device, seq).
    pub(crate) fn new(
        py: Python<'_>,
        name: &Arc<str>,
        spec: &FrameSpec,
        dtype: &str,
        guard: Guard,
        stream: u64,
        values: LoanValues,
    ) -> PyClassInitializer<PyDeviceLoan> {
        let (ptr, device) = (guard.ptr(), guard.device());
        let seq = values.seq.unwrap_or_else(|| guard.seq());
        PySlotHeader::loan(PyArrayHeader::of(py, spec, Some(device)), seq).add_subclass(PyDeviceLoan {
            seq,
            open: Mutex::new(Some(guard)),
            name: name.clone(),
            spec: spec.clone_ref(py),
            dtype: dtype.to_owned(),
            ptr,
            device,
            stream,
            values,
            generation: framebus::process::fork_generation(),
        })
    }

    fn take(&self, py: Python<'_>) -> PyResult<Guard> {
        if self.generation != framebus::process::fork_generation() {
            return Err(ErrorKind::InvalidArgument
                .err(py, (format!("this loan of stream {:?} belongs to the process that took it (this is a forked child)", self.name),)));
        }
        self.open.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| {
            ErrorKind::InvalidArgument.err(py, (format!("this loan of stream {:?} was already committed or aborted", self.name),))
        })
    }

    fn is_open(&self) -> bool {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.is_open() {
            return Ok(());
        }
        Err(ErrorKind::InvalidArgument
            .err(py, (format!("this loan of stream {:?} has ended: its memory belongs to the stream now", self.name),)))
    }
}

#[pymethods]
impl PyDeviceLoan {
    /// Publishes the frame: records the slot's ready event on the loan's CUDA stream (or
    /// `stream`, where the writes were queued instead) and commits; returns its sequence number.
    #[pyo3(signature = (stream = None))]
    fn commit(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let s = dlpack::stream_arg(stream)?.unwrap_or(self.stream);
        let guard = self.take(py)?;
        let info = self.values.info();
        py.detach(|| guard.commit(&info, s)).map_err(|e| CoreError(e).into())
    }

    /// Discards the frame (the slot is freed; nothing is published).
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        drop(self.take(py)?);
        Ok(())
    }

    /// The slot's device address in this process.
    #[getter]
    fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Whether the loan is still open (not committed or aborted).
    #[getter]
    fn open(&self) -> bool {
        self.is_open()
    }

    /// Writable, version 3; its `stream` is the loan's CUDA stream.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_open(py)?;
        dlpack::cuda_array_interface(py, self.ptr, &self.spec.shape, &self.dtype, false, Some(self.stream))
    }

    /// A DLPack capsule of the slot (no copy), writable. The consumer's stream should be the
    /// loan's; otherwise pass the stream the writes were queued on to commit().
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (max_version, stream);
        let py = slf.py();
        let me = slf.get();
        me.check_open(py)?;
        dlpack::check_export("DeviceLoan", me.device, copy, dl_device, "")?;
        dlpack::export_capsule(py, me.ptr, &me.spec.shape, &me.dtype, Some(me.device), slf.clone().into_any().unbind())
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        dlpack::device_tuple(self.device)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits on a clean exit, discards on an exception.
    #[pyo3(signature = (exc_type = None, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.is_open() {
            return Ok(false);
        }
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abort(py)?;
        } else {
            self.commit(py, None)?;
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "DeviceLoan(stream={:?}, seq={}, shape={:?}, dtype={}, device='cuda:{}', open={})",
            self.name,
            self.seq,
            &self.spec.shape[..],
            self.spec.dtype.bind(py),
            self.device,
            self.is_open()
        )
    }
}
