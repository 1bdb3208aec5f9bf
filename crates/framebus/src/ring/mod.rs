//! The ring of frame slots in one segment: layout, handles, the writer and the readers.

mod blocked;
mod device;
mod device_stream;
mod download;
mod fork;
pub mod frame_table;
mod handle;
mod kept;
pub mod layout;
pub mod monitor;
mod owner;
pub mod protocol;
mod reader;
mod readers;
mod spec;
mod variable;
mod watch;
mod windows;
mod writer;

pub use device::{Dest, DeviceSlots, Source, DEVICE_PITCH_ALIGN};
pub use device_stream::{DeviceFrame, DeviceLoan, DeviceStream};
pub use download::{DeviceDownload, Downloaded};
pub use fork::fork_grace;
pub use handle::{describe, now_ns, CreateOptions, DeviceAccess, ReaderMode, Stream, OPEN_READY_TIMEOUT};
pub use kept::{set_pages_in_use_check, KeptSlot};
pub use layout::MAX_SEQ;
pub use reader::{FrameRef, Pinned};
pub use spec::{
    checked_capacity, checked_shape, count, numpy_name, shape_text, DeviceSpec, StreamSpec, COUNT_LIMITS, MAX_DEVICE, MAX_FRAME_BYTES,
};
pub use writer::{FrameInfo, WriteGuard, REWRITE_MIN};
