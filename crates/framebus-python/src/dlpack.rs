//! GPU arrays across the Python boundary: DLPack capsules out (`__dlpack__` of device frames,
//! loans and arrays) and in (arrays written into device streams), and the CUDA Array Interface
//! (`__cuda_array_interface__`, version 3) both ways. The structs below are DLPack's C ABI
//! (dlpack.h, version 0.8 "unversioned" capsules named `dltensor`, which every consumer takes).

use std::ffi::{c_void, CStr};
use std::os::raw::c_int;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// DLPack's device types used here.
pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

const CAPSULE_NAME: &CStr = c"dltensor";
const USED_NAME: &CStr = c"used_dltensor";

/// What a `DLManagedTensor` we export owns: its shape, and the Python object that keeps the
/// memory alive (a frame keeps its slot pinned, an array its allocation).
struct Context {
    shape: Vec<i64>,
    /// Held for its drop only.
    _owner: Option<Py<PyAny>>,
}

unsafe extern "C" fn delete_managed(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the Box leaked by `export_capsule`, handed back exactly once (by the
    // consumer that took it, or by the capsule's destructor when nobody did).
    let managed = unsafe { Box::from_raw(managed) };
    // SAFETY: manager_ctx is the Box<Context> leaked with it.
    let context = unsafe { Box::from_raw(managed.manager_ctx.cast::<Context>()) };
    // The consumer may call this from any thread: drop the owner with the GIL held.
    Python::attach(move |_| drop(context));
}

unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: CPython calls this with a live capsule; a capsule still named "dltensor" was
    // never consumed, so its tensor is ours to delete.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE_NAME.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE_NAME.as_ptr()).cast::<DLManagedTensor>();
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        } else {
            pyo3::ffi::PyErr_Clear();
        }
    }
}

/// The DLPack type of a NumPy dtype string (`|u1`, `<f4`, ...), None for one DLPack (or CUDA)
/// cannot hold.
pub fn dl_dtype(dtype: &str) -> Option<DLDataType> {
    let bytes = dtype.as_bytes();
    if bytes.len() < 3 || bytes[0] == b'>' {
        return None;
    }
    let size: u32 = dtype[2..].parse().ok()?;
    let code = match bytes[1] {
        b'i' => 0,
        b'u' => 1,
        b'f' => 2,
        b'c' => 5,
        b'b' => 6,
        _ => return None,
    };
    let bits = u8::try_from(size * 8).ok()?;
    Some(DLDataType { code, bits, lanes: 1 })
}

/// A NumPy dtype string of a DLPack type.
fn numpy_dtype(t: DLDataType) -> Option<String> {
    if t.lanes != 1 || !t.bits.is_multiple_of(8) {
        return None;
    }
    let kind = match t.code {
        0 => 'i',
        1 => 'u',
        2 => 'f',
        5 => 'c',
        6 => 'b',
        _ => return None,
    };
    let order = if t.bits == 8 { '|' } else { '<' };
    Some(format!("{order}{kind}{}", t.bits / 8))
}

