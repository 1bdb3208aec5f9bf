//! What the device-stream tests share: the strict fake door, chosen once per process from
//! FRAMEBUS_CUDA before its first use, and one test at a time (the fake's counts are per
//! process); unique stream names; a small device spec; a deadline that only guards against hangs.

use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

use framebus::ring::DeviceSpec;
use framebus::{Deadline, StreamSpec};

static SERIAL: Mutex<()> = Mutex::new(());
static FAKE: Once = Once::new();

/// Selects the fake door (first call) and holds the per-process test lock.
pub fn serial() -> MutexGuard<'static, ()> {
    FAKE.call_once(|| std::env::set_var("FRAMEBUS_CUDA", "fake"));
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stream name unique to this process: `t-{file}-{pid}-{tag}`.
pub fn name(file: &str, tag: &str) -> String {
    format!("t-{file}-{}-{tag}", std::process::id())
}

/// A u8 device stream of `shape` on device 0, without a CPU mirror.
pub fn device_spec(slots: u32, shape: Vec<u64>) -> StreamSpec {
    StreamSpec { slots, device: Some(DeviceSpec { ordinal: 0, cpu_mirror: false }), ..StreamSpec::new("|u1", 1, shape) }
}

/// An upper bound for a wait that should end at once (never a measurement).
pub fn soon() -> Deadline {
    Deadline::after(Some(Duration::from_secs(10)))
}
