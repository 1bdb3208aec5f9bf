//! GPU streams: every CUDA call goes through one door ([`door::Door`]), with two sides behind
//! it: the CUDA driver API loaded at run time (`cuda::CudaDoor`, cargo feature `cuda`), and a
//! strict fake (`fake::FakeDoor`, cargo feature `fake-cuda`) chosen with `FRAMEBUS_CUDA=fake`
//! that keeps "device" memory in host shared memory. A side not built is an error of the door,
//! like a missing driver: a build with neither has host streams only, and every request for a
//! device stream says that GPU streams were not built.

pub mod buffer;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod door;
#[cfg(feature = "fake-cuda")]
pub mod fake;
pub mod host;
pub mod registry;

use std::sync::OnceLock;

use door::{DeviceInfo, Door, DoorError, DoorKind, DoorResult};

/// The environment variable that picks the side of the door.
pub const DOOR_ENV: &str = "FRAMEBUS_CUDA";

/// The door of this process, chosen on the first call from `FRAMEBUS_CUDA` and kept: `fake` is
/// the strict fake, unset, empty or `cuda` the CUDA driver. An error (no driver, no device, an unknown
/// value) is kept too, and returned again on every call.
pub fn door() -> DoorResult<&'static dyn Door> {
    static CHOSEN: OnceLock<DoorResult<&'static dyn Door>> = OnceLock::new();
    CHOSEN.get_or_init(|| door_for(setting().as_deref())).clone()
}

/// `FRAMEBUS_CUDA` as set (None when unset; a value that is not UTF-8 is kept as a lossy string
/// so that it is refused by name).
fn setting() -> Option<String> {
    std::env::var_os(DOOR_ENV).map(|v| v.to_string_lossy().into_owned())
}

/// The door a `FRAMEBUS_CUDA` value selects, without looking at the environment: None, `""` or
/// `"cuda"` the driver, `"fake"` the fake. Each side is set up once per process and shared.
pub fn door_for(setting: Option<&str>) -> DoorResult<&'static dyn Door> {
    match setting {
        None | Some("") | Some("cuda") => cuda_side(),
        Some("fake") => fake_side(),
        Some(other) => Err(DoorError {
            call: DOOR_ENV,
            code: door::BAD_SETTING.0,
            name: door::BAD_SETTING.1.to_string(),
            detail: format!(
                "FRAMEBUS_CUDA={other:?} is not understood: it accepts \"cuda\" (the CUDA driver; the default, also when unset or empty) or \"fake\" (a fake GPU in host memory, for tests without one)"
            ),
        }),
    }
}

/// The doors this build has (cargo features `cuda` and `fake-cuda`), in that order.
pub const BUILT: &[DoorKind] = &[
    #[cfg(feature = "cuda")]
    DoorKind::Cuda,
    #[cfg(feature = "fake-cuda")]
    DoorKind::Fake,
];

#[cfg(feature = "cuda")]
fn cuda_side() -> DoorResult<&'static dyn Door> {
    static CUDA: OnceLock<DoorResult<cuda::CudaDoor>> = OnceLock::new();
    match CUDA.get_or_init(cuda::CudaDoor::new) {
        Ok(d) => Ok(d),
        Err(e) => Err(e.clone()),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_side() -> DoorResult<&'static dyn Door> {
    Err(not_built("the CUDA driver door", "cuda"))
}

#[cfg(feature = "fake-cuda")]
fn fake_side() -> DoorResult<&'static dyn Door> {
    static FAKE: OnceLock<DoorResult<fake::FakeDoor>> = OnceLock::new();
    match FAKE.get_or_init(fake::FakeDoor::from_env) {
        Ok(d) => Ok(d),
        Err(e) => Err(e.clone()),
    }
}

#[cfg(not(feature = "fake-cuda"))]
fn fake_side() -> DoorResult<&'static dyn Door> {
    Err(not_built("the fake CUDA door (FRAMEBUS_CUDA=fake)", "fake-cuda"))
}

/// The error for a side of the door this build left out.
#[allow(dead_code)] // with both features on, no side is left out
fn not_built(side: &str, feature: &str) -> DoorError {
    let detail = if BUILT.is_empty() {
        "GPU streams were not built into this framebus (neither cargo feature `cuda` nor `fake-cuda` was on): it has host streams only; the published wheels have GPU streams".to_string()
    } else {
        format!("{side} was not built into this framebus (cargo feature `{feature}` was off); the published wheels have it")
    };
    DoorError { call: DOOR_ENV, code: door::NOT_BUILT.0, name: door::NOT_BUILT.1.to_string(), detail }
}

/// What `framebus doctor` reports about the door.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoorStatus {
    /// `FRAMEBUS_CUDA` as set, None when unset.
    pub setting: Option<String>,
    /// The side in use, None when no door could be opened.
    pub kind: Option<DoorKind>,
    /// `cuDriverGetVersion`, for example 13000 for CUDA 13.0.
    pub driver_version: Option<i32>,
    /// Every device the door sees.
    pub devices: Vec<DeviceInfo>,
    /// Why the door (or a device query) failed.
    pub error: Option<DoorError>,
}

/// The door of this process ([`door`]) and what it sees: driver version and devices, or the
/// error. Never fails itself.
pub fn door_status() -> DoorStatus {
    let mut status = DoorStatus { setting: setting(), kind: None, driver_version: None, devices: Vec::new(), error: None };
    let found = door().and_then(|d| {
        status.kind = Some(d.kind());
        status.driver_version = Some(d.driver_version()?);
        for device in 0..d.device_count()? {
            status.devices.push(d.device_info(device)?);
        }
        Ok(())
    });
    status.error = found.err();
    status
}
