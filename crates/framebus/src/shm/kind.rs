//! Telling a segment file from other things that may sit in /dev/shm under a framebus name.
//!
//! Every framebus segment is a regular file. A FIFO, socket, directory, device file or symbolic
//! link named `framebus.<name>` belongs to someone else: framebus never opens, describes or
//! removes it. Checks use `lstat` (a symbolic link is judged itself, never what it points to),
//! and a segment opened anyway is checked again on its descriptor (`fstat`), so an entry
//! replaced between the two is caught too.

use std::os::unix::fs::FileTypeExt;

/// What the entry at `path` is, in words, when it is not a regular file ("a FIFO (named
/// pipe)", "a socket", "a directory", "a symbolic link", ...); None for a regular file or an
/// entry that is not there (or cannot be looked at).
pub fn not_regular(path: &str) -> Option<&'static str> {
    let kind = std::fs::symlink_metadata(path).ok()?.file_type();
    describe(
        kind.is_file(),
        kind.is_symlink(),
        kind.is_dir(),
        kind.is_fifo(),
        kind.is_socket(),
        kind.is_char_device(),
        kind.is_block_device(),
    )
}

/// What a file of `st_mode` is, in words, when it is not a regular file (see [`not_regular`]).
pub fn not_regular_mode(st_mode: libc::mode_t) -> Option<&'static str> {
    let is = |t: libc::mode_t| st_mode & libc::S_IFMT == t;
    describe(
        is(libc::S_IFREG),
        is(libc::S_IFLNK),
        is(libc::S_IFDIR),
        is(libc::S_IFIFO),
        is(libc::S_IFSOCK),
        is(libc::S_IFCHR),
        is(libc::S_IFBLK),
    )
}

fn describe(file: bool, link: bool, dir: bool, fifo: bool, socket: bool, chr: bool, blk: bool) -> Option<&'static str> {
    Some(match () {
        _ if file => return None,
        _ if link => "a symbolic link",
        _ if dir => "a directory",
        _ if fifo => "a FIFO (named pipe)",
        _ if socket => "a socket",
        _ if chr => "a character device",
        _ if blk => "a block device",
        _ => "not a regular file",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_kinds_apart_without_following_links() {
        let dir = std::env::temp_dir().join(format!("framebus-kind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
        assert_eq!(not_regular(&s(&file)), None);
        assert_eq!(not_regular(&s(&link)), Some("a symbolic link"));
        assert_eq!(not_regular(&s(&dir)), Some("a directory"));
        assert_eq!(not_regular(&s(&fifo)), Some("a FIFO (named pipe)"));
        assert_eq!(not_regular(&s(&dir.join("missing"))), None);
        assert_eq!(not_regular_mode(libc::S_IFSOCK | 0o600), Some("a socket"));
        assert_eq!(not_regular_mode(libc::S_IFREG | 0o600), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
