//! Runs the `nccl-check` worker as a child of the task: its own process group, a hard deadline at
//! which the whole group is SIGKILLed, stderr kept (last lines) for the summary, and the verdict
//! read from the exit status (0 PASS, 1 FAIL, anything else or a signal ERROR).
//!
//! No threads: this runs in a task process forked from the multi-threaded slurmstepd, so the
//! child's stderr is read with poll(2) in the same loop that watches the deadline.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench_core::verdict::{ExitCode, Verdict};

/// Lines of the worker's stderr kept for the summary.
const TAIL_LINES: usize = 20;
/// Largest JSON report read back (the summary is one line; the rest is not needed here).
const MAX_JSON_BYTES: u64 = 4 << 20;
/// Longest summary shown to the user.
const MAX_SUMMARY_CHARS: usize = 400;

/// One run of the worker, as the task's rank.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub worker: PathBuf,
    pub plan: &'static str,
    pub rank: u32,
    pub world: u32,
    pub rendezvous: String,
    /// `--expect-collnet`: the worker turns CollNet (SHARP) on and FAILs with
    /// `transport_fallback` when CollNet did not carry the collectives (`--nccl-check=sharp`).
    pub expect_collnet: bool,
    /// Passed as `--timeout` (whole seconds).
    pub timeout: Duration,
    /// When the plugin kills the worker's process group.
    pub deadline: Duration,
    /// The complete environment of the worker (the task's environment).
    pub env: Vec<(OsString, OsString)>,
    /// Directory in which a private directory for the JSON report is created.
    pub tmp_dir: PathBuf,
}

/// How the worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signaled(i32),
    KilledAtDeadline,
    NotStarted(String),
}

/// The worker's result as the plugin reports it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub verdict: Verdict,
    pub ending: Ending,
    /// One line, without the `nccl-check: VERDICT` lead.
    pub detail: String,
    /// `host` from the JSON report, if any.
    pub host: Option<String>,
}

/// Runs the worker to completion or to the deadline.
pub fn run(inv: &Invocation) -> Outcome {
    let json_dir = private_dir(&inv.tmp_dir);
    let json_path = json_dir.as_ref().map(|d| d.join("report.json"));
    let mut cmd = command(inv, json_path.as_deref());
    let outcome = match cmd.spawn() {
        Ok(child) => supervise(child, inv, json_path.as_deref()),
        Err(e) => Outcome {
            verdict: Verdict::Error,
            ending: Ending::NotStarted(e.to_string()),
            detail: format!("cannot start the worker {}: {e}", inv.worker.display()),
            host: None,
        },
    };
    if let Some(dir) = json_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    outcome
}

fn command(inv: &Invocation, json: Option<&Path>) -> Command {
    let mut cmd = Command::new(&inv.worker);
    cmd.arg("--plan")
        .arg(inv.plan)
        .arg("--rank")
        .arg(inv.rank.to_string())
        .arg("--world")
        .arg(inv.world.to_string())
        .arg("--rendezvous")
        .arg(&inv.rendezvous)
        .arg("--timeout")
        .arg(inv.timeout.as_secs().max(1).to_string());
    if inv.expect_collnet {
        cmd.arg("--expect-collnet");
    }
    if let Some(json) = json {
        cmd.arg("--json").arg(json);
    }
    cmd.env_clear()
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Own process group: the deadline kill reaches everything the worker started, and a
        // signal to the task's group does not hit the worker by accident.
        .process_group(0);
    // SAFETY: prctl is async-signal-safe. If the task dies (scancel, slurmstepd gone), the worker
    // goes too instead of holding GPUs until its own timeout.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    cmd
}

