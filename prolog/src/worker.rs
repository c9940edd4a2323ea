//! Running the `nccl-check` worker as root, safely: a clean environment (a fixed PATH plus only
//! what the admin's config lists), the contract's command line ([`WorkerArgs`]), supervised by
//! [`bench_core::supervise`] (own process group killed with SIGKILL at the budget, output to the
//! log file), and the verdict read from its exit status (the contract: 0 PASS, 1 FAIL, anything
//! else or a signal ERROR) with the JSON report for the details.

use crate::report::{self, Report};
use bench_core::contract::{PlanName, WorkerArgs};
use bench_core::supervise::{self, Ending, Output, Spec};
use bench_core::verdict::{ExitCode, Verdict};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The worker's PATH. Fixed: the prolog's own environment has none, and the job's must not count.
pub const WORKER_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// Everything needed to start one worker run.
#[derive(Debug, Clone)]
pub struct Request {
    pub worker: PathBuf,
    pub plan: PlanName,
    pub json: PathBuf,
    /// The worker's `--timeout`.
    pub timeout_s: u64,
    /// The process group is killed this long after the start.
    pub budget: Duration,
    /// `--config`, when the worker's config file exists.
    pub config: Option<PathBuf>,
    /// `--gpus` (indices in PCI bus order); None = every GPU.
    pub gpus: Option<Vec<usize>>,
    /// The admin's `[env]` table.
    pub env: BTreeMap<String, String>,
    /// The worker's stdout and stderr go here.
    pub log: PathBuf,
}

/// How one run ended.
#[derive(Debug)]
pub struct Run {
    pub verdict: Verdict,
    /// The exit code, when the worker exited by itself.
    pub exit_code: Option<i32>,
    /// What went wrong outside the report: not started, killed, timed out.
    pub problem: Option<String>,
    pub report: Result<Report, String>,
    pub elapsed: Duration,
    /// The last lines the worker printed.
    pub output_tail: String,
}

impl Request {
    /// The worker's command line.
    pub fn args(&self) -> WorkerArgs {
        WorkerArgs {
            json: Some(self.json.clone()),
            quiet: true,
            config: self.config.clone(),
            gpus: self.gpus.clone(),
            ..WorkerArgs::new(self.plan.clone(), self.timeout_s)
        }
    }

    /// The worker's complete environment. Nothing comes from the prolog's own environment, which
    /// carries the job's `SPANK_*`, `SLURM_*` and GRES variables.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut e: BTreeMap<String, String> = BTreeMap::new();
        e.insert("PATH".into(), WORKER_PATH.into());
        // Slurm's GPU indices and `nvidia-smi` count in PCI bus order; CUDA's default is
        // "fastest first". This makes `--gpus` name the GPUs Slurm meant.
        e.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        e.extend(self.env.clone());
        e.into_iter().collect()
    }
}

/// The verdict of a run: the exit status decides (only 1 is FAIL); a report that cannot be read
/// does not change it.
pub fn verdict_of(exit_code: Option<i32>, timed_out: bool) -> Verdict {
    if timed_out {
        Verdict::Error
    } else {
        ExitCode::verdict_of_status(exit_code)
    }
}

/// Runs the worker to its end or to the budget, whichever comes first.
pub fn run(req: &Request) -> Run {
    let start = Instant::now();
    // A stale report must never be read as this run's.
    let _ = std::fs::remove_file(&req.json);
    let failed = |problem: String| Run {
        verdict: Verdict::Error,
        exit_code: None,
        problem: Some(problem),
        report: Err("no report".into()),
        elapsed: start.elapsed(),
        output_tail: String::new(),
    };
    let (out, err) = match File::create(&req.log).and_then(|f| Ok((f.try_clone()?, f))) {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot create {}: {e}", req.log.display())),
    };
    let mut spec = Spec::new(&req.worker, req.args().to_args(), req.budget);
    spec.env = Some(
        req.env()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
    );
    spec.stdout = Output::File(out);
    spec.stderr = Output::File(err);
    let done = match supervise::run(spec) {
        Ok(d) => d,
        Err(e) => return failed(e.to_string()),
    };
    let timed_out = done.ending == Ending::KilledAtDeadline;
    let problem = match done.ending {
        Ending::KilledAtDeadline => Some(format!(
            "no verdict within the budget of {} s; the worker's process group was killed",
            req.budget.as_secs()
        )),
        Ending::Signaled(s) => Some(format!("the worker was killed by signal {s}")),
        Ending::Exited(_) => None,
    };
    Run {
        verdict: verdict_of(done.exit_code(), timed_out),
        exit_code: done.exit_code(),
        problem,
        report: report::read(&req.json),
        elapsed: start.elapsed(),
        output_tail: tail(&req.log, 3),
    }
}

