//! `framebus._native.Stream`: a handle on one host stream, and the ring operations every
//! handle shares (waits, the write lock, the end of the stream, counters), which
//! `framebus._native.DeviceStream` (stream_device.rs) inherits. Copies run with the GIL released
//! when the frame is large; every wait releases it and wakes at least every 100 ms to run signal
//! handlers.

use std::sync::{Arc, RwLock};

use framebus::{CreateOptions, Deadline, Error, FrameInfo, ReaderMode, StreamSpec};
use numpy::PyArrayDescr;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::args::{after_arg, deadline, frame_id_arg, meta_of, seconds, spec_count, unsigned};
use crate::array::{DataPtr, FrameSpec};
use crate::errors::{CoreError, ErrorKind, SignalCheck};
use crate::frame::PyFrame;
use crate::frame_arrays::{DescrCache, LayoutCache, ReadCache};
use crate::loan::LoanValues;

/// Frames at least this large are copied with the GIL released.
pub(crate) const DETACH_BYTES: usize = 256 * 1024;

/// One handle on a stream (see `framebus.Stream` for the documented API).
#[pyclass(name = "Stream", module = "framebus._native", subclass, frozen)]
pub struct PyStream {
    pub(crate) name: Arc<str>,
    inner: RwLock<Option<Handle>>,
    pub(crate) spec: FrameSpec,
    /// One shape and dtype for every frame, or a table of arrays in each (and its caches).
    layout: Layout,
    slots: u32,
    meta_capacity: u32,
    mode: ReaderMode,
}

/// The core handle of a native handle: a host stream's, or a device stream's (its own type in
/// the core, over the same ring).
pub(crate) enum Handle {
    Host(Arc<framebus::Stream>),
    Device(framebus::DeviceStream),
}

impl std::ops::Deref for Handle {
    type Target = framebus::Stream;

    fn deref(&self) -> &framebus::Stream {
        self.ring()
    }
}

impl Handle {
    /// The shared ring.
    fn ring(&self) -> &Arc<framebus::Stream> {
        match self {
            Handle::Host(s) => s,
            Handle::Device(d) => d.ring(),
        }
    }
}

/// How a host stream's frames are laid out: the two code paths of the bindings. A fixed stream's
/// frames all have the stream's shape and dtype (stream_fixed.rs); a variable-shape stream's
/// frames each carry their own table of arrays (stream_variable.rs), which needs the caches.
pub(crate) enum Layout {
    Fixed,
    Variable(VariableCaches),
}

/// What a variable-shape stream remembers between frames, so that a frame laid out like the
/// last one costs no planning and no allocation.
#[derive(Default)]
pub(crate) struct VariableCaches {
    /// dtypes of the frames' arrays, built once per dtype string.
    pub(crate) descrs: DescrCache,
    /// The last frame table read and its arrays.
    pub(crate) read_cache: ReadCache,
    /// The last single-array layouts written and loaned.
    pub(crate) write_layout: LayoutCache,
    pub(crate) loan_layout: LayoutCache,
}

/// (seq, timestamp_ns, frame_id, meta) of a frame read with its record.
pub(crate) type FrameRecord = (u64, u64, i64, Vec<u8>);

impl PyStream {
    /// The core handle, or RuntimeError if closed. In a process that got this handle through
    /// fork(), the first call registers the handle's own reader entry here (TooManyReadersError
    /// if the table is full): a handle belongs to one process (see the core's `ring/owner.rs`).
    pub(crate) fn handle(&self, py: Python<'_>) -> PyResult<Arc<framebus::Stream>> {
        self.with_handle(py, |h| h.ring().clone())
    }

    fn with_handle<T>(&self, py: Python<'_>, f: impl FnOnce(&Handle) -> T) -> PyResult<T> {
        match &*self.inner.read().unwrap_or_else(|p| p.into_inner()) {
            Some(h) => {
                let s = h.ring();
                if s.is_inherited() {
                    s.adopt().map_err(CoreError)?;
                }
                Ok(f(h))
            }
            None => Err(PyErr::from_type(
                ErrorKind::StreamClosed.class(py)?,
                (format!("stream {:?} is closed; reopen it with framebus.open({:?})", self.name, self.name),),
            )),
        }
    }

    /// The core handle of a host stream, for the host methods (a device stream's are
    /// `DeviceStream`'s own: this refuses one reached through `_native.Stream`'s methods).
    pub(crate) fn host(&self, py: Python<'_>) -> PyResult<Arc<framebus::Stream>> {
        match self.with_handle(py, |h| match h {
            Handle::Host(s) => Some(s.clone()),
            Handle::Device(_) => None,
        })? {
            Some(s) => Ok(s),
            None => Err(ErrorKind::InvalidArgument
                .err(py, (format!("stream {:?} keeps its frames in GPU memory: use the DeviceStream's own methods", self.name),))),
        }
    }

