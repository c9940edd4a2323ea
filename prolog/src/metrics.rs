//! The optional Prometheus textfile (`metrics_file`) for node_exporter's textfile collector:
//! the gate's state (`nccl_check_gate_state`: pass, fail, error, or disabled when the config
//! cannot be used), the last measured verdict, busbw per collective, when and how long. Written atomically (temp
//! file + rename in the same directory), as the collector requires. A cached pass does not
//! rewrite it: the numbers stay those of the last real measurement, and `cache_seconds` says
//! how long after it such a pass may answer (the NcclCheckNoGateRunOnAllocatedNode alert waits
//! that long).

use crate::prom::{gauge, gauge_of};
use crate::status::GateState;
use nccl_check_contract::verdict::Verdict;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use strum::VariantArray;

pub struct Sample<'a> {
    pub gate: GateState,
    /// None: nothing was measured (a disabled gate, or an ERROR before the worker ran).
    pub verdict: Option<Verdict>,
    pub exit_code: Option<i32>,
    pub avg_busbw: &'a BTreeMap<String, f64>,
    /// Per collective, the smallest busbw / floor of the last measurement (`Report::margins`).
    pub margins: &'a BTreeMap<String, f64>,
    pub finished_unix: f64,
    pub duration_s: f64,
    /// The config's `cache_seconds` (None: no config could be read): how long after
    /// `finished_unix` a cached pass may still answer a prolog without rewriting this file, so
    /// an alert on a stale timestamp can wait that long.
    pub cache_seconds: Option<u64>,
}

/// No busbw or margins: nothing was measured.
static NONE: BTreeMap<String, f64> = BTreeMap::new();

impl Sample<'static> {
    /// A run that measured nothing (a disabled gate, skipped, a setup error before the worker,
    /// a hardware fault's FAIL): no numbers, finished now.
    pub fn unmeasured(
        gate: GateState,
        verdict: Option<Verdict>,
        cache_seconds: Option<u64>,
    ) -> Self {
        Sample {
            gate,
            verdict,
            exit_code: None,
            avg_busbw: &NONE,
            margins: &NONE,
            finished_unix: crate::status::now_unix(),
            duration_s: 0.0,
            cache_seconds,
        }
    }
}

/// The file's text.
pub fn render(s: &Sample) -> String {
    let mut t = String::new();
    gauge(
        &mut t,
        "nccl_check_gate_state",
        "State of the nccl-check prolog gate after its last run \
         (1 = this state; disabled = the config cannot be used, nothing is checked).",
    );
    for &g in GateState::VARIANTS {
        let _ = writeln!(
            t,
            "nccl_check_gate_state{{state=\"{}\"}} {}",
            <&str>::from(g),
            u8::from(s.gate == g)
        );
    }
    gauge(
        &mut t,
        "nccl_check_verdict",
        "Last nccl-check prolog verdict on this node (1 = this verdict).",
    );
    for v in [Verdict::Pass, Verdict::Fail, Verdict::Error] {
        let _ = writeln!(
            t,
            "nccl_check_verdict{{verdict=\"{v}\"}} {}",
            u8::from(s.verdict == Some(v))
        );
    }
    let code = s.exit_code.unwrap_or(-1);
    let help = "Exit code of the last worker run (-1 = killed).";
    gauge_of(&mut t, "nccl_check_exit_code", help, code);
    for (name, help, values) in [
        (
            "nccl_check_busbw_gbps",
            "Mean bus bandwidth per collective of the last measurement, GB/s.",
            s.avg_busbw,
        ),
        (
            "nccl_check_busbw_margin",
            "Smallest busbw / floor per collective of the last measurement (1.0 = at the \
             floor; only collectives a floor judged).",
            s.margins,
        ),
    ] {
        gauge(&mut t, name, help);
        for (coll, v) in values {
            if v.is_finite() && coll.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                let _ = writeln!(t, "{name}{{collective=\"{coll}\"}} {v:.3}");
            }
        }
    }
    let name = "nccl_check_last_run_timestamp_seconds";
    let help = "When the last measurement ended.";
    gauge_of(&mut t, name, help, format!("{:.3}", s.finished_unix));
    let name = "nccl_check_duration_seconds";
    let help = "Wall time of the last worker run.";
    gauge_of(&mut t, name, help, format!("{:.3}", s.duration_s));
    if let Some(c) = s.cache_seconds {
        let help = "The gate's cache_seconds: a pass this recent answers a prolog without \
                    measuring or rewriting this file.";
        gauge_of(&mut t, "nccl_check_cache_seconds", help, c);
    }
    t
}

/// The fallback file's name in the state directory: where a run's metrics go when
/// `metrics_file` cannot be written (the check runs all the same).
pub const FALLBACK: &str = "nccl_check.prom";

