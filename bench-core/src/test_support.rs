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
}
