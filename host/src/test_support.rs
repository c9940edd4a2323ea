//! Helpers for the workspace's unit tests (feature `test-support`).

use std::path::Path;
use std::process::Command;

/// Creates an executable script at `path` without ever holding a write descriptor to it in this
/// process. Tests run in parallel threads; a child forked by another thread between our write and
/// close would inherit the descriptor, and exec'ing the script would then fail with "Text file
/// busy" (ETXTBSY). So the body goes to a sibling file that is never executed, and a short-lived
/// `install` process creates the executable.
pub fn write_executable(path: &Path, body: &str) {
    let mut src = path.as_os_str().to_owned();
    src.push(".src");
    std::fs::write(&src, body).expect("write the script body");
    let status = Command::new("install")
        .arg("-m")
        .arg("0755")
        .arg(&src)
        .arg(path)
        .status()
        .expect("run install");
    assert!(status.success(), "install {} failed", path.display());
    std::fs::remove_file(&src).ok();
}

/// Asserts that the process whose pid `pid_file` holds is gone after `settle`: no longer in /proc,
/// or a zombie (`Z`) or dead (`X`) waiting for a reaper. The state field follows the `(comm)`.
pub fn assert_process_gone(pid_file: &Path, settle: std::time::Duration) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .expect("read the pid file")
        .trim()
        .parse()
        .expect("a pid");
    std::thread::sleep(settle);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
    assert!(
        matches!(state, None | Some('Z') | Some('X')),
        "process {pid} survived: {stat}"
    );
}

/// A fresh, empty directory for one test: `$TMPDIR/nccl-check-<name>-<pid>`.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nccl-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the scratch directory");
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_executable_and_runs() {
        let dir =
            std::env::temp_dir().join(format!("nccl-check-test-support-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let p = dir.join("hello.sh");
        write_executable(&p, "#!/bin/sh\necho hello\n");
        let out = Command::new(&p).output().expect("run");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
        assert!(!dir.join("hello.sh.src").exists());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_reaped_process_is_gone_and_a_live_one_is_not() {
        let dir = std::env::temp_dir().join(format!("nccl-check-test-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let pid_file = dir.join("pid");
        let mut done = Command::new("true").spawn().expect("spawn");
        std::fs::write(&pid_file, done.id().to_string()).expect("write");
        done.wait().expect("wait");
        assert_process_gone(&pid_file, std::time::Duration::ZERO);
        let mut live = Command::new("sleep").arg("30").spawn().expect("spawn");
        std::fs::write(&pid_file, live.id().to_string()).expect("write");
        let caught =
            std::panic::catch_unwind(|| assert_process_gone(&pid_file, std::time::Duration::ZERO));
        live.kill().ok();
        live.wait().ok();
        assert!(caught.is_err(), "a live process passed as gone");
        std::fs::remove_dir_all(&dir).ok();
    }
}
