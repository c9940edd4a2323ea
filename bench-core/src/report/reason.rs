//! Why a verdict is what it is: a stable reason code for machines and one sentence for people.

use serde::{Deserialize, Serialize};

/// The stable reason codes (consumers such as the prolog and the SPANK plugin match on them).
/// FAIL: `wrong_data` .. `suspects_unresolved`; ERROR: `nccl_library` .. `runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    WrongData,
    BusbwBelowThreshold,
    GpuOutlier,
    LinkOutlier,
    NodeOutlier,
    NodePairOutlier,
    TransportFallback,
    /// The localizer (multi-node checks): a node slow on every NIC or on its own GPUs.
    NodeSlow,
    /// The localizer: the path between two nodes, both fast with other partners.
    NodePairSlow,
    /// The localizer: one GPU's NIC on one node.
    RailSlow,
    /// The localizer: slow pairs it could not place within its round cap (never guessed).
    SuspectsUnresolved,
    NcclLibrary,
    NoGpu,
    Rendezvous,
    Timeout,
    Runtime,
    /// A code this reader does not know (a newer worker's report): tolerated, never written.
    #[serde(other)]
    Unknown,
}

impl ReasonCode {
    /// The code as the report spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::WrongData => "wrong_data",
            ReasonCode::BusbwBelowThreshold => "busbw_below_threshold",
            ReasonCode::GpuOutlier => "gpu_outlier",
            ReasonCode::LinkOutlier => "link_outlier",
            ReasonCode::NodeOutlier => "node_outlier",
            ReasonCode::NodePairOutlier => "node_pair_outlier",
            ReasonCode::TransportFallback => "transport_fallback",
            ReasonCode::NodeSlow => "node_slow",
            ReasonCode::NodePairSlow => "node_pair_slow",
            ReasonCode::RailSlow => "rail_slow",
            ReasonCode::SuspectsUnresolved => "suspects_unresolved",
            ReasonCode::NcclLibrary => "nccl_library",
            ReasonCode::NoGpu => "no_gpu",
            ReasonCode::Rendezvous => "rendezvous",
            ReasonCode::Timeout => "timeout",
            ReasonCode::Runtime => "runtime",
            ReasonCode::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason behind a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub code: ReasonCode,
    pub message: String,
    /// What is at fault, by name: `GPU2`, `GPU2<->GPU3`, `node017`, `node017<->node018`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The measured value (GB/s for bandwidths) and the limit it was held against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
}

impl Reason {
    /// A reason with only a code and a sentence (errors).
    pub fn plain(code: ReasonCode, message: impl Into<String>) -> Reason {
        Reason {
            code,
            message: message.into(),
            subject: None,
            measured: None,
            limit: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ReasonCode; 16] = [
        ReasonCode::WrongData,
        ReasonCode::BusbwBelowThreshold,
        ReasonCode::GpuOutlier,
        ReasonCode::LinkOutlier,
        ReasonCode::NodeOutlier,
        ReasonCode::NodePairOutlier,
        ReasonCode::TransportFallback,
        ReasonCode::NodeSlow,
        ReasonCode::NodePairSlow,
        ReasonCode::RailSlow,
        ReasonCode::SuspectsUnresolved,
        ReasonCode::NcclLibrary,
        ReasonCode::NoGpu,
        ReasonCode::Rendezvous,
        ReasonCode::Timeout,
        ReasonCode::Runtime,
    ];

    #[test]
    fn codes_are_written_as_the_report_has_always_spelled_them() {
        let written: Vec<String> = ALL
            .iter()
            .map(|c| serde_json::to_string(c).expect("serializes"))
            .collect();
        assert_eq!(
            written.join(","),
            concat!(
                r#""wrong_data","busbw_below_threshold","gpu_outlier","link_outlier","#,
                r#""node_outlier","node_pair_outlier","transport_fallback","node_slow","#,
                r#""node_pair_slow","rail_slow","suspects_unresolved","nccl_library","#,
                r#""no_gpu","rendezvous","timeout","runtime""#
            )
        );
        for c in ALL {
            assert_eq!(
                format!("\"{c}\""),
                serde_json::to_string(&c).expect("serializes")
            );
        }
    }

    #[test]
    fn a_reader_tolerates_a_code_it_does_not_know() {
        let r: Reason = serde_json::from_str(r#"{"code":"fan_failure","message":"m"}"#)
            .expect("an unknown code still parses");
        assert_eq!(r.code, ReasonCode::Unknown);
        assert_eq!(r.subject, None);
    }

    #[test]
    fn a_reason_round_trips() {
        let r = Reason {
            code: ReasonCode::LinkOutlier,
            message: "GPU2<->GPU3 slow".into(),
            subject: Some("GPU2<->GPU3".into()),
            measured: Some(41.2),
            limit: Some(256.8),
        };
        let text = serde_json::to_string(&r).expect("serializes");
        assert!(
            text.starts_with(r#"{"code":"link_outlier","message""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Reason>(&text).expect("parses"), r);
        let plain = serde_json::to_string(&Reason::plain(ReasonCode::Timeout, "t")).expect("ok");
        assert_eq!(plain, r#"{"code":"timeout","message":"t"}"#);
    }
}
