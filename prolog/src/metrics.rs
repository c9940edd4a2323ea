//! The optional Prometheus textfile (`metrics_file`) for node_exporter's textfile collector:
//! the gate's state (`nccl_check_gate_state`: pass, fail, error, or disabled when the config
//! cannot be used), the last measured verdict, busbw per collective, when and how long. Written atomically (temp
//! file + rename in the same directory), as the collector requires. A cached pass does not
//! rewrite it: the numbers stay those of the last real measurement.

use crate::status::GateState;
use nccl_check_contract::verdict::Verdict;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

pub struct Sample<'a> {
    pub gate: GateState,
    /// None: nothing was measured (a disabled gate, or an ERROR before the worker ran).
    pub verdict: Option<Verdict>,
    pub exit_code: Option<i32>,
    pub avg_busbw: &'a BTreeMap<String, f64>,
    /// Per collective, the smallest busbw / floor of the last measurement (`report::margins`).
    pub margins: &'a BTreeMap<String, f64>,
    pub finished_unix: f64,
    pub duration_s: f64,
}

/// The file's text.
pub fn render(s: &Sample) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# HELP nccl_check_gate_state State of the nccl-check prolog gate after its last run \
         (1 = this state; disabled = the config cannot be used, nothing is checked)."
    );
    let _ = writeln!(t, "# TYPE nccl_check_gate_state gauge");
    for g in GateState::ALL {
        let _ = writeln!(
            t,
            "nccl_check_gate_state{{state=\"{}\"}} {}",
            g.as_str(),
            u8::from(s.gate == g)
        );
    }
    let _ = writeln!(
        t,
        "# HELP nccl_check_verdict Last nccl-check prolog verdict on this node (1 = this verdict)."
    );
    let _ = writeln!(t, "# TYPE nccl_check_verdict gauge");
    for v in [Verdict::Pass, Verdict::Fail, Verdict::Error] {
        let _ = writeln!(
            t,
            "nccl_check_verdict{{verdict=\"{v}\"}} {}",
            u8::from(s.verdict == Some(v))
        );
    }
    let _ = writeln!(
        t,
        "# HELP nccl_check_exit_code Exit code of the last worker run (-1 = killed)."
    );
    let _ = writeln!(t, "# TYPE nccl_check_exit_code gauge");
    let _ = writeln!(t, "nccl_check_exit_code {}", s.exit_code.unwrap_or(-1));
    let _ = writeln!(
        t,
        "# HELP nccl_check_busbw_gbps Mean bus bandwidth per collective of the last measurement, GB/s."
    );
    let _ = writeln!(t, "# TYPE nccl_check_busbw_gbps gauge");
    for (coll, bw) in s.avg_busbw {
        if bw.is_finite() && coll.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            let _ = writeln!(t, "nccl_check_busbw_gbps{{collective=\"{coll}\"}} {bw:.3}");
        }
    }
    let _ = writeln!(
        t,
        "# HELP nccl_check_busbw_margin Smallest busbw / floor per collective of the last \
         measurement (1.0 = at the floor; only collectives a floor judged)."
    );
    let _ = writeln!(t, "# TYPE nccl_check_busbw_margin gauge");
    for (coll, m) in s.margins {
        if m.is_finite() && coll.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            let _ = writeln!(t, "nccl_check_busbw_margin{{collective=\"{coll}\"}} {m:.3}");
        }
    }
    let _ = writeln!(
        t,
        "# HELP nccl_check_last_run_timestamp_seconds When the last measurement ended."
    );
    let _ = writeln!(t, "# TYPE nccl_check_last_run_timestamp_seconds gauge");
    let _ = writeln!(
        t,
        "nccl_check_last_run_timestamp_seconds {:.3}",
        s.finished_unix
    );
    let _ = writeln!(
        t,
        "# HELP nccl_check_duration_seconds Wall time of the last worker run."
    );
    let _ = writeln!(t, "# TYPE nccl_check_duration_seconds gauge");
    let _ = writeln!(t, "nccl_check_duration_seconds {:.3}", s.duration_s);
    t
}

pub fn write(path: &Path, s: &Sample) -> std::io::Result<()> {
    crate::state::write_atomic(path, render(s).as_bytes(), 0o644)
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
}
