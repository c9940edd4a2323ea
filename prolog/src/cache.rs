//! The validity cache (`<state_dir>/last-pass.json`): which GPU sets passed, when, under which
//! settings. A job whose GPUs are all inside one recorded set that passed within the window, with
//! the same worker, worker config and prolog config, skips the measurement. Only PASS is ever
//! recorded; a FAIL deletes the file.

use crate::budget::Deadline;
use crate::state::Lock;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const FILE: &str = "last-pass.json";
/// Recorded sets kept (one per distinct GPU set of recent jobs on a shared node).
const MAX_ENTRIES: usize = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When the passing measurement started (seconds since the epoch).
    pub passed_unix: f64,
    /// GPU identities (`gpus::NodeGpu::identity`) the measurement covered, sorted.
    pub gpus: Vec<String>,
    /// Settings the pass was measured under (`fingerprint`).
    pub fingerprint: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub entries: Vec<Entry>,
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The largest cache file read (MAX_ENTRIES entries are a few KiB).
const MAX_BYTES: u64 = 64 << 10;

/// Reads the cache; anything unreadable counts as empty (the check then simply runs). Only a
/// regular file (no symlink) owned by us (root) and not writable by others counts: anything
/// else was not written by the prolog.
pub fn read(state_dir: &Path) -> Cache {
    match nccl_check_host::read::regular(&path(state_dir), MAX_BYTES, true) {
        Ok((bytes, m)) if m.uid() == crate::secure::owner() && m.mode() & 0o022 == 0 => {
            serde_json::from_slice(&bytes).unwrap_or_default()
        }
        _ => Cache::default(),
    }
}

/// Writes atomically (new file, then rename), so a concurrent prolog never reads half a file.
fn write(state_dir: &Path, cache: &Cache) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(cache).map_err(std::io::Error::other)?;
    crate::secure::write_atomic(&path(state_dir), &text, 0o644)
}

/// Read, change and write the cache under the state directory's lock (waiting until
/// `deadline` at most).
pub fn update(
    state_dir: &Path,
    deadline: Deadline,
    change: impl FnOnce(&mut Cache),
) -> std::io::Result<()> {
    let _lock = Lock::acquire(state_dir, deadline)?;
    let mut c = read(state_dir);
    change(&mut c);
    write(state_dir, &c)
}

impl Cache {
    /// Age in seconds of a pass that covers all of `gpus` within `window_s`, if any.
    pub fn lookup(
        &self,
        gpus: &[String],
        fingerprint: &str,
        now: f64,
        window_s: u64,
    ) -> Option<f64> {
        if gpus.is_empty() || window_s == 0 {
            return None;
        }
        self.entries
            .iter()
            .filter(|e| e.fingerprint == fingerprint)
            .filter(|e| gpus.iter().all(|g| e.gpus.contains(g)))
            .map(|e| now - e.passed_unix)
            // A clock that went backwards proves nothing.
            .filter(|&age| (0.0..window_s as f64).contains(&age))
            .reduce(f64::min)
    }

    /// Forgets every pass that included one of `gpus` (a FAIL of them); all passes when the
    /// failed GPUs are not known.
    pub fn forget(&mut self, gpus: Option<&[String]>) {
        match gpus {
            Some(g) => self
                .entries
                .retain(|e| !e.gpus.iter().any(|x| g.contains(x))),
            None => self.entries.clear(),
        }
    }

    /// Records a pass of `gpus`; sets it covers are dropped, the oldest go beyond MAX_ENTRIES.
    pub fn record(&mut self, gpus: &[String], fingerprint: &str, passed_unix: f64) {
        let mut set = gpus.to_vec();
        set.sort();
        set.dedup();
        self.entries
            .retain(|e| !(e.fingerprint == fingerprint && e.gpus.iter().all(|g| set.contains(g))));
        self.entries.push(Entry {
            passed_unix,
            gpus: set,
            fingerprint: fingerprint.to_string(),
        });
        let excess = self.entries.len().saturating_sub(MAX_ENTRIES);
        self.entries.drain(..excess);
    }
}

