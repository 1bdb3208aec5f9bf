//! The device half of `framebus._native.Stream`: streams whose frames live in GPU memory
//! (`Layout::Device`). A write copies device-to-device (or uploads a NumPy array) on the
//! caller's CUDA stream; a view hands out the slot's memory (DeviceFrame); a read copies into
//! `out` or a new DeviceArray; a loan hands out the slot to render into (DeviceLoan). Every CUDA
//! call goes through the core's door, so all of this runs against the fake in CI.

use std::sync::Arc;

use framebus::ring::{Dest, Source};
use framebus::{Deadline, FrameInfo};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::array::data_ptr;
use crate::device_array::{core, PyDeviceArray};
use crate::device_frame::PyDeviceFrame;
use crate::device_loan::PyDeviceLoan;
use crate::dlpack::{self, ArrayRef};
use crate::errors::ErrorKind;
use crate::loan::LoanValues;
use crate::stream::{FrameRecord, PyStream};

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

impl PyStream {
    /// What `value` is, checked against the stream's shape, dtype and device.
    fn device_input<'py>(&self, py: Python<'py>, s: &framebus::Stream, value: &Bound<'py, PyAny>, stream: Option<u64>, what: &str) -> PyResult<Input<'py>> {
        let dev = s.device_slots().map_err(core)?;
        let array = match dlpack::from_cuda_array_interface(value)? {
            Some(a) => Some(a),
            None if value.cast::<numpy::PyUntypedArray>().is_err() => dlpack::from_dlpack(value, stream)?.filter(|a| a.device.is_some()),
            None => None,
        };
        let Some(mut a) = array else {
            return Ok(Input::Host(self.spec.source(py, &self.name, value)?));
        };
        let want = normal_dtype(&s.spec().dtype);
        if a.shape != self.spec.shape[..] || normal_dtype(&a.dtype) != want {
            return Err(ErrorKind::InvalidArgument.err(py, (format!(
                "stream {:?} takes frames of shape {:?} and dtype {}; {what} has shape {:?} and dtype {} (device arrays are not converted: reshape or cast it first)",
                self.name, &self.spec.shape[..], self.spec.dtype.bind(py), a.shape, a.dtype
            ),)));
        }
        if !a.contiguous {
            return Err(ErrorKind::InvalidArgument.err(py, (format!("{what} is not C-contiguous; pass a contiguous copy (tensor.contiguous(), cupy.ascontiguousarray)"),)));
        }
        let on = dev.door().pointer_device(a.ptr).map_err(|e| ErrorKind::Device.err(py, (e.to_string(),)))?;
        match on {
            Some(d) if d == dev.device() => {}
            Some(d) => {
                return Err(ErrorKind::InvalidArgument.err(py, (format!("{what} is on cuda:{d}, stream {:?} on cuda:{}: copy it there first (tensor.to('cuda:{}'))", self.name, dev.device(), dev.device()),)))
            }
            None => return Err(ErrorKind::InvalidArgument.err(py, (format!("{what} is not in GPU memory the CUDA driver knows (its pointer {:#x})", a.ptr),))),
        }
        a.device = Some(dev.device());
        Ok(Input::Device(a))
    }

    /// Writes `value` into a device stream on `stream` (see the module documentation).
    pub(crate) fn write_device(&self, py: Python<'_>, s: &Arc<framebus::Stream>, value: &Bound<'_, PyAny>, info: &FrameInfo<'_>, stream: Option<u64>, deadline: Deadline) -> PyResult<()> {
        let input = self.device_input(py, s, value, stream, "the value")?;
        let (source, cuda_stream) = match &input {
            Input::Device(a) => (SourcePtr(a.ptr, true), stream.or(a.stream).unwrap_or(0)),
            Input::Host(arr) => (SourcePtr(data_ptr(arr).get() as u64, false), stream.unwrap_or(0)),
        };
        self.blocking(py, deadline, true, |d, check| {
            let src = if source.1 { Source::Device(source.0) } else { Source::Host(source.0 as *const u8) };
            s.write_device(src, cuda_stream, info, d, check)
        })?;
        drop(input);
        Ok(())
    }

