//! Why a verdict is what it is: a stable reason code for machines and one sentence for people.

use super::culprit::Culprit;
use serde::{Deserialize, Serialize};

/// The stable reason codes (consumers such as the prolog and the SPANK plugin match on them).
/// FAIL: `wrong_data` .. `transport_fallback`, the localizer's `node_slow` .. `suspects_unresolved`, and the node facts `gpu_missing` ..
/// `gpu_busy` (a part named by what the node itself says, `facts`); ERROR: `nccl_library`
/// .. `runtime`; WARN (never FAIL, never drains): `host_interference`, `foreign_process`; and
/// `host_busy` (WARN, or the FAIL that names a busy host instead of the parts it slowed: never a
/// hardware fault). What class of cause each names (hardware, busy, missing, setup):
/// [`ReasonCode::cause_class`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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
    /// Fewer GPUs than the node should have (config, Slurm's gres, or the job's allocation).
    GpuMissing,
    /// Fewer NVLinks active than the model has.
    NvlinkDown,
    /// PCIe link narrower (or, under load, slower) than its maximum.
    PcieDegraded,
    /// Uncorrectable ECC errors since the driver loaded.
    EccUncorrectable,
    /// A row remapping waits for a reset, or failed.
    RowRemapPending,
    /// Hardware slowdown, thermal slowdown or power brake active.
    HwSlowdown,
    /// A NIC NCCL uses is down.
    NetPortDown,
    /// A NIC NCCL uses trained below its width or its siblings' (or the configured) rate.
    NetRateDegraded,
    /// A GPU's device-local copy bandwidth below its model's floor or its siblings'.
    LocalProbeSlow,
    /// The check's worker could not run for half of its measuring (a CPU-starved or stopped
    /// process: NCCL's network proxy stops with it).
    WorkerStarved,
    /// A GPU slow while another process holds it (named with pid, user and memory): the
    /// node is busy, not broken.
    GpuBusy,
    /// Slow by the host's clock, fast by the GPU's: the host delayed the loop (WARN only).
    HostInterference,
    /// Another process holds a checked GPU but the GPU measured fine (an idle leftover that a
    /// job will still meet, e.g. by running out of memory): WARN only.
    ForeignProcess,
    /// The host's CPUs were busy with other processes while the check measured (the top
    /// consumers named). A FAIL in place of the bandwidth reasons when the GPUs' clock was slow
    /// too (the host, not a GPU, link or NIC, is the cause), a WARN otherwise; never hardware.
    HostBusy,
    NoGpu,
    Rendezvous,
    Timeout,
    Runtime,
    /// A code this reader does not know (a newer worker's report): tolerated, never written.
    #[serde(other)]
    Unknown,
}

impl ReasonCode {
    /// The code as the report spells it: serde's name, by the same snake_case rule (a test
    /// holds the two to each other for every variant); `Display` writes the same.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the reason is about a bandwidth measurement (a fact may explain it).
    pub fn is_bandwidth(self) -> bool {
        matches!(
            self,
            ReasonCode::BusbwBelowThreshold
                | ReasonCode::GpuOutlier
                | ReasonCode::LinkOutlier
                | ReasonCode::NodeOutlier
                | ReasonCode::NodePairOutlier
                | ReasonCode::LocalProbeSlow
        )
    }
}

/// A reason behind a verdict. Written with its class of cause (`"cause": "busy"`, from the
/// code by [`ReasonCode::cause_class`]) beside the code, for readers that do not know the
/// codes; read back, the class comes from the code again ([`Reason::cause`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Reason {
    pub code: ReasonCode,
    pub message: String,
    /// What is at fault, typed; the report writes it by name (`GPU2`, `GPU2<->GPU3`,
    /// `node017`, `node017<->node018`), and a report read back has it parsed once, here.
    #[serde(default, deserialize_with = "read_subject")]
    pub subject: Option<Culprit>,
    /// The measured value (GB/s for bandwidths) and the limit it was held against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
}