    /// The core handle of a device stream (DeviceStream's methods).
    /// A copy inherited through fork() is refused (DeviceUnavailableError) before it takes a
    /// reader entry in the child or pins anything: its GPU side is the parent's.
    pub(crate) fn device_handle(&self, py: Python<'_>) -> PyResult<framebus::DeviceStream> {
        if let Some(Handle::Device(d)) = &*self.inner.read().unwrap_or_else(|p| p.into_inner()) {
            d.ring().device_slots().map_err(CoreError)?;
        }
        match self.with_handle(py, |h| match h {
            Handle::Device(d) => Some(d.clone()),
            Handle::Host(_) => None,
        })? {
            Some(d) => Ok(d),
            None => Err(ErrorKind::InvalidArgument.err(py, (format!("stream {:?} is a host stream, not a device stream", self.name),))),
        }
    }

    /// Runs a core operation that may block: first one attempt holding the GIL (unless the
    /// frame is large), then, if it would have to wait, with the GIL released and signal checks.
    pub(crate) fn blocking<T: Send>(
        &self,
        py: Python<'_>,
        deadline: Deadline,
        heavy: bool,
        op: impl Fn(Deadline, &mut dyn FnMut() -> bool) -> Result<T, Error> + Send + Sync,
    ) -> PyResult<T> {
        if !heavy {
            match op(Deadline::probe(), &mut || true) {
                Err(Error::Timeout { .. } | Error::NoFreeSlot { .. } | Error::LockBusy { .. }) => {}
                r => return r.map_err(|e| CoreError(e).into()),
            }
            // Finished pipe writes may still hold loan arrays (and so pin their slots):
            // release them before waiting, and at every wake-up of the wait.
            crate::pipe::release_finished(py);
        }
        let mut signals = SignalCheck::default();
        let closed = || {
            if self.closed() {
                return Python::attach(|py| self.handle(py).err());
            }
            Python::attach(crate::pipe::release_finished);
            None
        };
        let result = py.detach(|| op(deadline, &mut || signals.check(closed)));
        signals.finish(result)
    }

    /// InvalidArgumentError when a fixed-shape stream is given per-frame layout arguments.
    pub(crate) fn refuse_layout(&self, py: Python<'_>, given: bool, what: &str) -> PyResult<()> {
        if !given {
            return Ok(());
        }
        Err(PyErr::from_type(
            ErrorKind::InvalidArgument.class(py)?,
            (format!(
                "stream {:?} has a fixed frame shape; {what} need a variable-shape stream (framebus.create(name, capacity=...))",
                self.name
            ),),
        ))
    }

    /// A timeout waiting on a device stream whose owner has exited becomes the error saying so.
    pub(crate) fn owner_gone_instead(&self, py: Python<'_>, s: &framebus::Stream, e: PyErr) -> PyErr {
        if !e.is_instance_of::<pyo3::exceptions::PyTimeoutError>(py) {
            return e;
        }
        s.device_owner_gone().map_or(e, |gone| CoreError(gone).into())
    }

    /// Whether each frame carries its own table of arrays.
    pub(crate) fn is_variable(&self) -> bool {
        matches!(self.layout, Layout::Variable(_))
    }