/// The last `n` non-empty lines of `path`, joined with " | " (at most 400 characters).
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(16 * 1024);
    let text = String::from_utf8_lossy(&text[start..]);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let s = lines[lines.len().saturating_sub(n)..].join(" | ");
    s.chars().take(400).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("nccl-check-worker-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    fn script(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("worker.sh");
        bench_core::test_support::write_executable(&p, &format!("#!/bin/sh\n{body}\n"));
        p
    }

    fn request(dir: &Path, worker: PathBuf, budget_ms: u64) -> Request {
        Request {
            worker,
            plan: PlanName::quick(),
            json: dir.join("report.json"),
            timeout_s: 1,
            budget: Duration::from_millis(budget_ms),
            config: None,
            gpus: Some(vec![0, 2]),
            env: BTreeMap::from([("OUT".to_string(), dir.join("env").display().to_string())]),
            log: dir.join("worker.log"),
        }
    }

    #[test]
    fn the_worker_gets_the_contract_arguments() {
        let mut r = request(Path::new("/s"), PathBuf::from("/usr/bin/nccl-check"), 1000);
        r.config = Some(PathBuf::from("/etc/nccl-check/nccl-check.toml"));
        assert_eq!(
            r.args().display(),
            "--plan quick --json /s/report.json --timeout 1 --quiet \
             --config /etc/nccl-check/nccl-check.toml --gpus 0,2"
        );
    }

    #[test]
    fn only_exit_code_one_is_fail_and_a_timeout_is_error() {
        assert_eq!(verdict_of(Some(0), false), Verdict::Pass);
        assert_eq!(verdict_of(Some(1), false), Verdict::Fail);
        assert_eq!(verdict_of(Some(1), true), Verdict::Error);
        assert_eq!(verdict_of(Some(5), false), Verdict::Error);
        assert_eq!(verdict_of(None, false), Verdict::Error);
    }

    #[test]
    fn the_environment_is_scrubbed_to_path_and_the_admin_table() {
        let dir = scratch("env");
        let w = script(&dir, "env > \"$OUT\"; exit 0");
        // The test process itself has HOME, CARGO_* and more: none may reach the worker.
        let run = run(&request(&dir, w, 5000));
        assert_eq!(run.verdict, Verdict::Pass, "{:?}", run.problem);
        let env = std::fs::read_to_string(dir.join("env")).expect("env written");
        let mut keys: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
        keys.sort();
        keys.retain(|k| *k != "PWD" && *k != "SHLVL" && *k != "_"); // set by the shell itself
        assert_eq!(keys, ["CUDA_DEVICE_ORDER", "OUT", "PATH"], "{env}");
        assert!(env.contains(&format!("PATH={WORKER_PATH}\n")));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_hung_worker_and_its_children_are_killed_at_the_budget() {
        let dir = scratch("hang");
        let w = script(&dir, "sleep 1000 & echo $! > \"$OUT\"; sleep 1000");
        let t = Instant::now();
        let run = run(&request(&dir, w, 300));
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_eq!(run.verdict, Verdict::Error);
        assert!(
            run.problem.as_deref().unwrap_or("").contains("budget"),
            "{:?}",
            run.problem
        );
        // The grandchild is gone (or a zombie of init's about to be reaped).
        bench_core::test_support::assert_process_gone(&dir.join("env"), Duration::from_millis(100));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_missing_worker_is_an_error_not_a_fail() {
        let dir = scratch("missing");
        let run = run(&request(
            &dir,
            PathBuf::from("/nonexistent/nccl-check"),
            1000,
        ));
        assert_eq!(run.verdict, Verdict::Error);
        assert!(run
            .problem
            .as_deref()
            .unwrap_or("")
            .contains("cannot start"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_stale_report_is_never_read_as_this_runs() {
        let dir = scratch("stale");
        std::fs::write(dir.join("report.json"), r#"{"verdict":"PASS"}"#).expect("write");
        let w = script(&dir, "echo 'nccl-check: ERROR rendezvous' >&2; exit 5");
        let run = run(&request(&dir, w, 5000));
        assert_eq!((run.verdict, run.exit_code), (Verdict::Error, Some(5)));
        assert!(run.report.is_err());
        assert_eq!(run.output_tail, "nccl-check: ERROR rendezvous");
        std::fs::remove_dir_all(&dir).ok();
    }
}
