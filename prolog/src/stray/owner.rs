//! Whose a process is, as Slurm says on this node: `scontrol listpids '*' NODE` lists every job
//! step's processes from the slurmstepds themselves, whatever the proctrack plugin (with
//! `proctrack/linuxproc`, as the test cluster runs, a job's processes are in no job's cgroup;
//! with 26.05's cgroup/v2 the job's directory is its SLUID). A process missing from a whole
//! answer is of no job. Only where slurmd cannot answer is the process's cgroup read (the host
//! crate's one reading, `job_<id>` or a SLUID), and that can only name a job: a process outside
//! any job's cgroup may still be a job's (linuxproc), so its owner is then unknown. Unknown
//! never drains.

use nccl_check_host::slurm_job::{self, SlurmJob};
use nccl_check_host::{read, text::escape_control};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Whose one process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This run's job.
    ThisJob,
    /// Another job's (it may share the node: its load is not the node's fault).
    Job(SlurmJob),
    /// Slurm listed every job step's processes on the node, and this one is in none.
    NoJob,
    /// Neither Slurm nor the cgroup could say.
    Unknown,
}

impl std::fmt::Display for Owner {
    /// `this job`, `job 42`, `no job`, `job not known`: as a process's description ends.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::ThisJob => f.write_str("this job"),
            Owner::Job(j) => write!(f, "job {j}"),
            Owner::NoJob => f.write_str("no job"),
            Owner::Unknown => f.write_str("job not known"),
        }
    }
}

/// Slurm's answer for one run, and where to read a cgroup where it has none.
#[derive(Debug, Clone)]
pub struct Owners {
    /// pid -> job id, from `scontrol listpids`; Err: why Slurm could not say.
    listed: Result<BTreeMap<u32, String>, String>,
    /// `/proc` (under `fault_root`).
    proc_root: PathBuf,
    /// This run's job: its id and SLUID, where it has them.
    job: Option<String>,
    sluid: Option<String>,
}

impl Owners {
    /// `listpids`: `scontrol listpids`'s stdout (empty: no step runs here) or why there is none.
    pub fn new(
        listpids: Result<String, String>,
        proc_root: &Path,
        job: Option<&str>,
        sluid: Option<&str>,
    ) -> Owners {
        Owners {
            listed: listpids.and_then(|t| parse_listpids(&t)),
            proc_root: proc_root.to_path_buf(),
            job: job.map(str::to_string),
            sluid: sluid.map(str::to_string),
        }
    }

    /// Whose `pid` is.
    pub fn of(&self, pid: u32) -> Owner {
        let job = match &self.listed {
            Ok(pids) => match pids.get(&pid) {
                Some(j) => SlurmJob::Id(j.clone()),
                None => return Owner::NoJob,
            },
            Err(_) => {
                let path = self.proc_root.join(pid.to_string()).join("cgroup");
                let cgroup = read::small(&path, 64 << 10).ok();
                match cgroup.as_deref().and_then(slurm_job::job_of_cgroup) {
                    Some(j) => j,
                    None => return Owner::Unknown,
                }
            }
        };
        if job.is(self.job.as_deref(), self.sluid.as_deref()) {
            Owner::ThisJob
        } else {
            Owner::Job(job)
        }
    }

    /// Why Slurm could not say whose the processes are (then only a cgroup names a job).
    pub fn not_listed(&self) -> Option<&str> {
        self.listed.as_ref().err().map(String::as_str)
    }
}