fn supervise(mut child: Child, inv: &Invocation, json: Option<&Path>) -> Outcome {
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + inv.deadline;
    let mut stderr = child.stderr.take();
    if let Some(err) = &stderr {
        // SAFETY: fcntl on a pipe fd we own.
        unsafe {
            let fd = err.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let mut tail = Tail::default();
    let killed = loop {
        if exited_without_reaping(pid) {
            break false;
        }
        let now = Instant::now();
        if now >= deadline {
            break true;
        }
        let wait = (deadline - now).min(Duration::from_millis(100));
        match &mut stderr {
            Some(err) => {
                if !poll_read(err, &mut tail, wait) {
                    stderr = None; // EOF: the worker closed stderr (it may still run)
                }
            }
            None => std::thread::sleep(wait.min(Duration::from_millis(20))),
        }
    };
    // Kill the group in both cases: at the deadline to end the worker, after a normal exit to end
    // anything it left behind. The worker is not reaped yet, so its pid (the group id) is not reused.
    // SAFETY: plain syscall; ESRCH (group already empty) is fine.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
    if let Some(err) = &mut stderr {
        let _ = poll_read(err, &mut tail, Duration::ZERO);
    }
    let status = child.wait();
    let ending = match (killed, status) {
        (true, _) => Ending::KilledAtDeadline,
        (false, Ok(s)) => match (s.code(), s.signal()) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(sig)) => Ending::Signaled(sig),
            (None, None) => Ending::NotStarted("unknown wait status".into()),
        },
        (false, Err(e)) => Ending::NotStarted(format!("wait failed: {e}")),
    };
    let report = json.and_then(read_report);
    outcome(ending, report, &tail.lines(), inv)
}

/// True once the child has exited; leaves it a zombie so its pid stays reserved.
fn exited_without_reaping(pid: libc::pid_t) -> bool {
    // SAFETY: waitid with a zeroed siginfo out-parameter.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        // rc < 0 (ECHILD: someone else reaped it) also ends the loop.
        rc < 0 || info.si_pid() != 0
    }
}

/// Waits up to `wait` for stderr data and appends it to `tail`; false at EOF.
fn poll_read(err: &mut std::process::ChildStderr, tail: &mut Tail, wait: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: err.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n <= 0 {
        return true;
    }
    let mut buf = [0u8; 8192];
    loop {
        match err.read(&mut buf) {
            Ok(0) => return false,
            Ok(k) => tail.push(&buf[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// The last [`TAIL_LINES`] lines of a byte stream.
#[derive(Default)]
struct Tail {
    lines: std::collections::VecDeque<String>,
    partial: Vec<u8>,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                self.lines.push_back(line);
                if self.lines.len() > TAIL_LINES {
                    self.lines.pop_front();
                }
            } else if self.partial.len() < 64 * 1024 {
                self.partial.push(b);
            }
        }
    }

    fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self.lines.iter().cloned().collect();
        if !self.partial.is_empty() {
            v.push(String::from_utf8_lossy(&self.partial).into_owned());
        }
        v
    }
}

/// What the plugin uses from the worker's JSON report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub verdict: Option<String>,
    pub summary: Option<String>,
    pub host: Option<String>,
}

fn read_report(path: &Path) -> Option<Report> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_JSON_BYTES).read_to_string(&mut text).ok()?;
    parse_report(&text)
}

/// Reads `verdict`, `summary` and `host` from the worker's JSON object; other fields are ignored.
pub fn parse_report(text: &str) -> Option<Report> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let field = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
    Some(Report {
        verdict: field("verdict"),
        summary: field("summary"),
        host: field("host"),
    })
}

