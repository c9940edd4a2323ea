//! What the prolog says: the one verdict line (stderr, syslog, `gate.json`) composed from what
//! actually happened (a drain is "drained" only after scontrol succeeded), and the dry run's plan.

use crate::config::GateConfig;
use crate::decide::{Actions, CacheAction, Mode};
use crate::drain::{self, DrainOutcome};
use crate::worker::Run;
use nccl_check_contract::exit::NCCL_LIB_HINT;
use nccl_check_contract::report::Report;
use std::path::Path;

/// What came of a drain request, for the verdict line.
pub fn drain_outcome(o: &DrainOutcome, node: &str) -> String {
    match o {
        DrainOutcome::Drained => format!("drained {node}"),
        DrainOutcome::AlreadyRequested => format!(
            "{node} drain already requested in the last {} s; not asked again",
            drain::RECENT
        ),
        DrainOutcome::AlreadyDrained(why) => {
            format!("{node} is drained already ({why}); left as it is")
        }
        DrainOutcome::Failed(e) => format!("drain FAILED: {e}"),
        DrainOutcome::Resumed | DrainOutcome::NotOurs(_) | DrainOutcome::Nothing => {
            format!("{o:?}")
        }
    }
}

/// What the exit code does to the job, after a FAIL or an ERROR.
pub fn job_fate(mode: Mode, exit_code: i32, fail: bool) -> &'static str {
    match (mode, exit_code, fail) {
        (Mode::Recheck, _, _) | (Mode::Epilog, 0, _) => "",
        (Mode::Epilog, _, _) => {
            ", exit 1 (on_error = \"fail-job\"): slurmd drains with \"Epilog error\""
        }
        (_, 0, true) => ", the job runs (on_fail = \"run\")",
        (_, 0, false) => ", the job runs (on_error = \"run\")",
        (_, _, true) => ", Slurm requeues the job",
        (_, _, false) => ", exit 1 (on_error = \"fail-job\"): slurmd drains with \"Prolog error\"",
    }
}

pub struct Line<'a> {
    pub whom: &'a str,
    pub node: &'a str,
    pub label: &'a str,
    pub mode: Mode,
    pub exit_code: i32,
    /// What replaces the worker's hint for a missing NCCL ([`missing_nccl_fix`]).
    pub nccl_hint: &'a str,
}

