//! GPU streams: every CUDA call goes through one door ([`door::Door`]), with two sides behind
//! it: the CUDA driver API loaded at run time, and a strict fake chosen with
//! `FRAMEBUS_CUDA=fake` that keeps "device" memory in host shared memory.

pub mod door;
