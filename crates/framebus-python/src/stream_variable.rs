//! The variable-shape half of `framebus._native.Stream`: writes of arrays, dicts and byte
//! payloads, copies and views of frames that carry their own table, and loans laid out per
//! frame. `stream.rs` calls in here only for streams created with a capacity (its
//! `Layout::Variable`, whose caches every call here takes); stream_fixed.rs is the other half.

use std::sync::Arc;

use framebus::ring::frame_table::{ArraySpec, FrameTable};
use framebus::{Deadline, FrameInfo, Pinned};
use numpy::{PyArrayDescr, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;

use crate::args::small_shape;
use crate::array::{data_ptr, DataPtr};
use crate::errors::CoreError;
use crate::frame::PyFrame;
use crate::frame_arrays::{self, Parts};
use crate::loan::{LoanValues, PyLoan};
use crate::stream::{FrameRecord, PyStream, VariableCaches, DETACH_BYTES};

impl PyStream {
    /// Lays out a frame of `arrays` (checked against every limit; nothing claimed yet).
    fn plan(&self, s: &framebus::Stream, arrays: &[ArraySpec<'_>], named: bool, codec: Option<&str>) -> PyResult<FrameTable> {
        Ok(s.plan_frame(arrays, named, codec.unwrap_or("")).map_err(CoreError)?)
    }

    /// The table of one array of `descr` and `shape` (a byte payload when `bytes`): the last
    /// one when the layout is the same (no planning), else planned and remembered. None when
    /// the dtype is not a plain number type or there are too many dimensions (the slow path
    /// then says what is wrong).
    fn single_table(
        &self,
        s: &framebus::Stream,
        cache: &frame_arrays::LayoutCache,
        descr: &Bound<'_, PyArrayDescr>,
        shape: &[u64],
        bytes: bool,
    ) -> PyResult<Option<Arc<FrameTable>>> {
        if let Some((table, _)) = cache.get(descr, shape, bytes) {
            return Ok(Some(table));
        }
        let Some(dtype) = frame_arrays::number_dtype_str(descr) else { return Ok(None) };
        if shape.len() > framebus::ring::layout::MAX_NDIM {
            return Ok(None);
        }
        let table = Arc::new(self.plan(s, &[ArraySpec { name: "", dtype: &dtype, shape, bytes }], false, None)?);
        cache.put(descr, shape, bytes, Arc::clone(&table), None);
        Ok(Some(table))
    }

    /// Copies `value` (an array, a dict of arrays, or a byte payload) into the next slot with
    /// its own table. Everything is checked before a slot is claimed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_variable(
        &self,
        py: Python<'_>,
        v: &VariableCaches,
        s: &Arc<framebus::Stream>,
        value: &Bound<'_, PyAny>,
        info: &FrameInfo<'_>,
        codec: Option<&str>,
        deadline: Deadline,
    ) -> PyResult<()> {
        if let (Ok(arr), None) = (value.cast::<PyUntypedArray>(), codec) {
            // One C-contiguous array of the layout written last time: no planning, no allocation.
            let dims = arr.shape();
            if arr.is_c_contiguous() && dims.len() <= framebus::ring::layout::MAX_NDIM {
                let mut shape = [0u64; framebus::ring::layout::MAX_NDIM];
                for (d, &n) in shape.iter_mut().zip(dims) {
                    *d = n as u64;
                }
                if let Some(table) = self.single_table(s, &v.write_layout, &arr.dtype(), &shape[..dims.len()], false)? {
                    s.check_frame(s.geometry().frame_bytes as usize, info).map_err(CoreError)?;
                    let (ptr, n) = (data_ptr(arr), table.arrays[0].nbytes as usize);
                    self.blocking(py, deadline, n >= DETACH_BYTES, |d, check| {
                        // SAFETY: ptr points to the `n` bytes of a C-contiguous array kept
                        // alive by `value` for the whole call.
                        let data = unsafe { std::slice::from_raw_parts(ptr.get() as *const u8, n) };
                        s.write_arrays(&table, &[data], info, d, check)
                    })?;
                    return Ok(());
                }
            }
        }
        let (parts, named) = frame_arrays::source(py, value, &self.name)?;
        let table = self.plan(s, &frame_arrays::specs(&parts), named, codec)?;
        s.check_frame(s.geometry().frame_bytes as usize, info).map_err(CoreError)?;
        let ptrs: Vec<(DataPtr, usize)> = parts.iter().zip(&table.arrays).map(|(p, a)| (data_ptr(&p.array), a.nbytes as usize)).collect();
        let heavy = table.data_end as usize >= DETACH_BYTES;
        self.blocking(py, deadline, heavy, |d, check| {
            // SAFETY: each pointer is the data of a C-contiguous array of `n` bytes kept alive
            // by `parts` for the whole call.
            let data: Vec<&[u8]> = ptrs.iter().map(|&(p, n)| unsafe { std::slice::from_raw_parts(p.get() as *const u8, n) }).collect();
            s.write_arrays(&table, &data, info, d, check)
        })?;
        Ok(())
    }

    /// Writes an empty byte payload (what `clear()` means without a fixed shape).
    pub(crate) fn clear_variable(&self, py: Python<'_>, s: &Arc<framebus::Stream>, deadline: Deadline) -> PyResult<()> {
        let table = self.plan(s, &[ArraySpec { name: "", dtype: "|u1", shape: &[0], bytes: true }], false, None)?;
        let info = FrameInfo { frame_id: Some(0), ..FrameInfo::default() };
        self.blocking(py, deadline, false, |d, check| s.write_arrays(&table, &[&[]], &info, d, check))?;
        Ok(())
    }

    /// The Python side of a pinned frame's table (CorruptStreamError for a damaged one).
    fn parts_of(&self, py: Python<'_>, v: &VariableCaches, s: &framebus::Stream, pinned: &Pinned) -> PyResult<Arc<Parts>> {
        let frame = pinned.frame();
        v.read_cache.parts(py, &v.descrs, frame.payload, || Ok(s.frame_table(&frame).map_err(CoreError)?))
    }

    /// Copies the newest frame (or the next new one): the array, the dict of arrays, or bytes,
    /// into `out` when given. Before the first frame, `read` raises StreamEmptyError.
    pub(crate) fn read_variable<'py>(
        &self,
        py: Python<'py>,
        v: &VariableCaches,
        new: bool,
        out: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
        with_info: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Option<FrameRecord>)> {
        let s = self.host(py)?;
        let deadline = crate::args::deadline(py, timeout)?;
        let pinned = if new {
            self.blocking(py, deadline, false, |d, check| s.wait_pinned(d, check))?
        } else {
            s.pin_latest().map_err(CoreError)?
        };
        let parts = self.parts_of(py, v, &s, &pinned)?;
        let f = pinned.frame();
        let value = parts.copy_out(py, f.payload.as_ptr(), out, &self.name, f.seq)?;
        let info = with_info.then(|| (f.seq, f.timestamp_ns, f.frame_id, f.meta.to_vec()));
        Ok((value, info))
    }

    /// A view of a pinned frame of this stream.
    pub(crate) fn frame_view_variable(
        &self,
        py: Python<'_>,
        v: &VariableCaches,
        s: &framebus::Stream,
        pinned: Pinned,
    ) -> PyResult<PyClassInitializer<PyFrame>> {
        let parts = self.parts_of(py, v, s, &pinned)?;
        Ok(PyFrame::with_parts(py, &self.name, parts, pinned))
    }

    /// The table and arrays of a loan: `shape`+`dtype` (one array), `nbytes` (a byte payload)
    /// or `arrays` (a dict of named arrays). The layout loaned last time is reused as it is.
    pub(crate) fn loan_table(
        &self,
        py: Python<'_>,
        v: &VariableCaches,
        s: &framebus::Stream,
        (shape, dtype, nbytes, arrays): frame_arrays::LoanArgs<'_, '_>,
        codec: Option<&str>,
    ) -> PyResult<(Arc<FrameTable>, Arc<Parts>)> {
        if let (Some(sh), Some(dt), None, None, None) = (shape, dtype, nbytes, arrays, codec) {
            let fast = (PyArrayDescr::new(py, dt), small_shape(sh));
            if let (Ok(descr), Some((dims, ndim))) = fast {
                let dims = &dims[..ndim];
                if let Some((table, Some(parts))) = v.loan_layout.get(&descr, dims, false) {
                    return Ok((table, parts));
                }
                if let Some(table) = self.single_table(s, &v.loan_layout, &descr, dims, false)? {
                    let parts = Arc::new(Parts::from_table(py, &v.descrs, &table)?);
                    v.loan_layout.put(&descr, dims, false, Arc::clone(&table), Some(Arc::clone(&parts)));
                    return Ok((table, parts));
                }
            }
        }
        let (arrays, named) = frame_arrays::loan_layout(py, shape, dtype, nbytes, arrays)?;
        let specs: Vec<ArraySpec<'_>> = arrays.iter().map(|(n, d, sh, b)| ArraySpec { name: n, dtype: d, shape: sh, bytes: *b }).collect();
        let table = self.plan(s, &specs, named, codec)?;
        let parts = Arc::new(Parts::from_table(py, &v.descrs, &table)?);
        Ok((Arc::new(table), parts))
    }

    /// A loan laid out by `loan_table`. The table is written at the claim.
    pub(crate) fn loan_variable(
        &self,
        py: Python<'_>,
        s: &Arc<framebus::Stream>,
        (table, parts): (Arc<FrameTable>, Arc<Parts>),
        values: LoanValues,
        deadline: Deadline,
    ) -> PyResult<Py<PyLoan>> {
        s.check_frame(s.geometry().frame_bytes as usize, &values.info()).map_err(CoreError)?;
        let before = s.lock_recoveries();
        let mut guard = self.blocking(py, deadline, false, |d, check| s.begin_loan(d, check))?;
        guard.write_table(&table);
        self.warn_recovered(py, s, before)?;
        let spec = parts.parts[0].spec.clone_ref(py);
        Py::new(py, PyLoan::new(&self.name, spec, guard, values).with_parts(parts).init(py))
    }
}
