//! `pipe(data, fd)`, `sync(fd=None, timeout=None)`, `close(fd=None, timeout=None)` and their
//! helpers: conversions to the core's background writers (`framebus::pipe`), GIL handling and
//! holding the exporter's buffer until its bytes are written. Nothing is copied: the writer
//! thread reads the caller's memory.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use framebus::pipe::{Options, Payload, PipeError, PushError, Registry, Writer};
use framebus::Deadline;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt};
use pyo3::{ffi, intern};

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};

use crate::args::deadline;
use crate::array::data_ptr;
use crate::errors::{ErrorKind, PipeFailure, SignalCheck};

/// The memory of a queued job and what keeps it alive until the job is finished: a buffer
/// export (the Py_buffer, whose `obj` is a strong reference to the exporter) or, for a
/// C-contiguous NumPy array, a strong reference to the array (NumPy's buffer export allocates
/// on every call; the array's data pointer does not).
pub struct Held {
    kind: Kind,
}

enum Kind {
    View(ffi::Py_buffer),
    Array { obj: *mut ffi::PyObject, addr: *const u8, len: usize },
}

// SAFETY: the export or reference is only released with the GIL held (`release`, or `bury` for
// one dropped elsewhere); other threads only read the memory it keeps alive.
unsafe impl Send for Held {}

// SAFETY: a Py_buffer's `buf`/`len` stay valid until PyBuffer_Release; an array's data stay
// valid while a reference to the array is held (NumPy refuses to resize an array that other
// references see). Only `release`/`bury` drop either, after the job is finished. The struct may
// move: the memory is the exporter's, never inside the Py_buffer itself.
unsafe impl Payload for Held {
    fn addr(&self) -> *const u8 {
        match &self.kind {
            Kind::View(v) => v.buf as *const u8,
            Kind::Array { addr, .. } => *addr,
        }
    }
    fn len(&self) -> usize {
        match &self.kind {
            Kind::View(v) => v.len.max(0) as usize,
            Kind::Array { len, .. } => *len,
        }
    }
}

impl Held {
    /// Exports `obj` as one C-contiguous run of bytes (PyBUF_SIMPLE).
    fn export(obj: &Bound<'_, PyAny>) -> PyResult<Held> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::zeroed();
        // SAFETY: `obj` is a live object (GIL held); on success the view is filled and owns a
        // reference to the exporter, on failure an exception is set and the view is untouched.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        // SAFETY: PyObject_GetBuffer succeeded and initialised the view.
        Ok(Held { kind: Kind::View(unsafe { view.assume_init() }) })
    }

    /// `data` as a held buffer: the object itself, or its `.mglo` (a moderngl.Buffer's native
    /// object), or a TypeError that says what to pass instead.
    fn get(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Held> {
        if let Ok(arr) = data.cast::<PyUntypedArray>() {
            let dtype = arr.dtype();
            if dtype.has_object() {
                return Err(PyTypeError::new_err(
                    "pipe() cannot write an array of Python objects (dtype=object holds pointers); convert it to a numeric dtype",
                ));
            }
            if arr.is_c_contiguous() {
                let len = arr.len() * dtype.itemsize();
                let addr = data_ptr(arr).get() as *const u8;
                let obj = data.clone().into_ptr();
                return Ok(Held { kind: Kind::Array { obj, addr, len } });
            }
        }
        let err = match Held::export(data) {
            Ok(h) => return Ok(h),
            Err(e) => e,
        };
        if let Ok(inner) = data.getattr(intern!(py, "mglo")) {
            if let Ok(h) = Held::export(&inner) {
                return Ok(h);
            }
        }
        let tname = data.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
        // SAFETY: `data` is a live object; PyObject_CheckBuffer only looks at its type.
        let has_buffer = unsafe { ffi::PyObject_CheckBuffer(data.as_ptr()) } != 0;
        let msg = if has_buffer {
            format!(
                "pipe() needs one C-contiguous block of memory, and this {tname} is not one ({err}); \
                 pass numpy.ascontiguousarray(data) (a copy) or a contiguous buffer"
            )
        } else {
            format!("pipe() needs a buffer (bytes, bytearray, memoryview, a NumPy array, mmap, a moderngl.Buffer), got {tname}")
        };
        let e = PyTypeError::new_err(msg);
        e.set_cause(py, Some(err));
        Err(e)
    }

    /// Releases the export (and the reference to the exporter) with the GIL held.
    fn release(self, _py: Python<'_>) {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: the export/reference was taken in `get` and is released exactly once (the
        // ManuallyDrop keeps Drop from burying it too); the GIL is held (`_py`).
        unsafe { release_kind(&mut me.kind) };
    }
}

impl Drop for Held {
    /// Only reached where no GIL is at hand (a writer torn down off a Python thread): the view
    /// is handed to `bury`, which the next call releases with the GIL.
    fn drop(&mut self) {
        // SAFETY: the kind is moved out once; `self` is not used after drop.
        let kind = unsafe { std::ptr::read(&self.kind) };
        GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner()).push(Buried(kind));
        BURIED.store(true, Ordering::Release);
    }
}

