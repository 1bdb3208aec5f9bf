//! The fixed-shape half of `framebus._native.Stream`: every frame has the stream's shape and
//! dtype, so a write is one copy of a checked array into a slot, a read one copy out, a loan
//! the slot itself as an array. `stream.rs` calls in here only for streams created with a shape
//! (its `Layout::Fixed`); stream_variable.rs is the other half.

use std::sync::Arc;

use framebus::{Deadline, FrameInfo};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray};
use pyo3::prelude::*;

use crate::args::deadline;
use crate::array::{data_ptr, DataPtr};
use crate::errors::{CoreError, ErrorKind};
use crate::frame_arrays::LoanArgs;
use crate::loan::{LoanValues, PyLoan};
use crate::stream::{FrameRecord, PyStream, DETACH_BYTES};

impl PyStream {
    /// Copies `value` (an array of the stream's shape; dtypes convert as `_convert` documents)
    /// into the next slot. The core's write checks the frame (size, metadata, sequence number)
    /// before it claims a slot: nothing is checked twice here.
    pub(crate) fn write_fixed(
        &self,
        py: Python<'_>,
        s: &Arc<framebus::Stream>,
        value: &Bound<'_, PyAny>,
        info: &FrameInfo<'_>,
        codec: Option<&str>,
        deadline: Deadline,
    ) -> PyResult<()> {
        self.refuse_layout(py, codec.is_some(), "codec=")?;
        let src = self.spec.source(py, &self.name, value)?;
        let len = self.spec.frame_bytes;
        let ptr: DataPtr = data_ptr(&src);
        self.blocking(py, deadline, len >= DETACH_BYTES, |d, check| {
            // SAFETY: ptr points to `len` bytes of a C-contiguous array kept alive by `src`.
            let data = unsafe { std::slice::from_raw_parts(ptr.get(), len) };
            s.write(data, info, d, check)
        })?;
        Ok(())
    }

    /// Writes a frame of zeros (frame id 0).
    pub(crate) fn clear_fixed(&self, py: Python<'_>, s: &Arc<framebus::Stream>, deadline: Deadline) -> PyResult<()> {
        self.blocking(py, deadline, true, |d, check| {
            let mut guard = s.begin_write(d, check)?;
            guard.payload_mut().fill(0);
            guard.commit(&FrameInfo { frame_id: Some(0), ..FrameInfo::default() })
        })?;
        Ok(())
    }

    /// Copies the newest frame (or the next new one) into `out` (or a new array); returns the
    /// array and (seq, timestamp_ns, frame_id, meta) when `with_info`. Before the first frame,
    /// `read` raises StreamEmptyError (`framebus.pyshmem` turns that into pyshmem's zeros).
    pub(crate) fn read_fixed<'py>(
        &self,
        py: Python<'py>,
        new: bool,
        out: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
        with_info: bool,
    ) -> PyResult<(Bound<'py, PyUntypedArray>, Option<FrameRecord>)> {
        let s = self.host(py)?;
        let deadline = deadline(py, timeout)?;
        let arr = match out {
            Some(o) => self.spec.destination(py, &self.name, o)?,
            None => self.spec.empty(py)?,
        };
        let dst = data_ptr(&arr);
        let len = self.spec.frame_bytes;
        let heavy = len >= DETACH_BYTES;
        let copy = move |f: &framebus::FrameRef<'_>| {
            let n = f.payload.len().min(len);
            // SAFETY: dst points to a C-contiguous buffer of `len` bytes kept alive by `arr`
            // for the whole call, which nothing else borrows meanwhile; n <= len.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.get(), n) };
            framebus::copy::copy_out(out, &f.payload[..n]);
            with_info.then(|| (f.seq, f.timestamp_ns, f.frame_id, f.meta.to_vec()))
        };
        let info = if new {
            self.blocking(py, deadline, heavy, |d, check| s.read_new(d, check, copy))?
        } else {
            let r = if heavy { py.detach(|| s.read_latest(copy)) } else { s.read_latest(copy) };
            r.map_err(CoreError)?
        };
        Ok((arr, info))
    }

    /// The next free slot as a writable array of the stream's shape and dtype; `shape=`/`dtype=`,
    /// when given, must be the stream's, and per-frame layouts (`nbytes=`, `arrays=`, `codec=`)
    /// are refused.
    pub(crate) fn loan_fixed(
        &self,
        py: Python<'_>,
        s: &Arc<framebus::Stream>,
        (shape, dtype, nbytes, arrays): LoanArgs<'_, '_>,
        codec: Option<&str>,
        values: LoanValues,
        deadline: Deadline,
    ) -> PyResult<Py<PyLoan>> {
        self.refuse_layout(py, nbytes.is_some() || arrays.is_some() || codec.is_some(), "nbytes=, arrays= and codec=")?;
        if shape.is_some() || dtype.is_some() {
            let shape_ok = shape.is_none_or(|sh| {
                crate::args::small_shape(sh).is_some_and(|(d, n)| d[..n].iter().map(|&x| x as usize).eq(self.spec.shape.iter().copied()))
            });
            let dtype_ok = dtype.is_none_or(|dt| PyArrayDescr::new(py, dt).is_ok_and(|d| d.is_equiv_to(self.spec.dtype.bind(py))));
            if !shape_ok || !dtype_ok {
                return Err(PyErr::from_type(
                    ErrorKind::InvalidArgument.class(py)?,
                    (format!(
                        "stream {:?} has a fixed frame shape {:?} and dtype {}; loan(shape=, dtype=) must match them or be left out",
                        self.name,
                        self.spec.shape,
                        self.spec.dtype.bind(py)
                    ),),
                ));
            }
        }
        s.check_frame(self.spec.frame_bytes, &values.info()).map_err(CoreError)?;
        let before = s.lock_recoveries();
        let guard = self.blocking(py, deadline, false, |d, check| s.begin_loan(d, check))?;
        self.warn_recovered(py, s, before)?;
        Py::new(py, PyLoan::new(&self.name, self.spec.clone_ref(py), guard, values).init(py))
    }
}
