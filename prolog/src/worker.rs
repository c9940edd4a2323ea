//! Running the `nccl-check` worker as root, safely: a clean environment (a fixed PATH plus only
//! what the admin's config lists), the contract's command line ([`WorkerArgs`]), supervised by
//! [`nccl_check_host::supervise`] (own process group killed with SIGKILL at the budget, output to the
//! log file in the run's private directory), and the verdict from its exit status and its JSON
//! report together (the contract: 0 PASS, 1 FAIL, anything else or a signal ERROR; a report that
//! says otherwise is an ERROR "contradiction", never a drain).

use nccl_check_contract::args::{PlanName, WorkerArgs};
use nccl_check_contract::outcome::RunProblem;
use nccl_check_contract::report::read::{read_report, ReportError};
use nccl_check_contract::report::{Report, MAX_REPORT_BYTES};
use nccl_check_contract::verdict::Verdict;
use nccl_check_host::supervise::{self, Ending, Output, Spec};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The worker's PATH. Fixed: the prolog's own environment has none, and the job's must not count.
pub const WORKER_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// `worker.log` keeps at most this much of the start of each of the worker's streams, and as
/// much of their end, with a line saying how much was cut: root's disk is not the worker's to
/// fill (a worker wrote 1.2 GB in 1.7 s), and the 32 newest runs are kept.
pub const LOG_HEAD_BYTES: usize = 1 << 20;
pub const LOG_TAIL_BYTES: usize = 1 << 20;

/// Everything needed to start one worker run.
#[derive(Debug, Clone)]
pub struct Request {
    pub worker: PathBuf,
    pub plan: PlanName,
    /// The run's private directory ([`crate::state::create_run_dir`]): the report, the log, and the
    /// worker's `TMPDIR` (NCCL's log goes there, never to a shared /tmp).
    pub dir: PathBuf,
    /// The worker's `--timeout`.
    pub timeout_s: u64,
    /// The process group is killed this long after the start.
    pub budget: Duration,
    /// `--config`, when the worker's config file exists.
    pub config: Option<PathBuf>,
    /// `--gpus` (indices in PCI bus order); None = every GPU.
    pub gpus: Option<Vec<usize>>,
    /// The admin's `env` table.
    pub env: BTreeMap<String, String>,
}

/// How one run ended.
#[derive(Debug)]
pub struct Run {
    pub verdict: Verdict,
    /// The exit code, when the worker exited by itself.
    pub exit_code: Option<i32>,
    /// What happened to the worker, in words ("exited 3", "killed by signal 11 (SIGSEGV)").
    pub ended: String,
    /// Why the verdict is ERROR besides the worker's own word: not started, killed, timed out,
    /// an unusable report, or a report that contradicts the exit code.
    pub problem: Option<String>,
    /// The exit code and the report disagree: the worker itself is at fault (logged as such).
    pub contradicted: bool,
    /// Killed at the end of its budget, without a verdict.
    pub out_of_budget: bool,
    pub report: Result<Report, ReportError>,
    pub elapsed: Duration,
    /// The last lines the worker printed.
    pub output_tail: String,
}

impl Request {
    pub fn json(&self) -> PathBuf {
        self.dir.join("report.json")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("worker.log")
    }

