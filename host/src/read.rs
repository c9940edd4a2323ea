//! Bounded reads: of small kernel-provided files (sysfs, procfs), and of files others may have
//! put in place ([`regular`]: configs, reports, the prolog's state and counters, a regular file
//! only, opened non-blocking). A file larger than its bound is an error, never read whole, and a
//! name that is not one path component is refused, so a directory entry cannot walk the reader
//! out of its root.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Largest sysfs/procfs attribute read (they are one line; the kernel caps them at a page).
pub const ATTR_MAX: u64 = 4096;
/// Largest directory listing walked (ports, devices, GPUs); more entries are an error.
pub const DIR_MAX: usize = 1024;

/// The contents of `path`, at most `max` bytes, as UTF-8 (lossy), trimmed.
pub fn small(path: &Path, max: u64) -> io::Result<String> {
    let mut buf = Vec::new();
    File::open(path)?.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(String::from_utf8_lossy(&buf).trim().to_string())
}

/// Why [`regular`] read nothing.
#[derive(Debug)]
pub enum FileError {
    /// Opening or reading failed: `NotFound` when absent, `ELOOP` for a link with `no_follow`.
    Io(io::Error),
    /// A FIFO, a device or a directory: refused, never waited on.
    NotAFile,
    /// Larger than the bound (the number); never read whole.
    TooLarge(u64),
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileError::Io(e) => e.fmt(f),
            FileError::NotAFile => f.write_str("not a regular file"),
            FileError::TooLarge(max) => write!(f, "larger than {max} bytes"),
        }
    }
}

impl From<FileError> for io::Error {
    fn from(e: FileError) -> io::Error {
        match e {
            FileError::Io(e) => e,
            FileError::NotAFile => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
            FileError::TooLarge(_) => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        }
    }
}

/// The bytes of the regular file `path`, at most `max`, and its metadata: the one reader of
/// files others may have put in place (configs, reports, counters). Opened non-blocking and
/// checked once open, so a FIFO planted where a file should be cannot hang the reader; with
/// `no_follow`, never through a symlink.
pub fn regular(path: &Path, max: u64, no_follow: bool) -> Result<(Vec<u8>, Metadata), FileError> {
    let nofollow = if no_follow { libc::O_NOFOLLOW } else { 0 };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | nofollow)
        .open(path)
        .map_err(FileError::Io)?;
    let meta = file.metadata().map_err(FileError::Io)?;
    if !meta.is_file() {
        return Err(FileError::NotAFile);
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(FileError::Io)?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge(max));
    }
    Ok((bytes, meta))
}

/// A config file whole ([`regular`]), as UTF-8 (lossy) and untrimmed, so its line numbers stay
/// the file's.
pub fn text(path: &Path, max: u64) -> io::Result<String> {
    let (bytes, _) = regular(path, max, false)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A sysfs attribute (one short line).
pub fn attr(path: &Path) -> io::Result<String> {
    small(path, ATTR_MAX)
}

/// The entry names of `dir`, sorted, each one plain path component; at most `DIR_MAX`.
pub fn entries(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.is_empty() || name.starts_with('.') || name.contains('/') {
            continue;
        }
        if names.len() == DIR_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} has more than {DIR_MAX} entries", dir.display()),
            ));
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Why `f` cannot be run (slurmd's Prolog= entries, the prolog's worker); None when it is an
/// executable file (links followed).
pub fn not_runnable(f: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(f) {
        Err(_) if std::fs::symlink_metadata(f).is_ok() => Some("a link to nothing".into()),
        Err(_) => Some("no such file".into()),
        Ok(m) if !m.is_file() => Some("not a file".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some("not executable".into()),
        Ok(_) => None,
    }
}

/// `root` joined with a path given as absolute (`/sys/class/net`), so tests point it at a tree.
pub fn under(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_its_bound_is_an_error_and_entries_are_sorted() {
        let dir = std::env::temp_dir().join(format!("facts-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b"), "x".repeat(10)).unwrap();
        std::fs::write(dir.join("a"), " 4: ACTIVE\n").unwrap();
        assert_eq!(attr(&dir.join("a")).unwrap(), "4: ACTIVE");
        assert!(small(&dir.join("b"), 9).is_err());
        assert_eq!(small(&dir.join("b"), 10).unwrap().len(), 10);
        assert_eq!(entries(&dir).unwrap(), vec!["a", "b"]);
        assert_eq!(
            under(Path::new("/x"), "/sys/class"),
            Path::new("/x/sys/class")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
