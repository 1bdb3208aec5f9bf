//! GPU streams: every CUDA call goes through one door ([`door::Door`]), with two sides behind
//! it: the CUDA driver API loaded at run time, and a strict fake chosen with
//! `FRAMEBUS_CUDA=fake` that keeps "device" memory in host shared memory.

pub mod door;
pub mod registry;

/// The door of this process (placeholder until the driver and fake sides land).
pub fn door() -> Result<&'static dyn door::Door, door::DoorError> {
    Err(door::DoorError { call: "cuInit", code: 100, name: "CUDA_ERROR_NO_DEVICE".into(), detail: "no CUDA door in this build yet".into() })
}

/// The fake door's bytes at `ptr` (placeholder until the fake lands).
pub fn fake_host_bytes(_ptr: u64, _len: usize) -> Option<Vec<u8>> {
    None
}

/// The fake door's live (allocations, openings, events) of this process (placeholder).
pub fn fake_counts() -> (usize, usize, usize) {
    (0, 0, 0)
}
