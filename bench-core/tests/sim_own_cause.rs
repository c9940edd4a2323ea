//! One cause across processes, on real processes: N `nccl-check-sim` workers (the
//! real options, rendezvous, control plane and localizer; the measurements from the fabric
//! simulation) on loopback, one emulated node each. A node whose own finding is a GPU another
//! process holds is named by that finding in every process's verdict line and report, never by
//! its network; a slow node with no finding of its own keeps the network reading.
//! Needs the `sim` feature: `cargo test -p bench-core --features sim --test sim_own_cause`.
#![cfg(feature = "sim")]

use std::path::Path;
use std::process::{Command, Output};

/// One check of `n` emulated nodes e1..eN, with `faults` (NCCL_CHECK_SIM_FAULTS) and `busy`
/// (NCCL_CHECK_SIM_BUSY); each process's verdict line (its stderr's last line) and report.
fn check(n: usize, faults: &str, busy: &str) -> Vec<(String, serde_json::Value)> {
    let dir = Dir::new(n, faults);
    // A port free now, for the rendezvous (rank 0 listens on it).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let secret: String = (0..32).map(|i| format!("{:02x}", 17 * i % 256)).collect();
    let children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_nccl-check-sim"))
                .args(["--rank", &i.to_string(), "--world", &n.to_string()])
                .args([
                    "--rendezvous",
                    &format!("127.0.0.1:{port}"),
                    "--timeout",
                    "30",
                ])
                .arg("--json")
                .arg(report_path(dir.path(), i))
                .env_remove("SLURM_JOB_ID")
                .env("NCCL_HOSTID", format!("e{}", i + 1))
                .env("NCCL_CHECK_SECRET", &secret)
                .env("NCCL_CHECK_SIM_GPUS", "1")
                .env("NCCL_CHECK_SIM_FLOOR", "none")
                .env("NCCL_CHECK_SIM_FAULTS", faults)
                .env("NCCL_CHECK_SIM_BUSY", busy)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn nccl-check-sim")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait"))
        .collect();
    outs.iter()
        .enumerate()
        .map(|(i, o)| {
            let err = String::from_utf8_lossy(&o.stderr);
            let line = err.lines().last().unwrap_or_default().to_string();
            let text = std::fs::read_to_string(report_path(dir.path(), i))
                .unwrap_or_else(|e| panic!("e{}: no report ({e}); stderr: {err}", i + 1));
            (line, serde_json::from_str(&text).expect("report"))
        })
        .collect()
}

/// A folder of this test's own, removed when dropped.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(n: usize, faults: &str) -> Dir {
        let name = format!(
            "nccl-check-own-cause-{}-{n}-{}",
            std::process::id(),
            faults.len()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("a folder");
        Dir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn report_path(dir: &Path, i: usize) -> std::path::PathBuf {
    dir.join(format!("e{}.json", i + 1))
}

/// `code@subject (cause)` of each reason.
fn reasons(report: &serde_json::Value) -> Vec<String> {
    report["reasons"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    format!("{}@{} ({})", r["code"], r["subject"], r["cause"]).replace('"', "")
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_busy_gpu_on_one_node_is_named_busy_by_every_process_and_never_as_its_network() {
    for (i, (line, report)) in check(4, "nodenet:e2:0.3", "e2:31337").iter().enumerate() {
        let node = format!("e{}", i + 1);
        assert_eq!(report["verdict"], "FAIL", "{node}: {line}");
        assert_eq!(
            reasons(report),
            ["gpu_busy@e2 GPU0 (busy)"],
            "{node}: {line}"
        );
        assert!(
            line.starts_with("nccl-check: FAIL e2 GPU0: busy: another process (pid 31337"),
            "{node}: {line}"
        );
    }
}

#[test]
fn a_slow_node_without_a_finding_of_its_own_keeps_the_network_reading_beside_a_busy_one() {
    for (i, (line, report)) in check(8, "nodenet:e2:0.3,nodenet:e5:0.3", "e2:31337")
        .iter()
        .enumerate()
    {
        let node = format!("e{}", i + 1);
        let mut got = reasons(report);
        got.sort();
        assert_eq!(
            got,
            ["gpu_busy@e2 GPU0 (busy)", "node_slow@e5 (hardware)"],
            "{node}: {line}"
        );
        assert!(!line.contains("e2: every node pair"), "{node}: {line}");
    }
}
