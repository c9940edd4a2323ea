//! The part of the worker's JSON report (schema_version 1, `bench-core/src/report/json.rs`) the
//! prolog uses. Tolerant: unknown fields are ignored, missing ones default, so a newer worker
//! that adds fields still works.

use bench_core::verdict::Verdict;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Report {
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub reasons: Vec<Reason>,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub avg_busbw: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Reason {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub measured: Option<f64>,
    #[serde(default)]
    pub limit: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Gpu {
    #[serde(default)]
    pub uuid: Option<String>,
}

/// Reads the report; `Err` says why it is unusable (missing, not JSON, not a report).
pub fn read(path: &Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn parse(text: &str) -> Result<Report, String> {
    let r: Report = serde_json::from_str(text).map_err(|e| format!("not a report: {e}"))?;
    if r.verdict.is_none() {
        return Err("not a report: no verdict".into());
    }
    Ok(r)
}

impl Report {
    /// The UUIDs of the GPUs the worker measured, when every GPU entry has one.
    pub fn uuids(&self) -> Option<Vec<String>> {
        let mut u: Vec<String> = self
            .gpus
            .iter()
            .map(|g| g.uuid.clone())
            .collect::<Option<_>>()?;
        u.sort();
        (!u.is_empty()).then_some(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_report_parses_and_extra_fields_are_ignored() {
        let text = r#"{"schema_version":1,"tool":"nccl-check","verdict":"FAIL","exit_code":1,
            "summary":"nccl-check: FAIL ...","reasons":[{"code":"busbw_below_threshold",
            "message":"all_reduce 256 MiB: busbw 12.3 < 300.0 GB/s","subject":"GPU2<->GPU3",
            "measured":12.3,"limit":300.0}],"host":"node017","gpus":[{"rank":0,"host":"node017",
            "device":0,"name":"NVIDIA H200","pci_bus_id":"0000:19:00.0","uuid":"GPU-b",
            "memory_bytes":1}],"avg_busbw":{"all_reduce":12.3},"new_field":{"x":1}}"#;
        let r = parse(text).expect("parses");
        assert_eq!(r.verdict, Some(Verdict::Fail));
        assert_eq!(r.reasons[0].subject.as_deref(), Some("GPU2<->GPU3"));
        assert_eq!(r.reasons[0].measured, Some(12.3));
        assert_eq!(r.avg_busbw["all_reduce"], 12.3);
        assert_eq!(r.uuids(), Some(vec!["GPU-b".to_string()]));
    }

    #[test]
    fn garbage_or_a_verdictless_object_is_not_a_report() {
        assert!(parse("{\"verdict\":").is_err());
        assert!(parse("{\"summary\":\"x\"}").is_err());
        assert!(parse("{\"verdict\":\"MAYBE\"}").is_err());
    }
}