/// A short hash of everything a pass depends on besides the GPUs: the prolog's settings and the
/// worker binary and config file as they are on disk (size and mtime; a `stat` each).
pub fn fingerprint(settings: &str, files: &[&Path]) -> String {
    let mut text = settings.to_string();
    for f in files {
        let stamp = std::fs::metadata(f)
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                format!("{}:{}.{}", m.len(), m.mtime(), m.mtime_nsec())
            })
            .unwrap_or_else(|_| "absent".into());
        text.push_str(&format!("\n{}={stamp}", f.display()));
    }
    format!("{:016x}", fnv1a(text.as_bytes()))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_recent_pass_of_the_same_gpus_is_valid() {
        let mut c = Cache::default();
        c.record(&ids(&["GPU-b", "GPU-a"]), "f", 1000.0);
        assert_eq!(
            c.lookup(&ids(&["GPU-a", "GPU-b"]), "f", 1010.0, 600),
            Some(10.0)
        );
        assert_eq!(c.lookup(&ids(&["GPU-b"]), "f", 1010.0, 600), Some(10.0));
    }

    #[test]
    fn an_expired_pass_is_not_valid() {
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a"]), "f", 1000.0);
        assert_eq!(c.lookup(&ids(&["GPU-a"]), "f", 1600.0, 600), None);
        assert_eq!(c.lookup(&ids(&["GPU-a"]), "f", 1599.0, 600), Some(599.0));
    }

    #[test]
    fn a_different_or_extra_gpu_is_not_covered() {
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a", "GPU-b"]), "f", 1000.0);
        assert_eq!(c.lookup(&ids(&["GPU-a", "GPU-c"]), "f", 1001.0, 600), None);
        // Two passes of halves do not prove the links between them.
        c.record(&ids(&["GPU-c", "GPU-d"]), "f", 1000.0);
        assert_eq!(c.lookup(&ids(&["GPU-b", "GPU-c"]), "f", 1001.0, 600), None);
    }

    #[test]
    fn other_settings_or_a_clock_going_back_or_no_window_invalidate() {
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a"]), "f", 1000.0);
        assert_eq!(c.lookup(&ids(&["GPU-a"]), "g", 1001.0, 600), None);
        assert_eq!(c.lookup(&ids(&["GPU-a"]), "f", 999.0, 600), None);
        assert_eq!(c.lookup(&ids(&["GPU-a"]), "f", 1001.0, 0), None);
        assert_eq!(c.lookup(&[], "f", 1001.0, 600), None);
    }

    #[test]
    fn a_larger_pass_replaces_the_sets_it_covers_and_the_list_is_bounded() {
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a"]), "f", 1.0);
        c.record(&ids(&["GPU-a", "GPU-b"]), "f", 2.0);
        assert_eq!(c.entries.len(), 1);
        for i in 0..20 {
            c.record(&[format!("GPU-{i}")], "f", 3.0 + f64::from(i));
        }
        assert_eq!(c.entries.len(), MAX_ENTRIES);
        assert_eq!(
            c.entries.last().map(|e| e.gpus.clone()),
            Some(ids(&["GPU-19"]))
        );
    }

    #[test]
    fn a_fail_forgets_only_the_passes_of_its_gpus() {
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a", "GPU-b"]), "f", 1.0);
        c.record(&ids(&["GPU-c", "GPU-d"]), "f", 1.0);
        c.forget(Some(&ids(&["GPU-c", "GPU-d"])));
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.entries[0].gpus, ids(&["GPU-a", "GPU-b"]));
        c.forget(None);
        assert!(c.entries.is_empty());
    }

    #[test]
    fn updated_under_the_lock_then_read_back() {
        let dir = nccl_check_host::test_support::scratch_dir("cache-rw");
        let far = || Deadline::after(std::time::Duration::from_secs(5));
        update(&dir, far(), |c| c.record(&ids(&["GPU-a"]), "f", 5.0)).expect("write");
        update(&dir, far(), |c| c.record(&ids(&["GPU-b"]), "f", 6.0)).expect("write");
        assert_eq!(read(&dir).entries.len(), 2);
        update(&dir, far(), |c| c.forget(None)).expect("write");
        assert_eq!(read(&dir), Cache::default());
        std::fs::write(path(&dir), b"{garbage").expect("write");
        assert_eq!(read(&dir), Cache::default());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A cache someone else could have written is not believed.
    #[test]
    fn a_group_writable_or_linked_cache_file_counts_as_empty() {
        use std::os::unix::fs::PermissionsExt;
        let dir = nccl_check_host::test_support::scratch_dir("cache-forged");
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a"]), "f", 5.0);
        write(&dir, &c).expect("write");
        assert_eq!(read(&dir), c);
        std::fs::set_permissions(path(&dir), std::fs::Permissions::from_mode(0o666))
            .expect("chmod");
        assert_eq!(read(&dir), Cache::default());
        std::fs::rename(path(&dir), dir.join("elsewhere")).expect("mv");
        std::os::unix::fs::symlink(dir.join("elsewhere"), path(&dir)).expect("ln");
        std::fs::set_permissions(
            dir.join("elsewhere"),
            std::fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        assert_eq!(read(&dir), Cache::default());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_fingerprint_changes_with_settings_and_files() {
        let a = fingerprint("x", &[Path::new("/nonexistent")]);
        assert_eq!(a, fingerprint("x", &[Path::new("/nonexistent")]));
        assert_ne!(a, fingerprint("y", &[Path::new("/nonexistent")]));
        assert_ne!(a, fingerprint("x", &[Path::new("/")]));
    }
}
