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
use std::path::PathBuf;

use nccl_check_contract::args::PlanName;
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::verdict::Verdict;
use nccl_check_host::supervise::Ending;
use slurm_spank::SpankHandle;

use crate::callback_error::{spank_err, Error};
use crate::config::{LoadedConfig, PluginConfig};
use crate::container::{self, Namespaces};
use crate::mode::Mode;
use crate::options::{self, requested};
use crate::present::{self, say};
use crate::secret::SECRET_TRANSPORT;
use crate::worker::{self, Invocation};
use crate::worker_env::{task_var, user_nccl_lib, worker_env};

/// Step ids from here up are Slurm's special steps (interactive 0xfffffffa, batch 0xfffffffb,
/// extern 0xfffffffc, ...; slurm.h): no check there, the steps inside the job are checked.
const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;
/// The batch script's step (SLURM_BATCH_SCRIPT in slurm.h): `sbatch --nccl-check` checks the
/// allocation there, before the script's first command.
const BATCH_STEP: u32 = 0xffff_fffb;

/// State kept between the two task callbacks (both run in the same task process).
#[derive(Debug, Default)]
pub struct TaskState {
    /// The task's namespaces before any plugin's task_init (i.e. before pyxis moved the task
    /// into a container); recorded when a check is requested: `allow_container=0` skips
    /// container steps by the mount namespace, a missing NCCL is then the image's to fix, and a
    /// network namespace of the container's own with only loopback is an ERROR at once.
    host: Option<Namespaces>,
}

/// `slurm_spank_task_init_privileged` (root, in the task process, before any task_init).
pub fn task_init_privileged(config: &LoadedConfig, state: &mut TaskState) -> Result<(), Error> {
    if let Ok(Some(_)) = requested(config, &options::raw()) {
        state.host = Some(Namespaces::now());
    }
    Ok(())
}

/// `slurm_spank_task_init` (the user, in the task process, just before exec).
pub fn task_init(
    spank: &SpankHandle,
    config: &LoadedConfig,
    state: &TaskState,
) -> Result<(), Error> {
    let mut raw = options::raw();
    let mut secret = None;
    if raw != options::Raw::Absent {
        // The step's secret is for the worker only: the user's program never sees it.
        secret = spank.getenv_os(SECRET_TRANSPORT).ok().flatten();
        let _ = spank.unsetenv(SECRET_TRANSPORT);
    }
    let step_id = spank.job_stepid().map_err(spank_err("S_JOB_STEPID"))?;
    if raw == options::Raw::Absent && step_id == BATCH_STEP {
        // Slurm hands no remote options to the batch step; sbatch's value is in the job's
        // environment (checked only here: cheap, no IO).
        raw = options::Raw::from_job_env(task_var(spank, options::JOB_ENV_VAR));
    }
    let Some((mode, config)) = requested(config, &raw)? else {
        return Ok(());
    };
    let verbose = config.verbose || raw.verbose();
    let nnodes = spank.job_nnodes().map_err(spank_err("S_JOB_NNODES"))?;
    // (The batch step's own node count is 0: slurmstepd_job.c never sets it for batch.)
    if step_id == BATCH_STEP && config.batch_check {
        return crate::batch::check_allocation(spank, config, &mode, verbose);
    }
    if step_id >= FIRST_SPECIAL_STEP || nnodes == 0 {
        return Ok(());
    }
    let rank = spank
        .task_global_id()
        .map_err(spank_err("S_TASK_GLOBAL_ID"))?;
    let in_container = moved_into_a_container(state);
    if in_container && !config.allow_container {
        if rank == 0 {
            say(
                "nccl-check: skipped: this step runs in a container and the site does not \
                 allow checks there (allow_container=0)",
            );
        }
        return Ok(());
    }
    let task = Task::of(spank, rank, step_id)?;
    let user_lib = user_nccl_lib(spank);
    let inv = invocation(spank, config, &mode, &task, secret)?;
    if verbose && rank == 0 {
        say(&present::header());
    }
    if let Some(cut_off) = network_cut_off(state, task.world) {
        return tell(&task, &mode, verbose, &cut_off);
    }
    let mut outcome = worker::run(&inv);
    if outcome.ending == Ok(Ending::Exited(ExitCode::NcclLibrary.code())) {
        let hint = if in_container {
            present::nccl_lib_hint_in_container
        } else {
            present::nccl_lib_hint
        };
        outcome.detail = hint(
            &outcome.detail,
            user_lib.as_deref(),
            config.nccl_lib.as_deref(),
        );
    }
    if let Some(p) = &outcome.keep_problem {
        say(&format!("nccl-check: note: {p}"));
    }
    tell(&task, &mode, verbose, &outcome)
}

/// Whether a plugin before this one (pyxis) moved the task into another mount namespace since
/// `task_init_privileged`.
fn moved_into_a_container(state: &TaskState) -> bool {
    state
        .host
        .is_some_and(|host| Namespaces::now().container_since(&host))
}