/// Releases an export or reference.
///
/// # Safety
/// The GIL must be held, and `kind` must not be released again.
unsafe fn release_kind(kind: &mut Kind) {
    match kind {
        // SAFETY: a view filled by PyObject_GetBuffer, released once, GIL held (caller).
        Kind::View(v) => unsafe { ffi::PyBuffer_Release(v) },
        // SAFETY: the strong reference taken in `Held::get`, dropped once, GIL held (caller).
        Kind::Array { obj, .. } => unsafe { ffi::Py_DECREF(*obj) },
    }
}

struct Buried(Kind);
// SAFETY: as for Held: only released with the GIL held.
unsafe impl Send for Buried {}

static GRAVEYARD: Mutex<Vec<Buried>> = Mutex::new(Vec::new());
static BURIED: AtomicBool = AtomicBool::new(false);

/// Releases the views that were dropped without the GIL.
fn bury(_py: Python<'_>) {
    if BURIED.swap(false, Ordering::Acquire) {
        let views = std::mem::take(&mut *GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner()));
        for mut b in views {
            // SAFETY: each was taken by `Held::get` and never released; the GIL is held.
            unsafe { release_kind(&mut b.0) };
        }
    }
}

/// Releases the buffers of finished background writes on every descriptor (they are otherwise
/// released at the next pipe()/sync() call). A stream write that waits for a free slot calls
/// this: a loan's array handed to pipe() keeps its slot pinned until its buffer is released.
pub fn release_finished(py: Python<'_>) {
    bury(py);
    for w in registry().all() {
        w.reap(|k| k.release(py));
    }
}

/// Whether a pipe write of this process may still refer to the pages of `addr..addr + len`
/// (vmsplice): the core then never gives a kept loan frame over that memory a private copy.
pub fn may_hold_pages(addr: usize, len: usize) -> bool {
    registry().all().iter().any(|w| w.may_hold_pages(addr as *const u8, len))
}

fn registry() -> &'static Registry<Held> {
    static PIPES: OnceLock<Registry<Held>> = OnceLock::new();
    PIPES.get_or_init(Registry::default)
}

/// A descriptor from an int or an object with fileno().
fn fd_of(fd: &Bound<'_, PyAny>) -> PyResult<i32> {
    let py = fd.py();
    if fd.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("fd must be a file descriptor (an int) or an object with fileno(), got a bool"));
    }
    let number = if fd.is_instance_of::<PyInt>() || is_index_scalar(fd) {
        fd.clone()
    } else {
        match fd.call_method0(intern!(py, "fileno")) {
            Ok(n) => n,
            Err(e) if fd.hasattr(intern!(py, "fileno")).unwrap_or(false) => return Err(e),
            Err(_) => {
                let tname = fd.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                return Err(PyTypeError::new_err(format!(
                    "fd must be a file descriptor (an int) or an object with fileno() (e.g. proc.stdin), got {tname}"
                )));
            }
        }
    };
    match number.extract::<i32>() {
        Ok(n) => Ok(n),
        Err(_) => Err(PyErr::from_type(
            ErrorKind::InvalidArgument.class(py)?,
            (format!("fd must be a file descriptor number (0 to 2**31-1), got {number}"),),
        )),
    }
}

/// Reports a writer's failure: releases what it held, forgets it, converts the error.
fn failed(py: Python<'_>, writer: &Writer<Held>, e: PipeError) -> PyErr {
    writer.reap(|k| k.release(py));
    if let Some(w) = registry().get(writer.fd()) {
        if std::ptr::eq(&*w, writer) {
            registry().remove(&w);
        }
    }
    PipeFailure(e).into()
}

