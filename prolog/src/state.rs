//! The state directory (`state_dir`, default /var/lib/nccl-check): created root-only, files in it
//! replaced atomically, and one lock per node for the decisions that must not race (drain,
//! resume) between prologs of jobs that start on the node at the same moment.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Creates `dir` (mode 0755, root's) if missing.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename, so readers
/// see the old or the new file, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// An exclusive `flock` on `<dir>/lock`, released on drop.
pub struct Lock {
    _file: File,
}

impl Lock {
    /// Waits at most `wait` for the lock.
    pub fn acquire(dir: &Path, wait: Duration) -> std::io::Result<Lock> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("lock"))?;
        let deadline = Instant::now() + wait;
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Lock { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e);
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{}/lock held longer than {:?}", dir.display(), wait),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("nccl-check-state-{}", std::process::id()));
        ensure_dir(&dir).expect("mkdir");
        let p = dir.join("x.json");
        write_atomic(&p, b"one", 0o644).expect("write");
        write_atomic(&p, b"two", 0o644).expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir).expect("ls").flatten().collect();
        assert_eq!(names.len(), 1);
        let held = Lock::acquire(&dir, Duration::from_millis(10)).expect("lock");
        let second = Lock::acquire(&dir, Duration::from_millis(50));
        assert!(second.is_err(), "a second holder must wait");
        drop(held);
        Lock::acquire(&dir, Duration::from_millis(50)).expect("free again");
        std::fs::remove_dir_all(&dir).ok();
    }
}
