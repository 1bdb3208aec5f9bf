//! GPU streams: every CUDA call goes through one door ([`door::Door`]), with two sides behind
//! it: the CUDA driver API loaded at run time, and a strict fake chosen with
//! `FRAMEBUS_CUDA=fake` that keeps "device" memory in host shared memory.

pub mod door;
pub mod registry;

/// The door of this process (placeholder until the driver and fake sides land).
pub fn door() -> Result<&'static dyn door::Door, door::DoorError> {
    Err(door::DoorError { call: "cuInit", code: 100, name: "CUDA_ERROR_NO_DEVICE".into(), detail: "no CUDA door in this build yet".into() })
}
