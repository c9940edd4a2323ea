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
use std::path::PathBuf;

use nccl_check_contract::args::{PlanName, WorkerArgs};
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::verdict::Verdict;
use nccl_check_host::supervise::Ending;
use slurm_spank::SpankHandle;

use crate::config::PluginConfig;
use crate::container::{self, Namespaces};
use crate::options::{self, Mode};
use crate::present;
use crate::srun::SECRET_TRANSPORT;
use crate::worker::{self, Invocation};
use crate::Error;

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

/// The requested mode in this step, or `None` when nothing is to run (cheap: no IO).
fn requested<'a>(
    config: &'a Result<PluginConfig, crate::config::ConfigError>,
    raw: &options::Raw,
) -> Result<Option<(Mode, &'a PluginConfig)>, Error> {
    if *raw == options::Raw::Absent {
        return Ok(None);
    }
    let config = config
        .as_ref()
        .map_err(|e| Error::PluginConfig(e.clone()))?;
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
    config: &Result<PluginConfig, crate::config::ConfigError>,
    state: &mut TaskState,
) -> Result<(), Error> {
    if let Ok(Some(_)) = requested(config, &options::raw()) {
        state.host = Some(Namespaces::now());
    }
    Ok(())
}

/// `slurm_spank_task_init` (the user, in the task process, just before exec).
pub fn task_init(
    spank: &SpankHandle,
    config: &Result<PluginConfig, crate::config::ConfigError>,
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
        raw = options::Raw::from_job_env(spank.getenv(options::JOB_ENV_VAR).ok().flatten());
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
    let user_lib = task.getenv(spank, NCCL_LIB_VAR).filter(|v| !v.is_empty());
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
        host: None,
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
        let job_id = spank.job_id().map_err(spank_err("S_JOB_ID"))?;
        let world = spank
            .job_total_task_count()
            .map_err(spank_err("S_JOB_TOTAL_TASK_COUNT"))?;
        let node = spank
            .getenv("SLURMD_NODENAME")
            .ok()
            .flatten()
            .unwrap_or_else(|| String::from("?"));
        Ok(Task {
            job_id,
            step_id,
            rank,
            world,
            node,
        })
    }

    fn getenv(&self, spank: &SpankHandle, name: &str) -> Option<String> {
        spank.getenv(name).ok().flatten()
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
    let tmp_dir = task
        .getenv(spank, "TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let plan = mode.plan().unwrap_or_else(PlanName::quick);
    let mut args = WorkerArgs::new(plan, config.timeout.as_secs());
    args.rank = Some(task.rank);
    args.world = Some(task.world);
    // No --rendezvous: the worker derives host, candidate ports and coordinator from the task's
    // Slurm environment (the coordinator is the first task of the step's first node, whatever
    // its rank, and a taken port is skipped); the site's range still applies.
    args.port_range = Some(config.ports);
    args.progress = task.rank == 0;
    args.expect_collnet = mode.expect_collnet();
    let report_dir = task
        .getenv(spank, REPORT_DIR_VAR)
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
        (verdict, true) => {
            let msg = format!("{verdict} {where_}: {}", outcome.detail);
            if !verbose {
                say(&format!("nccl-check: {msg}"));
            }
            Err(Error::Reported(msg))
        }
        (verdict, false) => {
            if !verbose {
                say(&format!(
                    "nccl-check: {verdict} {where_}: {}{warn_note}",
                    outcome.detail
                ));
            }
            Ok(())
        }
    }
}

/// The user's own directory for kept reports (wins over plugstack `report_dir=`).
pub const REPORT_DIR_VAR: &str = "NCCL_CHECK_REPORT_DIR";
/// The worker's variable for the NCCL library (the user's wins over plugstack `nccl_lib=`).
const NCCL_LIB_VAR: &str = "NCCL_CHECK_NCCL_LIB";
/// The worker's variable for the rendezvous secret.
const SECRET_VAR: &str = "NCCL_CHECK_SECRET";

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

/// The worker's environment: the task's, with the site's SHARP policy, the step's secret under
/// the worker's name for it, and the site's NCCL library unless the user names one.
pub fn worker_env(
    spank: &SpankHandle,
    config: &PluginConfig,
    secret: Option<OsString>,
) -> Result<Vec<(OsString, OsString)>, Error> {
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
    adjust_env(&mut env, config, secret);
    Ok(env)
}

/// The policy part of [`worker_env`] (pure).
fn adjust_env(
    env: &mut Vec<(OsString, OsString)>,
    config: &PluginConfig,
    secret: Option<OsString>,
) {
    if !config.allow_sharp {
        env.retain(|(k, _)| k != "NCCL_COLLNET_ENABLE");
        env.push(("NCCL_COLLNET_ENABLE".into(), "0".into()));
    }
    let transported = env
        .iter()
        .position(|(k, _)| k == SECRET_TRANSPORT)
        .map(|i| env.remove(i).1);
    if let Some(secret) = secret.or(transported) {
        env.retain(|(k, _)| k != SECRET_VAR);
        env.push((SECRET_VAR.into(), secret));
    }
    let user_lib = env.iter().any(|(k, v)| k == NCCL_LIB_VAR && !v.is_empty());
    if let (Some(lib), false) = (&config.nccl_lib, user_lib) {
        env.retain(|(k, _)| k != NCCL_LIB_VAR);
        env.push((NCCL_LIB_VAR.into(), lib.clone().into_os_string()));
    }
}

pub(crate) fn spank_err(item: &'static str) -> impl Fn(slurm_spank::SpankError) -> Error {
    move |e| Error::Check(format!("cannot read {item}: {e}"))
}

/// Writes one line to the task's stderr, which slurmstepd has already connected to srun's
/// stderr before any task callback runs (mgr.c `prepare_stdio` precedes `exec_task`).
pub(crate) fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a str> {
        env.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.to_str())
    }

    /// srun's per-step secret reaches the worker under the worker's name, and only there; so
    /// does the site's NCCL library, unless the user names one.
    #[test]
    fn the_worker_gets_the_steps_secret_and_the_sites_library_unless_the_user_names_one() {
        let mut config = PluginConfig {
            nccl_lib: Some(PathBuf::from("/opt/nccl/libnccl.so.2")),
            ..PluginConfig::default()
        };
        let mut env: Vec<(OsString, OsString)> = vec![
            (SECRET_TRANSPORT.into(), "feed".into()),
            (SECRET_VAR.into(), "users-own".into()),
            ("NCCL_COLLNET_ENABLE".into(), "1".into()),
        ];
        adjust_env(&mut env, &config, Some("cafe".into()));
        assert_eq!(get(&env, SECRET_VAR), Some("cafe"));
        assert_eq!(get(&env, SECRET_TRANSPORT), None);
        assert_eq!(get(&env, NCCL_LIB_VAR), Some("/opt/nccl/libnccl.so.2"));
        assert_eq!(get(&env, "NCCL_COLLNET_ENABLE"), Some("0"));
        assert_eq!(env.iter().filter(|(k, _)| k == SECRET_VAR).count(), 1);

        let mut env: Vec<(OsString, OsString)> = vec![
            (SECRET_TRANSPORT.into(), "feed".into()),
            (NCCL_LIB_VAR.into(), "/home/me/libnccl.so.2".into()),
        ];
        config.allow_sharp = true;
        adjust_env(&mut env, &config, None);
        assert_eq!(get(&env, SECRET_VAR), Some("feed"));
        assert_eq!(get(&env, NCCL_LIB_VAR), Some("/home/me/libnccl.so.2"));
        assert_eq!(get(&env, "NCCL_COLLNET_ENABLE"), None);
    }

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
