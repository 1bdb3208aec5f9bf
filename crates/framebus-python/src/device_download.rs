//! `framebus._native.DeviceDownload`: reads a device stream's frames on the host through the
//! core's `DeviceDownload` (one device-to-host copy per frame, on a CUDA stream of its own, into
//! page-locked memory allocated once). Only arguments and results are converted here: the copy
//! out of the page-locked buffer into a NumPy array is the one thing this file does itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, TryLockError};

use framebus::{DeviceDownload, Downloaded};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::args::{deadline, seconds};
use crate::array::data_ptr;
use crate::errors::{CoreError, ErrorKind};
use crate::stream::{info_tuple, PyStream};
use crate::stream_device::PyDeviceStream;

/// A host reader over a device stream (see `framebus._native.DeviceDownload` in the stubs).
#[pyclass(name = "DeviceDownload", module = "framebus._native", frozen)]
pub struct PyDeviceDownload {
    stream: Py<PyDeviceStream>,
    /// Locked by one read at a time (never waited for: a second thread is told instead, so
    /// no thread blocks on it holding the GIL while a read waits without it).
    inner: Mutex<Option<DeviceDownload>>,
    /// close() was called while a read held `inner`: that read gives the downloader back.
    closing: AtomicBool,
}

impl PyDeviceDownload {
    fn base<'a>(&'a self, py: Python<'a>) -> &'a PyStream {
        self.stream.bind(py).as_super().get()
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        let name = &self.base(py).name;
        ErrorKind::StreamClosed.err(py, (format!("the download of stream {name:?} is closed; open the stream again"),))
    }

    /// Runs `op` on the downloader (GIL released), then copies the frame it read into `out`
    /// (checked against the stream's shape and dtype) or a new array.
    fn read<'py>(
        &self,
        py: Python<'py>,
        out: Option<&Bound<'py, PyAny>>,
        op: impl FnOnce(&mut DeviceDownload) -> PyResult<Downloaded>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let base = self.base(py);
        base.device_handle(py)?; // StreamClosedError once the stream handle is closed
        let arr = match out {
            Some(o) => base.spec.destination(py, &base.name, o)?,
            None => base.spec.empty(py)?,
        };
        let mut guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(ErrorKind::InvalidArgument.err(
                    py,
                    (format!("the download of stream {:?} is reading in another thread: read from one thread at a time", base.name),),
                ))
            }
        };
        if self.closing.load(Ordering::Acquire) {
            let dl = guard.take();
            py.detach(move || drop(dl));
        }
        let Some(dl) = guard.as_mut() else { return Err(self.closed_error(py)) };
        let got = op(dl);
        if self.closing.load(Ordering::Acquire) {
            let dl = guard.take();
            py.detach(move || drop(dl));
            got?;
            return Err(self.closed_error(py));
        }
        let got = got?;
        let bytes = dl.bytes();
        // SAFETY: `arr` is a C-contiguous, writable array of the stream's shape and dtype
        // (destination() checked `out`; empty() made a new one), so it holds exactly one frame's
        // bytes, as many as the page-locked buffer; the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data_ptr(&arr).get(), bytes.len()) };
        drop(guard);
        info_tuple(py, arr.into_any(), Some((got.seq, got.timestamp_ns, got.frame_id, got.meta)))
    }
}

#[pymethods]
impl PyDeviceDownload {
    /// Allocates the page-locked buffer and CUDA stream for reading `stream` on the host.
    #[new]
    fn py_new(py: Python<'_>, stream: &Bound<'_, PyDeviceStream>) -> PyResult<Self> {
        let ds = stream.as_super().get().device_handle(py)?;
        let inner = py.detach(|| DeviceDownload::new(ds)).map_err(CoreError)?;
        Ok(PyDeviceDownload { stream: stream.clone().unbind(), inner: Mutex::new(Some(inner)), closing: AtomicBool::new(false) })
    }

    /// (array, seq, timestamp_ns, frame_id, meta) of the newest frame, never waiting.
    #[pyo3(signature = (*, out = None))]
    fn read_latest<'py>(&self, py: Python<'py>, out: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyTuple>> {
        self.read(py, out, |dl| py.detach(|| dl.latest()).map_err(|e| CoreError(e).into()))
    }

    /// (array, seq, timestamp_ns, frame_id, meta) of the next frame this handle has not seen.
    #[pyo3(signature = (*, timeout = None, out = None))]
    fn read_next<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let deadline = deadline(py, timeout)?;
        let base = self.base(py);
        base.device_handle(py)?; // a forked child's copy is refused before it takes a reader entry
        let ring = base.handle(py)?;
        self.read(py, out, |dl| {
            let cell = Mutex::new(dl);
            base.blocking(py, deadline, true, |d, check| cell.lock().unwrap_or_else(|e| e.into_inner()).next(d, check))
                .map_err(|e| base.owner_gone_instead(py, &ring, e))
        })
    }

    /// Gives back the page-locked buffer and the CUDA stream (idempotent; never waits: a read
    /// in progress in another thread gives them back when it ends). The stream handle stays open.
    fn close(&self, py: Python<'_>) {
        self.closing.store(true, Ordering::Release);
        let dl = match self.inner.try_lock() {
            Ok(mut g) => g.take(),
            Err(TryLockError::Poisoned(e)) => e.into_inner().take(),
            Err(TryLockError::WouldBlock) => None,
        };
        py.detach(move || drop(dl));
    }

    /// Whether close() was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
}
