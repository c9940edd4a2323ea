//! The decision table: from what the check found to what the prolog does (exit code, drain,
//! cache, resume). Pure; every row is a unit test below and a line in prolog/README.md.

use crate::config::{OnError, OnFail};
use nccl_check_contract::verdict::Verdict;

/// How the binary was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Mode {
    /// The context's name in `gate.json` and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Prolog => "prolog",
            Mode::Recheck => "recheck",
            Mode::Epilog => "epilog",
        }
    }
}

/// What happened before any action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The worker ran and gave this verdict (from its exit status; see `worker`).
    Measured(Verdict),
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

/// The policy part of the config that decisions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub on_fail: OnFail,
    pub on_error: OnError,
    pub auto_resume: bool,
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
        // A broken config never drains and never stops a job: the admin's mistake must not take
        // nodes out of service.
        Found::BrokenConfig => nothing(if mode == Mode::Recheck { 2 } else { 0 }),
        // Not the node's fault as far as anyone knows: the job runs, nothing is drained or
        // cached; a recheck (asked for a verdict) says it has none.
        Found::Unjudged => nothing(if mode == Mode::Recheck { 2 } else { 0 }),
        Found::NothingToCheck | Found::CachedPass => nothing(0),
        Found::Measured(Verdict::Pass) => Actions {
            drain: false,
            resume_own_drain: policy.auto_resume && all_gpus,
            cache: CacheAction::StorePass,
            exit_code: 0,
        },
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
