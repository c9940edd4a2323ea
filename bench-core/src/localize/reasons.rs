//! The localizer's verdict in the report: its findings as reasons, and a summary of the rounds
//! it ran.

use super::{Code, LocalizeVerdict};
use nccl_check_contract::report::reason::{Reason, ReasonCode};

/// Longest message or subject of a shared reason, in characters (a subject is kept within it
/// where it is built: `assess::unresolved_finding`).
pub(super) const MAX_REASON_CHARS: usize = 1000;

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