/// Builds the outcome from the ending, the JSON report and the stderr tail (pure).
pub fn outcome(
    ending: Ending,
    report: Option<Report>,
    stderr_tail: &[String],
    inv: &Invocation,
) -> Outcome {
    let verdict = match &ending {
        Ending::Exited(code) => ExitCode::verdict_of_status(Some(*code)),
        _ => Verdict::Error,
    };
    let report = report.unwrap_or_default();
    let from_worker = report
        .summary
        .clone()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            stderr_tail
                .iter()
                .rev()
                .find(|l| l.trim_start().starts_with("nccl-check:"))
                .cloned()
        });
    let last_output = stderr_tail
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| one_line(l));
    let detail = match (&ending, from_worker) {
        (Ending::Exited(code), Some(s)) if *code <= 1 => strip_lead(&s),
        (Ending::Exited(code), Some(s)) => format!("{} [worker exit {code}]", strip_lead(&s)),
        (Ending::Exited(code), None) => {
            let mut d = format!("worker exited with code {code} ({})", meaning(*code));
            if let Some(l) = last_output {
                d.push_str(&format!("; last output: {l}"));
            }
            d
        }
        (Ending::Signaled(sig), _) => {
            let mut d = format!("worker killed by signal {sig} ({})", signal_name(*sig));
            if let Some(l) = last_output {
                d.push_str(&format!("; last output: {l}"));
            }
            d
        }
        (Ending::KilledAtDeadline, _) => format!(
            "worker did not finish within {} s (--timeout {} s + grace); its process group was killed",
            inv.deadline.as_secs(),
            inv.timeout.as_secs()
        ),
        (Ending::NotStarted(e), _) => format!("cannot run the worker {}: {e}", inv.worker.display()),
    };
    Outcome {
        verdict,
        ending,
        detail: one_line(&detail),
        host: report.host,
    }
}

/// `nccl-check: FAIL busbw ...` → `busbw ...` (the plugin writes its own lead).
fn strip_lead(summary: &str) -> String {
    let s = one_line(summary);
    let s = s.trim_start();
    let s = s.strip_prefix("nccl-check:").unwrap_or(s).trim_start();
    let s = ["PASS", "FAIL", "ERROR"]
        .iter()
        .find_map(|v| {
            s.strip_prefix(v)
                .filter(|rest| rest.is_empty() || rest.starts_with([' ', ':']))
        })
        .map(|rest| rest.trim_start_matches(':').trim_start())
        .unwrap_or(s);
    s.to_string()
}

