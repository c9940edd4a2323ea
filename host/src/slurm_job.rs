//! The Slurm job whose cgroup holds a process, from its `/proc/PID/cgroup`: the one reading of
//! Slurm's cgroup paths for the prolog and the worker. Slurm's own answer (`scontrol listpids`)
//! is better where slurmd can give it; this is for where it cannot.
//!
//! Slurm names the job's directory `job_<id>` (cgroup v1 `/slurm/uid_1000/job_42/step_0`, v2
//! before 26.05 `/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`) or, from 26.05 on
//! with cgroup/v2, by the job's SLUID (`/system.slice/slurmstepd.scope/s14DKSR4920005/step_0/...`;
//! "Slurm cgroup/v2 paths are now constructed using the SLUID instead of the numeric job id",
//! CHANGELOG/slurm-26.05.md; `cgroup_p_step_create` in src/plugins/cgroup/v2/cgroup_v2.c writes
//! `print_sluid`'s form unless `CgroupJobIdPaths` asks for `job_%u`). The first such component of
//! a path counts: below its step a job's owner may create cgroups of any name, but only
//! slurmstepd puts a process under a job's directory.

/// A job as its cgroup names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlurmJob {
    /// `job_42`: the numeric job id, as `SLURM_JOB_ID` and `squeue` say it.
    Id(String),
    /// `s14DKSR4920005`: the SLUID, as `SLURM_JOB_SLUID` says it (Slurm 25.11 and later).
    Sluid(String),
}

impl std::fmt::Display for SlurmJob {
    /// `42` or `s14DKSR4920005`: what follows `job ` in a sentence.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlurmJob::Id(s) | SlurmJob::Sluid(s) => f.write_str(s),
        }
    }
}

impl SlurmJob {
    /// Whether this is the job with id `id` or SLUID `sluid` (either may be unknown).
    pub fn is(&self, id: Option<&str>, sluid: Option<&str>) -> bool {
        match self {
            SlurmJob::Id(s) => Some(s.as_str()) == id,
            SlurmJob::Sluid(s) => sluid.is_some_and(|x| x.eq_ignore_ascii_case(s)),
        }
    }
}

/// Crockford's base 32 as Slurm prints a SLUID (`cb32map` in src/common/sluid.c).
const CB32: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The job of the first Slurm job directory in any path of a `/proc/PID/cgroup` text
/// (`hierarchy:controllers:path` lines); None: in no job's cgroup.
pub fn job_of_cgroup(text: &str) -> Option<SlurmJob> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(|path| path.split('/').find_map(job_dir))
}

/// One path component as a job's directory: `job_<digits>` or a SLUID (`s` and 13 characters
/// of [`CB32`], the first of them at most `F`: a SLUID has 64 bits, 4 in that character).
fn job_dir(c: &str) -> Option<SlurmJob> {
    if let Some(n) = c.strip_prefix("job_") {
        let digits = !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit());
        return digits.then(|| SlurmJob::Id(n.to_string()));
    }
    let body = c.strip_prefix('s')?.as_bytes();
    let sluid = body.len() == 13 && body.iter().all(|b| CB32.contains(b)) && body[0] <= b'F';
    sluid.then(|| SlurmJob::Sluid(c.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Option<SlurmJob> {
        Some(SlurmJob::Id(s.into()))
    }

    #[test]
    fn a_jobs_cgroup_names_its_job_id_in_v1_and_v2() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        assert_eq!(job_of_cgroup(v2), id("42"));
        let v1 = "9:pids:/\n12:memory:/slurm/uid_1000/job_7/step_batch\n0::/\n";
        assert_eq!(job_of_cgroup(v1), id("7"));
        // The owner's own cgroups below the step never name another job.
        let nested = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/job_99/x\n";
        assert_eq!(job_of_cgroup(nested), id("42"));
    }

    /// Slurm 26.05's cgroup/v2 names the job's directory by its SLUID (`print_sluid`: `s` and
    /// 13 characters of Crockford's base 32; this one: cluster 0x123, 2026-05-28, sequence 5).
    #[test]
    fn a_26_05_cgroup_v2_path_names_the_job_by_its_sluid() {
        let v2 = "0::/system.slice/slurmstepd.scope/s14DKSR4920005/step_0/user/task_0\n";
        let job = job_of_cgroup(v2).expect("a SLUID path is a job's");
        assert_eq!(job, SlurmJob::Sluid("s14DKSR4920005".into()));
        assert_eq!(job.to_string(), "s14DKSR4920005");
        assert!(job.is(Some("42"), Some("s14DKSR4920005")));
        assert!(
            job.is(None, Some("S14dksr4920005")),
            "str2sluid reads either case"
        );
        assert!(
            !job.is(Some("s14DKSR4920005"), None),
            "a SLUID is not a job id"
        );
        let batch = "0::/system.slice/slurmstepd.scope/s14DKSR4920005/step_batch/user/task_0\n";
        assert_eq!(job_of_cgroup(batch), Some(job));
        assert!(id("42").unwrap().is(Some("42"), None));
    }

    #[test]
    fn no_other_component_is_a_job() {
        for none in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/system.slice/slurmstepd.scope/system\n",
            "0::/job_/x\n",
            "0::/job_4a/x\n",
            "0::/system.slice/job_x/y\n",
            // Not a SLUID: 12 or 14 characters, a letter Crockford leaves out, lower case, a
            // first character beyond the 4 bits it holds.
            "0::/s14DKSR492000/x\n",
            "0::/s14DKSR49200050/x\n",
            "0::/s14DKSR49U0005/x\n",
            "0::/s14dksr4920005/x\n",
            "0::/sZ4DKSR4920005/x\n",
            "0::/sshd.service-x/x\n",
            "",
        ] {
            assert_eq!(job_of_cgroup(none), None, "{none:?}");
        }
    }
}
