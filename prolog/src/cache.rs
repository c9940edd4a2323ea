//! The validity cache (`<state_dir>/last-pass.json`): which GPU sets passed, when, under which
//! settings. A job whose GPUs are all inside one recorded set that passed within the window, with
//! the same worker, worker config and prolog config, skips the measurement. Only PASS is ever
//! recorded; a FAIL deletes the file.

use serde::{Deserialize, Serialize};
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

/// Reads the cache; anything unreadable counts as empty (the check then simply runs).
pub fn read(state_dir: &Path) -> Cache {
    std::fs::read(path(state_dir))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes atomically (temp file, then rename), so a concurrent prolog never reads half a file.
pub fn write(state_dir: &Path, cache: &Cache) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(cache).map_err(std::io::Error::other)?;
    crate::state::write_atomic(&path(state_dir), &text, 0o644)
}

/// Forgets every pass.
pub fn clear(state_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path(state_dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
    fn written_then_read_back_and_cleared() {
        let dir = std::env::temp_dir().join(format!("nccl-check-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut c = Cache::default();
        c.record(&ids(&["GPU-a"]), "f", 5.0);
        write(&dir, &c).expect("write");
        assert_eq!(read(&dir), c);
        clear(&dir).expect("clear");
        clear(&dir).expect("clear twice");
        assert_eq!(read(&dir), Cache::default());
        std::fs::write(path(&dir), b"{garbage").expect("write");
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
