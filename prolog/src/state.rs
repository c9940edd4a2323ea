//! The state directory (`state_dir`, default /var/lib/nccl-check): checked root-only
//! ([`crate::secure`]), one private directory per run for the worker's report, log and temp files
//! (`runs/<job-N|recheck|nojob>.<random>/`, so concurrent jobs never share a file), and one lock
//! per node for everything read-modify-write (cache, drain marker, resume) between prologs of
//! jobs that start on the node at the same moment.

use crate::budget::Deadline;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Where the per-run directories live.
pub const RUNS: &str = "runs";
/// Finished run directories kept for the admin (newest first); older ones go.
const KEEP_RUNS: usize = 32;

/// Where a run goes when the state dir cannot take it (read-only, full): root's, on tmpfs.
pub const FALLBACK_DIR: &str = "/run/nccl-check";
/// Free space a run needs in its directory: the report and two capped streams of worker.log
/// (crate::worker::LOG_HEAD_BYTES, LOG_TAIL_BYTES), with room to spare.
pub const RUN_SPACE: u64 = 16 << 20;

/// Creates `<state_dir>/runs/<tag>.<random>`, one run's private directory (mode 0700, random
/// name, created with `mkdir`'s O_EXCL semantics): `report.json`, `worker.log`, and the
/// worker's `TMPDIR` (NCCL's log); `tag` is `job-<id>`, `recheck` or `nojob`.
pub fn create_run_dir(state_dir: &Path, tag: &str) -> std::io::Result<PathBuf> {
    let runs = state_dir.join(RUNS);
    crate::secure::ensure_dir(&runs).map_err(std::io::Error::other)?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{tag}."))
        .rand_bytes(8)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&runs)?;
    // Kept after the run for the admin (pruned by age and count, see `prune`).
    Ok(dir.keep())
}

/// [`create_run_dir`] where the file system has [`RUN_SPACE`] free; the error says what
/// could not be written and why.
pub fn create_run_dir_with_room(state_dir: &Path, tag: &str) -> Result<PathBuf, String> {
    let cannot = |e: String| {
        format!(
            "cannot write a run directory in state_dir {}: {e}",
            state_dir.display()
        )
    };
    let free = free_bytes(state_dir).map_err(|e| cannot(e.to_string()))?;
    if free < RUN_SPACE {
        return Err(cannot(format!(
            "{free} bytes free, {RUN_SPACE} needed (is the file system full?)"
        )));
    }
    create_run_dir(state_dir, tag).map_err(|e| cannot(e.to_string()))
}

/// Bytes an unprivileged writer could still write on the file system of `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir)?;
    Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// The tag of a run's directory and of its files: `job-<id>` (digits only, else `job-invalid`),
/// `recheck`, or `nojob`.
pub fn tag(job: Option<&str>, recheck: bool) -> String {
    match (recheck, job) {
        (true, _) => "recheck".into(),
        (false, Some(j))
            if !j.is_empty() && j.len() <= 20 && j.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("job-{j}")
        }
        (false, Some(_)) => "job-invalid".into(),
        (false, None) => "nojob".into(),
    }
}

/// Removes run directories beyond the newest [`KEEP_RUNS`], but only those older than
/// `older_than` (a run still in progress is never younger than its budget allows). Called under
/// the lock; errors are ignored (pruning is housekeeping).
pub fn prune(state_dir: &Path, older_than: Duration) {
    let Ok(entries) = std::fs::read_dir(state_dir.join(RUNS)) else {
        return;
    };
    let mut dirs: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.path().symlink_metadata().ok()?;
            let t = m.modified().ok()?;
            m.is_dir().then(|| (t, e.path()))
        })
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    let now = SystemTime::now();
    for (t, p) in dirs.into_iter().skip(KEEP_RUNS) {
        if now.duration_since(t).is_ok_and(|age| age > older_than) {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// An exclusive `flock` on `<dir>/lock`, released on drop.
pub struct Lock {
    _file: Flock<File>,
}

impl Lock {
    /// Waits for the lock until `deadline` at the latest.
    pub fn acquire(dir: &Path, deadline: Deadline) -> std::io::Result<Lock> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join("lock"))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(Lock { _file: locked }),
                Err((f, Errno::EWOULDBLOCK)) => file = f,
                Err((_, e)) => return Err(e.into()),
            }
            if deadline.passed() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{}/lock still held by another prolog at the end of the budget",
                        dir.display()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(5).min(deadline.remaining()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secure::write_atomic;
    use nccl_check_host::test_support::scratch_dir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_no_temp() {
        let dir = scratch_dir("state-atomic");
        let p = dir.join("x.json");
        write_atomic(&p, b"one", 0o644).expect("write");
        write_atomic(&p, b"two", 0o644).expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir).expect("ls").flatten().collect();
        assert_eq!(names.len(), 1);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_lock_is_exclusive_and_its_wait_ends_at_the_deadline() {
        let dir = scratch_dir("state-lock");
        let held = Lock::acquire(&dir, Deadline::after(Duration::from_millis(10))).expect("lock");
        let t = std::time::Instant::now();
        let second = Lock::acquire(&dir, Deadline::after(Duration::from_millis(50)));
        assert!(second.is_err(), "a second holder must wait");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(held);
        // Seconds, not 50 ms: another test thread's fork holds a copy of the descriptor until its
        // exec, a moment that can stretch on a loaded machine.
        Lock::acquire(&dir, Deadline::after(Duration::from_secs(2))).expect("free again");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn run_directories_are_private_distinct_and_named_by_job() {
        let dir = scratch_dir("state-runs");
        let a = create_run_dir(&dir, &tag(Some("42"), false)).expect("run dir");
        let b = create_run_dir(&dir, &tag(Some("42"), false)).expect("run dir");
        assert_ne!(a, b);
        let name = a.file_name().expect("name").to_string_lossy().into_owned();
        assert!(name.starts_with("job-42."), "{name}");
        let mode = std::fs::metadata(&a).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(tag(Some("../x"), false), "job-invalid");
        assert_eq!(tag(Some("7"), true), "recheck");
        assert_eq!(tag(None, false), "nojob");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn pruning_keeps_the_newest_and_every_young_run() {
        let dir = scratch_dir("state-prune");
        for i in 0..(KEEP_RUNS + 5) {
            create_run_dir(&dir, &format!("job-{i}")).expect("run dir");
        }
        prune(&dir, Duration::from_secs(3600));
        let n = std::fs::read_dir(dir.join(RUNS)).expect("ls").count();
        assert_eq!(n, KEEP_RUNS + 5, "young runs are never pruned");
        prune(&dir, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        prune(&dir, Duration::ZERO);
        let n = std::fs::read_dir(dir.join(RUNS)).expect("ls").count();
        assert_eq!(n, KEEP_RUNS);
        std::fs::remove_dir_all(&dir).ok();
    }
}
