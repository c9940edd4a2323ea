//! `nccl-check-prolog`: the Slurm prolog gate. slurmd runs it as root at job start (`Prolog=`);
//! it checks this node's GPUs with the `nccl-check` worker within a hard time budget, drains the
//! node on FAIL (reason `nccl-check: ...`), never drains on ERROR, and skips the measurement when
//! the same GPUs passed recently. This file only reads the facts, wires the modules together in
//! order and prints the one verdict line; each decision lives in its module.

mod budget;
mod cache;
mod chain;
mod check_config;
mod config;
mod decide;
mod drain;
mod faults;
mod gate;
mod gpus;
mod job_env;
mod log;
mod metrics;
mod prom;
mod reason;
mod secure;
mod shared;
mod slurm_uses;
mod state;
mod status;
mod stray;
mod words;
mod worker;

use clap::Parser;
use config::GateConfig;
use decide::{Found, Mode, Policy};
use job_env::Facts;
use log::Log;
use status::{GateState, Status};
use std::path::{Path, PathBuf};
use std::time::Duration;

const ABOUT: &str =
    "Slurm prolog gate: check this node's GPUs at job start, drain the node on FAIL";

const LONG_ABOUT: &str = "\
Slurm prolog gate of nccl-check: check this node's GPUs at job start, drain the node on FAIL.

slurmd runs it as root for every job (slurm.conf: Prolog=/usr/sbin/nccl-check-prolog). It runs the
nccl-check worker (quick plan) on the job's GPUs within a hard time budget, then:
  PASS   exit 0; the pass is cached (jobs on the same GPUs skip the check for cache_seconds)
  FAIL   drain this node with a reason starting 'nccl-check:' (what failed, measured vs limit),
         then exit 1: slurmd requeues a batch job (held unless SchedulerParameters has
         nohold_on_prolog_fail) and kills an srun/salloc job
  ERROR  (worker or library missing, no GPU, timeout) never drains; exit 0, the job runs
         (on_error = \"fail-job\" exits 1 instead; then slurmd drains with 'Prolog error')
  broken config: the gate is off (never drains, exit 0); --check-config finds it first
Only nodes whose reason starts with 'nccl-check:' are ever resumed (auto_resume, after --recheck
passes on every GPU).";

const AFTER_HELP: &str = "\
Examples:
  nccl-check-prolog --check-config --config new.toml   # validate; print every key and its source
  nccl-check-prolog --dry-run                 # measure now, print what a prolog would do
  nccl-check-prolog --recheck                 # every GPU now: drain on FAIL, resume our drain on PASS

Exit codes (prolog): 0 = let the job start (PASS, cached PASS, ERROR, broken config),
  1 = FAIL (node drained; Slurm requeues the job), 2 = invalid command line.
Exit codes (--recheck): 0 PASS, 1 FAIL, 2 ERROR or broken config.
Exit codes (--check-config): 0 valid and ready, 2 invalid or not ready (Slurm's configuration
  unreadable included), 3 valid but not enabled (no Prolog=/Epilog=/HealthCheckProgram= runs it).

Files: /etc/nccl-check/prolog.toml (config; absent = defaults); in <state_dir>: gate.json (the
last run: state, verdict line, drain reason), runs/job-<id>.<random>/ (report.json, worker.log),
last-pass.json (cache), drained (our drain marker), lock.
Docs: /usr/share/doc/nccl-check-slurm*/prolog.md (installed with the package).";

#[derive(Debug, Parser)]
#[command(name = "nccl-check-prolog", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// Config file [default: /etc/nccl-check/prolog.toml; when that is absent, the defaults]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Validate the config, print every key with its value and source, and what would keep the
    /// gate from working here; exit 0 ready, 2 invalid or not ready, 3 not enabled. Runs nothing
    #[arg(long, conflicts_with_all = ["dry_run", "recheck"])]
    check_config: bool,
    /// Print every Prolog=/Epilog= of this node's Slurm that runs this prolog (the controller's
    /// live settings, each slurm.conf with its Include files, a configless node's cache); exit
    /// 1 when there is one, 0 when none. The package asks it before removing the prolog
    #[arg(long, conflicts_with_all = ["dry_run", "recheck", "check_config"])]
    where_configured: bool,
    /// Measure and print what would be done; never drain, resume, write the cache or exit non-zero
    #[arg(long)]
    dry_run: bool,
    /// Check every GPU of the node now, without a job or the cache: drain on FAIL, resume our own
    /// drain on PASS (with auto_resume). For an admin, cron or a HealthCheckProgram wrapper
    #[arg(long)]
    recheck: bool,
    /// Run as slurm.conf's Epilog= after a job: check, drain on FAIL (exit 0: the job has ended),
    /// refresh the cache on PASS. The default where slurmd sets SLURM_SCRIPT_CONTEXT=epilog_slurmd
    #[arg(long, conflicts_with = "recheck")]
    epilog: bool,
    /// Read the hardware fault sources now (kernel log Xid/SXid, PCIe AER, IB/RoCE counters)
    /// and print what each cost and found as JSON, judged against the last check's position;
    /// keeps no position, drains nothing. Exit 0, or 1 when a fault would FAIL
    #[arg(long, conflicts_with_all = ["dry_run", "recheck", "epilog", "check_config"])]
    faults: bool,
    /// This node's Slurm name [default: $SLURMD_NODENAME, else the short host name]
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
}