    /// A copy of the newest (or next new) frame into `out` (a device array of the stream's
    /// device, or a NumPy array: downloaded) or a new DeviceArray.
    pub(crate) fn read_device<'py>(&self, py: Python<'py>, new: bool, out: Option<&Bound<'py, PyAny>>, timeout: Option<f64>, with_info: bool, stream: Option<u64>) -> PyResult<(Bound<'py, PyAny>, Option<FrameRecord>)> {
        let s = self.handle(py)?;
        let deadline = crate::args::deadline(py, timeout)?;
        let (target, result, cuda_stream): (DestPtr, Bound<'py, PyAny>, u64) = match out {
            Some(o) if o.cast::<numpy::PyUntypedArray>().is_ok() => {
                let arr = self.spec.destination(py, &self.name, o)?;
                (DestPtr(data_ptr(&arr).get() as u64, false), arr.into_any(), stream.unwrap_or(0))
            }
            Some(o) => match self.device_input(py, &s, o, stream, "out")? {
                Input::Device(a) if a.readonly => return Err(PyValueError::new_err("out is read-only")),
                Input::Device(a) => (DestPtr(a.ptr, true), o.clone(), stream.or(a.stream).unwrap_or(0)),
                Input::Host(_) => {
                    let arr = self.spec.destination(py, &self.name, o)?;
                    (DestPtr(data_ptr(&arr).get() as u64, false), arr.into_any(), stream.unwrap_or(0))
                }
            },
            None => {
                let dev = s.device_slots().map_err(core)?;
                let fresh = PyDeviceArray::allocate(py, dev.device(), &s.spec().dtype, &s.spec().shape)?;
                let cuda_stream = stream.unwrap_or(0);
                *fresh.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(cuda_stream);
                let ptr = fresh.ptr();
                (DestPtr(ptr, true), Bound::new(py, fresh)?.into_any(), cuda_stream)
            }
        };
        let pinned = match new {
            true => self.blocking(py, deadline, false, |d, check| s.wait_pinned(d, check)).map_err(|e| self.owner_gone_instead(py, &s, e))?,
            false => s.pin_latest().map_err(core)?,
        };
        let record = with_info.then(|| {
            let f = pinned.frame();
            (f.seq, f.timestamp_ns, f.frame_id, f.meta.to_vec())
        });
        let slot = pinned.slot();
        py.detach(|| {
            let dst = if target.1 { Dest::Device(target.0) } else { Dest::Host(target.0 as *mut u8) };
            s.read_device_into(slot, dst, cuda_stream)
        })
        .map_err(core)?;
        drop(pinned);
        Ok((result, record))
    }

    /// A zero-copy view of a pinned frame of a device stream.
    pub(crate) fn view_device(&self, py: Python<'_>, s: &framebus::Stream, pinned: framebus::Pinned, stream: Option<u64>) -> PyResult<PyDeviceFrame> {
        PyDeviceFrame::new(py, &self.name, &self.spec, &s.spec().dtype, pinned, stream.unwrap_or(0))
    }

    /// A loan of the next free slot of a device stream, its `stream` ordered after the readers.
    pub(crate) fn loan_device(&self, py: Python<'_>, s: &Arc<framebus::Stream>, values: LoanValues, deadline: Deadline, stream: Option<u64>) -> PyResult<Py<PyAny>> {
        let cuda_stream = stream.unwrap_or(0);
        let guard = self.blocking(py, deadline, false, |d, check| s.begin_loan(d, check))?;
        py.detach(|| guard.device_prepare(cuda_stream)).map_err(core)?;
        let loan = PyDeviceLoan::new(py, &self.name, &self.spec, &s.spec().dtype, guard, cuda_stream, values)?;
        Ok(Bound::new(py, loan)?.into_any().unbind())
    }

    /// InvalidArgumentError for `stream=` on a host stream.
    pub(crate) fn refuse_cuda_stream(&self, py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
        match stream {
            None => Ok(()),
            Some(_) => Err(ErrorKind::InvalidArgument.err(py, (format!("stream {:?} is a host stream: stream= (a CUDA stream) applies to device streams only", self.name),))),
        }
    }
}

/// (address, is device memory) of a write's source, movable into a GIL-detached closure.
#[derive(Clone, Copy)]
struct SourcePtr(u64, bool);
/// (address, is device memory) of a read's destination.
#[derive(Clone, Copy)]
struct DestPtr(u64, bool);
