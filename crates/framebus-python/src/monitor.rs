//! `stream_stats(name)`: the ring's counters for monitors (`framebus top`, `hz`, `echo`,
//! `framebus.stat`), read without attaching to the stream.

use framebus::ring::monitor::{self, mode_name, role_name};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::CoreError;

/// The counters of stream `name` now: a dict with `taken_ns`, `writer` (a dict) and `readers`
/// (a list of dicts). FileNotFoundError if there is no such stream.
#[pyfunction]
pub fn stream_stats<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
    let snap = py.detach(|| monitor::snapshot(name)).map_err(CoreError)?;
    let w = &snap.writer;
    let writer = PyDict::new(py);
    writer.set_item("pid", (w.pid != 0).then_some(w.pid))?;
    writer.set_item("alive", w.alive)?;
    writer.set_item("frames_written", w.frames_written)?;
    writer.set_item("bytes_written", w.bytes_written)?;
    writer.set_item("aborted_writes", w.aborted_writes)?;
    writer.set_item("write_waits", w.write_waits)?;
    writer.set_item("write_wait_ns", w.write_wait_ns)?;
    writer.set_item("latest_seq", w.latest_seq)?;
    writer.set_item("latest_ns", w.latest_ns)?;
    writer.set_item("ended", w.ended)?;
    writer.set_item("lock_holder", w.lock_holder)?;
    let mut readers = Vec::with_capacity(snap.readers.len());
    for r in &snap.readers {
        let d = PyDict::new(py);
        d.set_item("entry", r.entry)?;
        d.set_item("pid", r.pid)?;
        d.set_item("alive", r.alive)?;
        d.set_item("mode", mode_name(r.mode))?;
        d.set_item("role", role_name(r.role))?;
        d.set_item("download", r.download)?;
        d.set_item("label", &r.label)?;
        d.set_item("reads", r.reads)?;
        d.set_item("missed", r.missed)?;
        d.set_item("consumed", r.consumed)?;
        d.set_item("pinned_slots", r.pinned_slots)?;
        d.set_item("pinned_since_ns", (r.pinned_since_ns != 0).then_some(r.pinned_since_ns))?;
        d.set_item("writer_waits", r.writer_waits)?;
        readers.push(d);
    }
    let out = PyDict::new(py);
    out.set_item("taken_ns", snap.taken_ns)?;
    out.set_item("writer", writer)?;
    out.set_item("readers", readers)?;
    Ok(out)
}