    /// Copies the newest frame (or the next new one, `new`), into `out` when given, with its
    /// record when `with_info`: the one read of both layouts.
    fn read_frame<'py>(
        &self,
        py: Python<'py>,
        new: bool,
        out: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
        with_info: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Option<FrameRecord>)> {
        match &self.layout {
            Layout::Fixed => self.read_fixed(py, new, out, timeout, with_info).map(|(a, i)| (a.into_any(), i)),
            Layout::Variable(v) => self.read_variable(py, v, new, out, timeout, with_info),
        }
    }

    /// A view of a pinned frame of this stream.
    fn frame_view(&self, py: Python<'_>, s: &framebus::Stream, pinned: framebus::Pinned) -> PyResult<Py<PyAny>> {
        match &self.layout {
            Layout::Fixed => Ok(Bound::new(py, PyFrame::new(py, &self.name, &self.spec, pinned))?.into_any().unbind()),
            Layout::Variable(v) => Ok(Bound::new(py, self.frame_view_variable(py, v, s, pinned)?)?.into_any().unbind()),
        }
    }

    /// Pins the newest frame, waiting up to `deadline` for the first one (or for the next when
    /// the newest went with a write that was given up): `view()` of both kinds of stream.
    pub(crate) fn pin_newest(&self, py: Python<'_>, s: &Arc<framebus::Stream>, deadline: Deadline) -> PyResult<framebus::Pinned> {
        Ok(match s.pin_latest() {
            // Nothing written yet, or the newest frame went with a write that was given up.
            Err(Error::Empty { .. } | Error::NewestLost { .. }) => {
                let after = s.latest_seq();
                self.blocking(py, deadline, false, |d, check| s.wait_for(after, d, check))?;
                s.pin_latest()
            }
            other => other,
        }
        .map_err(CoreError)?)
    }

    /// Pins the next frame this handle has not seen: `wait_view()` of both kinds of stream.
    pub(crate) fn pin_next(&self, py: Python<'_>, s: &Arc<framebus::Stream>, deadline: Deadline) -> PyResult<framebus::Pinned> {
        self.blocking(py, deadline, false, |d, check| s.wait_pinned(d, check)).map_err(|e| self.owner_gone_instead(py, s, e))
    }

    /// Pins frame `seq` if the ring still holds it: `view_seq()` of both kinds of stream.
    pub(crate) fn pin_seq(&self, py: Python<'_>, s: &Arc<framebus::Stream>, seq: &Bound<'_, PyAny>) -> PyResult<Option<framebus::Pinned>> {
        if seq.is_none() {
            return Err(PyTypeError::new_err("seq must be an int (a frame's sequence number), got None"));
        }
        let seq = unsigned(py, "seq", Some(seq))?.unwrap_or(0);
        Ok(s.pin_seq(seq))
    }

    /// A new handle of `layout` on the opened or created `handle`.
    pub(crate) fn wrap(py: Python<'_>, name: &str, handle: Handle) -> PyResult<PyStream> {
        let stream = handle.ring();
        let spec = stream.spec().clone();
        if stream.mode() == ReaderMode::Lossless {
            crate::fork::track(py, stream);
        }
        Ok(PyStream {
            name: Arc::from(name),
            spec: FrameSpec::new(py, &spec.dtype, &spec.shape)?,
            slots: spec.slots,
            meta_capacity: spec.meta_capacity,
            mode: stream.mode(),
            layout: if spec.variable { Layout::Variable(VariableCaches::default()) } else { Layout::Fixed },
            inner: RwLock::new(Some(handle)),
        })
    }

    /// Warns (LockRecoveredWarning) when `before` differs from the handle's takeover count.
    pub(crate) fn warn_recovered(&self, py: Python<'_>, s: &framebus::Stream, before: u64) -> PyResult<()> {
        if s.lock_recoveries() != before {
            let cls = ErrorKind::LockRecoveredWarning.class(py)?;
            let msg = format!("stream {:?}: the write lock was held by a process that died; it was taken over and any frame that process was writing was dropped", self.name);
            PyErr::warn(py, &cls, &std::ffi::CString::new(msg).unwrap_or_default(), 2)?;
        }
        Ok(())
    }
}

/// "latest" or "lossless" as the core's reader mode.
pub(crate) fn reader_mode(py: Python<'_>, mode: &str) -> PyResult<ReaderMode> {
    match mode {
        "latest" => Ok(ReaderMode::Latest),
        "lossless" => Ok(ReaderMode::Lossless),
        other => Err(ErrorKind::InvalidArgument.err(py, (format!("mode must be 'latest' or 'lossless', got {other:?}"),))),
    }
}

/// The creation keywords of both native stream classes.
pub(crate) struct CreateArgs<'a, 'py> {
    /// A fixed shape (an int or a sequence of ints) and dtype (anything `numpy.dtype()` takes),
    /// or a variable-shape stream's capacity (an int of bytes); `size` cross-checks a fixed
    /// shape's frame bytes. As the caller gave them: the core checks them (spec_args.rs).
    pub shape: Option<&'a Bound<'py, PyAny>>,
    pub dtype: Option<&'a Bound<'py, PyAny>>,
    pub capacity: Option<&'a Bound<'py, PyAny>>,
    pub size: Option<&'a Bound<'py, PyAny>>,
    pub slots: Option<&'a Bound<'py, PyAny>>,
    pub meta_capacity: Option<&'a Bound<'py, PyAny>>,
    pub max_readers: Option<&'a Bound<'py, PyAny>>,
    pub permissions: Option<&'a Bound<'py, PyAny>>,
    pub exist_ok: bool,
    pub device: Option<framebus::ring::DeviceSpec>,
}

