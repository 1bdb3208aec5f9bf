//! `framebus._native.DeviceArray`: device memory framebus allocated for this process: the
//! fresh copy `read_new()` returns from a device stream, and a neutral GPU array for tests and
//! tools. It speaks DLPack and the CUDA Array Interface, so torch, CuPy and JAX take it without
//! a copy; the memory is freed when the last reference (this object or a consumer's tensor) goes.

use framebus::DeviceBuffer;
use numpy::{PyArrayDescr, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::PyDict;

use crate::array::{data_ptr, FrameSpec};
use crate::dlpack;
use crate::errors::{CoreError, ErrorKind};
use crate::header::PyArrayHeader;

/// Framebus-owned device memory of one C-contiguous array (the core's DeviceBuffer).
#[pyclass(name = "DeviceArray", module = "framebus._native", extends = PyArrayHeader, frozen)]
pub struct PyDeviceArray {
    pub(crate) buffer: DeviceBuffer,
    pub(crate) spec: FrameSpec,
    pub(crate) dtype: String,
}

/// The bytes of a NumPy array `arr` (C-contiguous, kept alive by the caller) as a slice.
fn host_bytes<'a>(arr: &'a Bound<'_, PyUntypedArray>, len: usize) -> &'a [u8] {
    // SAFETY: `arr` is a C-contiguous array of `len` bytes (FrameSpec::source checked it), and
    // the borrow of `arr` keeps it alive while the slice is used.
    unsafe { std::slice::from_raw_parts(data_ptr(arr).get(), len) }
}

/// A new NumPy array of `spec` filled by `fill` with the GIL released (a download).
pub(crate) fn download<'py>(
    py: Python<'py>,
    spec: &FrameSpec,
    fill: impl FnOnce(&mut [u8]) -> framebus::Result<()> + Send,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let out = spec.empty(py)?;
    let host = crate::array::DataPtr(data_ptr(&out).get());
    let len = spec.frame_bytes;
    py.detach(|| {
        // SAFETY: `out` is a new C-contiguous array of `len` bytes, alive for the whole call
        // and reached by nothing else while the GIL is released.
        fill(unsafe { std::slice::from_raw_parts_mut(host.get(), len) })
    })
    .map_err(CoreError)?;
    Ok(out)
}

impl PyDeviceArray {
    /// Wraps a device buffer holding an array of `dtype` and `shape`.
    pub(crate) fn wrap(py: Python<'_>, buffer: DeviceBuffer, dtype: &str, shape: &[u64]) -> PyResult<PyDeviceArray> {
        Ok(PyDeviceArray { buffer, spec: FrameSpec::new(py, dtype, shape)?, dtype: dtype.to_owned() })
    }

    /// A new uninitialised array on `device`.
    pub(crate) fn allocate(py: Python<'_>, device: u32, dtype: &str, shape: &[u64]) -> PyResult<PyDeviceArray> {
        let spec = FrameSpec::new(py, dtype, shape)?;
        if dlpack::dl_dtype(dtype).is_none() {
            return Err(
                ErrorKind::InvalidArgument.err(py, (format!("dtype {dtype} cannot live in GPU memory (big-endian or not a number type)"),))
            );
        }
        let bytes = spec.frame_bytes as u64;
        let buffer = py.detach(|| DeviceBuffer::allocate(device, bytes)).map_err(CoreError)?;
        Ok(PyDeviceArray { buffer, spec, dtype: dtype.to_owned() })
    }

    /// The Python object's initializer: this array under its header (shape, dtype, nbytes, device).
    pub(crate) fn init(self, py: Python<'_>) -> PyClassInitializer<PyDeviceArray> {
        PyClassInitializer::from(PyArrayHeader::of(py, &self.spec, Some(self.buffer.device()))).add_subclass(self)
    }
}

#[pymethods]
impl PyDeviceArray {
    /// A new, uninitialised array of `shape` and `dtype` on CUDA device `device` (DeviceUnavailableError without a GPU).
    #[staticmethod]
    #[pyo3(signature = (shape, dtype, device = 0))]
    fn empty<'py>(py: Python<'py>, shape: Vec<u64>, dtype: &Bound<'py, PyAny>, device: u32) -> PyResult<Bound<'py, PyDeviceArray>> {
        let descr = PyArrayDescr::new(py, dtype)?;
        let text = descr.getattr("str")?.extract::<String>()?;
        Bound::new(py, PyDeviceArray::allocate(py, device, &text, &shape)?.init(py))
    }

    /// Copies a NumPy array to a new device array (waits for the copy).
    #[staticmethod]
    #[pyo3(signature = (array, device = 0))]
    fn from_numpy<'py>(py: Python<'py>, array: &Bound<'py, PyUntypedArray>, device: u32) -> PyResult<Bound<'py, PyDeviceArray>> {
        let shape: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
        let dtype = array.dtype().getattr("str")?.extract::<String>()?;
        let out = PyDeviceArray::allocate(py, device, &dtype, &shape)?;
        out.copy_from_numpy(py, array, None)?;
        Bound::new(py, out.init(py))
    }

    /// Copies `array` (same shape and dtype, C-contiguous) into this one; waits for the copy.
    #[pyo3(signature = (array, stream = None))]
    fn copy_from_numpy(&self, py: Python<'_>, array: &Bound<'_, PyUntypedArray>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let src = self.spec.source(py, "DeviceArray", array.as_any())?;
        let s = dlpack::stream_arg(stream)?.unwrap_or(0);
        let bytes = host_bytes(&src, self.spec.frame_bytes);
        py.detach(|| self.buffer.upload(bytes, s)).map_err(CoreError)?;
        Ok(())
    }

    /// A NumPy copy of the array (waits for the copy).
    #[pyo3(signature = (stream = None))]
    fn to_numpy<'py>(&self, py: Python<'py>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let s = dlpack::stream_arg(stream)?;
        download(py, &self.spec, |dst| self.buffer.download(dst, s))
    }

    /// The device address of the first byte.
    #[getter(ptr)]
    fn py_ptr(&self) -> u64 {
        self.buffer.ptr()
    }

    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        dlpack::cuda_array_interface(py, self.buffer.ptr(), &self.spec.shape, &self.dtype, false, self.buffer.pending())
    }

    /// A DLPack capsule of the array (no copy); the consumer's `stream` is ordered after the
    /// last copy into it.
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
        dlpack::check_export("DeviceArray", me.buffer.device(), copy, dl_device, "")?;
        let consumer = dlpack::dlpack_stream(stream)?;
        py.detach(|| me.buffer.sync_for(consumer)).map_err(CoreError)?;
        dlpack::export_capsule(py, me.buffer.ptr(), &me.spec.shape, &me.dtype, Some(me.buffer.device()), slf.clone().into_any().unbind())
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        dlpack::device_tuple(self.buffer.device())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("DeviceArray(shape={:?}, dtype={}, device='cuda:{}')", &self.spec.shape[..], self.spec.dtype.bind(py), self.buffer.device())
    }
}