/// A DLPack capsule over `ptr` (device memory of `device`, or host memory for `device` None),
/// C-contiguous of `shape` and `dtype`; `owner` is kept alive until the consumer lets go.
pub fn export_capsule(
    py: Python<'_>,
    ptr: u64,
    shape: &[usize],
    dtype: &str,
    device: Option<u32>,
    owner: Py<PyAny>,
) -> PyResult<Py<PyAny>> {
    let dl = dl_dtype(dtype).ok_or_else(|| PyTypeError::new_err(format!("dtype {dtype} has no DLPack type")))?;
    let mut context = Box::new(Context { shape: shape.iter().map(|&d| d as i64).collect(), _owner: Some(owner) });
    let managed = Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: ptr as *mut c_void,
            device: match device {
                Some(id) => DLDevice { device_type: KDL_CUDA, device_id: id as i32 },
                None => DLDevice { device_type: KDL_CPU, device_id: 0 },
            },
            ndim: shape.len() as i32,
            dtype: dl,
            shape: context.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_managed),
    });
    let managed = Box::into_raw(managed);
    // SAFETY: `managed` was just leaked and is valid; the context is leaked with it and freed by
    // `delete_managed`.
    unsafe { (*managed).manager_ctx = Box::into_raw(context).cast() };
    // SAFETY: a valid pointer and a static name; the destructor frees an unconsumed tensor.
    let capsule = unsafe { pyo3::ffi::PyCapsule_New(managed.cast(), CAPSULE_NAME.as_ptr(), Some(capsule_destructor)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so the tensor is still ours.
        unsafe { delete_managed(managed) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}

/// A GPU (or host) array given to framebus: where its bytes are and what they hold.
pub struct ArrayRef {
    pub ptr: u64,
    pub shape: Vec<usize>,
    /// NumPy dtype string (`|u1`, `<f4`).
    pub dtype: String,
    /// CUDA device ordinal; None for host memory.
    pub device: Option<u32>,
    pub readonly: bool,
    pub contiguous: bool,
    /// The CUDA stream the producer says the data is ready on (CAI `stream`), as a CUstream
    /// value (1: the legacy default stream).
    pub stream: Option<u64>,
    /// A consumed DLPack capsule: its tensor is deleted (the producer lets go) when dropped.
    _held: Option<HeldTensor>,
}

/// A DLPack tensor we consumed, deleted when the call that used it is done.
struct HeldTensor(*mut DLManagedTensor);

impl Drop for HeldTensor {
    fn drop(&mut self) {
        // SAFETY: the tensor came from a capsule we renamed to "used_dltensor", so it is ours to
        // delete, once.
        unsafe {
            if let Some(deleter) = (*self.0).deleter {
                deleter(self.0);
            }
        }
    }
}

fn c_contiguous(shape: &[usize], strides: Option<&[i64]>, itemsize: usize) -> bool {
    let Some(strides) = strides else { return true };
    let mut expect = itemsize as i64;
    for (d, s) in shape.iter().zip(strides).rev() {
        if *d > 1 && *s != expect {
            return false;
        }
        expect *= *d as i64;
    }
    true
}

/// Reads `obj.__cuda_array_interface__`, if it has one.
pub fn from_cuda_array_interface(obj: &Bound<'_, PyAny>) -> PyResult<Option<ArrayRef>> {
    let py = obj.py();
    let Ok(cai) = obj.getattr(pyo3::intern!(py, "__cuda_array_interface__")) else { return Ok(None) };
    let cai = cai.cast_into::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(k)?.ok_or_else(|| PyTypeError::new_err(format!("__cuda_array_interface__ has no {k:?}")))
    };
    if cai.get_item("mask")?.is_some_and(|m| !m.is_none()) {
        return Err(PyValueError::new_err("masked arrays (__cuda_array_interface__ with a mask) cannot be written"));
    }
    let shape: Vec<usize> = get("shape")?.extract()?;
    let dtype: String = get("typestr")?.extract()?;
    let (ptr, readonly): (u64, bool) = get("data")?.extract()?;
    let strides: Option<Vec<i64>> = cai.get_item("strides")?.filter(|s| !s.is_none()).map(|s| s.extract()).transpose()?;
    let itemsize: usize = dtype.get(2..).and_then(|s| s.parse().ok()).unwrap_or(0);
    let stream: Option<u64> = cai.get_item("stream")?.filter(|s| !s.is_none()).map(|s| s.extract()).transpose()?;
    let contiguous = c_contiguous(&shape, strides.as_deref(), itemsize);
    Ok(Some(ArrayRef { ptr, shape, dtype, device: None, readonly, contiguous, stream, _held: None }))
}

/// Takes `obj.__dlpack__(stream=...)`, if it has one: the producer makes `stream` wait for its
/// work on the array before the capsule is returned.
pub fn from_dlpack(obj: &Bound<'_, PyAny>, stream: Option<u64>) -> PyResult<Option<ArrayRef>> {
    let py = obj.py();
    if !obj.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        return Ok(None);
    }
    let (device_type, _): (i32, i32) = obj.call_method0(pyo3::intern!(py, "__dlpack_device__"))?.extract()?;
    let kwargs = PyDict::new(py);
    if device_type == KDL_CUDA {
        // DLPack spells the legacy default stream 1 (0 is not allowed).
        kwargs.set_item(
            "stream",
            match stream.unwrap_or(0) {
                0 => 1,
                s => s,
            },
        )?;
    }
    let capsule = obj.call_method(pyo3::intern!(py, "__dlpack__"), (), Some(&kwargs))?;
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live object; PyCapsule_IsValid checks type and name.
    if unsafe { pyo3::ffi::PyCapsule_IsValid(raw, CAPSULE_NAME.as_ptr()) } != 1 {
        // SAFETY: IsValid may set no error; clearing is harmless.
        unsafe { pyo3::ffi::PyErr_Clear() };
        return Err(PyTypeError::new_err(
            "__dlpack__ returned something other than an unconsumed \"dltensor\" capsule (versioned DLPack capsules are not taken yet)",
        ));
    }
    // SAFETY: checked valid just above.
    let managed = unsafe { pyo3::ffi::PyCapsule_GetPointer(raw, CAPSULE_NAME.as_ptr()) }.cast::<DLManagedTensor>();
    // SAFETY: renaming marks the capsule consumed: its destructor no longer deletes the tensor,
    // HeldTensor does.
    if managed.is_null() || unsafe { pyo3::ffi::PyCapsule_SetName(raw, USED_NAME.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let held = HeldTensor(managed);
    // SAFETY: the producer keeps the tensor valid until its deleter runs (when `held` drops).
    let t = unsafe { &(*managed).dl_tensor };
    let ndim = usize::try_from(t.ndim).map_err(|_| PyValueError::new_err("DLPack tensor with a negative ndim"))?;
    // SAFETY: DLPack guarantees `shape` (and non-NULL `strides`) hold ndim entries.
    let shape_raw = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(t.shape, ndim) } };
    let shape: Vec<usize> = shape_raw.iter().map(|&d| d.max(0) as usize).collect();
    let dtype = numpy_dtype(t.dtype)
        .ok_or_else(|| PyTypeError::new_err(format!("DLPack type code {} of {} bits has no NumPy dtype", t.dtype.code, t.dtype.bits)))?;
    let strides: Option<Vec<i64>> = if t.strides.is_null() || ndim == 0 {
        None
    } else {
        // SAFETY: as above.
        Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) }.iter().map(|s| s * i64::from(t.dtype.bits / 8)).collect())
    };
    let contiguous = c_contiguous(&shape, strides.as_deref(), usize::from(t.dtype.bits / 8));
    let device = match t.device.device_type {
        KDL_CUDA => Some(t.device.device_id as u32),
        KDL_CPU => None,
        other => return Err(PyValueError::new_err(format!("arrays on DLPack device type {other} cannot be written (CUDA or CPU only)"))),
    };
    Ok(Some(ArrayRef {
        ptr: (t.data as u64).wrapping_add(t.byte_offset),
        shape,
        dtype,
        device,
        readonly: false,
        contiguous,
        stream: None,
        _held: Some(held),
    }))
}

