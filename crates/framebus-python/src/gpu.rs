//! The one module of the bindings that speaks to the core's GPU door module (`framebus::gpu`):
//! what this process can reach (`gpu_info`, for `framebus.gpu_available()` and `framebus
//! doctor`), the door's own error codes, and the fake door's test accessors. Everything else
//! reaches GPUs through the core's device types (DeviceStream, DeviceFrame, DeviceLoan,
//! DeviceBuffer) and gets door errors as values on core errors (errors.rs).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// {"door", "built", "driver_version", "devices", "error", "error_code", "error_name",
/// "error_call"}: never raises.
#[pyfunction]
pub fn gpu_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let status = py.detach(framebus::gpu::door_status);
    let d = PyDict::new(py);
    d.set_item("door", status.kind.map(|k| k.name()))?;
    d.set_item("built", PyList::new(py, framebus::gpu::BUILT.iter().map(|k| k.name()))?)?;
    d.set_item("driver_version", status.driver_version)?;
    let devices = PyList::empty(py);
    for info in &status.devices {
        let dev = PyDict::new(py);
        dev.set_item("ordinal", info.ordinal)?;
        dev.set_item("name", &info.name)?;
        dev.set_item("uuid", info.uuid.iter().map(|b| format!("{b:02x}")).collect::<String>())?;
        dev.set_item("total_memory", info.total_memory)?;
        dev.set_item("compute_capability", info.compute_capability)?;
        devices.append(dev)?;
    }
    d.set_item("devices", devices)?;
    let error = status.error.as_ref();
    d.set_item("error", error.map(|e| e.to_string()))?;
    d.set_item("error_code", error.map(|e| e.code))?;
    d.set_item("error_name", error.map(|e| e.name.as_str()))?;
    d.set_item("error_call", error.map(|e| e.call))?;
    Ok(d)
}

/// framebus's own door error codes (negative, beside the driver's `CUresult` codes), by the
/// names `gpu_info()["error_name"]` and the exceptions' `code_name` carry.
pub fn door_codes(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use framebus::gpu::door::{BAD_SETTING, NOT_BUILT, NO_DRIVER};
    let d = PyDict::new(py);
    for (code, name) in [NO_DRIVER, BAD_SETTING, NOT_BUILT] {
        d.set_item(name, code)?;
    }
    Ok(d)
}

/// The fake door's "device" bytes at `ptr` (FRAMEBUS_CUDA=fake only): a test's way to look at
/// device memory. ValueError for a range outside the fake's live memory of this process, and
/// in a build without the fake.
#[pyfunction]
pub fn fake_cuda_read(py: Python<'_>, ptr: u64, nbytes: usize) -> PyResult<Bound<'_, PyBytes>> {
    #[cfg(feature = "fake-cuda")]
    let bytes = framebus::gpu::fake::fake_read(ptr, nbytes as u64);
    #[cfg(not(feature = "fake-cuda"))]
    let bytes: Option<Vec<u8>> = None;
    match bytes {
        Some(bytes) => Ok(PyBytes::new(py, &bytes)),
        None => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{nbytes} bytes at {ptr:#x} are not live fake device memory of this process (FRAMEBUS_CUDA=fake)"
        ))),
    }
}

/// The fake door's live (allocations, opened memory handles, events) of this process (zeros
/// in a build without the fake).
#[pyfunction]
pub fn fake_cuda_counts() -> (usize, usize, usize) {
    #[cfg(feature = "fake-cuda")]
    {
        let c = framebus::gpu::fake::fake_counts();
        (c.allocations, c.openings, c.events)
    }
    #[cfg(not(feature = "fake-cuda"))]
    (0, 0, 0)
}

/// The fake door's page-locked host memory and CUDA streams of this process: (live page-locked
/// allocations, page-locked allocations made so far, live created streams); zeros in a build
/// without the fake.
#[pyfunction]
pub fn fake_cuda_host_counts() -> (usize, u64, usize) {
    #[cfg(feature = "fake-cuda")]
    {
        let c = framebus::gpu::fake::fake_counts();
        (c.host_allocations, c.host_allocations_made, c.streams)
    }
    #[cfg(not(feature = "fake-cuda"))]
    (0, 0, 0)
}
