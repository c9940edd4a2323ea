//! The decision table: from what the check found to what the prolog does (exit code, drain,
//! cache, resume). Pure; every row is a unit test below and a line in prolog/README.md.

use crate::config::{OnError, OnFail};
use crate::stray::Policy as StrayPolicy;
use nccl_check_contract::report::cause::CauseClass;
use nccl_check_contract::verdict::Verdict;

/// How the binary was started; its lowercase name (`&'static str`, through strum) is the
/// context in `gate.json` and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Mode {
    /// By slurmd as `Prolog=`, for a job about to start.
    Prolog,
    /// `--recheck`: by an admin, cron or a HealthCheckProgram wrapper, with no job; checks every
    /// GPU of the node, and is how a node drained by nccl-check gets back into service.
    Recheck,
    /// By slurmd as `Epilog=` after a job (`SLURM_SCRIPT_CONTEXT=epilog_slurmd`, or
    /// `--epilog`): the node is checked before the next job lands; a PASS refreshes the cache.
    Epilog,
}

/// Whose processes keep a busy node busy, as far as the prolog could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// Processes of no Slurm job (a leftover, a stray daemon): the node is not clean.
    NoJob,
    /// Another job's (the node is shared, not dirty), or not known (Slurm could not say whose
    /// a GPU or its process is; no busy process seen).
    Unknown,
    /// Busy CPUs of processes not this job's, whoever's they are: any user who can run a
    /// process on the node can cause that, so it never drains.
    CpuLoad,
}

/// What happened before any action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The worker ran and gave this verdict (from its exit status; see `worker`); a FAIL here
    /// is a fault of the node's hardware or a missing part ([`found`] sorts the others out).
    Measured(Verdict),
    /// A FAIL whose cause is a busy node (another process on a GPU, busy CPUs): never the
    /// hardware's fault, so it drains only for GPU processes Slurm says are of no job, under
    /// `stray_processes = "fail"`.
    Busy(Whose),
    /// The same GPUs passed within the cache window: nothing was run.
    CachedPass,
    /// Nothing to check (a job without GPUs under `gpus = "job"`; a recheck of a node running jobs).
    NothingToCheck,
    /// The config could not be used; nothing was run.
    BrokenConfig,
    /// The check could not be judged: a recheck whose node's state Slurm does not give (jobs
    /// may run there), or a slow result on GPUs that other jobs may be loading. Never a drain.
    Unjudged,
}

/// What the worker's verdict found, read with its report's class of cause (the contract's
/// `deciding` reason): a FAIL of a busy node is [`Found::Busy`], one of the check's setup (a
/// code this prolog does not know) is judged as an ERROR, never drained.
pub fn found(verdict: Verdict, cause: Option<CauseClass>, whose: Whose) -> Found {
    match (verdict, cause) {
        (Verdict::Fail, Some(CauseClass::Busy)) => Found::Busy(whose),
        (Verdict::Fail, Some(CauseClass::Setup)) => Found::Measured(Verdict::Error),
        (v, _) => Found::Measured(v),
    }
}

/// The policy part of the config that decisions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub on_fail: OnFail,
    pub on_error: OnError,
    pub auto_resume: bool,
    /// `stray_processes`: whether a node whose GPUs processes of no job hold FAILs and drains.
    pub stray: StrayPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAction {
    /// Record a pass of the checked GPUs.
    StorePass,
    /// Forget every recorded pass (a FAIL).
    Clear,
    Keep,
}

/// What to do, in this order: cache, drain or resume, then exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actions {
    pub drain: bool,
    /// Resume the node if, and only if, nccl-check drained it (checked against Slurm first).
    pub resume_own_drain: bool,
    pub cache: CacheAction,
    pub exit_code: i32,
}