/// Queues the bytes of `data` for writing to `fd` by a background thread and returns at once.
///
/// Does not copy: `data` is held (a buffer export and a reference) until its bytes are written,
/// so it must not be modified before `sync(fd)`. Writes to one descriptor happen in call order.
/// Blocks (GIL released) only while the descriptor's queue is full or while `data`'s memory is
/// still queued. Raises TypeError for a non-buffer or non-contiguous `data` or a bad `fd`,
/// PipeBrokenError (BrokenPipeError) / PipeError (OSError) for an earlier failed write to `fd`.
#[pyfunction]
pub fn pipe(py: Python<'_>, data: &Bound<'_, PyAny>, fd: &Bound<'_, PyAny>) -> PyResult<()> {
    let fd = fd_of(fd)?;
    bury(py);
    let mut held = Held::get(py, data)?;
    let writer = match registry().writer(fd) {
        Ok(w) => w,
        Err(e) => {
            held.release(py);
            return Err(PipeFailure(e).into());
        }
    };
    loop {
        match writer.try_push(held, |k| k.release(py)) {
            Ok(()) => return Ok(()),
            Err(PushError::Failed(e, k)) => {
                k.release(py);
                return Err(failed(py, &writer, e));
            }
            Err(PushError::Busy(k)) => {
                let (addr, len) = (k.addr() as usize, k.len());
                let mut signals = SignalCheck::default();
                let waited = py.detach(|| writer.wait_room(addr as *const u8, len, Deadline::never(), &mut || signals.check(|| None)));
                if let Err(e) = waited {
                    k.release(py);
                    return signals.finish_pipe(Err(e));
                }
                held = k;
            }
        }
    }
}

fn writers_of(fd: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<std::sync::Arc<Writer<Held>>>> {
    Ok(match fd {
        Some(fd) => registry().get(fd_of(fd)?).into_iter().collect(),
        None => registry().all(),
    })
}

/// Waits (GIL released) until the writes queued to `fd` (or to every descriptor when None)
/// are finished, then releases their buffers. Raises PipeTimeoutError (TimeoutError) after
/// `timeout` seconds (the writes stay queued), PipeBrokenError / PipeError for a failed write.
/// `fd` may also be a buffer (turbopipe 2's `sync(data)`): then it waits until no queued write,
/// to any descriptor, still covers that memory (errors are left for the next call on the fd).
#[pyfunction]
#[pyo3(signature = (fd = None, timeout = None))]
pub fn sync(
    py: Python<'_>,
    fd: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::args::seconds)] timeout: Option<f64>,
) -> PyResult<()> {
    if let Some(data) = fd.filter(|f| is_buffer_not_fd(f)) {
        return sync_memory(py, data, timeout);
    }
    finish_each(py, fd, timeout, false)
}

/// An integer-like scalar that is not an array (e.g. numpy.int64): usable as a descriptor.
fn is_index_scalar(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object; PyIndex_Check only looks at its type.
    !obj.is_instance_of::<PyUntypedArray>() && unsafe { ffi::PyIndex_Check(obj.as_ptr()) } != 0
}

/// Whether `obj` is a buffer rather than a descriptor (not an int, no fileno()).
fn is_buffer_not_fd(obj: &Bound<'_, PyAny>) -> bool {
    if obj.is_instance_of::<PyInt>() || is_index_scalar(obj) || obj.hasattr(intern!(obj.py(), "fileno")).unwrap_or(false) {
        return false;
    }
    // SAFETY: `obj` is a live object; PyObject_CheckBuffer only looks at its type.
    let buffer = unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } != 0;
    buffer || obj.hasattr(intern!(obj.py(), "mglo")).unwrap_or(false)
}

fn sync_memory(py: Python<'_>, data: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
    let deadline = deadline(py, timeout)?;
    let held = Held::get(py, data)?;
    let (addr, len) = (held.addr() as usize, held.len());
    held.release(py);
    for w in registry().all() {
        let mut signals = SignalCheck::default();
        let r = py.detach(|| w.wait_memory(addr as *const u8, len, deadline, &mut || signals.check(|| None)));
        w.reap(|k| k.release(py));
        if r.is_err() {
            return signals.finish_pipe(r);
        }
    }
    Ok(())
}

/// Waits like `sync`, then stops the writer thread of `fd` (or of every descriptor). Does not
/// close the descriptor itself. A later pipe() to it starts a new writer.
#[pyfunction]
#[pyo3(signature = (fd = None, timeout = None))]
pub fn close(
    py: Python<'_>,
    fd: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::args::seconds)] timeout: Option<f64>,
) -> PyResult<()> {
    finish_each(py, fd, timeout, true)
}