fn main() {
    let cli = Cli::parse();
    let dry_run = cli.dry_run;
    // A bug of ours must not take nodes out of service: slurmd drains on any non-zero exit, and a
    // panic would be one. Report it and let the job run (--recheck: exit 2).
    let code = std::panic::catch_unwind(|| run(cli)).unwrap_or_else(|_| {
        log::stderr_line("ERROR internal: the prolog panicked; not checked, the job runs");
        0
    });
    std::process::exit(if dry_run { 0 } else { code });
}

fn run(cli: Cli) -> i32 {
    let facts = Facts::read(cli.node.clone());
    let mode = if cli.recheck {
        Mode::Recheck
    } else if cli.epilog || facts.script_context.as_deref() == Some("epilog_slurmd") {
        Mode::Epilog
    } else {
        Mode::Prolog
    };
    let (path, explicit) = match &cli.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    if cli.where_configured {
        let scontrol = config::load(&path, explicit)
            .map(|c| c.scontrol)
            .unwrap_or_else(|_| GateConfig::default().scontrol);
        return slurm_uses::run(&scontrol, facts.slurm_conf.as_deref());
    }
    if cli.check_config {
        return check_config::run(&path, explicit, &facts.node, facts.slurm_conf.as_deref());
    }
    let cfg = match config::load(&path, explicit) {
        Ok(c) => c,
        Err(e) if cli.faults => {
            log::stderr_line(&format!("ERROR config: {e}"));
            return 2;
        }
        Err(e) => return gate_off(&path, &e.to_string(), &facts, mode, cli.dry_run),
    };
    if cli.faults {
        return fault_report(&cfg, &facts.node);
    }
    let mut log = Log::open(&cfg.syslog_facility, &cfg.syslog_socket, cli.dry_run);
    // The budget counts from here: asking the controller for its timeout is part of the run.
    let start = std::time::Instant::now();
    let (cfg, budget_cut) = within_slurm_timeout(cfg, &facts, mode, &mut log);
    let nccl_hint = words::missing_nccl_fix(&cfg, &path);
    gate::Gate {
        cfg: &cfg,
        facts: &facts,
        mode,
        dry_run: cli.dry_run,
        log: &mut log,
        faults: None,
        budget_cut,
        nccl_hint: &nccl_hint,
        // Everything, the drain included, within the budget and a moment (budget::GRACE).
        deadline: budget::Deadline::since(
            start,
            Duration::from_secs(cfg.budget_seconds) + budget::GRACE,
        ),
    }
    .run()
}

/// How long the controller is asked for its settings at each run: within the time
/// [`budget::MARGIN`] keeps free below the limits, and counted in the budget.
const LIVE_SETTINGS_WAIT: Duration = Duration::from_secs(2);

/// The config with `budget_seconds` cut below the limits Slurm holds this run to
/// ([`budget::Limits::for_mode`]: PrologEpilogTimeout, for the prolog BatchStartTimeout, for
/// `--recheck` HealthCheckTimeout), each the stricter of the slurm.conf slurmd uses (a configless
/// node's cache, which a reconfigure rewrites) and the controller's ([`budget::stricter`]), so a
/// timeout raised in the file before `scontrol reconfigure` does not give the gate time Slurm
/// will not. Neither readable: the budget as written.
fn within_slurm_timeout(
    cfg: GateConfig,
    facts: &Facts,
    mode: Mode,
    log: &mut Log,
) -> (GateConfig, Option<String>) {
    let conf = facts.slurm_conf.as_deref();
    let file = nccl_check_host::slurm_config::settings_now(Path::new("/"), conf);
    let live =
        nccl_check_host::slurm_config::settings_live(&cfg.scontrol, conf, LIVE_SETTINGS_WAIT);
    let limits = budget::Limits::read(&file, &live);
    if limits.prolog_epilog.is_none() {
        log.info(&format!(
            "Slurm's limits unknown ({}; {}): budget_seconds = {} as written",
            file.err().unwrap_or_default(),
            live.err().unwrap_or_default(),
            cfg.budget_seconds
        ));
        return (cfg, None);
    }
    for why in limits.differences() {
        log.warn(&format!("{}: {why}", facts.node));
    }
    let b = budget::within(cfg.budget_seconds, &limits.for_mode(mode));
    if let Some(why) = &b.cut {
        log.warn(&format!("{}: {why}", facts.node));
    }
    (
        GateConfig {
            budget_seconds: b.seconds,
            ..cfg
        },
        b.cut,
    )
}

