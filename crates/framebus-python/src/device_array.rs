//! `framebus._native.DeviceArray`: device memory framebus allocated for this process: the
//! fresh copy `read_new()` returns from a device stream, and a neutral GPU array for tests and
//! tools. It speaks DLPack and the CUDA Array Interface, so torch, CuPy and JAX take it without
//! a copy; the memory is freed when the last reference (this object or a consumer's tensor) goes.

use std::sync::{Arc, Mutex};

use framebus::gpu::door::Door;
use framebus::gpu::registry::{self, Memory};
use numpy::{PyArrayDescr, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::array::{data_ptr, FrameSpec};
use crate::dlpack;
use crate::errors::{CoreError, ErrorKind};

/// Framebus-owned device memory of one C-contiguous array.
#[pyclass(name = "DeviceArray", module = "framebus._native", frozen)]
pub struct PyDeviceArray {
    pub(crate) memory: Arc<Memory>,
    pub(crate) door: &'static dyn Door,
    pub(crate) device: u32,
    pub(crate) spec: FrameSpec,
    pub(crate) dtype: String,
    /// The CUDA stream the last copy into this array was queued on (consumers order after it).
    pub(crate) stream: Mutex<Option<u64>>,
}

/// A new NumPy array of `spec` holding the `spec.frame_bytes` device bytes at `ptr`, copied on
/// `stream` (after the work already queued there) and waited for.
pub(crate) fn download<'py>(py: Python<'py>, door: &'static dyn Door, device: u32, ptr: u64, spec: &FrameSpec, stream: u64, what: &str) -> PyResult<Bound<'py, PyUntypedArray>> {
    let out = spec.empty(py)?;
    let (host, n) = (data_ptr(&out), spec.frame_bytes as u64);
    py.detach(|| door.copy_device_to_host(device, host.get(), ptr, n, stream).and_then(|()| door.synchronize_stream(device, stream)))
        .map_err(|e| door_err(py, what, e))?;
    Ok(out)
}

fn door_err(py: Python<'_>, what: &str, e: framebus::gpu::door::DoorError) -> PyErr {
    ErrorKind::Device.class(py).map_or_else(|e| e, |cls| PyErr::from_type(cls, (format!("{what}: {e}"),)))
}

/// The door of this process, or DeviceUnavailableError saying why there is none.
pub(crate) fn door(py: Python<'_>) -> PyResult<&'static dyn Door> {
    framebus::gpu::door().map_err(|e| {
        ErrorKind::DeviceUnavailable.class(py).map_or_else(|e| e, |cls| PyErr::from_type(cls, (format!("no GPU available: {e}"),)))
    })
}

impl PyDeviceArray {
    /// A new uninitialised array on `device`.
    pub(crate) fn allocate(py: Python<'_>, device: u32, dtype: &str, shape: &[u64]) -> PyResult<PyDeviceArray> {
        let door = door(py)?;
        let spec = FrameSpec::new(py, dtype, shape)?;
        if dlpack::dl_dtype(dtype).is_none() {
            return Err(PyErr::from_type(ErrorKind::InvalidArgument.class(py)?, (format!("dtype {dtype} cannot live in GPU memory (big-endian or not a number type)"),)));
        }
        let bytes = spec.frame_bytes as u64;
        let memory = py.detach(|| registry::allocate_private(door, device, bytes)).map_err(|e| door_err(py, "allocating device memory", e))?;
        Ok(PyDeviceArray { memory, door, device, spec, dtype: dtype.to_owned(), stream: Mutex::new(None) })
    }

    pub(crate) fn ptr(&self) -> u64 {
        self.memory.ptr()
    }

    fn sync_for(&self, py: Python<'_>, consumer: Option<u64>) -> PyResult<()> {
        let last = *self.stream.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = last.filter(|s| Some(*s) != consumer) {
            let (door, device) = (self.door, self.device);
            py.detach(|| door.synchronize_stream(device, s)).map_err(|e| door_err(py, "waiting for the copy into the array", e))?;
        }
        Ok(())
    }
}

#[pymethods]
impl PyDeviceArray {
    /// A new, uninitialised array of `shape` and `dtype` on CUDA device `device` (DeviceUnavailableError without a GPU).
    #[staticmethod]
    #[pyo3(signature = (shape, dtype, device = 0))]
    fn empty(py: Python<'_>, shape: Vec<u64>, dtype: &Bound<'_, PyAny>, device: u32) -> PyResult<PyDeviceArray> {
        let descr = PyArrayDescr::new(py, dtype)?;
        let text = descr.getattr("str")?.extract::<String>()?;
        PyDeviceArray::allocate(py, device, &text, &shape)
    }

    /// Copies a NumPy array to a new device array (waits for the copy).
    #[staticmethod]
    #[pyo3(signature = (array, device = 0))]
    fn from_numpy(py: Python<'_>, array: &Bound<'_, PyUntypedArray>, device: u32) -> PyResult<PyDeviceArray> {
        let shape: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
        let dtype = array.dtype().getattr("str")?.extract::<String>()?;
        let out = PyDeviceArray::allocate(py, device, &dtype, &shape)?;
        out.copy_from_numpy(py, array, None)?;
        Ok(out)
    }

    /// Copies `array` (same shape and dtype, C-contiguous) into this one; waits for the copy.
    #[pyo3(signature = (array, stream = None))]
    fn copy_from_numpy(&self, py: Python<'_>, array: &Bound<'_, PyUntypedArray>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let src = self.spec.source(py, "DeviceArray", array.as_any())?;
        let s = dlpack::stream_arg(stream)?.unwrap_or(0);
        let (door, device, ptr, n, host) = (self.door, self.device, self.ptr(), self.spec.frame_bytes as u64, data_ptr(&src));
        py.detach(|| door.copy_host_to_device(device, ptr, host.get(), n, s).and_then(|()| door.synchronize_stream(device, s)))
            .map_err(|e| door_err(py, "copying into the device array", e))?;
        *self.stream.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// A NumPy copy of the array (waits for the copy).
    #[pyo3(signature = (stream = None))]
    fn to_numpy<'py>(&self, py: Python<'py>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let s = dlpack::stream_arg(stream)?.or(*self.stream.lock().unwrap_or_else(|e| e.into_inner())).unwrap_or(0);
        download(py, self.door, self.device, self.ptr(), &self.spec, s, "copying the device array to the host")
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> Bound<'py, PyTuple> {
        self.spec.shape_tuple.bind(py).clone()
    }

    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, PyArrayDescr> {
        self.spec.dtype.bind(py).clone()
    }

    /// "cuda:N".
    #[getter]
    fn device(&self) -> String {
        format!("cuda:{}", self.device)
    }

    /// The device address of the first byte.
    #[getter(ptr)]
    fn py_ptr(&self) -> u64 {
        self.ptr()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.spec.frame_bytes
    }

    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stream = *self.stream.lock().unwrap_or_else(|e| e.into_inner());
        dlpack::cuda_array_interface(py, self.ptr(), &self.spec.shape, &self.dtype, false, stream)
    }

    /// A DLPack capsule of the array (no copy); the consumer's `stream` is ordered after the
    /// last copy into it.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(slf: &Bound<'_, Self>, stream: Option<&Bound<'_, PyAny>>, max_version: Option<&Bound<'_, PyAny>>, dl_device: Option<&Bound<'_, PyAny>>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
        let _ = max_version;
        let py = slf.py();
        let me = slf.get();
        if copy == Some(true) {
            return Err(PyValueError::new_err("DeviceArray.__dlpack__ does not copy (copy=True)"));
        }
        if let Some(d) = dl_device.filter(|d| !d.is_none()) {
            if d.extract::<(i32, i32)>()? != (dlpack::KDL_CUDA, me.device as i32) {
                return Err(PyValueError::new_err("DeviceArray.__dlpack__ exports to its own device only"));
            }
        }
        me.sync_for(py, dlpack::dlpack_stream(stream)?)?;
        dlpack::export_capsule(py, me.ptr(), &me.spec.shape, &me.dtype, Some(me.device), slf.clone().into_any().unbind())
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        dlpack::device_tuple(self.device)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("DeviceArray(shape={:?}, dtype={}, device='cuda:{}')", &self.spec.shape[..], self.spec.dtype.bind(py), self.device)
    }
}

/// A CoreError for errors the core reports about device streams (same table as every error).
pub(crate) fn core(e: framebus::Error) -> PyErr {
    CoreError(e).into()
}
