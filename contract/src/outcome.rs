//! The one rule from how a worker ended and what its report says to the verdict a caller acts
//! on. The SPANK plugin (each task's worker, and the batch step's check), and the prolog all
//! decide by it, so a worker's PASS, FAIL or ERROR means the same to every caller.
//!
//! PASS needs exit 0 and a report saying PASS; FAIL exit 1 and a report saying FAIL, or no
//! report at all (a FAIL is never turned into a pass by a missing file: the generic reason
//! applies); anything else is ERROR, with the problem that made it one. A caller that asked
//! for no report decides by the exit status alone.

use crate::exit::ExitCode;
use crate::report::read::ReportError;
use crate::report::Report;
use crate::verdict::Verdict;
use nccl_check_host::supervise::Ending;

/// The verdict, and why it is an ERROR beside the worker's own word (a contradiction, an
/// unusable report), when it is one for that reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub verdict: Verdict,
    pub problem: Option<RunProblem>,
}

/// Why a worker's run is an ERROR though the worker did not say so. A caller tells the kinds
/// apart by the variant (a contradiction is logged as an error of the worker itself), never by
/// the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunProblem {
    /// The exit code and the report's verdict disagree.
    Contradiction(String),
    /// The report is larger than a reader takes.
    ReportTooLarge(String),
    /// No report where one was due, or one that does not parse.
    ReportUnusable(String),
}

impl RunProblem {
    pub fn is_contradiction(&self) -> bool {
        matches!(self, RunProblem::Contradiction(_))
    }
}

impl std::fmt::Display for RunProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunProblem::Contradiction(m)
            | RunProblem::ReportTooLarge(m)
            | RunProblem::ReportUnusable(m) => f.write_str(m),
        }
    }
}

impl Judged {
    fn plain(verdict: Verdict) -> Judged {
        Judged {
            verdict,
            problem: None,
        }
    }

    fn error(problem: RunProblem) -> Judged {
        Judged {
            verdict: Verdict::Error,
            problem: Some(problem),
        }
    }
}

/// The verdict from the worker's end and its report (`None`: no report was asked for).
pub fn of_run(ending: Ending, report: Option<&Result<Report, ReportError>>) -> Judged {
    let code = match ending {
        Ending::Exited(c) => c,
        Ending::Signaled(_) | Ending::KilledAtDeadline => return Judged::plain(Verdict::Error),
    };
    let by_exit = ExitCode::verdict_of_status(Some(code));
    let Some(report) = report else {
        return Judged::plain(by_exit);
    };
    match (by_exit, report) {
        (Verdict::Error, _) => Judged::plain(Verdict::Error),
        (v, Ok(r)) if r.head.verdict == v => Judged::plain(v),
        (v, Ok(r)) => Judged::error(RunProblem::Contradiction(format!(
            "contradiction: the worker exited {code} ({v}) but its report says {}",
            r.head.verdict
        ))),
        (Verdict::Fail, Err(ReportError::Missing(_))) => Judged::plain(Verdict::Fail),
        (_, Err(e @ ReportError::TooLarge(..))) => {
            Judged::error(RunProblem::ReportTooLarge(format!("report too large: {e}")))
        }
        (v, Err(e)) => Judged::error(RunProblem::ReportUnusable(format!(
            "the worker exited {code} ({v}) but its report is unusable: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn report(v: Verdict) -> Result<Report, ReportError> {
        Ok(Report {
            head: crate::report::Head {
                verdict: v,
                ..Default::default()
            },
            ..Report::default()
        })
    }

    fn verdict(ending: Ending, r: &Result<Report, ReportError>) -> Verdict {
        of_run(ending, Some(r)).verdict
    }

    #[test]
    fn the_verdict_needs_the_exit_code_and_the_report_to_agree() {
        let missing = || Err(ReportError::Missing(PathBuf::from("/r")));
        assert_eq!(
            verdict(Ending::Exited(0), &report(Verdict::Pass)),
            Verdict::Pass
        );
        assert_eq!(
            verdict(Ending::Exited(1), &report(Verdict::Fail)),
            Verdict::Fail
        );
        // A FAIL that wrote no report still fails (with the generic reason).
        assert_eq!(verdict(Ending::Exited(1), &missing()), Verdict::Fail);
        for (code, says) in [(1, Verdict::Pass), (0, Verdict::Fail), (0, Verdict::Error)] {
            let j = of_run(Ending::Exited(code), Some(&report(says)));
            assert_eq!(j.verdict, Verdict::Error, "exit {code} with {says}");
            assert!(
                matches!(j.problem, Some(RunProblem::Contradiction(_))),
                "{j:?}"
            );
        }
        let j = of_run(Ending::Exited(0), Some(&missing()));
        assert_eq!(j.verdict, Verdict::Error);
        assert!(
            matches!(&j.problem, Some(p @ RunProblem::ReportUnusable(_)) if p.to_string().contains("no report")),
            "{j:?}"
        );
        let big = Err(ReportError::TooLarge(PathBuf::from("/r"), 8));
        let j = of_run(Ending::Exited(0), Some(&big));
        assert_eq!(j.verdict, Verdict::Error);
        assert!(
            matches!(&j.problem, Some(p @ RunProblem::ReportTooLarge(_)) if p.to_string().starts_with("report too large")),
            "{j:?}"
        );
        let garbage = Err(ReportError::NotAReport("not JSON".into()));
        let j = of_run(Ending::Exited(1), Some(&garbage));
        assert_eq!(j.verdict, Verdict::Error);
        assert!(
            matches!(&j.problem, Some(p @ RunProblem::ReportUnusable(_)) if p.to_string().contains("unusable")),
            "{j:?}"
        );
        assert_eq!(
            verdict(Ending::Exited(5), &report(Verdict::Pass)),
            Verdict::Error
        );
        assert_eq!(
            verdict(Ending::KilledAtDeadline, &report(Verdict::Pass)),
            Verdict::Error
        );
        assert_eq!(
            verdict(Ending::Signaled(9), &report(Verdict::Fail)),
            Verdict::Error
        );
    }

    /// Without a report asked for, the exit status alone decides: 0 PASS, 1 FAIL, else ERROR.
    #[test]
    fn without_a_report_the_exit_status_decides() {
        let v = |e| of_run(e, None).verdict;
        assert_eq!(v(Ending::Exited(0)), Verdict::Pass);
        assert_eq!(v(Ending::Exited(1)), Verdict::Fail);
        assert_eq!(v(Ending::Exited(6)), Verdict::Error);
        assert_eq!(v(Ending::Exited(-1)), Verdict::Error);
        assert_eq!(v(Ending::Signaled(11)), Verdict::Error);
        assert_eq!(v(Ending::KilledAtDeadline), Verdict::Error);
    }
}