/// The core's spec and options of a stream to create.
pub(crate) fn create_args(py: Python<'_>, a: CreateArgs<'_, '_>) -> PyResult<(StreamSpec, CreateOptions)> {
    let mut spec = StreamSpec { device: a.device, ..crate::spec_args::spec(py, a.shape, a.dtype, a.capacity, a.size)? };
    let mut options = CreateOptions { exist_ok: a.exist_ok, ..CreateOptions::default() };
    spec.slots = spec_count(py, "slots", a.slots)?.unwrap_or(spec.slots);
    spec.meta_capacity = spec_count(py, "meta_capacity", a.meta_capacity)?.unwrap_or(spec.meta_capacity);
    spec.max_readers = spec_count(py, "max_readers", a.max_readers)?.unwrap_or(spec.max_readers);
    options.mode = spec_count(py, "permissions", a.permissions)?.unwrap_or(options.mode);
    Ok((spec, options))
}

/// A handle `_open()` opened, until a native stream class adopts it (`_opened=`): so that
/// `framebus.open` opens once and then picks the class (Stream or DeviceStream) of what it got.
#[pyclass(name = "_Opened", module = "framebus._native", frozen)]
pub struct PyOpened {
    handle: std::sync::Mutex<Option<Arc<framebus::Stream>>>,
    device: bool,
}

impl PyOpened {
    /// The opened handle, once; `device` says which class takes it.
    pub(crate) fn take(&self, py: Python<'_>, device: bool) -> PyResult<Arc<framebus::Stream>> {
        if device != self.device {
            let what = if self.device { "a device stream's handle goes to DeviceStream" } else { "a host stream's handle goes to Stream" };
            return Err(ErrorKind::InvalidArgument.err(py, (format!("_opened: {what}"),)));
        }
        self.handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| ErrorKind::InvalidArgument.err(py, ("_opened: this handle was already adopted".to_owned(),)))
    }
}

#[pymethods]
impl PyOpened {
    /// Whether the handle reaches a device stream's frames through the GPU (DeviceStream takes
    /// it); False for a host stream or a device stream's CPU mirror (Stream takes it).
    #[getter]
    fn device(&self) -> bool {
        self.device
    }
}

/// Opens the existing stream ``name`` in reader ``mode``; ``access`` ("auto", "device",
/// "host") says how a device stream is reached. The handle is adopted by ``Stream(name,
/// _opened=...)`` or ``DeviceStream(name, _opened=...)`` as its ``device`` says.
#[pyfunction]
#[pyo3(signature = (name, *, mode = "latest", access = "auto"))]
pub fn _open(py: Python<'_>, name: &str, mode: &str, access: &str) -> PyResult<PyOpened> {
    let access = match access {
        "auto" => framebus::ring::DeviceAccess::Auto,
        "device" => framebus::ring::DeviceAccess::Device,
        "host" => framebus::ring::DeviceAccess::Host,
        other => return Err(ErrorKind::InvalidArgument.err(py, (format!("access must be 'auto', 'device' or 'host', got {other:?}"),))),
    };
    let mode = reader_mode(py, mode)?;
    let stream = py.detach(|| framebus::Stream::open_with(name, mode, access)).map_err(CoreError)?;
    let device = stream.device_ordinal().is_some();
    Ok(PyOpened { handle: std::sync::Mutex::new(Some(Arc::new(stream))), device })
}

pub(crate) fn info_tuple<'py>(py: Python<'py>, arr: Bound<'py, PyAny>, info: Option<FrameRecord>) -> PyResult<Bound<'py, PyTuple>> {
    let (seq, ts, fid, meta) = info.unwrap_or_default();
    (arr, seq, ts, fid, PyBytes::new(py, &meta)).into_pyobject(py)
}

