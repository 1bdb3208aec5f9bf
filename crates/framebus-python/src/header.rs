//! What a frame, a loan or a device array says about itself, written once: three base classes
//! the handed-out objects extend, each adding the getters of one more kind of thing.
//!
//! - `_ArrayHeader`: `shape`, `dtype`, `nbytes`, `device` ("cuda:N", or "cpu" for host memory):
//!   `DeviceArray`.
//! - `_SlotHeader(_ArrayHeader)`: `seq`, the frame's sequence number (for a loan, the one it
//!   gets): `Loan`, `DeviceLoan`.
//! - `_FrameHeader(_SlotHeader)`: `timestamp_ns`, `timestamp`, `frame_id`, `meta` of a
//!   committed frame: `Frame`, `DeviceFrame` (a host `Frame` reads `meta` from its pinned slot
//!   instead, on demand).
//!
//! The values are taken once, when the object is made; nothing here touches the stream.

use numpy::PyArrayDescr;
use pyo3::prelude::*;
use pyo3::pyclass_init::PyClassInitializer;
use pyo3::types::{PyBytes, PyTuple};

use crate::array::FrameSpec;

/// Shape, dtype, size and device of an array (see the module documentation).
#[pyclass(name = "_ArrayHeader", module = "framebus._native", subclass, frozen)]
pub struct PyArrayHeader {
    /// None: a frame or loan of several named arrays (no one shape or dtype).
    shape: Option<Py<PyTuple>>,
    dtype: Option<Py<PyArrayDescr>>,
    nbytes: usize,
    /// CUDA ordinal in this process; None for host memory.
    device: Option<u32>,
}

impl PyArrayHeader {
    /// The header of one array of `spec` on `device` (None: host memory).
    pub fn of(py: Python<'_>, spec: &FrameSpec, device: Option<u32>) -> PyArrayHeader {
        PyArrayHeader {
            shape: Some(spec.shape_tuple.clone_ref(py)),
            dtype: Some(spec.dtype.clone_ref(py)),
            nbytes: spec.frame_bytes,
            device,
        }
    }

    /// The header of host memory holding `nbytes` of arrays, one of `single` (None: several).
    pub fn host(py: Python<'_>, single: Option<&FrameSpec>, nbytes: usize) -> PyArrayHeader {
        PyArrayHeader {
            shape: single.map(|s| s.shape_tuple.clone_ref(py)),
            dtype: single.map(|s| s.dtype.clone_ref(py)),
            nbytes,
            device: None,
        }
    }
}

#[pymethods]
impl PyArrayHeader {
    /// Shape of the array; None for a frame (or loan) of several named arrays.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyTuple>> {
        self.shape.as_ref().map(|s| s.bind(py).clone())
    }

    /// dtype of the array; None for a frame (or loan) of several named arrays.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArrayDescr>> {
        self.dtype.as_ref().map(|d| d.bind(py).clone())
    }

    /// Bytes of the array (of all the arrays of a frame of several).
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// "cuda:N" for device memory (this process's ordinal), "cpu" for host memory.
    #[getter]
    fn device(&self) -> String {
        self.device.map_or_else(|| "cpu".to_owned(), |d| format!("cuda:{d}"))
    }
}

/// An array header with the frame's sequence number (see the module documentation).
#[pyclass(name = "_SlotHeader", module = "framebus._native", extends = PyArrayHeader, subclass, frozen)]
pub struct PySlotHeader {
    seq: u64,
}

impl PySlotHeader {
    /// The headers of a loan: `array`, and `seq`, the number the frame gets.
    pub fn loan(array: PyArrayHeader, seq: u64) -> PyClassInitializer<PySlotHeader> {
        PyClassInitializer::from(array).add_subclass(PySlotHeader { seq })
    }
}

#[pymethods]
impl PySlotHeader {
    /// Sequence number of the frame (1 for a stream's first frame); for a loan, the number the
    /// frame gets when committed.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// A committed frame's record (see the module documentation).
#[pyclass(name = "_FrameHeader", module = "framebus._native", extends = PySlotHeader, subclass, frozen)]
pub struct PyFrameHeader {
    timestamp_ns: u64,
    frame_id: i64,
    meta: Vec<u8>,
}

/// A frame's record as the ring keeps it: (seq, timestamp_ns, frame_id, meta).
pub struct Record<'a> {
    pub seq: u64,
    pub timestamp_ns: u64,
    pub frame_id: i64,
    /// The metadata bytes to keep (a host frame keeps none: it reads them from its slot).
    pub meta: &'a [u8],
}

impl PyFrameHeader {
    /// The headers of a frame: `array` and `record`.
    pub fn frame(array: PyArrayHeader, record: Record<'_>) -> PyClassInitializer<PyFrameHeader> {
        PySlotHeader::loan(array, record.seq).add_subclass(PyFrameHeader {
            timestamp_ns: record.timestamp_ns,
            frame_id: record.frame_id,
            meta: record.meta.to_vec(),
        })
    }
}

#[pymethods]
impl PyFrameHeader {
    /// Write time in ns since the Unix epoch.
    #[getter]
    fn timestamp_ns(&self) -> u64 {
        self.timestamp_ns
    }

    /// Write time in seconds since the Unix epoch.
    #[getter]
    fn timestamp(&self) -> f64 {
        self.timestamp_ns as f64 / 1e9
    }

    /// User frame id given to write()/loan().
    #[getter]
    fn frame_id(&self) -> i64 {
        self.frame_id
    }

    /// Metadata bytes of the frame (a copy).
    #[getter]
    fn meta<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.meta)
    }
}
