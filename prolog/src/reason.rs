//! The drain reason of a FAIL, built from the job's own report only. `sinfo -R` shows the first
//! 20 characters of a reason, so those name what matters: `nccl-check:` (ours, the only reasons
//! ever resumed), the culprit in compact form (the contract's `Culprit::short`) and what is
//! wrong with it; the full sentence follows after a `|`:
//!
//! `nccl-check:GPU2-3 slow|GPU2<->GPU3: sendrecv 256 MiB: busbw 12.3 < 300.0 GB/s (job 42)`
//! `nccl-check:GPUs slow|all_reduce 256 MiB out-of-place: busbw 25.2 < 300.0 GB/s (+1 more) (job 7)`

use nccl_check_contract::report::cause::CauseClass;
use nccl_check_contract::report::reason::ReasonCode;
use nccl_check_contract::report::Report;

/// Every drain reason nccl-check sets starts with this; nothing else is ever resumed
/// ([`crate::drain`] owns only such drains).
pub const PREFIX: &str = "nccl-check:";
/// Longest sentence after the `|` (the whole reason stays one line of about 200 characters).
const MAX_SENTENCE: usize = 160;
/// What is wrong, in one word: by the reason's class of cause first (`busy`, `missing`), then
/// for hardware by its code.
fn problem(code: ReasonCode) -> &'static str {
    match code.cause_class() {
        CauseClass::Busy => return "busy",
        CauseClass::Missing => return "missing",
        CauseClass::Hardware | CauseClass::Setup => {}
    }
    match code {
        ReasonCode::BusbwBelowThreshold
        | ReasonCode::GpuOutlier
        | ReasonCode::LinkOutlier
        | ReasonCode::NodeOutlier
        | ReasonCode::NodePairOutlier => "slow",
        ReasonCode::WrongData => "wrong",
        ReasonCode::TransportFallback => "transport",
        _ => "FAIL",
    }
}

