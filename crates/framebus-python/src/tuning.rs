//! `copy_plan()`: the core's copy decisions for this process (framebus::copy), as a dict.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// How this process copies frames: kernels, threads and page preparation, decided once from
/// the machine and the FRAMEBUS_COPY / FRAMEBUS_COPY_THREADS / FRAMEBUS_HUGEPAGES /
/// FRAMEBUS_PREFAULT environment variables. With `nbytes`, also what a frame of that size gets
/// now ("frame": write kernel with no reader waiting and with one, read kernel, threads the
/// size and the idle cores allow), and what this process's copies have measured about helper
/// threads so far ("helpers_learned"). Copies nothing; raises ValueError for a negative size.
#[pyfunction]
#[pyo3(signature = (nbytes = None))]
pub fn copy_plan<'py>(py: Python<'py>, nbytes: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
    let nbytes: Option<i64> = match nbytes.filter(|v| !v.is_none()) {
        Some(v) => Some(v.extract().map_err(|e| crate::args::out_of_range(v, e, "nbytes", "0 to 2**63-1"))?),
        None => None,
    };
    use framebus::copy::{plan, Threads};
    let p = plan();
    let d = PyDict::new(py);
    d.set_item("arch", p.arch)?;
    d.set_item("features", p.features.clone())?;
    d.set_item("cpus", p.cpus)?;
    d.set_item("write_large", p.write_large.name())?;
    d.set_item("write_auto", p.write_auto)?;
    d.set_item("llc_bytes", p.llc)?;
    d.set_item("stream_min", p.stream_min)?;
    d.set_item("read", p.read.name())?;
    match p.threads {
        Threads::Auto => d.set_item("threads", "auto")?,
        Threads::Fixed(n) => d.set_item("threads", n)?,
    }
    d.set_item("thread_min", p.thread_min)?;
    d.set_item("helpers_learned", framebus::copy::helpers_learned())?;
    d.set_item("shmem_thp", &p.pages.shmem_thp)?;
    d.set_item("huge_pages", p.pages.huge)?;
    d.set_item("prefault", p.pages.prefault)?;
    d.set_item("pages_min", p.pages.min_bytes)?;
    d.set_item("notes", p.notes.clone())?;
    d.set_item("explain", p.explain())?;
    if let Some(n) = nbytes {
        let n = usize::try_from(n).map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("nbytes must be >= 0, got {n}")))?;
        let f = PyDict::new(py);
        f.set_item("nbytes", n)?;
        f.set_item("write", p.write_kernel(n, Some(0)).name())?;
        f.set_item("write_reader_waiting", p.write_kernel(n, Some(1)).name())?;
        f.set_item("read", p.read.name())?;
        f.set_item("threads", p.threads_for(n, &framebus::copy::idle_cores))?;
        d.set_item("frame", f)?;
    }
    Ok(d)
}