/// First line, control characters removed, at most [`MAX_SUMMARY_CHARS`] characters.
fn one_line(s: &str) -> String {
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

/// The documented exit codes (bench-core `ExitCode`).
fn meaning(code: i32) -> &'static str {
    match code {
        0 => "PASS",
        1 => "FAIL",
        2 => "usage error",
        3 => "NCCL library missing",
        4 => "no usable GPU",
        5 => "rendezvous failure",
        6 => "timeout",
        7 => "CUDA/NCCL runtime error",
        _ => "undocumented exit code",
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

/// `mkdtemp(DIR/nccl-check.XXXXXX)`: a 0700 directory no other user can race on.
fn private_dir(parent: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut template = parent
        .join("nccl-check.XXXXXX")
        .as_os_str()
        .as_bytes()
        .to_vec();
    template.push(0);
    // SAFETY: NUL-terminated, writable buffer, as mkdtemp requires.
    let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    template.pop();
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(&template)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(script: &str, deadline_ms: u64) -> (Invocation, tempdir::Dir) {
        let dir = tempdir::Dir::new();
        let worker = dir.path.join("worker.sh");
        bench_core::test_support::write_executable(&worker, &format!("#!/bin/sh\n{script}\n"));
        let inv = Invocation {
            worker,
            plan: "quick",
            rank: 1,
            world: 2,
            rendezvous: "n1:29501".into(),
            expect_collnet: false,
            timeout: Duration::from_secs(1),
            deadline: Duration::from_millis(deadline_ms),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            tmp_dir: dir.path.clone(),
        };
        (inv, dir)
    }

    mod tempdir {
        pub struct Dir {
            pub path: std::path::PathBuf,
        }
        impl Dir {
            pub fn new() -> Dir {
                let path = super::private_dir(&std::env::temp_dir()).expect("mkdtemp");
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    #[test]
    fn pass_gets_the_contract_arguments_and_the_given_environment_only() {
        let (inv, _d) = inv(
            r#"[ "$*" = "--plan quick --rank 1 --world 2 --rendezvous n1:29501 --timeout 1 --json $(dirname "${12}")/report.json" ] || exit 9
               [ -z "$HOME" ] || exit 8
               echo 'nccl-check: PASS all good' >&2; exit 0"#,
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.ending, Ending::Exited(0), "{o:?}");
        assert_eq!(o.verdict, Verdict::Pass);
        assert_eq!(o.detail, "all good");
    }

    #[test]
    fn sharp_mode_adds_expect_collnet_before_the_json_path() {
        let (mut inv, _d) = inv(
            r#"[ "$*" = "--plan quick --rank 1 --world 2 --rendezvous n1:29501 --timeout 1 --expect-collnet --json $(dirname "${13}")/report.json" ] || exit 9
               exit 0"#,
            5000,
        );
        inv.expect_collnet = true;
        let o = run(&inv);
        assert_eq!(o.ending, Ending::Exited(0), "{o:?}");
    }

    #[test]
    fn exit_one_is_fail_and_json_summary_wins_over_stderr() {
        let (inv, _d) = inv(
            r#"json="${12}"
               printf '{"verdict":"FAIL","summary":"nccl-check: FAIL busbw 12.0 < 300 GB/s on n2 GPU 3","host":"n2","exit_code":1}' > "$json"
               echo 'nccl-check: FAIL from stderr' >&2; exit 1"#,
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Fail);
        assert_eq!(o.detail, "busbw 12.0 < 300 GB/s on n2 GPU 3");
        assert_eq!(o.host.as_deref(), Some("n2"));
    }

    #[test]
    fn other_codes_are_errors_with_the_last_summary_line() {
        let (inv, _d) = inv(
            "echo noise >&2; echo 'nccl-check: ERROR no usable GPU: no device' >&2; echo trailing >&2; exit 4",
            5000,
        );
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Error);
        assert_eq!(o.detail, "no usable GPU: no device [worker exit 4]");
    }

    #[test]
    fn a_hanging_worker_and_its_children_are_killed_at_the_deadline() {
        let (inv, d) = inv(
            r#"sleep 300 & echo $! > "$(dirname "${12}")/../child.pid"; sleep 300"#,
            700,
        );
        let start = Instant::now();
        let o = run(&inv);
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(o.ending, Ending::KilledAtDeadline);
        assert_eq!(o.verdict, Verdict::Error);
        assert!(
            o.detail.contains("process group was killed"),
            "{}",
            o.detail
        );
        // The grandchild is gone, or a zombie waiting for a reaper.
        bench_core::test_support::assert_process_gone(
            &d.path.join("child.pid"),
            Duration::from_millis(200),
        );
    }

    #[test]
    fn a_crash_is_an_error_naming_the_signal() {
        let (inv, _d) = inv("echo 'about to crash' >&2; kill -SEGV $$", 5000);
        let o = run(&inv);
        assert_eq!(o.ending, Ending::Signaled(libc::SIGSEGV));
        assert_eq!(o.verdict, Verdict::Error);
        assert!(o.detail.contains("SIGSEGV"), "{}", o.detail);
        assert!(o.detail.contains("about to crash"), "{}", o.detail);
    }

    #[test]
    fn a_missing_worker_is_an_error_not_a_panic() {
        let (mut inv, _d) = inv("exit 0", 5000);
        inv.worker = PathBuf::from("/nonexistent/nccl-check");
        let o = run(&inv);
        assert_eq!(o.verdict, Verdict::Error);
        assert!(o.detail.contains("/nonexistent/nccl-check"), "{}", o.detail);
    }

    #[test]
    fn summaries_are_one_bounded_line() {
        assert_eq!(strip_lead("nccl-check: ERROR: x\ny"), "x");
        assert_eq!(strip_lead("nccl-check: PASSED"), "PASSED");
        assert_eq!(
            one_line(&"a".repeat(1000)).chars().count(),
            MAX_SUMMARY_CHARS + 1
        );
        assert_eq!(parse_report("not json"), None);
        assert_eq!(
            parse_report(r#"{"verdict":"PASS","exit_code":0}"#),
            Some(Report {
                verdict: Some("PASS".into()),
                ..Report::default()
            })
        );
    }
}
