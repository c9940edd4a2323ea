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
use std::collections::BTreeSet;
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

/// The Slurm job whose cgroup holds a process, from its `/proc/PID/cgroup`: the first `job_N`
/// component of a path (v2 `0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`, v1
/// `4:memory:/slurm/uid_1000/job_42/step_batch`). The first one: below its step a job's owner
/// may create cgroups of any name, but only slurmstepd puts a process under `job_N`.
pub fn job_in_cgroup(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(|path| {
            path.split('/')
                .find_map(|c| c.strip_prefix("job_"))
                .filter(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// [`job_in_cgroup`] of a running process (None when it has ended or is in no job).
pub fn job_of_pid(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    job_in_cgroup(&text)
}

/// A process on a checked GPU that runs in another Slurm job's cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherJobs {
    pub gpu: String,
    pub process: GpuProcess,
    pub job: String,
}

/// The strays that run in a job other than `ours` (`job_of`: [`job_of_pid`] but in tests).
pub fn in_other_jobs(
    strays: &[Stray],
    ours: Option<&str>,
    job_of: &dyn Fn(u32) -> Option<String>,
) -> Vec<OtherJobs> {
    strays
        .iter()
        .flat_map(|s| s.processes.iter().map(move |p| (s, p)))
        .filter_map(|(s, p)| {
            let job = job_of(p.pid).filter(|j| Some(j.as_str()) != ours)?;
            Some(OtherJobs {
                gpu: s.gpu.clone(),
                process: p.clone(),
                job,
            })
        })
        .collect()
}

/// Why the run cannot be judged when another running job loads a checked GPU: its processes,
/// of jobs Slurm says hold this node (`running`; where Slurm cannot say, every such job counts:
/// judged less, never more). None when no such process is of a running job (then a process
/// left in an ended job's cgroup is a stray like any other).
pub fn other_jobs_load(
    found: &[OtherJobs],
    running: &Result<BTreeSet<String>, String>,
) -> Option<String> {
    let load: Vec<String> = found
        .iter()
        .filter(|o| running.as_ref().map_or(true, |r| r.contains(&o.job)))
        .map(|o| format!("{} has a process of job {} ({})", o.gpu, o.job, o.process))
        .collect();
    if load.is_empty() {
        return None;
    }
    let said = match running {
        Ok(_) => "which Slurm says runs on this node".to_string(),
        Err(e) => format!("and Slurm could not say which jobs run here ({e})"),
    };
    Some(format!(
        "{} {said}: another job's load is not this node's fault",
        load.join("; ")
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
    let job = job.map(|j| format!(" (job {j})")).unwrap_or_default();
    format!("nccl-check:{} busy|{sentence}{job}", first.gpu)
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

    #[test]
    fn the_job_of_a_process_is_its_first_job_cgroup_that_slurm_made() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        assert_eq!(job_in_cgroup(v2), Some("42".into()));
        let v1 = "9:pids:/\n4:memory:/slurm/uid_1000/job_7/step_batch\n0::/\n";
        assert_eq!(job_in_cgroup(v1), Some("7".into()));
        // The owner's own cgroups below the step never name another job.
        let nested = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/job_99/x\n";
        assert_eq!(job_in_cgroup(nested), Some("42".into()));
        for none in [
            "0::/user.slice/session-3.scope\n",
            "0::/job_/x\n",
            "0::/job_4a/x\n",
            "",
        ] {
            assert_eq!(job_in_cgroup(none), None, "{none:?}");
        }
    }

    #[test]
    fn another_running_jobs_process_makes_the_run_unjudged_and_an_ended_jobs_does_not() {
        let report = Report {
            body: Body {
                gpus: vec![gpu(0, &[4242]), gpu(1, &[5151]), gpu(2, &[6161])],
                ..Body::default()
            },
            ..Report::default()
        };
        let strays = find(&report, &|_| false);
        // 4242 in job 12 (running), 5151 in job 9 (ours), 6161 in no job.
        let job_of = |pid: u32| match pid {
            4242 => Some("12".to_string()),
            5151 => Some("9".to_string()),
            _ => None,
        };
        let found = in_other_jobs(&strays, Some("9"), &job_of);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].gpu.as_str(), found[0].job.as_str()),
            ("GPU0", "12")
        );
        let why = other_jobs_load(&found, &Ok(["12".to_string()].into())).expect("unjudged");
        assert!(
            why.starts_with(
                "GPU0 has a process of job 12 (pid 4242, user bob, 8.0 GiB) which Slurm says runs"
            ),
            "{why}"
        );
        // Job 12 ended (its process lingers in its cgroup): a stray like any other.
        assert_eq!(
            other_jobs_load(&found, &Ok(["13".to_string()].into())),
            None
        );
        // Slurm cannot say: judged less.
        let why = other_jobs_load(&found, &Err("squeue: timed out".into())).expect("unjudged");
        assert!(
            why.contains("could not say which jobs run here (squeue: timed out)"),
            "{why}"
        );
        assert_eq!(other_jobs_load(&[], &Err("x".into())), None);
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
