//! Bounded reads of small kernel-provided files (sysfs, procfs, Slurm's config): a file larger
//! than its bound is an error, never read whole, and a name that is not one path component is
//! refused, so a directory entry cannot walk the reader out of its root.

use std::fs::File;
use std::io::{self, Read};
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

/// A config file whole, at most `max` bytes, as UTF-8 (lossy) and untrimmed, so its line
/// numbers stay the file's. Only a regular file is opened: a FIFO planted where a config
/// includes a directory would block the read.
pub fn text(path: &Path, max: u64) -> io::Result<String> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut buf = Vec::new();
    File::open(path)?.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        let msg = format!("larger than {max} bytes");
        return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
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
