//! Runs the `nccl-check` worker as a child of the task and turns its end into the plugin's
//! verdict and one line for the user. The command line is the contract's
//! ([`nccl_check_contract::args::WorkerArgs`]), the supervision (own process group, deadline, group
//! kill, stderr tail, no threads) is [`nccl_check_host::supervise`], and the details come
//! from the worker's JSON report ([`nccl_check_contract::report::read`]); the verdict is the contract's
//! one rule over both ([`nccl_check_contract::outcome`]: 0 PASS and 1 FAIL when the report
//! agrees, anything else, a signal or a contradiction ERROR). The worker's own lines are read
//! here too: its verdict line ([`verdict_line`]: left out of the live copy, read back by the
//! batch check from srun's), and how any line of it or of srun is shown ([`one_line`]).

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nccl_check_contract::args::{PlanName, WorkerArgs};
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::line;
use nccl_check_contract::outcome::of_run;
use nccl_check_contract::report::read::{read_report, ReportError};
use nccl_check_contract::report::Report;
use nccl_check_contract::verdict::Verdict;
use nccl_check_host::supervise::{self, Ending, Output, Spec};

use crate::config::PluginConfig;
use crate::mode::Mode;

/// Bytes of the worker's stderr kept for the message when there is no report.
const STDERR_TAIL_BYTES: usize = 16 << 10;
/// Largest JSON report read back: the contract's bound, the same for every caller.
const MAX_JSON_BYTES: u64 = nccl_check_contract::report::MAX_REPORT_BYTES;
/// Longest summary shown to the user.
const MAX_SUMMARY_CHARS: usize = 400;

/// A child's stderr kept as a tail only.
const TAIL: Output = Output::Tail {
    max_bytes: STDERR_TAIL_BYTES,
};

/// A child's stderr copied to ours (the task's: srun's, through slurmstepd; the batch step's:
/// the job's error file) as its lines arrive, less those `skip` takes, and kept as a tail; only
/// the tail where ours cannot be duplicated (a dup, so closing it leaves ours open).
pub fn tee_stderr(skip: fn(&[u8]) -> bool) -> Output {
    match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Output::TeeLines {
            max_bytes: STDERR_TAIL_BYTES,
            copy: std::fs::File::from(fd),
            skip,
        },
        Err(_) => TAIL,
    }
}

/// The worker's arguments that every check of `mode` under `config` shares: plan, timeout, the
/// site's port range, `--expect-collnet`; `progress` for the one that shows it.
pub fn worker_args(config: &PluginConfig, mode: &Mode, progress: bool) -> WorkerArgs {
    let plan = mode.plan().unwrap_or_else(PlanName::quick);
    let mut args = WorkerArgs::new(plan, config.timeout.as_secs());
    args.port_range = Some(config.ports);
    args.progress = progress;
    args.expect_collnet = mode.expect_collnet();
    args
}

/// One run of the worker, as the task's rank.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub worker: PathBuf,
    /// The command line; `json` is set by [`run`] to a private directory.
    pub args: WorkerArgs,
    /// When the plugin kills the worker's process group.
    pub deadline: Duration,
    /// The complete environment of the worker (the task's environment).
    pub env: Vec<(OsString, OsString)>,
    /// Directory in which a private directory for the JSON report is created.
    pub tmp_dir: PathBuf,
    /// Copy the worker's stderr to ours as it comes (its progress, for the user), besides the tail.
    pub show_stderr: bool,
    /// Keep a copy of the JSON report at this path (created new, never through a link).
    pub keep_report: Option<PathBuf>,
}

/// The worker's result as the plugin reports it.
#[derive(Debug)]
pub struct TaskOutcome {
    pub verdict: Verdict,
    /// How the worker ended; `Err` = it could not be started.
    pub ending: Result<Ending, String>,
    /// One line: the report's summary, or what is known without one.
    pub detail: String,
    /// How long the worker ran.
    pub elapsed: Duration,
    /// Why the report could not be kept (`keep_report`), for a note to the user.
    pub keep_problem: Option<String>,
}

