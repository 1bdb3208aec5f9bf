//! `framebus._native.DeviceStream`: a handle on a device stream (frames in GPU memory), a
//! subclass of the native Stream whose ring operations (waits, the write lock, the end, the
//! counters) it inherits. Its own methods take a CUDA `stream=` and wrap the core's
//! `framebus::DeviceStream`: a write copies device-to-device (or uploads a NumPy array) on the
//! caller's CUDA stream; a view hands out the slot's memory (DeviceFrame); a read copies into
//! `out` or a new DeviceArray; a loan hands out the slot to render into (DeviceLoan). Only
//! arguments are converted here: every CUDA call is the core's.

use framebus::ring::{Dest, Source};
use framebus::{Deadline, DeviceStream, FrameInfo};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::PyTuple;

use crate::args::{deadline, frame_id_arg, meta_of, seconds, unsigned};
use crate::array::data_ptr;
use crate::device_array::PyDeviceArray;
use crate::device_frame::PyDeviceFrame;
use crate::device_loan::PyDeviceLoan;
use crate::dlpack::{self, stream_arg, ArrayRef};
use crate::errors::{CoreError, ErrorKind};
use crate::loan::LoanValues;
use crate::stream::{create_args, info_tuple, reader_mode, CreateArgs, FrameRecord, Handle, PyOpened, PyStream};

/// One handle on a device stream (see `framebus.DeviceStream` for the documented API).
#[pyclass(name = "DeviceStream", module = "framebus._native", extends = PyStream, subclass, frozen)]
pub struct PyDeviceStream {
    /// This process's CUDA ordinal of the stream's device. A field of its own also makes the
    /// class lay its objects out beyond the base's, so a Python class deriving from both
    /// `framebus.Stream` and this one gets this class's layout and constructor.
    ordinal: u32,
}

/// A dtype string with the byte order spelled one way (`|` for one byte, `<` for native
/// little-endian), so `<u1`, `|u1` and `=f4`/`<f4` compare equal.
fn normal_dtype(dtype: &str) -> String {
    let (order, rest) = dtype.split_at(dtype.len().min(1));
    let size: usize = rest.get(1..).and_then(|s| s.parse().ok()).unwrap_or(0);
    match order {
        _ if size == 1 => format!("|{rest}"),
        "=" | "<" => format!("<{rest}"),
        _ => dtype.to_owned(),
    }
}

/// Where a value written into a device stream is: device memory (with the array reference that
/// keeps a DLPack producer's tensor until the call is done) or a host array.
enum Input<'py> {
    Device(ArrayRef),
    Host(Bound<'py, numpy::PyUntypedArray>),
}

/// (address, is device memory) of a write's source or a read's destination, movable into a
/// GIL-detached closure.
#[derive(Clone, Copy)]
struct Place(u64, bool);

