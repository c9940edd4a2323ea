//! The prolog binary against a state directory it cannot write (read-only, full) and a node name
//! that would lead out of it: a FAIL still drains, and `%n` takes only a valid Slurm node name.
//! No Slurm: the worker is tests/prolog/fake-worker (a recorded FAIL report, exit 1), scontrol a
//! script that records its calls. Needs root (the prolog's directories must be root's) and
//! mount(8) for the small tmpfs; without them the tests say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

const JOB: &str = "424242";

/// A fresh directory for one test, root's and 0755 like the prolog wants its parents.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nccl-check-prolog-{name}-{}", std::process::id()));
    let _ = Command::new("umount")
        .arg(d.join("state"))
        .stderr(std::process::Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The config, the fake driver directory and the fake scontrol for a FAIL on node n1.
fn setup(d: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = repo.join("tests/prolog/data");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("real-quick-pass.json")).expect("report"),
    )
    .expect("json");
    for g in report["gpus"].as_array().expect("gpus") {
        let dir = d
            .join("gpus")
            .join(g["pci_bus_id"].as_str().expect("bus id"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("information"),
            format!(
                "Model: \t\t {}\nGPU UUID: \t {}\nBus Location: \t {}\nDevice Minor: \t 0\nGPU Excluded:\t No\n",
                g["name"].as_str().unwrap_or(""),
                g["uuid"].as_str().unwrap_or(""),
                g["pci_bus_id"].as_str().unwrap_or("")
            ),
        )
        .expect("write");
    }
    let scontrol = d.join("scontrol");
    let calls = d.join("scontrol.calls");
    nccl_check_host::test_support::write_executable(
        &scontrol,
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in 'show node -d -o n1') echo 'NodeName=n1 Gres=gpu:4 GresUsed=gpu:4(IDX:0-3) State=ALLOCATED' ;; show*) echo 'NodeName=n1 State=IDLE Reason=(null)' ;; esac\nexit 0\n",
            calls.display()
        ),
    );
    // Slurm says whose the GPUs are (`shared`): all four this job's, so a FAIL is judged.
    nccl_check_host::test_support::write_executable(
        &d.join("squeue"),
        "#!/bin/sh\necho '{\"jobs\":[{\"job_id\":424242,\"job_state\":\"RUNNING\",\"nodes\":\"n1\",\"gres_detail\":[\"gpu:4(IDX:0-3)\"]}]}'\n",
    );
    let conf = d.join("prolog.toml");
    std::fs::write(
        &conf,
        format!(
            "worker = \"{}\"\nworker_config = \"{}\"\ngpus = \"all\"\nstate_dir = \"{}/state/%n\"\n\
             gpu_info_dir = \"{}\"\nscontrol = \"{}\"\nbudget_seconds = 20\ncache_seconds = 0\n\
             fault_root = \"{}\"\n[env]\nNCCL_CHECK_FAKE = \"fail\"\nNCCL_CHECK_FAKE_MARKER = \"{}\"\n",
            repo.join("tests/prolog/fake-worker").display(),
            d.join("absent.toml").display(),
            d.display(),
            d.join("gpus").display(),
            scontrol.display(),
            // An empty tree: this host's own kernel log cannot change the result.
            d.join("no-faults").display(),
            d.join("marker").display()
        ),
    )
    .expect("config");
    conf
}

/// Runs the prolog for job JOB on `node`: (exit code, stderr).
fn prolog(conf: &Path, node: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-check-prolog"))
        .arg("--config")
        .arg(conf)
        .env("SLURMD_NODENAME", node)
        .env("SLURM_JOB_ID", JOB)
        .output()
        .expect("the prolog runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Mounts a tmpfs of `size` on `<d>/state` with the node's directory in it; false if mount(8)
/// is not allowed here.
fn small_fs(d: &Path, size: &str) -> bool {
    let state = d.join("state");
    std::fs::create_dir_all(&state).expect("mkdir");
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0755"),
            "tmpfs",
        ])
        .arg(&state)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        std::fs::create_dir_all(state.join("n1")).expect("mkdir n1");
    }
    ok
}

fn cleanup(d: &Path) {
    let _ = Command::new("umount")
        .arg(d.join("state"))
        .stderr(std::process::Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(d);
    // The runs that went to the fallback directory.
    if let Ok(runs) = std::fs::read_dir(Path::new("/run/nccl-check/runs")) {
        for r in runs.flatten() {
            if r.file_name()
                .to_string_lossy()
                .starts_with(&format!("job-{JOB}."))
            {
                let _ = std::fs::remove_dir_all(r.path());
            }
        }
    }
}

fn a_fail_drains(name: &str, prepare: impl Fn(&Path) -> bool) {
    if !root() {
        panic!("needs root: the prolog's directories must be root's (CI runs the tests as root)");
    }
    let d = scratch(name);
    let conf = setup(&d);
    if !small_fs(&d, "4m") || !prepare(&d) {
        cleanup(&d);
        panic!("cannot mount a tmpfs here: the test needs root with mount rights (as on CI)");
    }
    let (code, err) = prolog(&conf, "n1");
    let calls = std::fs::read_to_string(d.join("scontrol.calls")).unwrap_or_default();
    cleanup(&d);
    assert_eq!(code, 1, "a FAIL exits 1 (the job is requeued): {err}");
    assert!(
        calls.contains("update nodename=n1 state=drain reason=nccl-check:"),
        "not drained; scontrol was called with: {calls}\nstderr: {err}"
    );
}

#[test]
fn a_fail_drains_the_node_when_the_state_dir_is_read_only() {
    a_fail_drains("ro", |d| {
        Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(d.join("state"))
            .status()
            .is_ok_and(|s| s.success())
    });
}

#[test]
fn a_fail_drains_the_node_when_the_state_dir_is_full() {
    a_fail_drains("full", |d| {
        // Fills the tmpfs to the last block (dd ends with "No space left on device").
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=64k"])
            .arg(format!("of={}", d.join("state/n1/filler").display()))
            .stderr(std::process::Stdio::null())
            .status();
        true
    });
}

#[test]
fn a_node_name_that_leads_out_of_the_state_root_is_refused() {
    if !root() {
        panic!("needs root: the prolog's directories must be root's (CI runs the tests as root)");
    }
    let d = scratch("nodename");
    let conf = setup(&d);
    std::fs::create_dir_all(d.join("state")).expect("mkdir");
    let (code, err) = prolog(&conf, "../x");
    let escaped = d.join("x").exists();
    let calls = std::fs::read_to_string(d.join("scontrol.calls")).unwrap_or_default();
    cleanup(&d);
    assert!(!escaped, "the prolog wrote outside its state root: {err}");
    assert_eq!(code, 0, "an ERROR lets the job run: {err}");
    assert!(
        err.contains("'../x' is not a valid Slurm node name"),
        "{err}"
    );
    assert!(!calls.contains("state=drain"), "{calls}");
}