fn finish_each(py: Python<'_>, fd: Option<&Bound<'_, PyAny>>, timeout: Option<f64>, stop: bool) -> PyResult<()> {
    let deadline = deadline(py, timeout)?;
    bury(py);
    let mut first: Option<PyErr> = None;
    for w in writers_of(fd)? {
        let mut signals = SignalCheck::default();
        let r = py.detach(|| {
            let check = &mut || signals.check(|| None);
            if stop {
                w.close(deadline, check)
            } else {
                w.sync(deadline, check)
            }
        });
        w.reap(|k| k.release(py));
        match r {
            Ok(()) => {
                if stop {
                    registry().remove(&w);
                }
            }
            Err(e @ (PipeError::Timeout { .. } | PipeError::Interrupted)) => return signals.finish_pipe(Err(e)),
            Err(e) => {
                let err = failed(py, &w, e);
                first.get_or_insert(err);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// Sets options for writers started from now on and returns the options in force:
/// `queue` (unfinished writes per descriptor before pipe() waits), `vmsplice` (hand pages to
/// pipes instead of copying), `pipe_size` (bytes to ask for; 0 leaves pipes as they are, None
/// grows them to /proc/sys/fs/pipe-max-size).
#[pyfunction]
#[pyo3(signature = (*, queue = None, vmsplice = None, pipe_size = -1))]
pub fn configure<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = queue_arg)] queue: Option<usize>,
    vmsplice: Option<bool>,
    #[pyo3(from_py_with = pipe_size_arg)] pipe_size: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut o = registry().options();
    if let Some(q) = queue {
        o.queue = q;
    }
    if let Some(v) = vmsplice {
        o.vmsplice = v;
    }
    match pipe_size {
        Some(-1) => {}
        None => o.pipe_size = None,
        Some(n) if n >= 0 => o.pipe_size = Some(n as usize),
        Some(n) => return Err(PipeFailure(PipeError::InvalidArgument(format!("pipe_size must be None or >= 0, got {n}"))).into()),
    }
    registry().set_options(o).map_err(PipeFailure)?;
    options_dict(py, &registry().options())
}

/// `configure(queue=)`: None or an int (a huge one is a ValueError naming it, not an OverflowError).
fn queue_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if value.is_none() {
        return Ok(None);
    }
    value.extract().map(Some).map_err(|e| crate::args::out_of_range(value, e, "queue", "1 to 2**20"))
}

/// `configure(pipe_size=)`: None or an int (a huge one is a ValueError naming it).
fn pipe_size_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if value.is_none() {
        return Ok(None);
    }
    value.extract().map(Some).map_err(|e| crate::args::out_of_range(value, e, "pipe_size", "0 to 2**63-1 (or None)"))
}

fn options_dict<'py>(py: Python<'py>, o: &Options) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("queue", o.queue)?;
    d.set_item("vmsplice", o.vmsplice)?;
    d.set_item("pipe_size", o.pipe_size)?;
    Ok(d)
}

/// Counters of the writer of `fd` (None when it has none): bytes, spliced, jobs, pending,
/// pending_bytes, pipe_size, vmsplice, fifo.
#[pyfunction]
pub fn pipe_stats<'py>(py: Python<'py>, fd: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(w) = registry().get(fd_of(fd)?) else { return Ok(None) };
    let s = w.stats();
    let d = PyDict::new(py);
    d.set_item("bytes", s.bytes)?;
    d.set_item("spliced", s.spliced)?;
    d.set_item("jobs", s.jobs)?;
    d.set_item("pending", s.pending)?;
    d.set_item("pending_bytes", s.pending_bytes)?;
    d.set_item("pipe_size", s.pipe_size)?;
    d.set_item("vmsplice", s.vmsplice)?;
    d.set_item("fifo", s.fifo)?;
    Ok(Some(d))
}

/// At interpreter exit: waits for the queued writes while they make progress, giving up after
/// `stall` seconds without any. Returns [(fd, pending writes, pending bytes)] given up on.
#[pyfunction]
pub fn _pipe_flush_at_exit(py: Python<'_>, stall: f64) -> Vec<(i32, usize, u64)> {
    bury(py);
    let stall = Duration::try_from_secs_f64(stall.max(0.0)).unwrap_or(Duration::from_secs(5));
    let mut signals = SignalCheck::default();
    let left = py.detach(|| registry().flush_at_exit(stall, &mut || signals.check(|| None)));
    for w in registry().all() {
        w.reap(|k| k.release(py));
    }
    left
}