impl Line<'_> {
    /// `whom on node: label in 1.23 s`, how each measured line begins.
    fn ran(&self, run: &Run) -> String {
        let s = run.elapsed.as_secs_f64();
        format!("{} on {}: {} in {s:.2} s", self.whom, self.node, self.label)
    }

    pub fn pass(&self, run: &Run, report: Option<&Report>) -> String {
        let bw: Vec<String> = report
            .map(|r| {
                r.body
                    .avg_busbw
                    .iter()
                    .map(|(c, b)| format!("{c} {b:.1} GB/s"))
                    .collect()
            })
            .unwrap_or_default();
        format!(
            "PASS {}{}{}",
            self.ran(run),
            if bw.is_empty() {
                String::new()
            } else {
                format!(", busbw {}", bw.join(", "))
            },
            report
                .map(|r| format!(" ({})", r.head.summary.trim()))
                .unwrap_or_default()
        )
    }

    /// `drain`: what came of the drain request (None in a dry run).
    pub fn fail(&self, run: &Run, reason: &str, drain: Option<&str>) -> String {
        format!(
            "FAIL {}: {reason}; {}{}",
            self.ran(run),
            drain.unwrap_or("would drain (dry run)"),
            job_fate(self.mode, self.exit_code, true)
        )
    }

    /// A FAIL that is not held against the node: `why` says whose load it may be.
    pub fn unjudged(&self, run: &Run, report: Option<&Report>, why: &str) -> String {
        let found = report
            .map(|r| r.head.summary.trim())
            .filter(|s| !s.is_empty())
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        format!(
            "NOT JUDGED {}: measured FAIL{found}, but {why}; not drained{}",
            self.ran(run),
            if self.mode == Mode::Recheck {
                ", no verdict"
            } else {
                ", the job runs"
            }
        )
    }

    /// A FAIL whose cause is a busy node that is not drained (another job's processes, a
    /// stray under `stray_processes = "warn"`, or whose not known): the hardware was not
    /// judged, and the job runs.
    pub fn busy(&self, run: &Run, reason: &str, why: &str) -> String {
        format!(
            "BUSY {}: {reason}; not drained: the node is busy, not broken ({why}){}",
            self.ran(run),
            if self.mode == Mode::Prolog {
                ", the job runs"
            } else {
                ""
            }
        )
    }

    pub fn error(&self, run: &Run, report: Option<&Report>) -> String {
        let detail = run
            .problem
            .clone()
            .or_else(|| {
                report
                    .map(|r| r.head.summary.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .or_else(|| (!run.output_tail.is_empty()).then(|| run.output_tail.clone()));
        // The worker's hint for a missing NCCL names its command line: the admin's is ours.
        let for_the_admin = detail.map(|d| d.replace(NCCL_LIB_HINT, self.nccl_hint));
        let what = match for_the_admin {
            Some(d) if d != run.ended => format!("{}: {d}", run.ended),
            _ => run.ended.clone(),
        };
        format!(
            "ERROR {} on {}: {}: {what}; not drained{}",
            self.whom,
            self.node,
            self.label,
            job_fate(self.mode, self.exit_code, false)
        )
    }

    /// A setup problem found before the worker could run.
    pub fn error_without_run(&self, problem: &str) -> String {
        format!(
            "ERROR {} on {}: {problem}; not checked, not drained{}",
            self.whom,
            self.node,
            job_fate(self.mode, self.exit_code, false)
        )
    }
}

/// The prolog's hint where the worker's own one names its command line (`--nccl-lib`), which
/// nobody passes to the root prolog: the setting that fixes it, in the file that has it. The
/// prolog's `env` (in `config`, the prolog's file) wins over the worker's config where it names
/// `NCCL_CHECK_NCCL_LIB`; otherwise `nccl_lib` in `worker_config`, the file the gate hands the
/// worker (one place for srun's checks too, where that is the default path).
pub fn missing_nccl_fix(cfg: &GateConfig, config: &Path) -> String {
    if cfg.env.contains_key("NCCL_CHECK_NCCL_LIB") {
        format!(
            "NCCL_CHECK_NCCL_LIB in `env` of {} names it and wins over nccl_lib: correct it \
             there, or remove it and set nccl_lib in {}",
            config.display(),
            cfg.worker_config.display()
        )
    } else {
        format!(
            "give its path as nccl_lib = \"/path/to/libnccl.so.2\" in {}",
            cfg.worker_config.display()
        )
    }
}

/// The dry run's plan, on stdout.
pub fn print_plan(node: &str, a: &Actions, reason: Option<&str>) {
    nccl_check_host::outln!("dry run: nothing below was done");
    nccl_check_host::outln!(
        "  cache:  {}",
        match a.cache {
            CacheAction::StorePass => "record this pass",
            CacheAction::Clear => "forget the passes of these GPUs",
            CacheAction::Keep => "unchanged",
        }
    );
    if a.drain {
        nccl_check_host::outln!(
            "  drain:  {node} reason=\"{}\" (unless already drained)",
            reason.unwrap_or("")
        );
    } else {
        nccl_check_host::outln!("  drain:  no");
    }
    nccl_check_host::outln!(
        "  resume: {}",
        if a.resume_own_drain {
            "yes, if nccl-check drained this node"
        } else {
            "no"
        }
    );
    nccl_check_host::outln!("  exit:   {} (a dry run exits 0)", a.exit_code);
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::report::read::ReportError;
    use nccl_check_contract::verdict::Verdict;
    use std::time::Duration;

    fn run(ended: &str, problem: Option<&str>) -> Run {
        Run {
            verdict: Verdict::Error,
            exit_code: None,
            ended: ended.into(),
            problem: problem.map(str::to_string),
            contradicted: false,
            out_of_budget: false,
            report: Err(ReportError::Missing("/r".into())),
            elapsed: Duration::from_millis(1500),
            output_tail: String::new(),
        }
    }

    fn line(mode: Mode, exit_code: i32) -> Line<'static> {
        Line {
            whom: "job 7",
            node: "n1",
            label: "GPUs 0,1",
            mode,
            exit_code,
            nccl_hint: "HINT",
        }
    }

    #[test]
    fn an_error_says_what_happened_to_the_worker_never_none() {
        let r = run("the worker was killed by signal 11 (SIGSEGV)", None);
        let s = line(Mode::Prolog, 0).error(&r, None);
        assert_eq!(
            s,
            "ERROR job 7 on n1: GPUs 0,1: the worker was killed by signal 11 (SIGSEGV); \
             not drained, the job runs (on_error = \"run\")"
        );
        assert!(!s.contains("none"));
    }

    #[test]
    fn a_fail_says_drained_only_after_the_drain_and_otherwise_why_not() {
        let r = run("the worker exited 1", None);
        let l = line(Mode::Prolog, 1);
        let ok = l.fail(
            &r,
            "nccl-check:GPUs slow|x",
            Some(&drain_outcome(&DrainOutcome::Drained, "n1")),
        );
        assert!(ok.ends_with("; drained n1, Slurm requeues the job"), "{ok}");
        let bad = drain_outcome(
            &DrainOutcome::Failed("scontrol: exit status 1: denied".into()),
            "n1",
        );
        let s = l.fail(&r, "nccl-check:GPUs slow|x", Some(&bad));
        assert!(
            s.contains("; drain FAILED: scontrol: exit status 1: denied"),
            "{s}"
        );
        assert!(!s.contains("drained n1"), "{s}");
        assert!(l.fail(&r, "x", None).contains("would drain (dry run)"));
    }

    /// Regression: the prolog's hint said `give its path with --nccl-lib`, a worker option no
    /// admin can pass to the prolog.
    #[test]
    fn the_missing_nccl_hint_names_the_config_key_not_a_worker_option() {
        let r = Run {
            problem: None,
            contradicted: false,
            out_of_budget: false,
            output_tail: format!(
                "ERROR: NCCL library not found (tried libnccl.so.2: nope); {}",
                nccl_check_contract::exit::NCCL_LIB_HINT
            ),
            ..run("the worker exited 3", None)
        };
        let s = line(Mode::Prolog, 0).error(&r, None);
        assert!(!s.contains("--nccl-lib"), "{s}");
        assert!(s.contains("NCCL library not found"), "{s}");
        assert!(s.contains("nope); HINT; not drained"), "{s}");
    }

    /// Regression (issue 46): the hint sent the admin to `env` in /etc/nccl-check/prolog.toml
    /// whatever file the prolog reads and wherever the library was named. It names the setting
    /// that wins: the prolog's own `env` where that sets NCCL_CHECK_NCCL_LIB (in the file the
    /// prolog read), else `nccl_lib` in the worker's config the gate passes on.
    #[test]
    fn the_missing_nccl_hint_names_the_setting_that_wins_in_its_file() {
        let mut cfg = GateConfig {
            worker_config: "/site/nccl-check.toml".into(),
            ..GateConfig::default()
        };
        let prolog = Path::new("/site/prolog.toml");
        assert_eq!(
            missing_nccl_fix(&cfg, prolog),
            "give its path as nccl_lib = \"/path/to/libnccl.so.2\" in /site/nccl-check.toml"
        );
        cfg.env.insert(
            "NCCL_CHECK_NCCL_LIB".into(),
            "/opt/gone/libnccl.so.2".into(),
        );
        let h = missing_nccl_fix(&cfg, prolog);
        assert!(
            h.starts_with("NCCL_CHECK_NCCL_LIB in `env` of /site/prolog.toml names it and wins"),
            "{h}"
        );
        assert!(!h.contains("/etc/nccl-check"), "{h}");
    }
}