/// [`render`] plus `nccl_check_metrics_file_error 1` and why (in the HELP line: a label would
/// make a new series per message).
pub fn render_fallback(s: &Sample, why: &str) -> String {
    let mut t = render(s);
    let why: String = why
        .chars()
        .map(|c| if c.is_control() || c == '\\' { ' ' } else { c })
        .collect();
    let help = format!(
        "1: metrics_file could not be written, these metrics are the fallback in the state \
         directory. Last reason: {why}"
    );
    gauge_of(&mut t, "nccl_check_metrics_file_error", &help, 1);
    t
}

/// `x.prom` → `x-node.prom`: the node's Slurm state as the last recheck read it, in its own file
/// beside the gate's (a recheck of a busy node measures nothing and must not touch the gate's).
pub fn node_path(metrics_file: &Path) -> PathBuf {
    crate::prom::beside(metrics_file, "node")
}

/// Whether Slurm has jobs on the node (State ALLOCATED, MIXED or COMPLETING), and when that was
/// read: the fact the alert "no gate run in a day on an allocated node" joins with
/// `nccl_check_last_run_timestamp_seconds`. Written by `--recheck` (the HealthCheckProgram,
/// every HealthCheckInterval), from the `scontrol show node` it asks anyway.
pub fn render_node(allocated: bool, slurm_state: &str, now_unix: f64) -> String {
    let mut t = String::new();
    gauge(
        &mut t,
        "nccl_check_node_allocated",
        "Whether Slurm runs jobs on this node (State ALLOCATED, \
         MIXED or COMPLETING), as nccl-check-prolog --recheck last read it.",
    );
    // The state word goes into a label only when it is Slurm's alphabet (IDLE+DRAIN, MIXED...).
    let state_ok = !slurm_state.is_empty()
        && slurm_state.len() <= 64
        && slurm_state
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '+' || c == '_');
    let label = if state_ok {
        format!("{{slurm_state=\"{slurm_state}\"}}")
    } else {
        String::new()
    };
    let _ = writeln!(
        t,
        "nccl_check_node_allocated{label} {}",
        u8::from(allocated)
    );
    let name = "nccl_check_node_state_timestamp_seconds";
    let help = "When the recheck last read Slurm's node state.";
    gauge_of(&mut t, name, help, format!("{now_unix:.3}"));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_textfile_has_the_verdict_busbw_and_timestamp() {
        let bw = BTreeMap::from([
            ("all_reduce".to_string(), 361.25),
            ("bad name".to_string(), 1.0),
        ]);
        let t = render(&Sample {
            gate: GateState::Fail,
            verdict: Some(Verdict::Fail),
            exit_code: Some(1),
            avg_busbw: &bw,
            margins: &BTreeMap::from([("all_reduce".to_string(), 1.07)]),
            finished_unix: 1_790_000_000.5,
            duration_s: 2.1,
            cache_seconds: Some(7200),
        });
        assert!(
            t.contains("nccl_check_verdict{verdict=\"FAIL\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_verdict{verdict=\"PASS\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_busbw_gbps{collective=\"all_reduce\"} 361.250\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_busbw_margin{collective=\"all_reduce\"} 1.070\n"),
            "{t}"
        );
        assert!(!t.contains("bad name"), "label values are checked: {t}");
        assert!(
            t.contains("nccl_check_last_run_timestamp_seconds 1790000000.500\n"),
            "{t}"
        );
        assert!(t.contains("nccl_check_exit_code 1\n"), "{t}");
        assert!(t.contains("nccl_check_cache_seconds 7200\n"), "{t}");
        assert!(
            t.contains("nccl_check_gate_state{state=\"fail\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_gate_state{state=\"disabled\"} 0\n"),
            "{t}"
        );
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(line.split(' ').count(), 2, "{line}");
        }
    }

    #[test]
    fn the_node_state_file_says_allocated_and_when_beside_the_gate_s() {
        assert_eq!(
            node_path(Path::new("/var/lib/node_exporter/nccl_check.prom")),
            Path::new("/var/lib/node_exporter/nccl_check-node.prom")
        );
        let t = render_node(true, "MIXED", 1_790_000_000.25);
        assert!(
            t.contains("nccl_check_node_allocated{slurm_state=\"MIXED\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_node_state_timestamp_seconds 1790000000.250\n"),
            "{t}"
        );
        let t = render_node(false, "IDLE+DRAIN", 1.0);
        assert!(
            t.contains("nccl_check_node_allocated{slurm_state=\"IDLE+DRAIN\"} 0\n"),
            "{t}"
        );
        // Whatever scontrol printed, no label injection: a strange state is left out.
        let t = render_node(false, "IDLE\"} 1\nevil{x=\"", 1.0);
        assert!(t.contains("\nnccl_check_node_allocated 0\n"), "{t}");
        assert!(!t.contains("evil"), "{t}");
    }
}
