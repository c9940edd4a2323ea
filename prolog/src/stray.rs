//! Other processes on the GPUs the prolog checked: a node whose GPUs another process still
//! holds is not clean (a leftover of the previous job is the common case), whatever bandwidth it
//! measured, and the fix is to end that process, not to replace the GPU. The worker reads them
//! from NVML before measuring (`gpus[].health.processes`, its own pid left out); the prolog's own
//! earlier workers (the same binary as `worker`, run as root) never count.
//!
//! Whose each process is comes from Slurm ([`owner`]). Only a process Slurm says is of no job
//! (or this job's) is a stray: `stray_processes = "fail"` (default) makes such a run a FAIL with
//! a drain reason that says `busy`; `"warn"` logs it and leaves the verdict to the measurement.
//! Another job's process, or one whose owner is not known, never drains: the run is not judged
//! where it would FAIL. Busy CPUs ([`cpu_busy`]) never drain at all.

pub mod cpu_busy;
pub mod owner;

use nccl_check_contract::report::process::GpuProcess;
use nccl_check_contract::report::Report;
use owner::{Owner, Owners};
use std::path::Path;

/// What a stray process does to the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
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
    let mut gpus: Vec<_> = report.body.gpus.iter().collect();
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

/// Why the run cannot be judged when a checked GPU has a process that is neither this job's
/// nor, as Slurm says, of no job: another job's (the node is shared, its load is not the
/// node's fault) or one whose owner is not known (it may be another job's). None when every
/// process is this job's or of no job: then they are strays.
pub fn not_judged(strays: &[Stray], owners: &Owners) -> Option<String> {
    let said: Vec<String> = strays
        .iter()
        .flat_map(|s| s.processes.iter().map(move |p| (s, p)))
        .filter_map(|(s, p)| match owners.of(p.pid) {
            Owner::ThisJob | Owner::NoJob => None,
            o @ Owner::Job(_) => Some(format!("{} has a process of {o} ({p})", s.gpu)),
            Owner::Unknown => Some(format!("{} has a process of a job not known ({p})", s.gpu)),
        })
        .collect();
    if said.is_empty() {
        return None;
    }
    let why = match owners.not_listed() {
        None => "as Slurm says".to_string(),
        Some(e) => format!("and Slurm could not list the jobs' processes ({e})"),
    };
    Some(format!(
        "{} {why}: another job's load is not this node's fault",
        said.join("; ")
    ))
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
    crate::reason::compose(&format!("{} busy", first.gpu), &sentence, job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::report::{Body, Gpu, Health};

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
            body: Body {
                gpus: vec![gpu(1, &[4242]), gpu(0, &[]), gpu(2, &[77])],
                ..Body::default()
            },
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
            body: Body {
                gpus: vec![gpu(0, &[])],
                ..Body::default()
            },
            ..Report::default()
        };
        assert!(find(&clean, &|_| false).is_empty());
    }

    /// On GPU0 a process of running job 12, on GPU1 one of this job (9), on GPU2 one of no job
    /// (Slurm's `listpids` lists every step's processes on the node and not it).
    #[test]
    fn only_processes_slurm_says_are_of_no_job_or_this_job_are_strays() {
        let report = Report {
            body: Body {
                gpus: vec![gpu(0, &[4242]), gpu(1, &[5151]), gpu(2, &[6161])],
                ..Body::default()
            },
            ..Report::default()
        };
        let strays = find(&report, &|_| false);
        let tmp = tempfile::tempdir().expect("tempdir");
        let table = "PID JOBID STEPID LOCALID GLOBALID\n4242 12 0 0 0\n5151 9 batch 0 0\n";
        let owners = Owners::new(Ok(table.into()), tmp.path(), Some("9"), None);
        let why = not_judged(&strays, &owners).expect("another job's process");
        assert_eq!(
            why,
            "GPU0 has a process of job 12 (pid 4242, user bob, 8.0 GiB) as Slurm says: \
             another job's load is not this node's fault"
        );
        assert_eq!(
            not_judged(&strays[1..], &owners),
            None,
            "this job's and no job's"
        );
        // slurmd cannot answer and no cgroup names a job: not known, never a stray.
        let unknown = Owners::new(
            Err("scontrol: timed out".into()),
            tmp.path(),
            Some("9"),
            None,
        );
        let why = not_judged(&strays[2..], &unknown).expect("not known");
        assert!(
            why.starts_with(
                "GPU2 has a process of a job not known (pid 6161, user bob, 8.0 GiB) and Slurm \
                 could not list the jobs' processes (scontrol: timed out)"
            ),
            "{why}"
        );
        assert_eq!(not_judged(&[], &unknown), None);
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