/// `__cuda_array_interface__` (version 3) of a C-contiguous device array; `stream` is the
/// CUstream consumers must order their work after (None: nothing to wait for).
pub fn cuda_array_interface<'py>(
    py: Python<'py>,
    ptr: u64,
    shape: &[usize],
    dtype: &str,
    readonly: bool,
    stream: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("shape", PyTuple::new(py, shape)?)?;
    d.set_item("typestr", dtype)?;
    d.set_item("data", (ptr, readonly))?;
    d.set_item("strides", py.None())?;
    d.set_item("version", 3)?;
    // The interface spells the legacy default stream 1 (0 is not allowed).
    d.set_item("stream", stream.map(|s| if s == 0 { 1 } else { s }))?;
    Ok(d)
}

/// A CUDA stream argument as a CUstream value: None, an int, or an object with `cuda_stream`
/// (torch) or `ptr` (CuPy). DLPack's and the interface's 1 (legacy default) and 2 (per-thread
/// default) are the driver's own CU_STREAM_LEGACY and CU_STREAM_PER_THREAD.
pub fn stream_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(v) = value.filter(|v| !v.is_none()) else { return Ok(None) };
    let py = v.py();
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("stream must be a CUDA stream (an int handle, torch.cuda.Stream or cupy.cuda.Stream), got bool"));
    }
    if let Ok(n) = v.extract::<u64>() {
        return Ok(Some(n));
    }
    for attr in [pyo3::intern!(py, "cuda_stream"), pyo3::intern!(py, "ptr")] {
        if let Ok(n) = v.getattr(attr).and_then(|x| x.extract::<u64>()) {
            return Ok(Some(n));
        }
    }
    Err(PyTypeError::new_err(format!(
        "stream must be a CUDA stream (an int handle, torch.cuda.Stream or cupy.cuda.Stream), got {}",
        v.get_type().name()?
    )))
}

/// Whether a DLPack consumer asked for no synchronisation (`stream=-1`).
pub fn dlpack_stream(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match value.filter(|v| !v.is_none()) {
        Some(v) if v.extract::<i64>().is_ok_and(|n| n == -1) => Ok(None),
        other => Ok(Some(stream_arg(other)?.unwrap_or(0))),
    }
}

/// `c_int` DLPack device tuple.
pub fn device_tuple(device: u32) -> (c_int, c_int) {
    (KDL_CUDA, device as c_int)
}

/// Checks a `__dlpack__` request for the zero-copy export of `what` ("DeviceArray", ...) on CUDA
/// device `device`: ValueError for `copy=True` (the message ends with `hint`, how to get a copy
/// instead) and for a `dl_device` other than that device.
pub fn check_export(what: &str, device: u32, copy: Option<bool>, dl_device: Option<&Bound<'_, PyAny>>, hint: &str) -> PyResult<()> {
    if copy == Some(true) {
        return Err(PyValueError::new_err(format!("{what}.__dlpack__ does not copy (copy=True){hint}")));
    }
    if let Some(d) = dl_device.filter(|d| !d.is_none()) {
        if d.extract::<(i32, i32)>()? != (KDL_CUDA, device as i32) {
            return Err(PyValueError::new_err(format!("a {what} exports to its own device only")));
        }
    }
    Ok(())
}