/// Runs the worker to completion or to the deadline.
pub fn run(inv: &Invocation) -> TaskOutcome {
    let json_dir = private_dir(&inv.tmp_dir);
    let mut args = inv.args.clone();
    args.json = json_dir.as_ref().map(|d| d.path().join("report.json"));
    // Its progress as it comes; not its verdict line: the plugin says that once, itself.
    let stderr = if inv.show_stderr {
        tee_stderr(is_verdict_line)
    } else {
        TAIL
    };
    let spec = Spec {
        env: Some(inv.env.clone()),
        cwd: None,
        stderr,
        ..Spec::new(&inv.worker, args.to_args(), inv.deadline)
    };
    let started = std::time::Instant::now();
    let mut outcome = match supervise::run(spec) {
        Ok(done) => {
            let report = args.json.as_deref().map(|p| read_report(p, MAX_JSON_BYTES));
            outcome(Ok(done.ending), report, &done.stderr, inv)
        }
        Err(e) => outcome(Err(e.error.to_string()), None, &[], inv),
    };
    outcome.elapsed = started.elapsed();
    if let (Some(src), Some(dst)) = (args.json.as_deref(), inv.keep_report.as_deref()) {
        outcome.keep_problem = keep(src, dst).err();
    }
    drop(json_dir);
    outcome
}

/// The worker's own verdict line (`nccl-check: FAIL <summary>`, written by
/// `nccl_check_contract::line`), also behind srun's `--label` (`1: `): its verdict and summary.
/// Only at the start of the line (after a label), so a line that quotes one is not taken for it;
/// the contract's parser reads it.
pub fn verdict_line(line: &str) -> Option<(Verdict, &str)> {
    let line = line.trim();
    let unlabelled = line
        .split_once(": ")
        .filter(|(label, _)| !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()))
        .map_or(line, |(_, rest)| rest);
    if !unlabelled.starts_with(line::PREFIX) {
        return None;
    }
    line::parse(unlabelled).map(|f| (f.verdict, f.summary))
}

/// Left out of the live copy of the worker's stderr: its verdict line, which the plugin's own
/// line (or table row) says with the node and rank.
fn is_verdict_line(line: &[u8]) -> bool {
    verdict_line(&String::from_utf8_lossy(line)).is_some()
}

/// Copies the report to `dst`: a new file (`O_EXCL`, never through a symlink), at most
/// [`MAX_JSON_BYTES`], written as the user who runs the task.
fn keep(src: &Path, dst: &Path) -> Result<(), String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let why = |e: std::io::Error| format!("cannot keep the report as {}: {e}", dst.display());
    let mut from = std::fs::File::open(src).map_err(why)?.take(MAX_JSON_BYTES);
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)
        .map_err(why)?;
    std::io::copy(&mut from, &mut to).map(|_| ()).map_err(why)
}

/// Builds the outcome from the ending, the JSON report and the stderr tail (pure).
pub fn outcome(
    ending: Result<Ending, String>,
    report: Option<Result<Report, ReportError>>,
    stderr_tail: &[u8],
    inv: &Invocation,
) -> TaskOutcome {
    // The contract's one rule (the prolog's too): exit status and report must agree.
    // A worker that could not start is an ERROR.
    let judged = ending.as_ref().ok().map(|e| of_run(*e, report.as_ref()));
    let (verdict, report_problem) =
        judged.map_or((Verdict::Error, None), |j| (j.verdict, j.problem));
    let report = report.and_then(Result::ok);
    let summary = report
        .as_ref()
        .map(|r| one_line(&r.head.summary))
        .filter(|s| !s.is_empty());
    // Without a report, the worker's last words are all there is.
    let tail = String::from_utf8_lossy(stderr_tail);
    let last_output = last_words(&tail)
        .map(|l| format!("; last output: {l}"))
        .unwrap_or_default();
    let mut detail = match (&ending, summary) {
        (Ok(Ending::Exited(code)), Some(s)) if *code <= 1 => s,
        (Ok(Ending::Exited(code)), Some(s)) => format!("{s} [worker exit {code}]"),
        (Ok(Ending::Exited(code)), None) => format!(
            "worker exited with code {code} ({}){last_output}",
            ExitCode::meaning_of(*code)
        ),
        (Ok(Ending::Signaled(sig)), _) => format!(
            "worker killed by signal {sig} ({}){last_output}",
            signal_name(*sig)
        ),
        (Ok(Ending::KilledAtDeadline), _) => format!(
            "worker did not finish within {} s (--timeout {} s + grace); its process group was killed",
            inv.deadline.as_secs(),
            inv.args.timeout_s
        ),
        (Err(e), _) => format!("cannot start the worker {}: {e}", inv.worker.display()),
    };
    if let Some(p) = report_problem {
        detail.push_str(&format!("; {p}"));
    }
    TaskOutcome {
        verdict,
        ending,
        detail: one_line(&detail),
        elapsed: Duration::ZERO,
        keep_problem: None,
    }
}

