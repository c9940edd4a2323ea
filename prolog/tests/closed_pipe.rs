//! A reader that has gone (`nccl-check-prolog --check-config | head -1`) changes neither the exit
//! code nor anything else: before issue 46 every print to the closed pipe panicked ("failed
//! printing to stdout: Broken pipe") and the catch-all turned a NOT READY into exit 0.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

/// The write end of a pipe whose read end is already closed.
fn readerless_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills both descriptors; each is owned exactly once below.
    let (r, w) = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0, "pipe");
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(r);
    Stdio::from(w)
}

const BIN: &str = env!("CARGO_BIN_EXE_nccl-check-prolog");

/// Runs the prolog with stdout a pipe whose read end is closed (every write: EPIPE) and, with
/// `close_stderr`, stderr too; returns the exit code and what stderr said otherwise.
fn with_closed_stdout(args: &[&str], close_stderr: bool) -> (Option<i32>, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("SLURM_CONF", "/nonexistent/slurm.conf")
        .stdin(Stdio::null())
        .stdout(readerless_pipe());
    if close_stderr {
        cmd.stderr(readerless_pipe());
        let st = cmd.status().expect("run");
        return (st.code(), String::new());
    }
    let out = cmd.stderr(Stdio::piped()).output().expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_into_a_closed_pipe_keeps_its_exit_code_and_never_panics() {
    let d = nccl_check_host::test_support::scratch_dir("closed-pipe");
    let conf = d.join("prolog.toml");
    std::fs::write(
        &conf,
        format!(
            "worker = \"/nonexistent/nccl-check\"\nscontrol = \"/nonexistent/scontrol\"\n\
             state_dir = \"{}/state\"\n",
            d.display()
        ),
    )
    .expect("write");
    let c = conf.to_str().expect("utf-8");
    let (code, err) = with_closed_stdout(&["--check-config", "--config", c], false);
    assert_eq!(code, Some(2), "NOT READY must stay exit 2: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, _) = with_closed_stdout(&["--check-config", "--config", c], true);
    assert_eq!(code, Some(2), "stdout and stderr closed");
    std::fs::write(&conf, "budget_secs = 1\n").expect("write");
    let (code, err) = with_closed_stdout(&["--check-config", "--config", c], false);
    assert_eq!(code, Some(2), "INVALID must stay exit 2: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, err) = with_closed_stdout(&["--where-configured", "--config", c], false);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, err) = with_closed_stdout(&["--help"], false);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(&d).ok();
}
