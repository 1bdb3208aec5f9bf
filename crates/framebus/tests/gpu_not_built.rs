//! A framebus built without GPU doors (`cargo test -p framebus --no-default-features --test
//! gpu_not_built`): host streams work as ever, and every request for a device stream or device
//! memory is refused with an error that says GPU streams were not built, carrying the door's
//! code and name (never a panic, never a segment left behind). Built with a door, this file is
//! empty.
#![cfg(not(any(feature = "cuda", feature = "fake-cuda")))]

use framebus::gpu::door::NOT_BUILT;
use framebus::gpu::{door, door_for, door_status, BUILT};
use framebus::ring::{DeviceAccess, DeviceSpec};
use framebus::{CreateOptions, Deadline, DeviceBuffer, DeviceStream, Error, FrameInfo, ReaderMode, Stream, StreamSpec};

fn device_spec() -> StreamSpec {
    StreamSpec { device: Some(DeviceSpec { ordinal: 0, cpu_mirror: false }), ..StreamSpec::new("|u1", 1, vec![4, 4]) }
}

fn says_not_built(e: &Error) {
    let text = e.to_string();
    assert!(text.contains("GPU streams were not built"), "{text}");
    let door = e.door_error().expect("the door's error rides along");
    assert_eq!((door.code, door.name.as_str()), (NOT_BUILT.0, NOT_BUILT.1));
}

#[test]
fn no_door_refuses_device_streams_clearly_and_host_streams_work() {
    assert!(BUILT.is_empty());
    for setting in [None, Some("cuda"), Some("fake")] {
        let e = door_for(setting).err().expect("no door in this build");
        assert_eq!(e.name, NOT_BUILT.1);
        assert!(e.to_string().contains("GPU streams were not built"), "{e}");
    }
    assert_eq!(door().err().expect("no door").name, NOT_BUILT.1);
    let status = door_status();
    assert_eq!(status.kind, None);
    assert_eq!(status.error.as_ref().map(|e| e.code), Some(NOT_BUILT.0));

    let name = format!("t-not-built-{}", std::process::id());
    let e = DeviceStream::create(&name, &device_spec(), &CreateOptions::default()).expect_err("no device stream");
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e:?}");
    says_not_built(&e);
    let e = Stream::create(&name, &device_spec(), &CreateOptions::default()).err().expect("no device stream either way");
    says_not_built(&e);
    assert!(!std::path::Path::new(&format!("/dev/shm/framebus.{name}")).exists(), "nothing is left behind");
    says_not_built(&DeviceBuffer::allocate(0, 64).expect_err("no device memory"));

    let host = Stream::create(&name, &StreamSpec::new("|u1", 1, vec![4, 4]), &CreateOptions::default()).expect("host streams work");
    host.write(&[7u8; 16], &FrameInfo::default(), Deadline::never(), &mut || true).expect("write");
    let reader = Stream::open_with(&name, ReaderMode::Latest, DeviceAccess::Auto).expect("open");
    assert_eq!(reader.read_latest(|f| f.payload.to_vec()).expect("read"), vec![7u8; 16]);
    assert!(DeviceStream::from_ring(std::sync::Arc::new(reader)).is_err(), "a host stream is no device stream");
    framebus::unlink(&name).expect("unlink");
}