/// `s` on one line, its white space (newlines and tabs too) one space each; what is left of
/// control characters, and `|`, escaped by the one function for text that is not ours (the
/// report's sentences carry process names).
fn one_line(s: &str) -> String {
    nccl_check_host::text::escape_control(&s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The reason for a FAIL of `job` (`None` for a recheck) whose report is `report`: told by the
/// reason that says the FAIL's cause (the contract's `deciding`: a busy GPU or host before
/// the slow readings it explains).
pub fn drain_reason(report: Option<&Report>, job: Option<&str>) -> String {
    let (head, sentence) = match report {
        Some(r) => match r.head.deciding_reason() {
            Some(first) => {
                let mut s = first.message.clone();
                if s.trim().is_empty() {
                    s = match (first.measured, first.limit) {
                        (Some(m), Some(l)) => format!("{} {m:.1} vs limit {l:.1}", first.code),
                        _ => first.code.to_string(),
                    };
                }
                let subject = first.subject_text().filter(|s| !s.trim().is_empty());
                if let Some(subj) = subject.filter(|s| !first.message.contains(s.as_str())) {
                    s = format!("{subj}: {s}");
                }
                if r.head.reasons.len() > 1 {
                    s.push_str(&format!(" (+{} more)", r.head.reasons.len() - 1));
                }
                let culprit = first
                    .subject
                    .as_ref()
                    .map_or_else(|| "GPUs".to_string(), |c| c.short());
                (format!("{culprit} {}", problem(first.code)), s)
            }
            None if !r.head.summary.trim().is_empty() => {
                ("FAIL".to_string(), r.head.summary.clone())
            }
            None => ("FAIL".to_string(), "the report gives no reason".to_string()),
        },
        None => (
            "FAIL no report".to_string(),
            "the worker exited 1 (FAIL) without a report".to_string(),
        ),
    };
    compose(&head, &sentence, job)
}

/// The one shape of every drain reason nccl-check sets (a worker's FAIL here, a hardware fault,
/// a stray process): `nccl-check:HEAD|SENTENCE (job J)`, both parts on one line with text that
/// is not ours escaped, our prefix not repeated, the sentence cut at [`MAX_SENTENCE`] characters.
pub fn compose(head: &str, sentence: &str, job: Option<&str>) -> String {
    let sentence = one_line(sentence);
    let sentence = sentence
        .strip_prefix(PREFIX)
        .map(str::trim)
        .unwrap_or(&sentence);
    let mut sentence = sentence.to_string();
    if sentence.chars().count() > MAX_SENTENCE {
        sentence = sentence.chars().take(MAX_SENTENCE - 3).collect::<String>() + "...";
    }
    let job = job.map(|j| format!(" (job {j})")).unwrap_or_default();
    format!("{PREFIX}{}|{sentence}{job}", one_line(head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::report::culprit::Culprit;
    use nccl_check_contract::report::reason::Reason;
    use nccl_check_contract::report::Head;

    /// What `sinfo -R` shows of a reason by default.
    fn sinfo_view(reason: &str) -> String {
        reason.chars().take(20).collect()
    }

    fn fail(reasons: Vec<Reason>) -> Report {
        Report {
            head: Head {
                summary: "all_reduce 256 MiB out-of-place: busbw 12.3 < 300.0 GB/s".into(),
                reasons,
                ..Head::default()
            },
            ..Report::default()
        }
    }

    fn busbw(subject: Option<&str>) -> Reason {
        Reason {
            code: ReasonCode::BusbwBelowThreshold,
            message: "sendrecv 256 MiB: busbw 12.3 < 300.0 GB/s".into(),
            subject: subject.map(Culprit::parse),
            measured: Some(12.3),
            limit: Some(300.0),
        }
    }

    #[test]
    fn the_first_twenty_characters_name_ours_the_culprit_and_the_problem() {
        let r = fail(vec![busbw(Some("GPU2<->GPU3"))]);
        let s = drain_reason(Some(&r), Some("42"));
        assert_eq!(
            s,
            "nccl-check:GPU2-3 slow|GPU2<->GPU3: sendrecv 256 MiB: busbw 12.3 < 300.0 GB/s (job 42)"
        );
        assert_eq!(sinfo_view(&s), "nccl-check:GPU2-3 sl");
        let s = drain_reason(Some(&fail(vec![busbw(Some("GPU1"))])), None);
        assert_eq!(sinfo_view(&s), "nccl-check:GPU1 slow");
        let s = drain_reason(Some(&fail(vec![busbw(None), busbw(None)])), Some("7"));
        assert_eq!(
            s,
            "nccl-check:GPUs slow|sendrecv 256 MiB: busbw 12.3 < 300.0 GB/s (+1 more) (job 7)"
        );
    }

    /// The culprit's short form is the contract's (`Culprit::short`), not string surgery here.
    #[test]
    fn each_kind_of_culprit_leads_the_reason_in_its_short_form() {
        for (subject, head) in [
            ("GPU0->GPU1", "nccl-check:GPU0-1 slow|"),
            ("n1<->n2", "nccl-check:n1-n2 slow|"),
            ("gpu-node017", "nccl-check:gpu-node017 slow|"),
            ("n7 GPU3 NIC", "nccl-check:n7_GPU3_NIC slow|"),
            ("node 7", "nccl-check:node_7 slow|"),
        ] {
            let s = drain_reason(Some(&fail(vec![busbw(Some(subject))])), None);
            assert!(s.starts_with(head), "{subject}: {s}");
        }
    }

    /// A busy GPU explains the slow pair beside it: the reason names the GPU busy, not the
    /// link slow; a missing GPU says missing.
    #[test]
    fn the_cause_leads_the_reason_a_busy_gpu_before_the_slow_link_it_explains() {
        let busy = Reason {
            code: ReasonCode::GpuBusy,
            message: "GPU1: busy: 1 other process (pid 4242, user bob, 8.0 GiB); \
                      device-local copy 400 GB/s < 1000 GB/s"
                .into(),
            subject: Some("GPU1".into()),
            measured: None,
            limit: None,
        };
        let r = fail(vec![busbw(Some("GPU0<->GPU1")), busy]);
        let s = drain_reason(Some(&r), Some("3"));
        assert!(
            s.starts_with("nccl-check:GPU1 busy|GPU1: busy: 1 other process (pid 4242"),
            "{s}"
        );
        assert!(s.ends_with("(+1 more) (job 3)"), "{s}");
        let missing = Reason::plain(ReasonCode::GpuMissing, "3 GPUs < 4 expected");
        let s = drain_reason(Some(&fail(vec![missing])), None);
        assert_eq!(s, "nccl-check:GPUs missing|3 GPUs < 4 expected");
    }

    #[test]
    fn a_reason_without_a_message_is_told_by_its_code_and_numbers() {
        let mut b = busbw(Some("GPU1"));
        b.message.clear();
        assert_eq!(
            drain_reason(Some(&fail(vec![b])), None),
            "nccl-check:GPU1 slow|GPU1: busbw_below_threshold 12.3 vs limit 300.0"
        );
    }

    #[test]
    fn without_reasons_the_summary_and_without_a_report_it_says_so() {
        let s = drain_reason(Some(&fail(vec![])), None);
        assert!(s.starts_with("nccl-check:FAIL|all_reduce 256 MiB"), "{s}");
        assert_eq!(
            drain_reason(None, Some("7")),
            "nccl-check:FAIL no report|the worker exited 1 (FAIL) without a report (job 7)"
        );
    }

    #[test]
    fn the_reason_is_one_short_line_with_one_prefix_and_one_bar() {
        let mut r = fail(vec![]);
        r.head.summary = format!("nccl-check: line one\nline\ttwo | {}", "x".repeat(400));
        let s = drain_reason(Some(&r), Some("1"));
        assert!(
            s.starts_with("nccl-check:FAIL|line one line two \\u{7c} x"),
            "{s}"
        );
        assert_eq!(s.matches(PREFIX).count(), 1);
        assert_eq!(s.matches('|').count(), 1);
        assert!(!s.contains('\n') && s.chars().count() <= 200, "{s}");
    }
}
