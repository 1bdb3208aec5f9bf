//! `framebus._native.DeviceFrame`: a frame of a device stream, pinned in its slot (zero-copy).
//! It speaks DLPack and the CUDA Array Interface: `torch.from_dlpack(frame)` and
//! `cupy.asarray(frame)` take the slot's device memory without a copy. The consumer's CUDA
//! stream is made to wait for the frame's ready event (no host synchronisation); when the frame
//! is released, this handle's release event is recorded on every CUDA stream it was handed to,
//! so the writer's next frame into the slot waits for that work.

use std::sync::Arc;

use framebus::{DeviceStream, Pinned};
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::{PyDict, PyTuple};

use crate::array::FrameSpec;
use crate::dlpack;
use crate::errors::CoreError;
use crate::header::{PyArrayHeader, PyFrameHeader, Record};

/// A pinned device frame (the core's DeviceFrame); see the module documentation.
#[pyclass(name = "DeviceFrame", module = "framebus._native", extends = PyFrameHeader, frozen)]
pub struct PyDeviceFrame {
    name: Arc<str>,
    spec: FrameSpec,
    dtype: String,
    seq: u64,
    /// The CUDA stream given to the view (its `__cuda_array_interface__` orders after it).
    view_stream: u64,
    frame: framebus::DeviceFrame,
}

impl PyDeviceFrame {
    /// The Python object's initializer: the frame under its header (shape, dtype, nbytes,
    /// device, seq, timestamp_ns, frame_id, meta).
    pub(crate) fn new(
        py: Python<'_>,
        name: &Arc<str>,
        spec: &FrameSpec,
        dtype: &str,
        ds: &DeviceStream,
        pinned: Pinned,
        view_stream: u64,
    ) -> PyResult<PyClassInitializer<PyDeviceFrame>> {
        let f = pinned.frame();
        let header = PyFrameHeader::frame(
            PyArrayHeader::of(py, spec, Some(ds.device())),
            Record { seq: f.seq, timestamp_ns: f.timestamp_ns, frame_id: f.frame_id, meta: f.meta },
        );
        let seq = f.seq;
        let frame = ds.frame(pinned).map_err(CoreError)?;
        Ok(header.add_subclass(PyDeviceFrame {
            name: name.clone(),
            spec: spec.clone_ref(py),
            dtype: dtype.to_owned(),
            seq,
            view_stream,
            frame,
        }))
    }

    /// Makes `cuda_stream` wait for the frame (once per stream); StreamClosedError once released.
    fn acquire_on(&self, py: Python<'_>, cuda_stream: u64) -> PyResult<()> {
        py.detach(|| self.frame.acquire_on(cuda_stream)).map_err(|e| CoreError(e).into())
    }
}

#[pymethods]
impl PyDeviceFrame {
    /// The device address of the frame in this process (valid while the frame is held).
    #[getter]
    fn ptr(&self) -> u64 {
        self.frame.ptr()
    }

    /// Whether release() was called (or the `with` block ended).
    #[getter]
    fn released(&self) -> bool {
        self.frame.is_released()
    }

    /// Read-only, version 3; its `stream` is the view's CUDA stream, already made to wait for
    /// the frame.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.acquire_on(py, self.view_stream)?;
        dlpack::cuda_array_interface(py, self.frame.ptr(), &self.spec.shape, &self.dtype, true, Some(self.view_stream))
    }

    /// A DLPack capsule of the frame (no copy). `stream` is the consumer's CUDA stream, made to
    /// wait for the frame; -1 waits on the host instead. The capsule keeps this frame (and its
    /// pin) alive until the consumer lets go of it. DLPack has no read-only flag: do not write
    /// into the frame.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = max_version;
        let py = slf.py();
        let me = slf.get();
        dlpack::check_export("DeviceFrame", me.frame.device(), copy, dl_device, ": use read_new() for a copy")?;
        match dlpack::dlpack_stream(stream)? {
            Some(s) => me.acquire_on(py, s)?,
            None => py.detach(|| me.frame.wait_on_host()).map_err(CoreError)?,
        }
        dlpack::export_capsule(py, me.frame.ptr(), &me.spec.shape, &me.dtype, Some(me.frame.device()), slf.clone().into_any().unbind())
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        dlpack::device_tuple(self.frame.device())
    }

    /// A NumPy copy of the frame (downloads it on `stream` after the frame's ready event and
    /// waits for the copy).
    #[pyo3(signature = (stream = None))]
    fn to_numpy<'py>(&self, py: Python<'py>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
        let s = dlpack::stream_arg(stream)?.unwrap_or(self.view_stream);
        crate::device_array::download(py, &self.spec, |dst| self.frame.download(dst, s))
    }

    /// Lets the frame go: records this handle's release event on every CUDA stream the frame
    /// was handed to (and on `stream`, if given), so the writer's next frame into the slot
    /// waits for the work queued there; then unpins. Idempotent.
    #[pyo3(signature = (stream = None))]
    fn release(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let extra = dlpack::stream_arg(stream)?;
        py.detach(|| self.frame.release(extra)).map_err(|e| CoreError(e).into())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.release(py, None)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "DeviceFrame(stream={:?}, seq={}, shape={:?}, dtype={}, device='cuda:{}')",
            self.name,
            self.seq,
            &self.spec.shape[..],
            self.spec.dtype.bind(py),
            self.frame.device()
        )
    }
}
