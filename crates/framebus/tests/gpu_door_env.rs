//! `door()` as a process first calls it, with `FRAMEBUS_CUDA` unset: the CUDA driver side. On a
//! machine without the driver library (CI) it is a clean error that says what to install, and
//! `door_status()` reports it; never a panic. One test alone in this binary, because the choice
//! is made once per process.

use framebus::gpu::cuda::{driver_library_present, NO_DRIVER};
use framebus::gpu::door::DoorKind;
use framebus::gpu::{door, door_for, door_status, DOOR_ENV};

#[test]
fn door_without_setting_is_the_driver_or_a_clean_no_driver_error() {
    // The only test of this binary: nothing else reads the environment meanwhile.
    std::env::remove_var(DOOR_ENV);
    let chosen = door().map(|d| d.kind());
    let status = door_status();
    assert_eq!(status.setting, None);
    if driver_library_present() {
        // A GPU machine: the driver side, or the driver's own error (no device, ...).
        match chosen {
            Ok(kind) => assert_eq!(kind, DoorKind::Cuda),
            Err(e) => assert_ne!(e.name, NO_DRIVER.1, "{e}"),
        }
        return;
    }
    let e = chosen.expect_err("no libcuda here");
    assert_eq!(e.name, NO_DRIVER.1);
    assert!(e.detail.contains("libcuda.so.1") && e.detail.contains("FRAMEBUS_CUDA=fake"), "{e}");
    // Said once: the message is the detail, not the call and a code around it.
    let text = e.to_string();
    assert_eq!(text.matches("libcuda.so.1").count(), 1, "{text}");
    assert!(!text.contains(NO_DRIVER.1) && !text.contains("failed with"), "{text}");
    assert_eq!(door_for(Some("cuda")).err().expect("same side").name, NO_DRIVER.1);
    assert_eq!(status.kind, None);
    assert_eq!(status.error, Some(e));
    assert!(status.devices.is_empty());
}
