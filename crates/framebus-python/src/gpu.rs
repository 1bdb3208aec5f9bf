//! Module functions about the GPU door: what this process can reach (`gpu_info`, for
//! `framebus.gpu_available()` and `framebus doctor`), and the fake door's test accessors.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// {"door": "cuda"|"fake"|None, "driver_version", "devices": [...], "error"}: never raises.
#[pyfunction]
pub fn gpu_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let devices = pyo3::types::PyList::empty(py);
    d.set_item("door", py.None())?;
    d.set_item("driver_version", py.None())?;
    d.set_item("error", py.None())?;
    d.set_item("devices", &devices)?;
    let door = match py.detach(framebus::gpu::door) {
        Ok(door) => door,
        Err(e) => {
            d.set_item("error", e.to_string())?;
            return Ok(d);
        }
    };
    d.set_item("door", door.kind().name())?;
    let probe = py.detach(|| -> Result<(i32, Vec<framebus::gpu::door::DeviceInfo>), framebus::gpu::door::DoorError> {
        let version = door.driver_version()?;
        let count = door.device_count()?;
        let infos = (0..count).map(|i| door.device_info(i)).collect::<Result<Vec<_>, _>>()?;
        Ok((version, infos))
    });
    match probe {
        Ok((version, infos)) => {
            d.set_item("driver_version", version)?;
            for info in infos {
                let dev = PyDict::new(py);
                dev.set_item("ordinal", info.ordinal)?;
                dev.set_item("name", info.name)?;
                dev.set_item("uuid", info.uuid.iter().map(|b| format!("{b:02x}")).collect::<String>())?;
                dev.set_item("total_memory", info.total_memory)?;
                dev.set_item("compute_capability", info.compute_capability)?;
                devices.append(dev)?;
            }
        }
        Err(e) => d.set_item("error", e.to_string())?,
    }
    Ok(d)
}

/// The fake door's "device" bytes at `ptr` (FRAMEBUS_CUDA=fake only): a test's way to look at
/// device memory. ValueError for a range outside the fake's live memory of this process.
#[pyfunction]
pub fn fake_cuda_read(py: Python<'_>, ptr: u64, nbytes: usize) -> PyResult<Bound<'_, PyBytes>> {
    match framebus::gpu::fake::fake_read(ptr, nbytes as u64) {
        Some(bytes) => Ok(PyBytes::new(py, &bytes)),
        None => Err(pyo3::exceptions::PyValueError::new_err(format!("{nbytes} bytes at {ptr:#x} are not live fake device memory of this process (FRAMEBUS_CUDA=fake)"))),
    }
}

/// The fake door's live (allocations, opened memory handles, events) of this process.
#[pyfunction]
pub fn fake_cuda_counts() -> (usize, usize, usize) {
    let c = framebus::gpu::fake::fake_counts();
    (c.allocations, c.openings, c.events)
}
