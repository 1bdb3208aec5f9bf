//! Python bindings of the framebus core, built by maturin as `framebus._native`. Only
//! conversions, GIL handling and error mapping live here; behaviour lives in the core crate.

use pyo3::prelude::*;
use pyo3::types::PyDict;

mod args;
mod array;
mod device_array;
mod device_download;
mod device_frame;
mod device_loan;
mod dlpack;
mod errors;
mod fork;
mod frame;
mod frame_arrays;
mod gpu;
mod header;
mod loan;
mod monitor;
mod pipe;
mod spec_args;
mod stream;
mod stream_device;
mod stream_fixed;
mod stream_variable;
mod tuning;

use errors::CoreError;

/// Removes the stream `name` (FileNotFoundError if there is none).
#[pyfunction]
fn unlink(py: Python<'_>, name: &str) -> PyResult<()> {
    py.detach(|| framebus::unlink(name)).map_err(|e| CoreError(e).into())
}

/// Names of all streams in /dev/shm.
#[pyfunction]
fn stream_names() -> Vec<String> {
    framebus::recovery::names()
}

fn info_dict<'py>(py: Python<'py>, i: &framebus::StreamInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &i.name)?;
    d.set_item("path", &i.path)?;
    let fixed = i.spec.as_ref().filter(|s| !s.variable);
    let variable = i.spec.as_ref().filter(|s| s.variable);
    d.set_item("dtype", fixed.map(|s| s.dtype.clone()))?;
    d.set_item("shape", fixed.map(|s| s.shape.clone()))?;
    d.set_item("variable", variable.is_some())?;
    d.set_item("capacity", variable.map(|s| s.shape[0]))?;
    d.set_item("slots", i.spec.as_ref().map(|s| s.slots))?;
    d.set_item("meta_capacity", i.spec.as_ref().map(|s| s.meta_capacity))?;
    d.set_item("frame_bytes", i.spec.as_ref().and_then(|s| s.frame_bytes()))?;
    let device = i.spec.as_ref().and_then(|s| s.device);
    d.set_item("device", device.map(|d| format!("cuda:{}", d.ordinal)))?;
    d.set_item("cpu_mirror", device.is_some_and(|d| d.cpu_mirror))?;
    d.set_item("problem", &i.problem)?;
    d.set_item("problem_kind", i.problem_kind.map(framebus::recovery::ProblemKind::code))?;
    d.set_item("creator_pid", i.creator_pid)?;
    d.set_item("creator_alive", i.creator_alive)?;
    d.set_item("attached", i.attached)?;
    d.set_item("lossless", i.lossless)?;
    d.set_item("sequence", i.latest_seq)?;
    d.set_item("frames_written", i.frames_written)?;
    d.set_item("bytes_written", i.bytes_written)?;
    d.set_item("total_bytes", i.total_bytes)?;
    d.set_item("lock_holder", i.lock_holder)?;
    d.set_item("uid", i.uid)?;
    d.set_item("mode", i.mode)?;
    d.set_item("stale", i.stale)?;
    Ok(d)
}

/// Description of one stream, without attaching to it.
#[pyfunction]
fn stream_info<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
    let info = py.detach(|| framebus::recovery::info(name)).map_err(CoreError)?;
    info_dict(py, &info)
}

/// Descriptions of all streams.
#[pyfunction]
fn list_info<'py>(py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let all = py.detach(framebus::recovery::list);
    all.iter().map(|i| info_dict(py, i)).collect()
}

/// Bytes of /dev/shm a stream of `frame_bytes` per frame (a variable-shape stream: its
/// capacity plus FRAME_TABLE_BYTES) would take, as create() lays it out. ValueError when the
/// sizes overflow.
#[pyfunction]
#[pyo3(signature = (frame_bytes, slots, *, meta_capacity = 256, max_readers = 64))]
fn segment_bytes(
    #[pyo3(from_py_with = frame_bytes_arg)] frame_bytes: u64,
    #[pyo3(from_py_with = slots_arg)] slots: u32,
    #[pyo3(from_py_with = meta_capacity_arg)] meta_capacity: u32,
    #[pyo3(from_py_with = max_readers_arg)] max_readers: u32,
) -> PyResult<u64> {
    framebus::ring::layout::Geometry::new(slots, max_readers, frame_bytes, meta_capacity).map(|g| g.total_bytes).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!("a stream of {slots} slots of {frame_bytes} bytes is larger than 2**64 bytes"))
    })
}

/// `fn $name(value) -> PyResult<$ty>`: an int argument `$what`, out of range a ValueError
/// naming it and `$range` (not an OverflowError).
macro_rules! int_arg {
    ($name:ident, $ty:ty, $what:literal, $range:literal) => {
        fn $name(value: &Bound<'_, PyAny>) -> PyResult<$ty> {
            value.extract().map_err(|e| args::out_of_range(value, e, $what, $range))
        }
    };
}
int_arg!(frame_bytes_arg, u64, "frame_bytes", "0 to 2**64-1");
int_arg!(slots_arg, u32, "slots", "0 to 2**32-1");
int_arg!(meta_capacity_arg, u32, "meta_capacity", "0 to 2**32-1");
int_arg!(max_readers_arg, u32, "max_readers", "0 to 2**32-1");