impl PyStream {
    /// What `value` is, checked against the stream's shape and dtype (here) and device (the core).
    fn device_input<'py>(
        &self,
        py: Python<'py>,
        ds: &DeviceStream,
        value: &Bound<'py, PyAny>,
        stream: Option<u64>,
        what: &str,
    ) -> PyResult<Input<'py>> {
        let array = match dlpack::from_cuda_array_interface(value)? {
            Some(a) => Some(a),
            None if value.cast::<numpy::PyUntypedArray>().is_err() => dlpack::from_dlpack(value, stream)?.filter(|a| a.device.is_some()),
            None => None,
        };
        let Some(mut a) = array else {
            return Ok(Input::Host(self.spec.source(py, &self.name, value)?));
        };
        let want = normal_dtype(&ds.ring().spec().dtype);
        if a.shape != self.spec.shape[..] || normal_dtype(&a.dtype) != want {
            return Err(ErrorKind::InvalidArgument.err(py, (format!(
                "stream {:?} takes frames of shape {:?} and dtype {}; {what} has shape {:?} and dtype {} (device arrays are not converted: reshape or cast it first)",
                self.name, &self.spec.shape[..], self.spec.dtype.bind(py), a.shape, a.dtype
            ),)));
        }
        if !a.contiguous {
            return Err(ErrorKind::InvalidArgument
                .err(py, (format!("{what} is not C-contiguous; pass a contiguous copy (tensor.contiguous(), cupy.ascontiguousarray)"),)));
        }
        py.detach(|| ds.check_device_memory(a.ptr, what)).map_err(CoreError)?;
        a.device = Some(ds.device());
        Ok(Input::Device(a))
    }

    /// Writes `value` into a device stream on `stream` (see the module documentation).
    fn write_device(
        &self,
        py: Python<'_>,
        ds: &DeviceStream,
        value: &Bound<'_, PyAny>,
        info: &FrameInfo<'_>,
        stream: Option<u64>,
        deadline: Deadline,
    ) -> PyResult<()> {
        let input = self.device_input(py, ds, value, stream, "the value")?;
        let (source, cuda_stream) = match &input {
            Input::Device(a) => (Place(a.ptr, true), stream.or(a.stream).unwrap_or(0)),
            Input::Host(arr) => (Place(data_ptr(arr).get() as u64, false), stream.unwrap_or(0)),
        };
        let before = ds.ring().lock_recoveries();
        self.blocking(py, deadline, true, |d, check| {
            let src = if source.1 { Source::Device(source.0) } else { Source::Host(source.0 as *const u8) };
            ds.write(src, cuda_stream, info, d, check)
        })?;
        drop(input);
        self.warn_recovered(py, ds.ring(), before)
    }

    /// A copy of the newest (or next new) frame into `out` (a device array of the stream's
    /// device, or a NumPy array: downloaded) or a new DeviceArray.
    fn read_device<'py>(
        &self,
        py: Python<'py>,
        new: bool,
        out: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
        with_info: bool,
        stream: Option<u64>,
    ) -> PyResult<(Bound<'py, PyAny>, Option<FrameRecord>)> {
        let ds = self.device_handle(py)?;
        let s = ds.ring();
        let deadline = deadline(py, timeout)?;
        let (target, result, cuda_stream): (Place, Bound<'py, PyAny>, u64) = match out {
            Some(o) if o.cast::<numpy::PyUntypedArray>().is_ok() => {
                let arr = self.spec.destination(py, &self.name, o)?;
                (Place(data_ptr(&arr).get() as u64, false), arr.into_any(), stream.unwrap_or(0))
            }
            Some(o) => match self.device_input(py, &ds, o, stream, "out")? {
                Input::Device(a) if a.readonly => return Err(PyValueError::new_err("out is read-only")),
                Input::Device(a) => (Place(a.ptr, true), o.clone(), stream.or(a.stream).unwrap_or(0)),
                Input::Host(_) => {
                    let arr = self.spec.destination(py, &self.name, o)?;
                    (Place(data_ptr(&arr).get() as u64, false), arr.into_any(), stream.unwrap_or(0))
                }
            },
            None => {
                let cuda_stream = stream.unwrap_or(0);
                let fresh = PyDeviceArray::wrap(py, py.detach(|| ds.new_buffer()).map_err(CoreError)?, &s.spec().dtype, &s.spec().shape)?;
                fresh.buffer.set_pending(cuda_stream);
                let ptr = fresh.buffer.ptr();
                (Place(ptr, true), Bound::new(py, fresh.init(py))?.into_any(), cuda_stream)
            }
        };
        let pinned = match new {
            true => self.pin_next(py, s, deadline)?,
            false => s.pin_latest().map_err(CoreError)?,
        };
        let record = with_info.then(|| {
            let f = pinned.frame();
            (f.seq, f.timestamp_ns, f.frame_id, f.meta.to_vec())
        });
        py.detach(|| {
            let dst = if target.1 { Dest::Device(target.0) } else { Dest::Host(target.0 as *mut u8) };
            ds.read_into(&pinned, dst, cuda_stream)
        })
        .map_err(CoreError)?;
        drop(pinned);
        Ok((result, record))
    }

    /// A zero-copy view of a pinned frame of a device stream.
    fn view_device(&self, py: Python<'_>, ds: &DeviceStream, pinned: framebus::Pinned, stream: Option<u64>) -> PyResult<Py<PyAny>> {
        let frame = PyDeviceFrame::new(py, &self.name, &self.spec, &ds.ring().spec().dtype, ds, pinned, stream.unwrap_or(0))?;
        Ok(Bound::new(py, frame)?.into_any().unbind())
    }
}

