//! `--progress` in the real worker, without a GPU: a check has to run longer than one tick (3 s),
//! so NCCL's path is a FIFO that nobody writes. dlopen blocks in open(2) on it, the check waits
//! for its libraries until the watchdog ends it with ERROR 6 at `--timeout` + 0.4 s, and rank 0
//! meanwhile says what it waits for, how long it has run and its budget.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A FIFO in a fresh directory under the temp dir.
fn fifo(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("nccl-check-progress-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("libnccl.so.2");
    let _ = std::fs::remove_file(&path);
    let c = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: mkfifo reads one NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    path
}

/// Runs the worker with NCCL's path a FIFO and `--timeout 4`; returns (exit code, stderr). Killed
/// after 20 s should the watchdog fail (the test then fails on the exit code).
fn run_blocked(name: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let lib = fifo(name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_nccl-check"))
        .arg("--nccl-lib")
        .arg(&lib)
        .args(["--timeout", "4"])
        .args(args)
        .env_remove("SLURM_PROCID")
        .env_remove("SLURM_NTASKS")
        .env_remove("NCCL_CHECK_NCCL_LIB")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nccl-check starts");
    let until = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    std::fs::remove_dir_all(lib.parent().expect("dir")).ok();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn progress_lines(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| l.starts_with("nccl-check: running "))
        .collect()
}

#[test]
fn rank_0_with_progress_says_phase_elapsed_and_budget_while_it_waits() {
    let (rc, err) = run_blocked("rank0", &["--progress"], &[]);
    assert_eq!(rc, 6, "{err}");
    let lines = progress_lines(&err);
    assert_eq!(
        lines,
        ["nccl-check: running 3 s of 4 s budget: loading NCCL and the CUDA driver"],
        "{err}"
    );
    // The progress came before the verdict line, which names the same phase.
    let verdict = err.lines().last().unwrap_or("");
    assert!(
        verdict.starts_with(
            "nccl-check: ERROR no progress within --timeout 4s; waiting for: loading NCCL"
        ),
        "{err}"
    );
}

#[test]
fn without_progress_nothing_is_printed_while_it_waits() {
    let (rc, err) = run_blocked("off", &[], &[]);
    assert_eq!(rc, 6, "{err}");
    assert!(progress_lines(&err).is_empty(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn other_ranks_stay_quiet_with_progress() {
    let (rc, err) = run_blocked(
        "rank1",
        &[
            "--progress",
            "--rank",
            "1",
            "--world",
            "2",
            "--rendezvous",
            "127.0.0.1:29998",
        ],
        &[("NCCL_CHECK_SECRET", "0123456789abcdef0123456789abcdef")],
    );
    assert_eq!(rc, 6, "{err}");
    assert!(progress_lines(&err).is_empty(), "{err}");
}
