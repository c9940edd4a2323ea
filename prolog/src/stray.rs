//! Other processes on the GPUs the prolog checked: a node whose GPUs another process still
//! holds is not clean (a leftover of the previous job is the common case), whatever bandwidth it
//! measured, and the fix is to end that process, not to replace the GPU. The worker reads them
//! from NVML before measuring (`gpus[].health.processes`, its own pid left out); the prolog's own
//! earlier workers (the same binary as `worker`, run as root) never count.
//!
//! `stray_processes = "fail"` (default) makes such a run a FAIL with a drain reason that says
//! `busy`; `"warn"` logs it and leaves the verdict to the measurement.

pub mod cpu_busy;

use nccl_check_contract::report::process::GpuProcess;
use nccl_check_contract::report::Report;
use std::path::Path;

/// What a stray process does to the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    Fail,
    Warn,
}

/// One checked GPU with the processes on it that are not ours.
#[derive(Debug, Clone, PartialEq)]
pub struct Stray {
    /// `GPU0`: the GPU's index among the checked ones, as the report's reasons name it.
    pub gpu: String,
    pub processes: Vec<GpuProcess>,
}

/// The checked GPUs that other processes hold; `ours(pid)` says a pid is the prolog's own.
pub fn find(report: &Report, ours: &dyn Fn(u32) -> bool) -> Vec<Stray> {
    let mut gpus: Vec<_> = report.gpus.iter().collect();
    gpus.sort_by_key(|g| g.rank);
    gpus.iter()
        .enumerate()
        .filter_map(|(k, g)| {
            let processes: Vec<GpuProcess> = g
                .health
                .as_ref()?
                .processes
                .iter()
                .filter(|p| !ours(p.pid))
                .cloned()
                .collect();
            (!processes.is_empty()).then(|| Stray {
                gpu: format!("GPU{k}"),
                processes,
            })
        })
        .collect()
}

/// Whether `pid` runs the prolog's worker binary (an earlier run of ours, still exiting).
pub fn is_our_worker(pid: u32, worker: &Path) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
    match (exe, std::fs::canonicalize(worker)) {
        (Ok(exe), Ok(w)) => exe == w,
        _ => false,
    }
}

/// The drain reason: `nccl-check:GPU0 busy|GPU0: busy: 1 other process (pid 4242, user bob,
/// 8.0 GiB): the node is not clean (job 8)`.
pub fn drain_reason(strays: &[Stray], job: Option<&str>) -> String {
    let first = &strays[0];
    let mut sentence =
        nccl_check_contract::report::process::busy_prefix(&first.gpu, &first.processes)
            .trim_end()
            .trim_end_matches(';')
            .to_string();
    if strays.len() > 1 {
        sentence.push_str(&format!(" (+{} more GPUs)", strays.len() - 1));
    }
    sentence.push_str(": not the job's, the node is not clean");
    let job = job.map(|j| format!(" (job {j})")).unwrap_or_default();
    format!("nccl-check:{} busy|{sentence}{job}", first.gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::report::{Gpu, Health};

    fn gpu(rank: u32, pids: &[u32]) -> Gpu {
        let health: Health = serde_json::from_value(serde_json::json!({
            "index": rank, "bus_id": "", "name": "NVIDIA H200", "nvlink": null, "pcie": null,
            "ecc_uncorrected_volatile": null, "row_remap": null, "throttle": null, "clocks": null,
            "processes": pids.iter().map(|&pid| serde_json::json!({
                "pid": pid, "user": "bob", "used_bytes": 8u64 << 30
            })).collect::<Vec<_>>()
        }))
        .expect("health");
        Gpu {
            rank,
            health: Some(health),
            ..Gpu::default()
        }
    }

    #[test]
    fn another_process_on_a_checked_gpu_is_named_busy_and_ours_never_count() {
        let report = Report {
            gpus: vec![gpu(1, &[4242]), gpu(0, &[]), gpu(2, &[77])],
            ..Report::default()
        };
        let strays = find(&report, &|pid| pid == 77);
        assert_eq!(strays.len(), 1);
        assert_eq!(strays[0].gpu, "GPU1");
        let r = drain_reason(&strays, Some("8"));
        assert_eq!(
            r,
            "nccl-check:GPU1 busy|GPU1: busy: 1 other process (pid 4242, user bob, 8.0 GiB): \
             not the job's, the node is not clean (job 8)"
        );
        assert!(r.chars().take(20).collect::<String>().ends_with("busy"));
        assert!(find(&report, &|_| true).is_empty());
        let clean = Report {
            gpus: vec![gpu(0, &[])],
            ..Report::default()
        };
        assert!(find(&clean, &|_| false).is_empty());
    }

    #[test]
    fn our_worker_is_recognised_by_its_executable() {
        let me = std::process::id();
        let exe = std::env::current_exe().expect("exe");
        assert!(is_our_worker(me, &exe));
        assert!(!is_our_worker(me, Path::new("/bin/sh")));
        assert!(!is_our_worker(u32::MAX, &exe));
    }
}