/// `scontrol listpids`'s table as pid -> job id:
///
/// ```text
/// PID      JOBID    STEPID   LOCALID GLOBALID
/// 4242     17       batch    0       0
/// ```
///
/// Every row must read as a pid and a numeric job id, else the answer is not trusted (an Err:
/// a process then is not known to be of no job).
pub fn parse_listpids(text: &str) -> Result<BTreeMap<u32, String>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let mut f = line.split_whitespace();
        let (pid, job) = match (f.next(), f.next()) {
            (None, _) => continue,
            (Some("PID"), Some("JOBID")) if n == 0 => continue,
            (Some(p), Some(j)) => (p, j),
            (Some(_), None) => (line, ""),
        };
        let job_id = !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit());
        let Some(pid) = pid.parse::<u32>().ok().filter(|_| job_id) else {
            return Err(format!(
                "scontrol listpids: line {}: not a pid and a job id: {:?}",
                n + 1,
                escape_control(line.trim())
            ));
        };
        out.insert(pid, job.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "PID      JOBID    STEPID   LOCALID GLOBALID\n\
                         4242     17       batch    0       0        \n\
                         4243     17       extern   -       -        \n\
                         5151     9        0        0       0        \n";

    #[test]
    fn slurms_list_names_each_jobs_processes_and_the_rest_are_of_no_job() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let o = Owners::new(Ok(TABLE.into()), tmp.path(), Some("9"), None);
        assert_eq!(o.of(4242), Owner::Job(SlurmJob::Id("17".into())));
        assert_eq!(o.of(4243).to_string(), "job 17");
        assert_eq!(o.of(5151), Owner::ThisJob);
        assert_eq!(o.of(777), Owner::NoJob);
        assert_eq!(o.not_listed(), None);
        // No step runs on the node: every process is of no job.
        let none = Owners::new(Ok(String::new()), tmp.path(), Some("9"), None);
        assert_eq!(none.of(4242), Owner::NoJob);
    }

    /// Where slurmd cannot answer, a job's cgroup (numeric or 26.05's SLUID) still names its
    /// job, and a process in no job's cgroup is not known to be of no job.
    #[test]
    fn without_slurms_answer_only_a_cgroup_names_a_job_and_the_rest_are_unknown() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cgroup = |pid: u32, text: &str| {
            let d = tmp.path().join(pid.to_string());
            std::fs::create_dir_all(&d).expect("dir");
            std::fs::write(d.join("cgroup"), text).expect("cgroup");
        };
        cgroup(
            1,
            "0::/system.slice/slurmstepd.scope/job_17/step_0/user/task_0\n",
        );
        cgroup(
            2,
            "0::/system.slice/slurmstepd.scope/s14DKSR4920005/step_0/user/task_0\n",
        );
        cgroup(3, "0::/user.slice/user-1000.slice/session-3.scope\n");
        let o = Owners::new(
            Err("scontrol listpids: timed out".into()),
            tmp.path(),
            Some("42"),
            Some("s14DKSR4920005"),
        );
        assert_eq!(o.of(1), Owner::Job(SlurmJob::Id("17".into())));
        assert_eq!(o.of(2), Owner::ThisJob, "26.05's SLUID path of this job");
        assert_eq!(o.of(3), Owner::Unknown);
        assert_eq!(o.of(4), Owner::Unknown, "a process that is gone");
        assert_eq!(o.not_listed(), Some("scontrol listpids: timed out"));
        let other = Owners::new(Err("x".into()), tmp.path(), Some("42"), None);
        assert_eq!(
            other.of(2).to_string(),
            "job s14DKSR4920005",
            "another job's SLUID"
        );
    }

    /// `scontrol listpids '*' n1` as the real Slurm 24.11.5 and 26.05.5 print it (the same bytes,
    /// captured in the matrix's trixie and sid roots, 2026-12-02, a batch job running `srun
    /// sleep`): each cell padded, a space before every newline but the header's, and the
    /// batch step's other processes (its srun and sleep) with `-` for the task ids.
    const REAL_24_11_AND_26_05: &str = concat!(
        "PID      JOBID    STEPID   LOCALID GLOBALID\n",
        "24762    1        0        0       0        \n",
        "24741    1        batch    0       0        \n",
        "24748    1        batch    -       -        \n",
        "24742    1        batch    -       -        \n",
        "24743    1        batch    -       -        \n",
    );

    #[test]
    fn the_real_24_11_and_26_05_table_names_every_process_of_the_job() {
        let pids = parse_listpids(REAL_24_11_AND_26_05).expect("Slurm's own table");
        assert_eq!(pids.len(), 5);
        assert!(pids.values().all(|j| j == "1"), "{pids:?}");
        let tmp = tempfile::tempdir().expect("tempdir");
        let o = Owners::new(Ok(REAL_24_11_AND_26_05.into()), tmp.path(), Some("2"), None);
        assert_eq!(
            o.of(24748).to_string(),
            "job 1",
            "srun of job 1's batch step"
        );
        assert_eq!(o.of(24762), Owner::Job(SlurmJob::Id("1".into())));
        assert_eq!(o.of(1), Owner::NoJob, "init is in no step");
    }

    #[test]
    fn an_answer_that_does_not_read_as_slurms_table_is_not_trusted() {
        for bad in [
            "PID JOBID\n4242 x\n",
            "PID JOBID\n4242\n",
            "nonsense\n",
            "PID JOBID\nPID JOBID\n",
        ] {
            assert!(parse_listpids(bad).is_err(), "{bad:?}");
        }
        let e = parse_listpids("4242 \x1b[2J\n").expect_err("escape");
        assert!(!e.contains('\x1b'), "{e}");
        assert_eq!(parse_listpids("\n").map(|m| m.len()), Ok(0));
    }
}