/// The last line of `text` that is not blank, as [`one_line`]: what a process said last.
pub fn last_words(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(one_line)
}

/// First line, control characters removed, at most 400 characters (then `…`):
/// every line of a worker's or srun's the user is shown.
pub fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or("").trim();
    let mut out: String = first
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_SUMMARY_CHARS)
        .collect();
    if first.chars().count() > MAX_SUMMARY_CHARS {
        out.push('…');
    }
    out
}

/// The signal's name as `kill -l` spells it (`SIGSEGV`), from nix's table; "signal" for a
/// number it does not know (a real-time signal).
fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig).map_or("signal", |s| s.as_str())
}

/// `DIR/nccl-check.XXXXXX`: a new 0700 directory no other user can race on (`mkdtemp`, through
/// tempfile), removed when the value is dropped.
fn private_dir(parent: &Path) -> Option<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    // tempfile leaves the mode to the umask unless told: mkdtemp's is 0700.
    tempfile::Builder::new()
        .prefix("nccl-check.")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::args::PlanName;

    /// A worker script; `$json` is the value of its `--json` argument.
    fn inv(script: &str, deadline_ms: u64) -> (Invocation, tempfile::TempDir) {
        let dir = private_dir(&std::env::temp_dir()).expect("a private dir");
        let worker = dir.path().join("worker.sh");
        let body = format!(
            "#!/bin/sh\njson=; prev=; for a; do [ \"$prev\" = --json ] && json=$a; prev=$a; done\n{script}\n"
        );
        nccl_check_host::test_support::write_executable(&worker, &body);
        let mut args = WorkerArgs::new(PlanName::quick(), 1);
        args.rank = Some(1);
        args.world = Some(2);
        args.rendezvous = Some("n1:29501".into());
        let inv = Invocation {
            worker,
            args,
            deadline: Duration::from_millis(deadline_ms),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            tmp_dir: dir.path().to_path_buf(),
            show_stderr: false,
            keep_report: None,
        };
        (inv, dir)
    }

    const REPORT: &str = r#"{"schema_version":1,"tool":"fake","tool_version":"0","reasons":[],"gpus":[],"results":[],"avg_busbw":{},"verdict":"VERDICT","exit_code":CODE,"summary":"SUMMARY","host":"n2"}"#;

    fn write_report(verdict: &str, code: i32, summary: &str) -> String {
        let r = REPORT
            .replace("VERDICT", verdict)
            .replace("CODE", &code.to_string())
            .replace("SUMMARY", summary);
        format!("printf '%s' '{r}' > \"$json\"")
    }

    #[test]
    fn pass_gets_the_contract_arguments_and_the_given_environment_only() {
        let (inv, _d) = inv(
            &format!(
                r#"[ "$*" = "--plan quick --json $json --timeout 1 --rank 1 --world 2 --rendezvous n1:29501" ] || exit 9
               [ "$(dirname "$json")" != "{}" ] || exit 7
               [ -z "$HOME" ] || exit 8
               {}; exit 0"#,
                std::env::temp_dir().display(),
                write_report("PASS", 0, "8 x H200 on 1 node(s)")
            ),
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.ending, Ok(Ending::Exited(0)), "{o:?}");
        assert_eq!(o.verdict, Verdict::Pass);
        assert_eq!(o.detail, "8 x H200 on 1 node(s)");
    }

    /// The report goes to a new 0700 `nccl-check.XXXXXX` directory under the task's temporary
    /// directory, removed when the worker is done.
    #[test]
    fn the_report_directory_is_private_new_and_removed_after() {
        let (inv, d) = inv(
            r#"dir=$(dirname "$json")
               [ "$(stat -c %a "$dir")" = 700 ] || exit 9
               case "$(basename "$dir")" in nccl-check.??????) ;; *) exit 8 ;; esac
               echo "$dir" > "$(dirname "$dir")/seen"; exit 0"#,
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.ending, Ok(Ending::Exited(0)), "{o:?}");
        let seen = std::fs::read_to_string(d.path().join("seen")).expect("the worker ran");
        let seen = Path::new(seen.trim_end());
        assert_eq!(seen.parent(), Some(d.path()));
        assert!(!seen.exists(), "{} left behind", seen.display());
    }

    #[test]
    fn sharp_mode_adds_expect_collnet_and_a_sites_plan_passes_through() {
        let (mut inv, _d) = inv(
            r#"[ "$*" = "--plan site_nvlink --json $json --timeout 1 --rank 1 --world 2 --rendezvous n1:29501 --expect-collnet" ] || exit 9
               exit 0"#,
            5000,
        );
        inv.args.expect_collnet = true;
        inv.args.plan = PlanName::new("site_nvlink").expect("valid");
        let o = run(&inv);
        assert_eq!(o.ending, Ok(Ending::Exited(0)), "{o:?}");
    }

    #[test]
    fn exit_one_is_fail_with_the_reports_summary_not_stderr() {
        let (inv, _d) = inv(
            &format!(
                "{}; echo 'nccl-check: FAIL from stderr' >&2; exit 1",
                write_report("FAIL", 1, "busbw 12.0 < 300 GB/s on n2 GPU 3")
            ),
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.detail, "busbw 12.0 < 300 GB/s on n2 GPU 3");
    }

    /// The contract's one rule, as the prolog applies it: an exit status that the report
    /// contradicts is an ERROR that says so (the plugin used to take the exit alone).
    #[test]
    fn an_exit_status_the_report_contradicts_is_an_error_that_says_so() {
        let (inv, _d) = inv(&format!("{}; exit 1", write_report("PASS", 0, "ok")), 5000);
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Error);
        assert!(
            o.detail
                .contains("contradiction: the worker exited 1 (FAIL) but its report says PASS"),
            "{}",
            o.detail
        );
    }

    #[test]
    fn an_error_with_a_report_names_the_exit_code() {
        let (inv, _d) = inv(
            &format!(
                "{}; exit 4",
                write_report("ERROR", 4, "no usable GPU: no device")
            ),
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Error);
        assert_eq!(o.detail, "no usable GPU: no device [worker exit 4]");
    }

    #[test]
    fn without_a_report_the_table_and_the_last_stderr_line_tell_it() {
        let (inv2, _d) = inv(
            "echo noise >&2; echo \"nccl-check: ERROR usage: unknown plan 'x' (plans: full, quick)\" >&2; exit 2",
            5000,
        );
        let o = run(&inv2);
        assert_eq!(o.verdict, Verdict::Error);
        assert_eq!(
            o.detail,
            format!(
                "worker exited with code 2 ({}); last output: nccl-check: ERROR usage: unknown \
                 plan 'x' (plans: full, quick)",
                ExitCode::Usage.meaning()
            )
        );
        let (inv42, _d42) = inv("exit 42", 5000);
        assert_eq!(
            run(&inv42).detail,
            "worker exited with code 42 (undocumented exit code)"
        );
    }

    #[test]
    fn a_report_of_a_newer_schema_is_named_not_ignored() {
        let (inv, _d) = inv(
            r#"printf '{"schema_version":9,"verdict":"PASS"}' > "$json"; exit 0"#,
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Error);
        assert!(o.detail.contains("report is unusable"), "{}", o.detail);
        assert!(o.detail.contains("schema_version 9"), "{}", o.detail);
    }

    #[test]
    fn a_hanging_worker_and_its_children_are_killed_at_the_deadline() {
        let (inv, d) = inv(
            r#"sleep 300 & echo $! > "$(dirname "$json")/../child.pid"; sleep 300"#,
            700,
        );
        let start = std::time::Instant::now();
        let o = run(&inv);
        assert!(start.elapsed() < Duration::from_secs(10));
        assert_eq!(o.ending, Ok(Ending::KilledAtDeadline));
        assert_eq!(o.verdict, Verdict::Error);
        assert!(
            o.detail.contains("process group was killed"),
            "{}",
            o.detail
        );
        nccl_check_host::test_support::assert_process_gone(
            &d.path().join("child.pid"),
            Duration::from_millis(200),
        );
    }

    /// Regression: the per-node reports were always deleted.
    #[test]
    fn a_kept_report_is_a_new_file_and_never_follows_a_link() {
        let (mut inv, d) = inv(&format!("{}; exit 0", write_report("PASS", 0, "ok")), 5000);
        inv.keep_report = Some(d.path().join("kept.json"));
        let out = run(&inv);
        assert_eq!(out.keep_problem, None);
        let kept = std::fs::read_to_string(d.path().join("kept.json")).expect("kept");
        assert!(kept.contains("\"summary\":\"ok\""), "{kept}");
        // The same name again, and a planted symlink: refused with a note, the check unaffected.
        let again = run(&inv);
        assert_eq!(again.verdict, Verdict::Pass);
        assert!(again.keep_problem.is_some_and(|p| p.contains("kept.json")));
        std::os::unix::fs::symlink(d.path().join("victim"), d.path().join("link.json"))
            .expect("ln");
        inv.keep_report = Some(d.path().join("link.json"));
        assert!(run(&inv).keep_problem.is_some());
        assert!(!d.path().join("victim").exists());
    }

    #[test]
    fn a_crash_is_an_error_naming_the_signal() {
        let (inv, _d) = inv("echo 'about to crash' >&2; kill -SEGV $$", 5000);
        let o = run(&inv);
        assert_eq!(o.ending, Ok(Ending::Signaled(libc::SIGSEGV)));
        assert_eq!(o.verdict, Verdict::Error);
        assert!(o.detail.contains("SIGSEGV"), "{}", o.detail);
        assert!(o.detail.contains("about to crash"), "{}", o.detail);
    }

    #[test]
    fn every_standard_signal_is_named_and_others_are_not_guessed() {
        let named = [
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGBUS, "SIGBUS"),
            (libc::SIGKILL, "SIGKILL"),
            (libc::SIGPIPE, "SIGPIPE"),
            (libc::SIGUSR1, "SIGUSR1"),
            (libc::SIGXCPU, "SIGXCPU"),
        ];
        for (sig, name) in named {
            assert_eq!(signal_name(sig), name);
        }
        assert_eq!(signal_name(0), "signal");
        assert_eq!(signal_name(libc::SIGRTMIN() + 1), "signal");
    }

    #[test]
    fn a_missing_worker_is_an_error_not_a_panic() {
        let (mut inv, _d) = inv("exit 0", 5000);
        inv.worker = PathBuf::from("/nonexistent/nccl-check");
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Error);
        assert!(
            o.detail
                .starts_with("cannot start the worker /nonexistent/nccl-check: "),
            "{}",
            o.detail
        );
    }

    #[test]
    fn summaries_are_one_bounded_line() {
        assert_eq!(one_line("x\ny"), "x");
        assert_eq!(one_line("a\tb"), "ab");
        assert_eq!(
            one_line(&"a".repeat(1000)).chars().count(),
            MAX_SUMMARY_CHARS + 1
        );
    }

    #[test]
    fn the_workers_verdict_lines_are_known_with_or_without_a_label() {
        assert_eq!(
            verdict_line("nccl-check: FAIL busbw 12.3 < 300.0 GB/s"),
            Some((Verdict::Fail, "busbw 12.3 < 300.0 GB/s"))
        );
        assert_eq!(
            verdict_line("1: nccl-check: ERROR rendezvous: no peer\n"),
            Some((Verdict::Error, "rendezvous: no peer"))
        );
        assert!(is_verdict_line(b"nccl-check: PASS 8 x H100 on 1 node(s)\n"));
        for other in [
            "nccl-check: running 3 s of 4 s budget: loading NCCL",
            "nccl-check: PASSED",
            "fake worker: all_reduce 256 MiB ok",
            "x1: nccl-check: FAIL y",
            "srun: error: n1: task 0: Exited with exit code 1",
        ] {
            assert!(!is_verdict_line(other.as_bytes()), "{other}");
        }
    }
}
