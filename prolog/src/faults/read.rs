//! Bounded reads of the kernel's small files (sysfs counters, the boot id) that never block:
//! opened `O_NONBLOCK` (a FIFO planted where a counter should be cannot hang the prolog),
//! regular files only, at most [`MAX_SMALL`] bytes, and only files no other user can write
//! (owned by root or by this process, not group- or world-writable: sysfs and procfs files are
//! root's, mode 0444 or 0644), so a counter is the kernel's or the device's word, never a user's.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most read of one small file: sysfs counter files are well under 1 KiB.
pub const MAX_SMALL: u64 = 64 * 1024;

/// Opens `path` for reading without blocking (FIFOs, devices).
pub fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// The text of a small regular file (lossy UTF-8), or why not.
pub fn small(path: &Path) -> Result<String, String> {
    let (bytes, md) = nccl_check_host::read::regular(path, MAX_SMALL, false)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writable_by_others(&md).map_err(|why| format!("{}: {why}: not evidence", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Err when a user other than root and this process could have written the file.
fn writable_by_others(md: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    if md.uid() != 0 && md.uid() != me {
        return Err(format!("owned by uid {}", md.uid()));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!(
            "writable by group or others (mode {:o})",
            md.mode() & 0o777
        ));
    }
    Ok(())
}

/// The first whitespace-separated word of a small file, e.g. a counter's value.
pub fn number(path: &Path) -> Result<u64, String> {
    let text = small(path)?;
    let word = text.split_whitespace().next().unwrap_or("");
    word.parse()
        .map_err(|_| format!("{}: not a number: {:?}", path.display(), cut(word)))
}

/// At most 40 characters of `s`, for messages about bad input.
pub fn cut(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn make_fifo(p: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    #[test]
    fn a_fifo_a_directory_and_garbage_are_errors_not_hangs_or_panics() {
        let d = nccl_check_host::test_support::scratch_dir("faults-read");
        let fifo = d.join("fifo");
        make_fifo(&fifo);
        assert!(small(&fifo).unwrap_err().contains("not a regular file"));
        assert!(small(&d).is_err());
        assert!(small(&d.join("absent")).is_err());
        std::fs::write(d.join("bin"), [0xff, 0x00, 0xfe, b'\n']).expect("write");
        assert!(number(&d.join("bin")).unwrap_err().contains("not a number"));
        std::fs::write(d.join("n"), "42\n").expect("write");
        assert_eq!(number(&d.join("n")), Ok(42));
        // A counter another user could have written is no evidence.
        use std::os::unix::fs::PermissionsExt;
        for mode in [0o666, 0o664, 0o646] {
            std::fs::set_permissions(d.join("n"), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let e = number(&d.join("n")).unwrap_err();
            assert!(e.contains("writable by group or others"), "{mode:o}: {e}");
        }
        std::fs::set_permissions(d.join("n"), std::fs::Permissions::from_mode(0o444))
            .expect("chmod");
        assert_eq!(number(&d.join("n")), Ok(42));
        if unsafe { libc::geteuid() } == 0 {
            // Root can give the file away: a user's file is no evidence.
            std::os::unix::fs::chown(d.join("n"), Some(65534), None).expect("chown");
            assert!(number(&d.join("n"))
                .unwrap_err()
                .contains("owned by uid 65534"));
        }
        std::fs::remove_dir_all(&d).ok();
    }
}