/// The ERROR for a task that a plugin before this one moved into a network namespace with no
/// interface up but loopback (pyxis `--container-unshare=net`), where its ranks cannot meet;
/// `None` where the check can run: one rank alone (no rendezvous, no network), the host's
/// network, an interface up, or interfaces that cannot be read (the worker's own deadline then
/// bounds the wait).
fn network_cut_off(state: &TaskState, world: u32) -> Option<worker::TaskOutcome> {
    let host = state.host?;
    if world < 2 || !Namespaces::now().network_since(&host) {
        return None;
    }
    let interfaces = container::interfaces().ok()?;
    if container::reaches_out(&interfaces) {
        return None;
    }
    Some(worker::TaskOutcome {
        verdict: Verdict::Error,
        ending: Err(String::from("not started: the task's network is unshared")),
        detail: container::unshared_network(world, &interfaces),
        elapsed: std::time::Duration::ZERO,
        keep_problem: None,
    })
}

/// Who this task is in its step.
struct Task {
    job_id: u32,
    step_id: u32,
    rank: u32,
    world: u32,
    node: String,
}

impl Task {
    fn of(spank: &SpankHandle, rank: u32, step_id: u32) -> Result<Task, Error> {
        Ok(Task {
            job_id: spank.job_id().map_err(spank_err("S_JOB_ID"))?,
            step_id,
            rank,
            world: spank
                .job_total_task_count()
                .map_err(spank_err("S_JOB_TOTAL_TASK_COUNT"))?,
            node: task_var(spank, "SLURMD_NODENAME").unwrap_or_else(|| String::from("?")),
        })
    }
}

/// The worker's command line, environment, deadline and report place for this task.
fn invocation(
    spank: &SpankHandle,
    config: &PluginConfig,
    mode: &Mode,
    task: &Task,
    secret: Option<OsString>,
) -> Result<Invocation, Error> {
    let env = worker_env(spank, config, secret)?;
    let tmp_dir = task_var(spank, "TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    // No --rendezvous: the worker derives host, candidate ports and coordinator from the task's
    // Slurm environment (the coordinator is the first task of the step's first node, whatever
    // its rank, and a taken port is skipped); the site's range still applies.
    let mut args = worker::worker_args(config, mode, task.rank == 0);
    args.rank = Some(task.rank);
    args.world = Some(task.world);
    let report_dir = task_var(spank, REPORT_DIR_VAR)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| config.report_dir.clone());
    let name = report_name(task.job_id, task.step_id, &task.node, task.rank);
    Ok(Invocation {
        worker: config.worker.clone(),
        args,
        deadline: config.deadline(),
        env,
        tmp_dir,
        show_stderr: task.rank == 0,
        keep_report: report_dir.map(|d| d.join(name)),
    })
}

/// Says the outcome (rank 0 a PASS, every rank its FAIL or ERROR) and fails the task when the
/// mode enforces.
fn tell(
    task: &Task,
    mode: &Mode,
    verbose: bool,
    outcome: &worker::TaskOutcome,
) -> Result<(), Error> {
    let Task {
        rank, world, node, ..
    } = task;
    let warn_note = match (outcome.verdict, mode.enforcing()) {
        (Verdict::Pass, _) | (_, true) => "",
        (_, false) => " (warn mode: the task runs anyway)",
    };
    if verbose {
        // The row is where a verbose check says a FAIL or ERROR; no second line repeats it.
        say(&present::row(node, *rank, *world, outcome, warn_note));
    }
    let where_ = format!("on {node} (rank {rank} of {world})");
    match (outcome.verdict, mode.enforcing()) {
        (Verdict::Pass, _) => {
            if *rank == 0 {
                let plan = mode.plan().unwrap_or_else(PlanName::quick);
                say(&format!(
                    "nccl-check: PASS ({plan}, {world} ranks): {}",
                    outcome.detail
                ));
            }
            Ok(())
        }
        (verdict, enforcing) => {
            let msg = format!("{verdict} {where_}: {}", outcome.detail);
            if !verbose {
                say(&format!("nccl-check: {msg}{warn_note}"));
            }
            if enforcing {
                return Err(Error::Reported(msg));
            }
            Ok(())
        }
    }
}

/// The user's own directory for kept reports (wins over plugstack `report_dir=`).
pub const REPORT_DIR_VAR: &str = "NCCL_CHECK_REPORT_DIR";
/// `nccl-check-JOB.STEP-NODE-rankR.json`, with only `[A-Za-z0-9._-]` of the node name.
fn report_name(job: u32, step: u32, node: &str, rank: u32) -> String {
    let node: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("nccl-check-{job}.{step}-{node}-rank{rank}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_report_names_are_one_plain_file_name() {
        assert_eq!(
            report_name(12, 0, "gpu-a07", 3),
            "nccl-check-12.0-gpu-a07-rank3.json"
        );
        assert_eq!(
            report_name(12, 1, "../x/y", 0),
            "nccl-check-12.1-.._x_y-rank0.json"
        );
    }
}