/// `--faults`: one read-only fault pass, printed.
fn fault_report(cfg: &GateConfig, node: &str) -> i32 {
    let settings = cfg.fault_settings();
    let state_dir = match cfg.state_dir_for(node) {
        Ok(d) => d,
        Err(e) => {
            log::stderr_line(&format!("ERROR {e}"));
            return 2;
        }
    };
    let sum = faults::check(&settings, &state_dir, false);
    match serde_json::to_string_pretty(&sum) {
        Ok(text) => nccl_check_host::outln!("{text}"),
        Err(e) => log::stderr_line(&format!("ERROR internal: {e}")),
    }
    nccl_check_host::errln!("{}", sum.line());
    i32::from(sum.failed())
}

/// The config cannot be used: the gate is off. Nothing is measured or drained, the job runs, and
/// the state says so where admins look: stderr (slurmd's log), syslog, and `gate.json` and
/// the metrics file where the broken file still names usable places for them.
fn gate_off(path: &Path, error: &str, facts: &Facts, mode: Mode, dry_run: bool) -> i32 {
    let mut log = Log::open("daemon", Path::new("/dev/log"), dry_run);
    let msg = format!(
        "ERROR config: {error}; the gate is OFF: not checked, nothing drained{}",
        if mode == Mode::Prolog {
            ", the job runs"
        } else {
            ""
        }
    );
    log.error(&msg);
    if !dry_run {
        log::stderr_line(&msg);
    }
    // %n only with a valid node name (never `../x`): otherwise nothing is written.
    let salvaged = check_config::salvage(path)
        .filter(|_| !dry_run && config::check_node_name(&facts.node).is_ok());
    if let Some((state_dir, metrics_file)) = salvaged {
        let state_dir = PathBuf::from(state_dir.replace("%n", &facts.node));
        if secure::ensure_dir(&state_dir).is_ok() {
            let st = Status::new(GateState::Disabled, &msg, facts, mode);
            let _ = status::write(&state_dir, &st);
        }
        if !metrics_file.is_empty() {
            let m = PathBuf::from(metrics_file.replace("%n", &facts.node));
            let dir = secure::open_textfile_dir(m.parent().unwrap_or(Path::new("/")));
            if let (Ok(dir), Some(name)) = (dir, m.file_name()) {
                let sample = metrics::Sample::unmeasured(GateState::Disabled, None, None);
                let _ = prom::write(&dir.file(name), &metrics::render(&sample));
            }
        }
    }
    let policy = Policy::from(&GateConfig::default());
    decide::decide(mode, Found::BrokenConfig, policy, false).exit_code
}

impl From<&GateConfig> for Policy {
    fn from(c: &GateConfig) -> Policy {
        Policy {
            on_fail: c.on_fail,
            on_error: c.on_error,
            auto_resume: c.auto_resume,
            stray: c.stray_processes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_teaches_the_slurm_side() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for needle in [
            "Prolog=",
            "nohold_on_prolog_fail",
            "--dry-run",
            "--recheck",
            "--check-config",
            "nccl-check:",
            "Exit codes",
        ] {
            assert!(help.contains(needle), "{needle} missing from --help");
        }
        assert!(!help.starts_with("[nccl-check]"), "{help}");
    }

    #[test]
    fn unknown_arguments_are_rejected() {
        assert!(Cli::try_parse_from(["nccl-check-prolog", "--bogus"]).is_err());
        let c = Cli::try_parse_from(["nccl-check-prolog", "--config", "/x.toml", "--dry-run"])
            .expect("valid");
        assert_eq!(c.config, Some(PathBuf::from("/x.toml")));
        assert!(c.dry_run && !c.recheck && !c.check_config);
        assert!(Cli::try_parse_from(["nccl-check-prolog", "--check-config", "--dry-run"]).is_err());
    }
}
