//! The worker's report as the prolog reads it: the contract's plain report
//! ([`nccl_check_contract::report::Report`]) through its bounded reader, at the contract's
//! bound.

use nccl_check_contract::report::read::{read_report, ReportError};
use nccl_check_contract::report::{Report, MAX_REPORT_BYTES};
use std::path::Path;

/// Reads the report; `Err` says why it is unusable (missing, not a report, a newer schema).
pub fn read(path: &Path) -> Result<Report, ReportError> {
    read_report(path, MAX_REPORT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::verdict::Verdict;
    use nccl_check_host::test_support::scratch_dir;

    #[test]
    fn margins_are_the_smallest_per_collective_and_only_where_a_floor_judged() {
        use nccl_check_contract::report::{Body, Expected, Measured};
        let row = |c: &str, m: Option<f64>| Measured {
            collective: c.into(),
            expected: m.map(|m| Expected {
                floor_gbs: 100.0,
                margin: m,
                source: "test".into(),
            }),
            ..Measured::default()
        };
        let r = Report {
            body: Body {
                results: vec![
                    row("all_reduce", Some(1.3)),
                    row("all_reduce", Some(1.07)),
                    row("all_gather", None),
                    row("sendrecv", Some(f64::INFINITY)),
                ],
                ..Body::default()
            },
            ..Report::default()
        };
        let m = r.margins();
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m.get("all_reduce"), Some(&1.07));
    }

    #[test]
    fn the_recorded_fail_report_gives_its_reasons_and_gpu_uuids() {
        let r = read(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/prolog/data/real-quick-fail-p2p-disabled.json"
        )))
        .expect("reads");
        assert_eq!(r.head.verdict, Verdict::Fail);
        assert_eq!(
            r.head.reasons[0].code,
            nccl_check_contract::report::reason::ReasonCode::BusbwBelowThreshold
        );
        let ids = r.uuids().expect("every GPU has a UUID");
        assert_eq!(ids.len(), 4);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }

    #[test]
    fn a_gpu_without_uuid_means_no_uuids_and_garbage_is_not_a_report() {
        let d = scratch_dir("report-garbage");
        let p = d.join("r.json");
        std::fs::write(
            &p,
            r#"{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":0,"summary":"ok","reasons":[],"host":"n1","results":[],"avg_busbw":{},"verdict":"PASS","gpus":[{"uuid":"GPU-a"},{"name":"x"}]}"#,
        )
        .expect("write");
        assert_eq!(read(&p).expect("reads").uuids(), None);
        std::fs::write(&p, r#"{"summary":"x"}"#).expect("write");
        assert!(read(&p).unwrap_err().to_string().contains("not a report"));
        std::fs::remove_dir_all(&d).ok();
    }
}
