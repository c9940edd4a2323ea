//! slurmstepd (SPANK Remote context): run the check in every task of a step, before the user's
//! program is exec'ed, and fail the task on FAIL or ERROR.
//!
//! Why `task_init`: it runs in the task process as the user (never root), inside the task's
//! cgroup, with the task's GPU binding (`CUDA_VISIBLE_DEVICES`) in its environment and, when
//! listed after pyxis, inside the container. A failure there is the one that reaches the user
//! with srun's exit code != 0; failing `user_init` leaves srun at 0 (SchedMD bug 7573, see
//! shared/notes/slurm-spank-prolog.md 1.4). Every task is one rank, so the collective spans the
//! whole step and doubles as the barrier between nodes.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use bench_core::contract::{PlanName, WorkerArgs};
use bench_core::verdict::Verdict;
use slurm_spank::SpankHandle;

use crate::config::Config;
use crate::options::{self, Mode};
use crate::worker::{self, Invocation};
use crate::Error;

/// Step ids from here up are Slurm's special steps (interactive 0xfffffffa, batch 0xfffffffb,
/// extern 0xfffffffc, ...; slurm.h): no check there, the steps inside the job are checked.
const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

/// State kept between the two task callbacks (both run in the same task process).
#[derive(Debug, Default)]
pub struct TaskState {
    /// Inode of the mount namespace before any plugin's task_init (i.e. before pyxis moved the
    /// task into a container); only recorded when `allow_container=0` needs it.
    host_mnt_ns: Option<u64>,
}

fn mount_ns() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/mnt").ok().map(|m| m.ino())
}

/// The requested mode in this step, or `None` when nothing is to run (cheap: no IO).
fn requested(
    config: &Result<Config, crate::config::ConfigError>,
) -> Result<Option<(Mode, &Config)>, Error> {
    let raw = options::raw();
    if raw == options::Raw::Absent {
        return Ok(None);
    }
    let config = config.as_ref().map_err(|e| Error::Config(e.clone()))?;
    let mode = raw.mode(&config.default_mode).map_err(Error::Mode)?;
    // srun/sbatch/salloc refused it already; the step checks again in case the option came
    // through the environment from elsewhere.
    options::check_allowed(mode.as_ref(), config)?;
    match mode {
        Some(Mode::Off) | None => Ok(None),
        Some(mode) => Ok(Some((mode, config))),
    }
}

/// `slurm_spank_task_init_privileged` (root, in the task process, before any task_init).
pub fn task_init_privileged(
    config: &Result<Config, crate::config::ConfigError>,
    state: &mut TaskState,
) -> Result<(), Error> {
    if let Ok(Some((_, config))) = requested(config) {
        if !config.allow_container {
            state.host_mnt_ns = mount_ns();
        }
    }
    Ok(())
}

/// `slurm_spank_task_init` (the user, in the task process, just before exec).
pub fn task_init(
    spank: &SpankHandle,
    config: &Result<Config, crate::config::ConfigError>,
    state: &TaskState,
) -> Result<(), Error> {
    let Some((mode, config)) = requested(config)? else {
        return Ok(());
    };
    let step_id = spank.job_stepid().map_err(spank_err("S_JOB_STEPID"))?;
    let nnodes = spank.job_nnodes().map_err(spank_err("S_JOB_NNODES"))?;
    if step_id >= FIRST_SPECIAL_STEP || nnodes == 0 {
        return Ok(());
    }
    let rank = spank
        .task_global_id()
        .map_err(spank_err("S_TASK_GLOBAL_ID"))?;
    if let (Some(host), Some(now)) = (state.host_mnt_ns, mount_ns()) {
        if host != now {
            if rank == 0 {
                say(
                    "nccl-check: skipped: this step runs in a container and the site does not \
                     allow checks there (allow_container=0)",
                );
            }
            return Ok(());
        }
    }
    let job_id = spank.job_id().map_err(spank_err("S_JOB_ID"))?;
    let world = spank
        .job_total_task_count()
        .map_err(spank_err("S_JOB_TOTAL_TASK_COUNT"))?;
    let getenv = |name: &str| spank.getenv(name).ok().flatten();
    let node = getenv("SLURMD_NODENAME").unwrap_or_else(|| String::from("?"));
    let nodelist = getenv("SLURM_STEP_NODELIST")
        .ok_or_else(|| Error::Check("SLURM_STEP_NODELIST is not set in the step".into()))?;
    let rdv = bench_core::slurm_rendezvous::address(&nodelist, job_id, step_id, config.ports)
        .map_err(|e| Error::Check(e.to_string()))?;
    let mut env: Vec<(OsString, OsString)> = spank
        .job_env_os()
        .map_err(spank_err("S_JOB_ENV"))?
        .into_iter()
        .filter_map(|kv| {
            let bytes = kv.as_bytes();
            let eq = bytes.iter().position(|&b| b == b'=')?;
            Some((
                std::ffi::OsStr::from_bytes(&bytes[..eq]).to_os_string(),
                std::ffi::OsStr::from_bytes(&bytes[eq + 1..]).to_os_string(),
            ))
        })
        .collect();
    if !config.allow_sharp {
        env.retain(|(k, _)| k != "NCCL_COLLNET_ENABLE");
        env.push(("NCCL_COLLNET_ENABLE".into(), "0".into()));
    }
    let tmp_dir = getenv("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let plan = mode.plan().unwrap_or_else(PlanName::quick);
    let mut args = WorkerArgs::new(plan.clone(), config.timeout.as_secs());
    args.rank = Some(rank);
    args.world = Some(world);
    args.rendezvous = Some(rdv);
    args.expect_collnet = mode.expect_collnet();
    let inv = Invocation {
        worker: config.worker.clone(),
        args,
        deadline: config.deadline(),
        env,
        tmp_dir,
    };
    let outcome = worker::run(&inv);
    let where_ = format!("on {node} (rank {rank} of {world})");
    match (outcome.verdict, mode.enforcing()) {
        (Verdict::Pass, _) => {
            if rank == 0 {
                say(&format!(
                    "nccl-check: PASS ({plan}, {world} ranks): {}",
                    outcome.detail
                ));
            }
            Ok(())
        }
        (verdict, true) => {
            say(&format!(
                "nccl-check: {verdict} {where_}: {}",
                outcome.detail
            ));
            Err(Error::Reported(format!(
                "{verdict} {where_}: {}",
                outcome.detail
            )))
        }
        (verdict, false) => {
            say(&format!(
                "nccl-check: {verdict} {where_}: {} (warn mode: the task runs anyway)",
                outcome.detail
            ));
            Ok(())
        }
    }
}

fn spank_err(item: &'static str) -> impl Fn(slurm_spank::SpankError) -> Error {
    move |e| Error::Check(format!("cannot read {item}: {e}"))
}

/// Writes one line to the task's stderr, which slurmstepd has already connected to srun's
/// stderr before any task callback runs (mgr.c `prepare_stdio` precedes `exec_task`).
fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}
