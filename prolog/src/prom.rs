//! The Prometheus text format of the prolog's two textfiles (the gate's, `metrics.rs`; the
//! fault pass's, `faults/metrics.rs`): a gauge's head, and where a textfile of its own lies
//! beside the gate's (same directory, so node_exporter's textfile collector reads them all).

use std::fmt::Write;
use std::path::{Path, PathBuf};

/// A gauge's `# HELP` and `# TYPE` lines (`help` ends the HELP line as written).
pub fn gauge(t: &mut String, name: &str, help: &str) {
    let _ = writeln!(t, "# HELP {name} {help}");
    let _ = writeln!(t, "# TYPE {name} gauge");
}

/// A gauge of one value, no labels: its head and its line.
pub fn gauge_of(t: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    gauge(t, name, help);
    let _ = writeln!(t, "{name} {value}");
}

/// Writes a textfile atomically (the collector never reads half a file), readable by all.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    crate::secure::write_atomic(path, text.as_bytes(), 0o644)
}

/// `x.prom` → `x-WHAT.prom`.
pub fn beside(metrics_file: &Path, what: &str) -> PathBuf {
    let stem = metrics_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    metrics_file.with_file_name(format!("{stem}-{what}.prom"))
}