    /// The worker's command line.
    pub fn args(&self) -> WorkerArgs {
        WorkerArgs {
            json: Some(self.json()),
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
        // The run's private directory (root's, 0700): NCCL's log and any temp file of the worker.
        e.insert("TMPDIR".into(), self.dir.display().to_string());
        e.into_iter().collect()
    }
}

/// What the ending means, in words.
pub fn describe(ending: Ending, budget: Duration) -> String {
    match ending {
        Ending::Exited(c) => format!("the worker exited {c}"),
        Ending::Signaled(s) => {
            let name = nix::sys::signal::Signal::try_from(s)
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            format!("the worker was killed by signal {s}{name}")
        }
        Ending::KilledAtDeadline => format!(
            "no verdict within the budget of {} s; the worker's process group was killed",
            budget.as_secs()
        ),
    }
}

/// The verdict from the exit status and the report together: the contract's one rule
/// ([`nccl_check_contract::outcome::of_run`]), with the problem that made it an ERROR.
pub fn verdict_of_run(
    ending: Ending,
    report: &Result<Report, ReportError>,
) -> (Verdict, Option<RunProblem>) {
    let j = nccl_check_contract::outcome::of_run(ending, Some(report));
    (j.verdict, j.problem)
}

/// Runs the worker to its end or to the budget, whichever comes first.
pub fn run(req: &Request) -> Run {
    let start = Instant::now();
    let failed = |problem: String| Run {
        verdict: Verdict::Error,
        exit_code: None,
        ended: "the worker did not start".into(),
        problem: Some(problem),
        contradicted: false,
        out_of_budget: false,
        report: Err(ReportError::Missing(req.json())),
        elapsed: start.elapsed(),
        output_tail: String::new(),
    };
    // A new file in the run's private directory (O_EXCL: nothing planted is written through).
    let log = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(req.log());
    let (out, err) = match log.and_then(|f: File| Ok((f.try_clone()?, f))) {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot create {}: {e}", req.log().display())),
    };
    let mut spec = Spec::new(&req.worker, req.args().to_args(), req.budget);
    spec.env = Some(
        req.env()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
    );
    let capped = |file| Output::Capped {
        file,
        head: LOG_HEAD_BYTES,
        tail: LOG_TAIL_BYTES,
    };
    spec.stdout = capped(out);
    spec.stderr = capped(err);
    // Guarded: a SIGKILL of the prolog (slurmd's PrologEpilogTimeout) takes the whole group.
    let done = match supervise::run_guarded(spec) {
        Ok(d) => d,
        Err(e) => return failed(e.to_string()),
    };
    let report = read_report(&req.json(), MAX_REPORT_BYTES);
    let (verdict, judged) = verdict_of_run(done.ending, &report);
    let contradicted = judged.as_ref().is_some_and(RunProblem::is_contradiction);
    let problem = match done.ending {
        Ending::Exited(_) => judged.map(|p| p.to_string()),
        other => Some(describe(other, req.budget)),
    };
    Run {
        verdict,
        exit_code: done.exit_code(),
        ended: describe(done.ending, req.budget),
        problem,
        contradicted,
        out_of_budget: matches!(done.ending, Ending::KilledAtDeadline),
        report,
        elapsed: start.elapsed(),
        // The worker's last words are on its standard error; worker.log may end with the kept
        // tail of its standard output after a cut.
        output_tail: Some(last_lines(&done.stderr, 3))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| tail(&req.log(), 3)),
    }
}

/// The last `n` non-empty lines of `bytes`, joined with " | " (at most 400 characters).
fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let s = lines[lines.len().saturating_sub(n)..].join(" | ");
    s.chars().take(400).collect()
}

