//! Where the gate's state is visible besides syslog: `<state_dir>/gate.json` (the node's report
//! of the last prolog run: state, the verdict line, the drain reason and what came of it, the
//! run's directory) and the `nccl_check_gate_state` metric ([`crate::metrics`]). A gate that is
//! off (broken config) or in ERROR says so there, not only in a log nobody reads.

use crate::decide::Mode;
use crate::job_env::Facts;
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const FILE: &str = "gate.json";

/// The gate's state after one run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum GateState {
    /// The job's GPUs passed (measured or cached).
    Pass,
    /// They failed: the node was (or would be) drained.
    Fail,
    /// The check could not be made (setup problem), or found the node only busy and left it
    /// in service: nothing drained, the hardware not judged.
    Error,
    /// The gate is off: the config cannot be used, nothing is checked.
    Disabled,
    /// This run checked nothing (the job has no GPUs under `gpus = "job"`); the message says why.
    Skipped,
}

/// The content of `gate.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub state: GateState,
    /// The verdict line (what the prolog printed on stderr).
    pub message: String,
    pub node: String,
    pub job: Option<String>,
    pub time_unix: f64,
    /// The FAIL's drain reason (the `sinfo -R` text) and what came of the request.
    pub drain_reason: Option<String>,
    pub drain: Option<String>,
    /// The run's private directory (report.json, worker.log).
    pub run_dir: Option<PathBuf>,
    /// Which run wrote it: "prolog", "epilog" or "recheck".
    pub context: &'static str,
    /// The hardware fault pass: each source, readable or not, its cost, and what it found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<crate::faults::Summary>,
    /// Why `metrics_file` could not be written (the check ran; its metrics went to the
    /// fallback file in the state directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_error: Option<String>,
}

/// Now, as gate.json and the metrics record a time.
pub fn now_unix() -> f64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Status {
    /// This run in `state` saying `message`: nothing drained, no run directory, no faults (the
    /// callers that have them set them).
    pub fn new(state: GateState, message: &str, facts: &Facts, mode: Mode) -> Status {
        Status {
            state,
            message: message.to_string(),
            node: facts.node.clone(),
            job: facts.job.clone(),
            time_unix: now_unix(),
            drain_reason: None,
            drain: None,
            run_dir: None,
            context: mode.into(),
            faults: None,
            metrics_error: None,
        }
    }
}

pub fn write(state_dir: &Path, s: &Status) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
    // A text file ends with a newline: `cat gate.json` (an admin step, docs/admin.md) must not glue the
    // admin's next prompt or `sinfo -R`'s header to the closing brace.
    text.push(b'\n');
    crate::secure::write_atomic(&state_dir.join(FILE), &text, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_names_the_state_and_the_reason() {
        let d = nccl_check_host::test_support::scratch_dir("status");
        let s = Status {
            state: GateState::Disabled,
            message: "ERROR config: x".into(),
            node: "n1".into(),
            job: Some("4".into()),
            time_unix: 1.0,
            drain_reason: None,
            drain: None,
            run_dir: None,
            context: "prolog",
            faults: None,
            metrics_error: None,
        };
        write(&d, &s).expect("write");
        let bytes = std::fs::read(d.join(FILE)).expect("read");
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(v["state"], "disabled");
        assert_eq!(v["job"], "4");
        assert_eq!(
            bytes.last(),
            Some(&b'\n'),
            "gate.json ends without a newline"
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