#[pymethods]
impl PyStream {
    /// Opens the host stream ``name`` as a ``mode`` reader (a device stream only through its CPU
    /// mirror: ``framebus.open`` gives a DeviceStream for the GPU), or with ``create=True``
    /// creates it from the keywords: ``shape`` (an int or a sequence of ints) and ``dtype``
    /// (anything ``numpy.dtype()`` takes), or ``capacity`` (an int of bytes: a variable-shape
    /// stream), and ``size``, a cross-check of a fixed shape's frame bytes. ``_opened`` adopts a
    /// handle ``_open()`` opened. The core checks every value and says what is wrong
    /// (spec_args.rs); unset counts take the core's defaults.
    #[new]
    #[pyo3(signature = (name, *, mode = "latest", create = false, shape = None, dtype = None, capacity = None, size = None, slots = None, meta_capacity = None, max_readers = None, permissions = None, exist_ok = false, _opened = None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        name: &str,
        mode: &str,
        create: bool,
        shape: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
        capacity: Option<&Bound<'_, PyAny>>,
        size: Option<&Bound<'_, PyAny>>,
        slots: Option<&Bound<'_, PyAny>>,
        meta_capacity: Option<&Bound<'_, PyAny>>,
        max_readers: Option<&Bound<'_, PyAny>>,
        permissions: Option<&Bound<'_, PyAny>>,
        exist_ok: bool,
        _opened: Option<&Bound<'_, PyOpened>>,
    ) -> PyResult<Self> {
        let stream = match _opened {
            Some(opened) => opened.get().take(py, false)?,
            None if create => {
                let (spec, options) = create_args(
                    py,
                    CreateArgs { shape, dtype, capacity, size, slots, meta_capacity, max_readers, permissions, exist_ok, device: None },
                )?;
                Arc::new(py.detach(|| framebus::Stream::create(name, &spec, &options)).map_err(CoreError)?)
            }
            None => {
                let mode = reader_mode(py, mode)?;
                let opened =
                    Arc::new(py.detach(|| framebus::Stream::open_with(name, mode, framebus::ring::DeviceAccess::Auto)).map_err(CoreError)?);
                if opened.device_ordinal().is_some() {
                    return Err(ErrorKind::InvalidArgument.err(py, (format!("stream {name:?} keeps its frames in GPU memory: open it with framebus.open({name:?}), which gives a DeviceStream"),)));
                }
                opened
            }
        };
        PyStream::wrap(py, name, Handle::Host(stream))
    }

    /// Stream name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Frame shape; None for a variable-shape stream (each frame has its own).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyTuple>> {
        (!self.is_variable()).then(|| self.spec.shape_tuple.bind(py).clone())
    }

    /// Frame dtype; None for a variable-shape stream (each frame has its own).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArrayDescr>> {
        (!self.is_variable()).then(|| self.spec.dtype.bind(py).clone())
    }

    /// Bytes per frame (for a variable-shape stream: the capacity, the most a frame may hold).
    #[getter]
    fn size(&self) -> usize {
        self.spec.frame_bytes
    }

    /// Bytes of arrays a frame of a variable-shape stream may hold; None for a fixed shape.
    #[getter]
    fn capacity(&self) -> Option<usize> {
        self.is_variable().then_some(self.spec.frame_bytes)
    }

    /// Whether each frame carries its own shape and dtype (created with a capacity).
    #[getter]
    fn variable(&self) -> bool {
        self.is_variable()
    }

    /// "cuda:N" for a device stream reached through its GPU; None for a host stream (and for a
    /// device stream opened for its CPU mirror: see `device_stream`).
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.handle(py)?.device_ordinal().map(|d| format!("cuda:{d}")))
    }

    /// The device a device stream's frames live on, as its creator numbered it ("cuda:N"),
    /// whether or not this handle reaches it; None for a host stream.
    #[getter]
    fn device_stream(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.handle(py)?.spec().device.map(|d| format!("cuda:{}", d.ordinal)))
    }

    /// Whether every frame of this device stream is also copied into host memory.
    #[getter]
    fn cpu_mirror(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.spec().device.is_some_and(|d| d.cpu_mirror))
    }

    /// Frames in the ring.
    #[getter]
    fn slots(&self) -> u32 {
        self.slots
    }

    /// Metadata bytes a frame can carry.
    #[getter]
    fn meta_capacity(&self) -> u32 {
        self.meta_capacity
    }

    /// "latest" or "lossless".
    #[getter]
    fn mode(&self) -> &'static str {
        match self.mode {
            ReaderMode::Latest => "latest",
            ReaderMode::Lossless => "lossless",
        }
    }

    /// Whether close() was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// Live handles attached to the stream, in all processes.
    #[getter]
    fn attached(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.handle(py)?.ownercount())
    }

    /// Sequence number of the newest frame (number of frames written; 0 before the first).
    #[getter]
    fn write_sequence(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.handle(py)?.latest_seq())
    }

    /// Wall-clock time (seconds since the epoch) of the newest frame; 0.0 before the first.
    #[getter]
    fn write_time(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.handle(py)?.latest_record().map_err(CoreError)?.1 as f64 / 1e9)
    }

    /// Frame id of the newest frame.
    #[getter]
    fn frame_id(&self, py: Python<'_>) -> PyResult<i64> {
        Ok(self.handle(py)?.latest_record().map_err(CoreError)?.2)
    }

    /// Sequence number of the newest frame this handle has read (or seen at open).
    #[getter]
    fn last_seq(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.handle(py)?.seen_seq())
    }

    /// Frames skipped just before the frame the last read_new returned (the gap before that one
    /// frame, in either mode); `total_missed` counts every frame this handle skipped.
    #[getter]
    fn missed(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.handle(py)?.missed().0)
    }

    /// Frames skipped by all read_new calls of this handle (latest mode: frames overtaken;
    /// lossless: frames reclaimed before the handle had a reader entry, such as a forked
    /// child's copy used after its reservation's grace).
    #[getter]
    fn total_missed(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.handle(py)?.missed().1)
    }

    /// Whether this handle came through fork() and has not been used in this process yet (its
    /// entry, pins and lock holds are still the parent's); False once closed. Never registers.
    #[getter]
    fn _inherited(&self) -> bool {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|s| s.is_inherited())
    }

    /// The last frame this handle consumed (lossless) or saw (latest), as this process knows
    /// it; None once closed. Never registers. A pickled copy resumes from here.
    #[getter]
    fn _position(&self) -> Option<u64> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|s| s.position())
    }

    /// Moves this freshly opened handle back to `seq` (see `_position`), so that it continues
    /// where the handle it was pickled from was.
    fn _resume(&self, py: Python<'_>, seq: u64) -> PyResult<()> {
        Ok(self.handle(py)?.resume_from(seq).map_err(CoreError)?)
    }

    /// Times this handle took over a write lock whose holder had died.
    #[getter]
    fn lock_recoveries(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.handle(py)?.lock_recoveries())
    }

    /// Pid of the process holding the write lock, or None.
    #[getter]
    fn lock_owner(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        Ok(self.handle(py)?.lock_holder())
    }

    /// Copies `value` into the next slot and publishes it, with the sequence number `seq` if
    /// given (it must be above the newest frame's).
    #[pyo3(signature = (value, *, frame_id = None, meta = None, timeout = None, timestamp_ns = None, seq = None, codec = None))]
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = frame_id_arg)] frame_id: Option<i64>,
        meta: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        timestamp_ns: Option<&Bound<'_, PyAny>>,
        seq: Option<&Bound<'_, PyAny>>,
        codec: Option<&str>,
    ) -> PyResult<()> {
        let (timestamp_ns, seq) = (unsigned(py, "timestamp_ns", timestamp_ns)?, unsigned(py, "seq", seq)?);
        let s = self.host(py)?;
        let meta = meta_of(py, meta)?;
        let info = FrameInfo { frame_id, meta: meta.as_slice(), timestamp_ns, seq };
        let deadline = deadline(py, timeout)?;
        let before = s.lock_recoveries();
        match &self.layout {
            Layout::Fixed => self.write_fixed(py, &s, value, &info, codec, deadline)?,
            Layout::Variable(v) => self.write_variable(py, v, &s, value, &info, codec, deadline)?,
        }
        self.warn_recovered(py, &s, before)
    }

    /// Writes a frame of a variable-shape stream given whole, table first, as `Frame._raw`
    /// shows it (a bridge's receiving end). The table is validated against this stream's
    /// capacity first (InvalidArgumentError naming the problem; nothing written). One copy.
    #[pyo3(signature = (data, *, frame_id = None, meta = None, timeout = None, timestamp_ns = None, seq = None))]
    #[allow(clippy::too_many_arguments)]
    fn _write_raw(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = frame_id_arg)] frame_id: Option<i64>,
        meta: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        timestamp_ns: Option<&Bound<'_, PyAny>>,
        seq: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (timestamp_ns, seq) = (unsigned(py, "timestamp_ns", timestamp_ns)?, unsigned(py, "seq", seq)?);
        let s = self.host(py)?;
        let buf = PyBuffer::<u8>::get(data)?;
        if !buf.is_c_contiguous() {
            return Err(PyTypeError::new_err("_write_raw takes a contiguous bytes-like object"));
        }
        let (ptr, len) = (DataPtr(buf.buf_ptr().cast()), buf.len_bytes());
        let meta = meta_of(py, meta)?;
        let info = FrameInfo { frame_id, meta: meta.as_slice(), timestamp_ns, seq };
        let deadline = deadline(py, timeout)?;
        let before = s.lock_recoveries();
        self.blocking(py, deadline, len >= DETACH_BYTES, |d, check| {
            // SAFETY: `buf` (alive for the whole call) exports `len` contiguous bytes at `ptr`.
            let bytes = unsafe { std::slice::from_raw_parts(ptr.get() as *const u8, len) };
            s.write_raw_frame(bytes, &info, d, check)
        })?;
        self.warn_recovered(py, &s, before)
    }

    /// Writes a frame of zeros.
    #[pyo3(signature = (*, timeout = None))]
    fn clear(&self, py: Python<'_>, #[pyo3(from_py_with = seconds)] timeout: Option<f64>) -> PyResult<()> {
        let s = self.host(py)?;
        let deadline = deadline(py, timeout)?;
        match &self.layout {
            Layout::Fixed => self.clear_fixed(py, &s, deadline),
            Layout::Variable(_) => self.clear_variable(py, &s, deadline),
        }
    }

    /// Copy of the newest frame (never waits).
    #[pyo3(signature = (*, out = None))]
    fn read<'py>(&self, py: Python<'py>, out: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.read_frame(py, false, out, None, false)?.0)
    }

    /// Copies the newest frame into `out` and returns `out`.
    #[pyo3(signature = (out))]
    fn read_into<'py>(&self, py: Python<'py>, out: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.read_frame(py, false, Some(out), None, false)?.0)
    }

    /// Waits for a frame newer than the last one this handle saw and returns a copy.
    #[pyo3(signature = (*, timeout = None, out = None))]
    fn read_new<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.read_frame(py, true, out, timeout, false)?.0)
    }

    /// (array, seq, timestamp_ns, frame_id, meta) of the newest frame, read together.
    #[pyo3(signature = (*, out = None))]
    fn _read_info<'py>(&self, py: Python<'py>, out: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyTuple>> {
        let (arr, info) = self.read_frame(py, false, out, None, true)?;
        info_tuple(py, arr, info)
    }

    /// (array, seq, timestamp_ns, frame_id, meta) of the next new frame.
    #[pyo3(signature = (*, timeout = None, out = None))]
    fn _read_new_info<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (arr, info) = self.read_frame(py, true, out, timeout, true)?;
        info_tuple(py, arr, info)
    }

    /// Waits until a frame newer than the last one this handle saw exists; returns its sequence.
    #[pyo3(signature = (*, timeout = None))]
    fn wait(&self, py: Python<'_>, #[pyo3(from_py_with = seconds)] timeout: Option<f64>) -> PyResult<u64> {
        let s = self.handle(py)?;
        let deadline = deadline(py, timeout)?;
        let after = s.seen_seq();
        self.blocking(py, deadline, false, |d, check| s.wait_for(after, d, check))
    }

    /// Zero-copy read-only view of the newest frame (waits for the first frame of an empty
    /// stream, up to `timeout`).
    #[pyo3(signature = (timeout = None))]
    fn view(&self, py: Python<'_>, #[pyo3(from_py_with = seconds)] timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        let s = self.host(py)?;
        let deadline = deadline(py, timeout)?;
        let pinned = self.pin_newest(py, &s, deadline)?;
        self.frame_view(py, &s, pinned)
    }

    /// Zero-copy view of the next frame this handle has not seen (read_new semantics).
    #[pyo3(signature = (timeout = None))]
    fn wait_view(&self, py: Python<'_>, #[pyo3(from_py_with = seconds)] timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        let s = self.host(py)?;
        let deadline = deadline(py, timeout)?;
        let pinned = self.pin_next(py, &s, deadline)?;
        self.frame_view(py, &s, pinned)
    }

    /// Zero-copy view of frame `seq` if the ring still holds it, else None (see docs in the stub).
    #[pyo3(signature = (seq))]
    fn view_seq(&self, py: Python<'_>, seq: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        let s = self.host(py)?;
        match self.pin_seq(py, &s, seq)? {
            Some(pinned) => self.frame_view(py, &s, pinned).map(Some),
            None => Ok(None),
        }
    }

    /// A writable array in the next free slot, published on commit / clean `with` exit.
    #[pyo3(signature = (timeout = None, *, frame_id = None, meta = None, timestamp_ns = None, seq = None, shape = None, dtype = None, nbytes = None, arrays = None, codec = None))]
    #[allow(clippy::too_many_arguments)]
    fn loan(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        #[pyo3(from_py_with = frame_id_arg)] frame_id: Option<i64>,
        meta: Option<&Bound<'_, PyAny>>,
        timestamp_ns: Option<&Bound<'_, PyAny>>,
        seq: Option<&Bound<'_, PyAny>>,
        shape: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
        nbytes: Option<&Bound<'_, PyAny>>,
        arrays: Option<&Bound<'_, PyAny>>,
        codec: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let (timestamp_ns, seq) = (unsigned(py, "timestamp_ns", timestamp_ns)?, unsigned(py, "seq", seq)?);
        let s = self.host(py)?;
        let meta = meta_of(py, meta)?.as_slice().to_vec();
        let values = LoanValues { frame_id, meta, timestamp_ns, seq };
        let deadline = deadline(py, timeout)?;
        match &self.layout {
            Layout::Fixed => Ok(self.loan_fixed(py, &s, (shape, dtype, nbytes, arrays), codec, values, deadline)?.into_any()),
            Layout::Variable(v) => {
                let layout = self.loan_table(py, v, &s, (shape, dtype, nbytes, arrays), codec)?;
                Ok(self.loan_variable(py, &s, layout, values, deadline)?.into_any())
            }
        }
    }

    /// Tags this handle for monitors (`framebus top`): `role` is one of "handle", "bridge out",
    /// "bridge in", "record", "play", "monitor"; `label` a short text (cut at 48 bytes).
    #[pyo3(signature = (role, label = ""))]
    fn set_role(&self, py: Python<'_>, role: &str, label: &str) -> PyResult<()> {
        use framebus::ring::layout::role as r;
        let value = match role {
            "handle" => r::HANDLE,
            "bridge out" => r::BRIDGE_OUT,
            "bridge in" => r::BRIDGE_IN,
            "record" => r::RECORD,
            "play" => r::PLAY,
            "monitor" => r::MONITOR,
            "writer" => r::WRITER,
            other => {
                return Err(PyErr::from_type(
                    ErrorKind::InvalidArgument.class(py)?,
                    (format!(
                        "role must be one of 'handle', 'bridge out', 'bridge in', 'record', 'play', 'monitor', 'writer', got {other:?}"
                    ),),
                ))
            }
        };
        self.handle(py)?.set_role(value, label);
        Ok(())
    }

    /// This handle's role as monitors show it: what set_role tagged it, or "writer" once it
    /// took the write lock (its first write, loan or clear).
    #[getter]
    fn role(&self, py: Python<'_>) -> PyResult<String> {
        Ok(framebus::ring::monitor::role_name(self.handle(py)?.role()))
    }

    /// Live handles of this stream (this handle's segment, whatever its name now points to)
    /// other than this one that write it and are not closed.
    fn _other_writers(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.handle(py)?.other_writers())
    }

    /// Ends the stream: readers blocked in read_new/wait_view/wait wake at once; each gets the
    /// frames it has not read yet (lossless), then StreamEndedError. A later write clears it.
    fn end(&self, py: Python<'_>) -> PyResult<()> {
        self.handle(py)?.end();
        Ok(())
    }

    /// Whether the writer ended the stream (and has not written since).
    #[getter]
    fn ended(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.is_ended())
    }

    /// Waits until a frame newer than `after` exists; returns the newest sequence.
    #[pyo3(signature = (after, *, timeout = None))]
    fn wait_after(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = after_arg)] after: u64,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
    ) -> PyResult<u64> {
        let s = self.handle(py)?;
        let deadline = deadline(py, timeout)?;
        self.blocking(py, deadline, false, |d, check| s.wait_for(after, d, check))
    }

    /// Takes the cross-process write lock (re-entrant for the calling thread).
    #[pyo3(signature = (timeout = None))]
    fn acquire(&self, py: Python<'_>, #[pyo3(from_py_with = seconds)] timeout: Option<f64>) -> PyResult<()> {
        let s = self.handle(py)?;
        let deadline = deadline(py, timeout)?;
        let before = s.lock_recoveries();
        self.blocking(py, deadline, false, |d, check| s.acquire(d, check))?;
        if let Err(e) = self.warn_recovered(py, &s, before) {
            let _ = s.release();
            return Err(e);
        }
        Ok(())
    }

    /// Releases one level of the calling thread's write lock.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.handle(py)?.release().map_err(|e| CoreError(e).into())
    }

    /// Whether the calling thread holds the write lock.
    fn lock_held(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.lock_held())
    }

    /// Removes the stream's name (if it still names this handle's segment); handles stay usable.
    fn unlink(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.unlink().map_err(CoreError)?)
    }

    /// Detaches this handle; idempotent. Memory stays mapped while views of it are alive.
    fn close(&self) {
        let taken = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        // A handle inherited through fork() and never used here: its holds and its entry are
        // the parent's, not this process's to release.
        if let Some(s) = taken.as_ref().filter(|s| !s.is_inherited()) {
            // Views may keep the core handle alive; neither the write lock nor the writer (a
            // lossless handle's backpressure) may wait for them: only their pins remain.
            s.release_all_holds();
            s.end_backpressure();
        }
        drop(taken);
    }
}