/// The table. `all_gpus` = the check covered every GPU of the node (needed to resume: a pass of
/// two GPUs says nothing about the two that failed).
pub fn decide(mode: Mode, found: Found, policy: Policy, all_gpus: bool) -> Actions {
    let nothing = |exit_code| Actions {
        drain: false,
        resume_own_drain: false,
        cache: CacheAction::Keep,
        exit_code,
    };
    match found {
        Found::NothingToCheck | Found::CachedPass => nothing(0),
        Found::Measured(Verdict::Pass) => Actions {
            drain: false,
            resume_own_drain: policy.auto_resume && all_gpus,
            cache: CacheAction::StorePass,
            exit_code: 0,
        },
        // GPUs held by processes Slurm says are of no job, and the admin wants such a node
        // cleaned: as a FAIL.
        Found::Busy(Whose::NoJob) if policy.stray == StrayPolicy::Fail => {
            decide(mode, Found::Measured(Verdict::Fail), policy, all_gpus)
        }
        // A broken config never drains and never stops a job: the admin's mistake must not take
        // nodes out of service. Unjudged: not the node's fault as far as anyone knows. Busy
        // otherwise: the hardware was not judged. In each, nothing drains, nothing is cached,
        // the job runs; a recheck (asked for a verdict) says it has none (2), so nothing resumes.
        Found::BrokenConfig | Found::Unjudged | Found::Busy(_) => {
            nothing(if mode == Mode::Recheck { 2 } else { 0 })
        }
        Found::Measured(Verdict::Fail) => Actions {
            drain: true,
            resume_own_drain: false,
            cache: CacheAction::Clear,
            exit_code: match (mode, policy.on_fail) {
                (Mode::Recheck, _) | (Mode::Prolog, OnFail::Requeue) => 1,
                (Mode::Prolog, OnFail::Run) => 0,
                // The job has ended; the drain (reason "nccl-check: ...") keeps the next one
                // away. A non-zero exit would only make slurmd drain with "Epilog error".
                (Mode::Epilog, _) => 0,
            },
        },
        // ERROR is a setup problem, never the hardware's fault: never drained by us.
        Found::Measured(Verdict::Error) => nothing(match (mode, policy.on_error) {
            (Mode::Recheck, _) => 2,
            (Mode::Prolog | Mode::Epilog, OnError::Run) => 0,
            (Mode::Prolog | Mode::Epilog, OnError::FailJob) => 1,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Policy = Policy {
        on_fail: OnFail::Requeue,
        on_error: OnError::Run,
        auto_resume: false,
        stray: StrayPolicy::Fail,
    };
    const RESUME: Policy = Policy {
        auto_resume: true,
        ..DEFAULT
    };

    fn prolog(found: Found, policy: Policy) -> Actions {
        decide(Mode::Prolog, found, policy, false)
    }

    #[test]
    fn pass_exits_zero_and_records_the_pass() {
        let a = prolog(Found::Measured(Verdict::Pass), DEFAULT);
        assert_eq!(
            (a.exit_code, a.drain, a.cache),
            (0, false, CacheAction::StorePass)
        );
        assert!(!a.resume_own_drain);
    }

    #[test]
    fn fail_drains_clears_the_cache_and_exits_one_so_slurm_requeues() {
        let a = prolog(Found::Measured(Verdict::Fail), DEFAULT);
        assert_eq!(
            (a.exit_code, a.drain, a.cache),
            (1, true, CacheAction::Clear)
        );
    }

    #[test]
    fn fail_with_on_fail_run_drains_but_lets_the_job_run() {
        let p = Policy {
            on_fail: OnFail::Run,
            ..DEFAULT
        };
        let a = prolog(Found::Measured(Verdict::Fail), p);
        assert_eq!((a.exit_code, a.drain), (0, true));
    }

    #[test]
    fn error_never_drains_and_runs_the_job_by_default() {
        let a = prolog(Found::Measured(Verdict::Error), RESUME);
        assert_eq!(
            a,
            Actions {
                drain: false,
                resume_own_drain: false,
                cache: CacheAction::Keep,
                exit_code: 0
            }
        );
    }

    #[test]
    fn error_with_on_error_fail_exits_one_but_still_never_drains_itself() {
        let p = Policy {
            on_error: OnError::FailJob,
            ..DEFAULT
        };
        let a = prolog(Found::Measured(Verdict::Error), p);
        assert_eq!((a.exit_code, a.drain), (1, false));
    }

    #[test]
    fn a_broken_config_never_drains_and_never_stops_the_job() {
        for policy in [DEFAULT, RESUME] {
            let a = prolog(Found::BrokenConfig, policy);
            assert_eq!(
                (a.exit_code, a.drain, a.resume_own_drain),
                (0, false, false)
            );
        }
        let a = decide(Mode::Recheck, Found::BrokenConfig, DEFAULT, true);
        assert_eq!((a.exit_code, a.drain), (2, false));
    }

    #[test]
    fn what_could_not_be_judged_never_drains_and_a_recheck_says_it_has_no_verdict() {
        for mode in [Mode::Prolog, Mode::Epilog, Mode::Recheck] {
            for policy in [DEFAULT, RESUME] {
                let a = decide(mode, Found::Unjudged, policy, true);
                let code = if mode == Mode::Recheck { 2 } else { 0 };
                assert_eq!(
                    (a.exit_code, a.drain, a.resume_own_drain, a.cache),
                    (code, false, false, CacheAction::Keep),
                    "{mode:?}"
                );
            }
        }
    }

    #[test]
    fn a_cached_pass_or_a_job_without_gpus_does_nothing() {
        for found in [Found::CachedPass, Found::NothingToCheck] {
            let a = decide(Mode::Prolog, found, RESUME, true);
            assert_eq!(
                (a.exit_code, a.drain, a.resume_own_drain, a.cache),
                (0, false, false, CacheAction::Keep)
            );
        }
    }

    #[test]
    fn resume_only_when_enabled_and_every_gpu_passed() {
        let pass = Found::Measured(Verdict::Pass);
        assert!(!decide(Mode::Recheck, pass, DEFAULT, true).resume_own_drain);
        assert!(!decide(Mode::Prolog, pass, RESUME, false).resume_own_drain);
        assert!(decide(Mode::Prolog, pass, RESUME, true).resume_own_drain);
        assert!(decide(Mode::Recheck, pass, RESUME, true).resume_own_drain);
    }

    #[test]
    fn the_epilog_drains_on_fail_exits_zero_and_records_a_pass() {
        let a = decide(Mode::Epilog, Found::Measured(Verdict::Fail), DEFAULT, false);
        assert_eq!(
            (a.exit_code, a.drain, a.cache),
            (0, true, CacheAction::Clear)
        );
        let a = decide(Mode::Epilog, Found::Measured(Verdict::Pass), DEFAULT, false);
        assert_eq!((a.exit_code, a.cache), (0, CacheAction::StorePass));
        let a = decide(
            Mode::Epilog,
            Found::Measured(Verdict::Error),
            DEFAULT,
            false,
        );
        assert_eq!((a.exit_code, a.drain), (0, false));
    }

    /// The README's table "which causes drain": only a hardware fault or a missing part
    /// drains whatever runs on the node; a busy node drains only for GPU processes of no job
    /// under `stray_processes = "fail"`; another job's GPUs and anyone's busy CPUs never drain.
    #[test]
    fn only_faults_drain_and_a_busy_node_only_for_strays_under_stray_processes_fail() {
        let warn = Policy {
            stray: StrayPolicy::Warn,
            ..DEFAULT
        };
        let drains = |class: CauseClass, whose: Whose, policy: Policy| {
            let f = found(Verdict::Fail, Some(class), whose);
            decide(Mode::Prolog, f, policy, true).drain
        };
        for whose in [Whose::NoJob, Whose::Unknown, Whose::CpuLoad] {
            for policy in [DEFAULT, warn] {
                assert!(drains(CauseClass::Hardware, whose, policy));
                assert!(drains(CauseClass::Missing, whose, policy));
                assert!(!drains(CauseClass::Setup, whose, policy));
                let stray = whose == Whose::NoJob && policy.stray == StrayPolicy::Fail;
                assert_eq!(drains(CauseClass::Busy, whose, policy), stray, "{whose:?}");
            }
        }
        // A busy node not drained: the job runs, nothing is cached, a recheck did not judge.
        let a = prolog(Found::Busy(Whose::Unknown), DEFAULT);
        assert_eq!(
            a,
            Actions {
                drain: false,
                resume_own_drain: false,
                cache: CacheAction::Keep,
                exit_code: 0
            }
        );
        let a = decide(Mode::Recheck, Found::Busy(Whose::NoJob), warn, true);
        assert_eq!(
            (a.exit_code, a.drain, a.resume_own_drain),
            (2, false, false)
        );
        // A stray under "fail" is a FAIL: drained, cache cleared, the job requeued.
        let a = prolog(Found::Busy(Whose::NoJob), DEFAULT);
        assert_eq!(
            (a.exit_code, a.drain, a.cache),
            (1, true, CacheAction::Clear)
        );
        // A PASS and an ERROR are what they were, whatever the class.
        assert_eq!(
            found(Verdict::Pass, Some(CauseClass::Busy), Whose::NoJob),
            Found::Measured(Verdict::Pass)
        );
        assert_eq!(
            found(Verdict::Fail, None, Whose::Unknown),
            Found::Measured(Verdict::Fail)
        );
    }

    /// prolog/README.md's "Which causes drain" says what `decide` does, row by row.
    #[test]
    fn the_readmes_table_of_causes_is_what_decide_does() {
        let readme = include_str!("../README.md");
        let section = readme
            .split("## Which causes drain")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("the README has the section");
        let mut rows = 0;
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let class = match cells[0].split('`').nth(1) {
                Some("hardware") => CauseClass::Hardware,
                Some("missing") => CauseClass::Missing,
                Some("busy") => CauseClass::Busy,
                Some("setup") => CauseClass::Setup,
                other => panic!("unknown cause {other:?} in {line}"),
            };
            let whose: &[Whose] = match cells[1] {
                "any" => &[Whose::NoJob, Whose::Unknown, Whose::CpuLoad],
                "no job's" => &[Whose::NoJob],
                w if w.starts_with("another job's or not known") => &[Whose::Unknown],
                w if w.starts_with("any user's busy CPUs") => &[Whose::CpuLoad],
                w => panic!("unknown whose {w:?} in {line}"),
            };
            for (cell, stray) in [(cells[2], StrayPolicy::Fail), (cells[3], StrayPolicy::Warn)] {
                let policy = Policy { stray, ..DEFAULT };
                for w in whose {
                    let f = found(Verdict::Fail, Some(class), *w);
                    let drain = decide(Mode::Prolog, f, policy, true).drain;
                    assert_eq!(drain, cell == "drains", "{line}: {w:?}, {stray:?}");
                }
            }
            rows += 1;
        }
        assert_eq!(rows, 6, "every class and whose has its row");
    }

    #[test]
    fn recheck_exit_codes_follow_the_verdict() {
        let code = |v| decide(Mode::Recheck, Found::Measured(v), DEFAULT, true).exit_code;
        assert_eq!(
            (
                code(Verdict::Pass),
                code(Verdict::Fail),
                code(Verdict::Error)
            ),
            (0, 1, 2)
        );
    }
}