/// The base handle of a DeviceStream.
fn base<'a>(slf: &'a Bound<'_, PyDeviceStream>) -> &'a PyStream {
    slf.as_super().get()
}

#[pymethods]
impl PyDeviceStream {
    /// Opens the device stream ``name`` through its GPU as a ``mode`` reader, or with
    /// ``create=True`` creates it on CUDA device ``device`` (the keywords of ``Stream``, and
    /// ``cpu_mirror`` to keep a copy of every frame in host memory). ``_opened`` adopts a
    /// handle ``_open()`` opened.
    #[new]
    #[pyo3(signature = (name, *, mode = "latest", create = false, shape = None, dtype = None, capacity = None, size = None, slots = None, meta_capacity = None, max_readers = None, permissions = None, exist_ok = false, device = 0, cpu_mirror = false, _opened = None))]
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
        device: u32,
        cpu_mirror: bool,
        _opened: Option<&Bound<'_, PyOpened>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let handle = match _opened {
            Some(opened) => DeviceStream::from_ring(opened.get().take(py, true)?).map_err(CoreError)?,
            None if create => {
                let device = Some(framebus::ring::DeviceSpec { ordinal: device, cpu_mirror });
                let (spec, options) = create_args(
                    py,
                    CreateArgs { shape, dtype, capacity, size, slots, meta_capacity, max_readers, permissions, exist_ok, device },
                )?;
                py.detach(|| DeviceStream::create(name, &spec, &options)).map_err(CoreError)?
            }
            None => {
                let mode = reader_mode(py, mode)?;
                py.detach(|| DeviceStream::open(name, mode)).map_err(CoreError)?
            }
        };
        let ordinal = handle.device();
        Ok(PyClassInitializer::from(PyStream::wrap(py, name, Handle::Device(handle))?).add_subclass(PyDeviceStream { ordinal }))
    }

    /// "cuda:N": this process's ordinal of the stream's device.
    #[getter]
    fn device(slf: &Bound<'_, Self>) -> PyResult<String> {
        base(slf).handle(slf.py())?;
        Ok(format!("cuda:{}", slf.get().ordinal))
    }

    /// Copies `value` into the next slot on the CUDA `stream` and publishes it (see the stub).
    #[pyo3(signature = (value, *, frame_id = None, meta = None, timeout = None, timestamp_ns = None, seq = None, stream = None))]
    #[allow(clippy::too_many_arguments)]
    fn write(
        slf: &Bound<'_, Self>,
        value: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = frame_id_arg)] frame_id: Option<i64>,
        meta: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        timestamp_ns: Option<&Bound<'_, PyAny>>,
        seq: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (py, this) = (slf.py(), base(slf));
        let stream = stream_arg(stream)?;
        let (timestamp_ns, seq) = (unsigned(py, "timestamp_ns", timestamp_ns)?, unsigned(py, "seq", seq)?);
        let ds = this.device_handle(py)?;
        let meta = meta_of(py, meta)?;
        let info = FrameInfo { frame_id, meta: meta.as_slice(), timestamp_ns, seq };
        let deadline = deadline(py, timeout)?;
        this.write_device(py, &ds, value, &info, stream, deadline)
    }

    /// Writes a frame of zeros (uploaded).
    #[pyo3(signature = (*, timeout = None))]
    fn clear(slf: &Bound<'_, Self>, #[pyo3(from_py_with = seconds)] timeout: Option<f64>) -> PyResult<()> {
        let (py, this) = (slf.py(), base(slf));
        let ds = this.device_handle(py)?;
        let deadline = deadline(py, timeout)?;
        let zeros = this.spec.zeros(py)?;
        let info = FrameInfo { frame_id: Some(0), ..FrameInfo::default() };
        this.write_device(py, &ds, zeros.as_any(), &info, None, deadline)
    }

    /// Copy of the newest frame (never waits).
    #[pyo3(signature = (*, out = None, stream = None))]
    fn read<'py>(
        slf: &Bound<'py, Self>,
        out: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(base(slf).read_device(slf.py(), false, out, None, false, stream_arg(stream)?)?.0)
    }

    /// Copies the newest frame into `out` and returns `out`.
    #[pyo3(signature = (out, *, stream = None))]
    fn read_into<'py>(slf: &Bound<'py, Self>, out: &Bound<'py, PyAny>, stream: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        Ok(base(slf).read_device(slf.py(), false, Some(out), None, false, stream_arg(stream)?)?.0)
    }

    /// Waits for a frame newer than the last one this handle saw and returns a copy.
    #[pyo3(signature = (*, timeout = None, out = None, stream = None))]
    fn read_new<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        out: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(base(slf).read_device(slf.py(), true, out, timeout, false, stream_arg(stream)?)?.0)
    }

    /// (array, seq, timestamp_ns, frame_id, meta) of the newest frame, read together.
    #[pyo3(signature = (*, out = None, stream = None))]
    fn _read_info<'py>(
        slf: &Bound<'py, Self>,
        out: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (arr, info) = base(slf).read_device(slf.py(), false, out, None, true, stream_arg(stream)?)?;
        info_tuple(slf.py(), arr, info)
    }

    /// (array, seq, timestamp_ns, frame_id, meta) of the next new frame.
    #[pyo3(signature = (*, timeout = None, out = None, stream = None))]
    fn _read_new_info<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        out: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (arr, info) = base(slf).read_device(slf.py(), true, out, timeout, true, stream_arg(stream)?)?;
        info_tuple(slf.py(), arr, info)
    }

    /// Zero-copy DeviceFrame of the newest frame (waits for the first frame of an empty stream,
    /// up to `timeout`).
    #[pyo3(signature = (timeout = None, *, stream = None))]
    fn view(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let (py, this) = (slf.py(), base(slf));
        let stream = stream_arg(stream)?;
        let ds = this.device_handle(py)?;
        let deadline = deadline(py, timeout)?;
        let pinned = this.pin_newest(py, ds.ring(), deadline)?;
        this.view_device(py, &ds, pinned, stream)
    }

    /// Zero-copy DeviceFrame of the next frame this handle has not seen.
    #[pyo3(signature = (timeout = None, *, stream = None))]
    fn wait_view(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let (py, this) = (slf.py(), base(slf));
        let stream = stream_arg(stream)?;
        let ds = this.device_handle(py)?;
        let deadline = deadline(py, timeout)?;
        let pinned = this.pin_next(py, ds.ring(), deadline)?;
        this.view_device(py, &ds, pinned, stream)
    }

    /// Zero-copy DeviceFrame of frame `seq` if the ring still holds it, else None.
    #[pyo3(signature = (seq, *, stream = None))]
    fn view_seq(slf: &Bound<'_, Self>, seq: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let (py, this) = (slf.py(), base(slf));
        let stream = stream_arg(stream)?;
        let ds = this.device_handle(py)?;
        match this.pin_seq(py, ds.ring(), seq)? {
            Some(pinned) => this.view_device(py, &ds, pinned, stream).map(Some),
            None => Ok(None),
        }
    }

    /// The next free slot as a DeviceLoan, its CUDA `stream` ordered after the readers' work.
    #[pyo3(signature = (timeout = None, *, frame_id = None, meta = None, timestamp_ns = None, seq = None, stream = None))]
    #[allow(clippy::too_many_arguments)]
    fn loan(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = seconds)] timeout: Option<f64>,
        #[pyo3(from_py_with = frame_id_arg)] frame_id: Option<i64>,
        meta: Option<&Bound<'_, PyAny>>,
        timestamp_ns: Option<&Bound<'_, PyAny>>,
        seq: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let (py, this) = (slf.py(), base(slf));
        let cuda_stream = stream_arg(stream)?.unwrap_or(0);
        let (timestamp_ns, seq) = (unsigned(py, "timestamp_ns", timestamp_ns)?, unsigned(py, "seq", seq)?);
        let ds = this.device_handle(py)?;
        let meta = meta_of(py, meta)?.as_slice().to_vec();
        let values = LoanValues { frame_id, meta, timestamp_ns, seq };
        let deadline = deadline(py, timeout)?;
        let loan = this.blocking(py, deadline, false, |d, check| ds.begin_loan(d, check))?;
        py.detach(|| loan.order_after_readers(cuda_stream)).map_err(CoreError)?;
        let loan = PyDeviceLoan::new(py, &this.name, &this.spec, &ds.ring().spec().dtype, loan, cuda_stream, values);
        Ok(Bound::new(py, loan)?.into_any().unbind())
    }
}