/// [`last_lines`] of the last 16 KiB of `path`.
fn tail(path: &Path, n: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
        let _ = f.take(16 * 1024).read_to_end(&mut text);
    }
    last_lines(&text, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::report::Head;
    use nccl_check_host::test_support::scratch_dir;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("worker.sh");
        nccl_check_host::test_support::write_executable(&p, &format!("#!/bin/sh\n{body}\n"));
        p
    }

    fn request(dir: &Path, worker: PathBuf, budget_ms: u64) -> Request {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).expect("mkdir");
        Request {
            worker,
            plan: PlanName::quick(),
            dir: run,
            timeout_s: 1,
            budget: Duration::from_millis(budget_ms),
            config: None,
            gpus: Some(vec![0, 2]),
            env: BTreeMap::from([("OUT".to_string(), dir.join("env").display().to_string())]),
        }
    }

    fn report(v: Verdict) -> Result<Report, ReportError> {
        Ok(Report {
            head: Head {
                verdict: v,
                ..Head::default()
            },
            ..Report::default()
        })
    }

    #[test]
    fn the_worker_gets_the_contract_arguments() {
        let mut r = request(&scratch_dir("worker-args"), PathBuf::from("/w"), 1000);
        r.dir = PathBuf::from("/s/runs/job-1.x");
        r.config = Some(PathBuf::from("/etc/nccl-check/nccl-check.toml"));
        assert_eq!(
            r.args().display(),
            "--plan quick --json /s/runs/job-1.x/report.json --timeout 1 --quiet \
             --config /etc/nccl-check/nccl-check.toml --gpus 0,2"
        );
    }

    /// The rule itself is tested in the contract (`outcome`); here, that the prolog uses it.
    #[test]
    fn the_verdict_needs_the_exit_code_and_the_report_to_agree() {
        let missing = || Err(ReportError::Missing(PathBuf::from("/r")));
        assert_eq!(
            verdict_of_run(Ending::Exited(1), &missing()).0,
            Verdict::Fail
        );
        let (v, why) = verdict_of_run(Ending::Exited(0), &report(Verdict::Fail));
        assert_eq!(v, Verdict::Error);
        assert!(why.is_some_and(|p| p.is_contradiction()));
    }

    #[test]
    fn endings_are_told_in_words_never_as_none() {
        let b = Duration::from_secs(30);
        assert_eq!(describe(Ending::Exited(3), b), "the worker exited 3");
        assert_eq!(
            describe(Ending::Signaled(11), b),
            "the worker was killed by signal 11 (SIGSEGV)"
        );
        assert!(describe(Ending::KilledAtDeadline, b).contains("budget of 30 s"));
    }

    #[test]
    fn the_environment_is_scrubbed_to_path_tmpdir_and_the_admin_table() {
        let dir = scratch_dir("worker-env");
        let w = script(&dir, "env > \"$OUT\"; cp /dev/null \"$TMPDIR/x\"; echo '{\"schema_version\":1,\"tool\":\"fake\",\"tool_version\":\"0\",\"exit_code\":0,\"summary\":\"ok\",\"reasons\":[],\"host\":\"n1\",\"gpus\":[],\"results\":[],\"avg_busbw\":{},\"verdict\":\"PASS\"}' > \"$(dirname \"$TMPDIR/x\")/report.json\"; exit 0");
        // The test process itself has HOME, CARGO_* and more: none may reach the worker.
        let req = request(&dir, w, 5000);
        let run = run(&req);
        assert_eq!(run.verdict, Verdict::Pass, "{:?}", run.problem);
        let env = std::fs::read_to_string(dir.join("env")).expect("env written");
        let mut keys: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
        keys.sort();
        keys.retain(|k| *k != "PWD" && *k != "SHLVL" && *k != "_"); // set by the shell itself
        assert_eq!(
            keys,
            ["CUDA_DEVICE_ORDER", "OUT", "PATH", "TMPDIR"],
            "{env}"
        );
        assert!(env.contains(&format!("PATH={WORKER_PATH}\n")));
        assert!(req.dir.join("x").exists(), "TMPDIR is the run's directory");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_hung_worker_and_its_children_are_killed_at_the_budget() {
        let dir = scratch_dir("worker-hang");
        let w = script(&dir, "sleep 1000 & echo $! > \"$OUT\"; sleep 1000");
        let t = Instant::now();
        let run = run(&request(&dir, w, 300));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(run.verdict, Verdict::Error);
        assert!(
            run.out_of_budget,
            "the gate names a budget cut by this flag"
        );
        assert!(
            run.problem.as_deref().unwrap_or("").contains("budget"),
            "{:?}",
            run.problem
        );
        // The grandchild is gone (or a zombie of init's about to be reaped).
        nccl_check_host::test_support::assert_process_gone(
            &dir.join("env"),
            Duration::from_millis(100),
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_missing_worker_is_an_error_not_a_fail() {
        let dir = scratch_dir("worker-missing");
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
        assert_eq!(run.ended, "the worker did not start");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_gigabyte_of_worker_output_leaves_a_capped_log_that_says_what_was_cut() {
        let dir = scratch_dir("worker-flood");
        let w = script(
            &dir,
            "head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo 'nccl-check: FAIL the last line' >&2; exit 1",
        );
        let run = run(&request(&dir, w, 60_000));
        assert_eq!(run.exit_code, Some(1), "{:?}", run.problem);
        let req = request(&dir, PathBuf::new(), 1);
        let size = std::fs::metadata(req.log()).expect("worker.log").len();
        let most = 2 * (LOG_HEAD_BYTES + LOG_TAIL_BYTES) as u64 + 1024;
        assert!(size <= most, "worker.log is {size} bytes");
        let log = std::fs::read(req.log()).expect("read");
        let text = String::from_utf8_lossy(&log);
        assert!(
            text.contains("[nccl-check: 997902849 bytes of the worker's standard output cut here; its first 1048576 and last 1048576 bytes are kept]"),
            "{}",
            &text[LOG_HEAD_BYTES..LOG_HEAD_BYTES + 300]
        );
        assert!(text.contains("nccl-check: FAIL the last line\n"));
        assert_eq!(run.output_tail, "nccl-check: FAIL the last line");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_error_exit_keeps_the_output_tail() {
        let dir = scratch_dir("worker-tail");
        let w = script(&dir, "echo 'nccl-check: ERROR rendezvous' >&2; exit 5");
        let run = run(&request(&dir, w, 5000));
        assert_eq!((run.verdict, run.exit_code), (Verdict::Error, Some(5)));
        assert!(run.report.is_err());
        assert_eq!(run.output_tail, "nccl-check: ERROR rendezvous");
        assert_eq!(run.ended, "the worker exited 5");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The report as the prolog reads it: the contract's bounded reader, at its bound.
    mod report {
        use super::*;
        use nccl_check_contract::verdict::Verdict;
        use nccl_check_host::test_support::scratch_dir;

        #[test]
        fn margins_are_the_smallest_per_collective_and_only_where_a_floor_judged() {
            use nccl_check_contract::report::{Body, Expected, Measured};
            let row = |c: &str, m: Option<f64>| Measured {
                collective: c.into(),
                expected: m.map(|m| Expected {
                    floor_gbs: 100.0,
                    margin: m,
                    source: "test".into(),
                }),
                ..Measured::default()
            };
            let r = Report {
                body: Body {
                    results: vec![
                        row("all_reduce", Some(1.3)),
                        row("all_reduce", Some(1.07)),
                        row("all_gather", None),
                        row("sendrecv", Some(f64::INFINITY)),
                    ],
                    ..Body::default()
                },
                ..Report::default()
            };
            let m = r.margins();
            assert_eq!(m.len(), 1, "{m:?}");
            assert_eq!(m.get("all_reduce"), Some(&1.07));
        }

        #[test]
        fn the_recorded_fail_report_gives_its_reasons_and_gpu_uuids() {
            let r = read_report(
                Path::new(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../tests/prolog/data/real-quick-fail-p2p-disabled.json"
                )),
                MAX_REPORT_BYTES,
            )
            .expect("reads");
            assert_eq!(r.head.verdict, Verdict::Fail);
            assert_eq!(
                r.head.reasons[0].code,
                nccl_check_contract::report::reason::ReasonCode::BusbwBelowThreshold
            );
            let ids = r.uuids().expect("every GPU has a UUID");
            assert_eq!(ids.len(), 4);
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        }

        #[test]
        fn a_gpu_without_uuid_means_no_uuids_and_garbage_is_not_a_report() {
            let d = scratch_dir("report-garbage");
            let p = d.join("r.json");
            std::fs::write(
                &p,
                r#"{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":0,"summary":"ok","reasons":[],"host":"n1","results":[],"avg_busbw":{},"verdict":"PASS","gpus":[{"uuid":"GPU-a"},{"name":"x"}]}"#,
            )
            .expect("write");
            assert_eq!(
                read_report(&p, MAX_REPORT_BYTES).expect("reads").uuids(),
                None
            );
            std::fs::write(&p, r#"{"summary":"x"}"#).expect("write");
            assert!(read_report(&p, MAX_REPORT_BYTES)
                .unwrap_err()
                .to_string()
                .contains("not a report"));
            std::fs::remove_dir_all(&d).ok();
        }
    }
}