/// A report's `subject` as read back: its text, parsed (an empty one names nothing).
fn read_subject<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Culprit>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    Ok(text
        .filter(|s| !s.trim().is_empty())
        .map(|s| Culprit::parse(&s)))
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let present = [
            self.subject.is_some(),
            self.measured.is_some(),
            self.limit.is_some(),
        ];
        let n = 3 + present.iter().filter(|p| **p).count();
        let mut st = s.serialize_struct("Reason", n)?;
        st.serialize_field("code", &self.code)?;
        st.serialize_field("cause", &self.cause())?;
        st.serialize_field("message", &self.message)?;
        if let Some(subject) = &self.subject {
            st.serialize_field("subject", &subject.to_string())?;
        }
        if let Some(m) = self.measured {
            st.serialize_field("measured", &m)?;
        }
        if let Some(l) = self.limit {
            st.serialize_field("limit", &l)?;
        }
        st.end()
    }
}

impl Reason {
    /// What the reason blames, as the report writes it; None when it names nothing.
    pub fn subject_text(&self) -> Option<String> {
        self.subject.as_ref().map(Culprit::to_string)
    }

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

    /// Every code, as serde writes it and as `as_str` names it: one spelling, pinned (the report
    /// schema's consumers match on these strings).
    #[test]
    fn every_code_has_one_spelling_and_it_does_not_change() {
        use strum::IntoEnumIterator;
        let mut spelled = Vec::new();
        for c in ReasonCode::iter() {
            let json = serde_json::to_string(&c).expect("serializes");
            assert_eq!(json, format!("\"{}\"", c.as_str()), "{c:?}");
            let back: ReasonCode = serde_json::from_str(&json).expect("a code parses back");
            assert_eq!(back, c);
            spelled.push(c.as_str());
        }
        assert_eq!(
            spelled.join(","),
            concat!(
                "wrong_data,busbw_below_threshold,gpu_outlier,link_outlier,node_outlier,",
                "node_pair_outlier,transport_fallback,node_slow,node_pair_slow,rail_slow,",
                "suspects_unresolved,nccl_library,gpu_missing,nvlink_down,pcie_degraded,",
                "ecc_uncorrectable,row_remap_pending,hw_slowdown,net_port_down,",
                "net_rate_degraded,local_probe_slow,worker_starved,gpu_busy,host_interference,",
                "foreign_process,host_busy,no_gpu,",
                "rendezvous,",
                "timeout,runtime,unknown"
            )
        );
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
            text.starts_with(r#"{"code":"link_outlier","cause":"hardware","message""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Reason>(&text).expect("parses"), r);
        let plain = serde_json::to_string(&Reason::plain(ReasonCode::Timeout, "t")).expect("ok");
        assert_eq!(plain, r#"{"code":"timeout","cause":"setup","message":"t"}"#);
        let busy = Reason::plain(ReasonCode::GpuBusy, "GPU0: busy");
        let text = serde_json::to_string(&busy).expect("ok");
        assert_eq!(
            text,
            r#"{"code":"gpu_busy","cause":"busy","message":"GPU0: busy"}"#
        );
        assert_eq!(serde_json::from_str::<Reason>(&text).expect("parses"), busy);
    }

    /// The subject is typed in the worker and written as the text reports have always carried;
    /// read back it is the same culprit, and an empty one names nothing.
    #[test]
    fn a_typed_subject_is_written_as_its_name_and_read_back_as_the_same_culprit() {
        let cases = [
            (Culprit::NodePair("n1".into(), "n2".into()), "n1<->n2"),
            (
                Culprit::Gpu {
                    node: Some("e2".into()),
                    gpu: 0,
                },
                "e2 GPU0",
            ),
            (
                Culprit::Rail {
                    node: "n7".into(),
                    gpu: 3,
                },
                "n7 GPU3 NIC",
            ),
        ];
        for (culprit, text) in cases {
            let r = Reason {
                subject: Some(culprit.clone()),
                ..Reason::plain(ReasonCode::NodeSlow, "m")
            };
            let json = serde_json::to_value(&r).expect("serializes");
            assert_eq!(json["subject"], text);
            let back: Reason = serde_json::from_value(json).expect("parses");
            assert_eq!(back.subject, Some(culprit));
        }
        let empty: Reason = serde_json::from_str(
            r#"{"code":"node_slow","cause":"hardware","message":"m","subject":" "}"#,
        )
        .expect("parses");
        assert_eq!(empty.subject, None);
    }
}
