//! Stream names and the POSIX shared-memory names they map to.

use crate::error::{Error, Result};

/// Prefix of every framebus segment in /dev/shm.
pub const PREFIX: &str = "framebus.";
/// Directory where Linux exposes POSIX shared memory.
pub const SHM_DIR: &str = "/dev/shm";
/// Longest accepted stream name.
pub const MAX_NAME_LEN: usize = 200;

/// Checks a user-visible stream name: 1..=200 characters of `[A-Za-z0-9._-]`, no leading dot.
pub fn validate(name: &str) -> Result<()> {
    let bad = |reason| Err(Error::InvalidName { name: name.to_owned(), reason });
    if name.is_empty() {
        return bad("it is empty; use 1 to 200 characters of [A-Za-z0-9._-]");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("it is longer than 200 characters");
    }
    if name.starts_with('.') {
        return bad("it starts with a dot");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return bad("only letters, digits, '.', '_' and '-' are allowed (no '/', spaces or NUL)");
    }
    Ok(())
}

/// The name passed to shm_open: `/framebus.<name>`.
pub fn shm_name(name: &str) -> String {
    format!("/{PREFIX}{name}")
}

/// The file that backs the segment on Linux: `/dev/shm/framebus.<name>`.
pub fn path(name: &str) -> String {
    format!("{SHM_DIR}/{PREFIX}{name}")
}

/// The stream name behind a /dev/shm file name, if it is one of ours.
pub fn from_file_name(file: &str) -> Option<&str> {
    let name = file.strip_prefix(PREFIX)?;
    validate(name).ok().map(|_| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names() {
        for ok in ["a", "cam0", "render.left_eye-2", &"x".repeat(200)] {
            validate(ok).unwrap();
        }
    }

    #[test]
    fn rejects_dangerous_names() {
        for bad in ["", ".hidden", "a/b", "..", "../etc", "nul\0x", "sp ace", "é", &"x".repeat(201)] {
            assert!(matches!(validate(bad), Err(Error::InvalidName { .. })), "{bad:?}");
        }
    }

    #[test]
    fn maps_to_dev_shm() {
        assert_eq!(path("cam"), "/dev/shm/framebus.cam");
        assert_eq!(shm_name("cam"), "/framebus.cam");
        assert_eq!(from_file_name("framebus.cam"), Some("cam"));
        assert_eq!(from_file_name("other.cam"), None);
    }
}