/// ``shape`` (an int or a sequence of ints) as the tuple a fixed-shape stream would have,
/// checked as ``create()`` checks it (InvalidArgumentError saying what is wrong, TypeError for
/// what is no int); nothing is created.
#[pyfunction]
fn check_shape<'py>(py: Python<'py>, shape: &Bound<'py, PyAny>) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
    pyo3::types::PyTuple::new(py, spec_args::shape(shape)?)
}

/// ``dtype`` (anything ``numpy.dtype()`` takes) as the ``dtype.str`` a fixed-shape stream would
/// hold, checked as ``create()`` checks it: InvalidArgumentError for a dtype no stream holds
/// (objects, strings, records; streams hold bool, integer, float and complex elements),
/// TypeError for what is no dtype.
#[pyfunction]
fn check_dtype(py: Python<'_>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    spec_args::dtype(dtype, py)
}

/// ``capacity`` (an int of bytes) as a variable-shape stream would take it, checked as
/// ``create(capacity=)`` checks it.
#[pyfunction]
fn check_capacity(capacity: &Bound<'_, PyAny>) -> PyResult<u64> {
    spec_args::capacity(capacity)
}

/// Removes stale streams; returns their names.
#[pyfunction]
#[pyo3(signature = (*, dry_run = false))]
fn gc(py: Python<'_>, dry_run: bool) -> Vec<String> {
    py.detach(|| framebus::recovery::gc(dry_run))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // NumPy's C API is fetched here, once: fetched lazily by the first array a call makes, a
    // Ctrl-C landing in that import would make the numpy crate panic instead of raising.
    numpy::PyArrayDescr::new(m.py(), "u1")?;
    framebus::ring::set_pages_in_use_check(pipe::may_hold_pages);
    m.add("LAYOUT_VERSION", framebus::ring::layout::VERSION)?;
    let limits = pyo3::types::PyDict::new(m.py());
    for (field, low, high) in framebus::ring::COUNT_LIMITS {
        limits.set_item(field, (low, high))?;
    }
    m.add("COUNT_LIMITS", limits)?;
    m.add("MAX_FRAME_BYTES", framebus::ring::MAX_FRAME_BYTES)?;
    m.add("PROBLEM_KINDS", framebus::recovery::ProblemKind::ALL.map(framebus::recovery::ProblemKind::code).to_vec())?;
    m.add("ERROR_KINDS", errors::ErrorKind::ALL.map(errors::ErrorKind::name).to_vec())?;
    m.add("FRAME_TABLE_BYTES", framebus::ring::frame_table::TABLE_BYTES)?;
    m.add("MAX_FRAME_ARRAYS", framebus::ring::frame_table::MAX_ARRAYS)?;
    m.add("MAX_ARRAY_NAME", framebus::ring::frame_table::MAX_NAME)?;
    m.add_class::<stream::PyStream>()?;
    m.add_class::<header::PyArrayHeader>()?;
    m.add_class::<header::PySlotHeader>()?;
    m.add_class::<header::PyFrameHeader>()?;
    m.add_class::<frame::PyFrame>()?;
    m.add_class::<loan::PyLoan>()?;
    m.add_class::<device_array::PyDeviceArray>()?;
    m.add_class::<device_download::PyDeviceDownload>()?;
    m.add_class::<device_frame::PyDeviceFrame>()?;
    m.add_class::<device_loan::PyDeviceLoan>()?;
    m.add_class::<stream_device::PyDeviceStream>()?;
    m.add_class::<stream::PyOpened>()?;
    m.add_function(wrap_pyfunction!(stream::_open, m)?)?;
    m.add("DOOR_CODES", gpu::door_codes(m.py())?)?;
    m.add_function(wrap_pyfunction!(gpu::gpu_info, m)?)?;
    m.add_function(wrap_pyfunction!(gpu::fake_cuda_read, m)?)?;
    m.add_function(wrap_pyfunction!(gpu::fake_cuda_counts, m)?)?;
    m.add_function(wrap_pyfunction!(gpu::fake_cuda_host_counts, m)?)?;
    m.add_function(wrap_pyfunction!(fork::fork_prepare, m)?)?;
    m.add_function(wrap_pyfunction!(fork::fork_parent, m)?)?;
    m.add_function(wrap_pyfunction!(fork::fork_child, m)?)?;
    m.add_function(wrap_pyfunction!(unlink, m)?)?;
    m.add_function(wrap_pyfunction!(stream_names, m)?)?;
    m.add_function(wrap_pyfunction!(stream_info, m)?)?;
    m.add_function(wrap_pyfunction!(list_info, m)?)?;
    m.add_function(wrap_pyfunction!(gc, m)?)?;
    m.add_function(wrap_pyfunction!(check_shape, m)?)?;
    m.add_function(wrap_pyfunction!(check_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(check_capacity, m)?)?;
    m.add_function(wrap_pyfunction!(segment_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(monitor::stream_stats, m)?)?;
    m.add_function(wrap_pyfunction!(tuning::copy_plan, m)?)?;
    // Pipes: background writers for file descriptors (pipe.rs).
    m.add_function(wrap_pyfunction!(pipe::pipe, m)?)?;
    m.add_function(wrap_pyfunction!(pipe::sync, m)?)?;
    m.add_function(wrap_pyfunction!(pipe::close, m)?)?;
    m.add_function(wrap_pyfunction!(pipe::configure, m)?)?;
    m.add_function(wrap_pyfunction!(pipe::pipe_stats, m)?)?;
    m.add_function(wrap_pyfunction!(pipe::_pipe_flush_at_exit, m)?)?;
    Ok(())
}
