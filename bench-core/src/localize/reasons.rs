//! The localizer's verdict in the report: its findings as reasons, and a summary of the rounds
//! it ran.

use super::{Code, LocalizeVerdict};
use nccl_check_contract::report::reason::{Reason, ReasonCode};
use serde::{Deserialize, Serialize};

/// What the node-level localization of a multi-node check did, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalizeSummary {
    /// `adaptive` (screening + confirmation) or `full` (every node pair).
    pub plan: String,
    pub nodes: usize,
    pub rails: usize,
    /// Every round, phases A and B included.
    pub rounds: usize,
    /// Rounds after phase B (bounded by `2*log2(N)+4`).
    pub localization_rounds: usize,
    /// Phase B's busbw (GB/s) and the floor it was held against, if one applies.
    pub allocation_busbw: Option<f64>,
    pub allocation_floor: Option<f64>,
    /// Node-rail pair groups measured over all rounds.
    pub pair_groups: usize,
    pub reasons: Vec<Reason>,
    /// Reasons left out of this process's report (the coordinator's report has them all).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasons_omitted: usize,
    /// This process's time per round, in order: its measurement, then the gather that follows
    /// (which includes waiting for the slowest process). What `--explain-plan`'s per-round
    /// constants are calibrated from (tests/gpu/fabric.sh's committed reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub round_times: Vec<RoundTime>,
}

/// One round's time in one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundTime {
    pub round: u32,
    pub phase: super::Phase,
    pub measure_ms: f64,
    pub gather_ms: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The verdict's findings as reasons (named as the localizer names the nodes: the topology's
/// names, `Localizer::named`); none for `allocation_slow`, which the allocation-wide
/// collective's own row already reports (`busbw_below_threshold`, the same floor).
pub fn reasons(v: &LocalizeVerdict) -> Vec<Reason> {
    v.findings
        .iter()
        .filter_map(|f| {
            let code = match f.code {
                Code::NodeSlow => ReasonCode::NodeSlow,
                Code::NodePairSlow => ReasonCode::NodePairSlow,
                Code::RailSlow => ReasonCode::RailSlow,
                Code::SuspectsUnresolved => ReasonCode::SuspectsUnresolved,
                Code::AllocationSlow => return None,
            };
            Some(Reason {
                code,
                message: f.message.clone(),
                subject: Some(f.subject.clone()),
                measured: f.measured,
                limit: f.limit,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::localize::LocalizeFinding;

    #[test]
    fn findings_become_reasons_except_allocation_slow() {
        let f = |code| LocalizeFinding {
            code,
            nodes: vec![1],
            rail: None,
            subject: nccl_check_contract::report::culprit::Culprit::Node("b".into()),
            message: "b: slow".into(),
            measured: Some(1.0),
            limit: Some(2.0),
        };
        let v = LocalizeVerdict {
            findings: vec![f(Code::RailSlow), f(Code::AllocationSlow)],
            rounds: 4,
            localization_rounds: 2,
            allocation_busbw: Some(3.0),
        };
        let r = reasons(&v);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].code, ReasonCode::RailSlow);
        assert_eq!(r[0].subject_text().as_deref(), Some("b"));
        assert_eq!(r[0].message, "b: slow");
    }
}
