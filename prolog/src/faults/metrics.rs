//! The fault pass's Prometheus textfile, beside the gate's own (`metrics_file` `x.prom` →
//! `x-faults.prom`, in the same directory, so node_exporter's textfile collector reads both and
//! `metrics.rs` stays the gate's): what the last pass found per source and class, whether each
//! source was readable, and what the pass cost. Written atomically after every pass but a dry run.

use super::{Class, Summary};
use crate::prom::{gauge, gauge_of};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// `kmsg`: lost or unreadable kernel records; `driver`: a GPU's driver state read after them.
const SOURCES: [&str; 6] = ["xid", "sxid", "aer", "ib", "kmsg", "driver"];

/// `x.prom` → `x-faults.prom`.
pub fn path_beside(metrics_file: &Path) -> PathBuf {
    crate::prom::beside(metrics_file, "faults")
}

pub fn render(s: &Summary, now_unix: f64) -> String {
    let mut t = String::new();
    gauge(
        &mut t,
        "nccl_check_fault_findings",
        "Hardware faults new since the previous check, found by the last nccl-check fault pass \
         (fail = the node was drained).",
    );
    for source in SOURCES {
        for (class, name) in [(Class::Fail, "fail"), (Class::Warn, "warn")] {
            let n = s
                .findings
                .iter()
                .filter(|f| f.source == source && f.class == class)
                .count();
            let _ = writeln!(
                t,
                "nccl_check_fault_findings{{source=\"{source}\",class=\"{name}\"}} {n}"
            );
        }
    }
    gauge(
        &mut t,
        "nccl_check_fault_source_readable",
        "Whether the last fault pass could read the source (kmsg = the kernel log, Xid/SXid; \
         aer; ib).",
    );
    for src in &s.sources {
        let _ = writeln!(
            t,
            "nccl_check_fault_source_readable{{source=\"{}\"}} {}",
            src.name,
            u8::from(src.readable)
        );
    }
    // Unreadable shows as nccl_check_fault_source_readable{source="kmsg"} 0 (no count then).
    if !matches!(s.kmsg_lost, Some(super::Lost::Unreadable(_))) {
        let lost = match s.kmsg_lost {
            Some(super::Lost::Records(n)) => n,
            _ => 0,
        };
        let help = "Kernel log records overwritten since the previous check before the last \
                    fault pass read them (a flood can hide an Xid).";
        gauge_of(&mut t, "nccl_check_fault_kmsg_lost_records", help, lost);
    }
    let name = "nccl_check_fault_pass_seconds";
    let secs = format!("{:.6}", s.total_ms / 1000.0);
    gauge_of(&mut t, name, "Wall time of the last fault pass.", secs);
    let name = "nccl_check_fault_last_pass_timestamp_seconds";
    let at = format!("{now_unix:.3}");
    gauge_of(&mut t, name, "When the last fault pass ran.", at);
    t
}

#[cfg(test)]
mod tests {
    use super::super::summary::{Finding, Source};
    use super::super::xid::Needs;
    use super::*;

    #[test]
    fn counts_per_source_and_class_and_readability() {
        let s = Summary {
            findings: vec![Finding {
                class: Class::Warn,
                source: "xid",
                subject: "0000:18:00".into(),
                what: "Xid 13".into(),
                needs: Needs::Nothing,
                evidence: None,
            }],
            sources: vec![Source {
                name: "kmsg",
                path: "/dev/kmsg".into(),
                readable: false,
                items: 0,
                ms: 0.1,
                note: None,
            }],
            total_ms: 1.5,
            kmsg_lost: Some(super::super::Lost::Records(1234)),
            ..Summary::default()
        };
        let t = render(&s, 7.0);
        assert!(
            t.contains("nccl_check_fault_findings{source=\"xid\",class=\"warn\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_fault_findings{source=\"ib\",class=\"fail\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_fault_source_readable{source=\"kmsg\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_fault_kmsg_lost_records 1234\n"),
            "{t}"
        );
        assert!(
            t.contains("nccl_check_fault_pass_seconds 0.001500\n"),
            "{t}"
        );
        assert_eq!(
            path_beside(Path::new("/m/n1.prom")),
            PathBuf::from("/m/n1-faults.prom")
        );
    }
}
