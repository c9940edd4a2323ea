//! `nccl-check-prolog`: the Slurm prolog gate. slurmd runs it as root at job start (`Prolog=`);
//! it checks this node's GPUs with the `nccl-check` worker within a hard time budget, drains the
//! node on FAIL (reason `nccl-check: ...`), never drains on ERROR, and skips the measurement when
//! the same GPUs passed recently. This file only reads the facts, wires the modules together in
//! order and prints the one verdict line; each decision lives in its module.

mod cache;
mod config;
mod decide;
mod drain;
mod gpus;
mod log;
mod metrics;
mod report;
mod state;
mod worker;

use bench_core::verdict::Verdict;
use clap::Parser;
use config::{Config, GpuPolicy};
use decide::{Actions, CacheAction, Found, Mode, Policy};
use log::Log;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ABOUT: &str =
    "[nccl-check] Slurm prolog gate: check this node's GPUs at job start, drain the node on FAIL";

const LONG_ABOUT: &str = "\
[nccl-check] Slurm prolog gate: check this node's GPUs at job start, drain the node on FAIL.

slurmd runs it as root for every job (slurm.conf: Prolog=/usr/sbin/nccl-check-prolog). It runs the
nccl-check worker (quick plan) on the job's GPUs within a hard time budget, then:
  PASS   exit 0; the pass is cached (jobs on the same GPUs skip the check for cache_seconds)
  FAIL   drain this node with a reason starting 'nccl-check:' (what failed, measured vs limit),
         then exit 1: slurmd requeues a batch job (held unless SchedulerParameters has
         nohold_on_prolog_fail) and kills an srun/salloc job
  ERROR  (worker or library missing, no GPU, timeout, broken config) never drains; exit 0, the
         job runs (on_error = \"fail\" exits 1 instead; then slurmd drains with 'Prolog error')
Only nodes whose reason starts with 'nccl-check:' are ever resumed (auto_resume, after --recheck
passes on every GPU).";

const AFTER_HELP: &str = "\
Examples:
  nccl-check-prolog --dry-run                 # measure now, print what a prolog would do
  nccl-check-prolog --config new.toml --dry-run   # check a config change before slurmd sees it
  nccl-check-prolog --recheck                 # every GPU now: drain on FAIL, resume our drain on PASS

Exit codes (prolog): 0 = let the job start (PASS, cached PASS, ERROR, broken config),
  1 = FAIL (node drained; Slurm requeues the job), 2 = invalid command line.
Exit codes (--recheck): 0 PASS, 1 FAIL, 2 ERROR or broken config.

Files: /etc/nccl-check/prolog.toml (config; absent = defaults), <state_dir>/report.json (last
report), fail-report.json, last-pass.json (cache), worker.log, drained (our drain marker).
Docs: prolog/README.md.";

#[derive(Debug, Parser)]
#[command(name = "nccl-check-prolog", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// Config file [default: /etc/nccl-check/prolog.toml; when that is absent, the defaults]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Measure and print what would be done; never drain, resume, write the cache or exit non-zero
    #[arg(long)]
    dry_run: bool,
    /// Check every GPU of the node now, without a job or the cache: drain on FAIL, resume our own
    /// drain on PASS (with auto_resume). For an admin, cron or a HealthCheckProgram wrapper
    #[arg(long)]
    recheck: bool,
    /// This node's Slurm name [default: $SLURMD_NODENAME, else the short host name]
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
}

/// What the environment slurmd built for the prolog says, read once here and nowhere else.
#[derive(Debug)]
struct Facts {
    node: String,
    job: Option<String>,
    /// The job's GPUs (physical indices), with gres/gpu.
    cuda_visible_devices: Option<String>,
    /// slurmd's config, for scontrol.
    slurm_conf: Option<String>,
}

impl Facts {
    fn read(node: Option<String>) -> Facts {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let node = node.or_else(|| var("SLURMD_NODENAME")).unwrap_or_else(|| {
            nix::unistd::gethostname()
                .map(|h| {
                    h.to_string_lossy()
                        .split('.')
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default()
        });
        Facts {
            node,
            job: var("SLURM_JOB_ID"),
            cuda_visible_devices: var("CUDA_VISIBLE_DEVICES"),
            slurm_conf: var("SLURM_CONF"),
        }
    }
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
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
    let mode = if cli.recheck {
        Mode::Recheck
    } else {
        Mode::Prolog
    };
    let facts = Facts::read(cli.node.clone());
    let (path, explicit) = match &cli.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    let cfg = match config::load(&path, explicit) {
        Ok(c) => c,
        Err(e) => {
            let mut log = Log::open("daemon", std::path::Path::new("/dev/log"), cli.dry_run);
            let msg = format!(
                "ERROR config: {e}; not checked, nothing drained{}",
                if mode == Mode::Prolog {
                    ", the job runs"
                } else {
                    ""
                }
            );
            log.error(&msg);
            log::stderr_line(&msg);
            let policy = Policy::from(&Config::default());
            return decide::decide(mode, Found::BrokenConfig, policy, false).exit_code;
        }
    };
    let mut log = Log::open(&cfg.syslog_facility, &cfg.syslog_socket, cli.dry_run);
    Gate {
        cfg: &cfg,
        facts: &facts,
        mode,
        dry_run: cli.dry_run,
        log: &mut log,
    }
    .run()
}

impl From<&Config> for Policy {
    fn from(c: &Config) -> Policy {
        Policy {
            on_fail: c.on_fail,
            on_error: c.on_error,
            auto_resume: c.auto_resume,
        }
    }
}

/// One run of the gate, with a valid config.
struct Gate<'a> {
    cfg: &'a Config,
    facts: &'a Facts,
    mode: Mode,
    dry_run: bool,
    log: &'a mut Log,
}

/// The GPUs one run checks.
struct Selection {
    /// `--gpus` for the worker; None = every GPU.
    indices: Option<Vec<usize>>,
    /// Their identities, when the driver lists them all (the cache needs them).
    identities: Option<Vec<String>>,
    /// The check covers every GPU of the node.
    all: bool,
    /// For messages: "GPUs 0,2" or "all GPUs".
    label: String,
}

impl Gate<'_> {
    fn run(mut self) -> i32 {
        let start = now_unix();
        let job = self.facts.job.as_deref();
        let whom = match (self.mode, job) {
            (Mode::Recheck, _) => "recheck".to_string(),
            (Mode::Prolog, Some(j)) => format!("job {j}"),
            (Mode::Prolog, None) => "no job".to_string(),
        };
        let state_dir = self.cfg.state_dir_for(&self.facts.node);
        if let Err(e) = state::ensure_dir(&state_dir) {
            return self
                .error_without_run(&format!("state_dir {}: {e}", state_dir.display()), &whom);
        }
        let slurm = drain::Slurm {
            scontrol: self.cfg.scontrol.clone(),
            node: self.facts.node.clone(),
            slurm_conf: self.facts.slurm_conf.clone(),
            timeout: drain::SCONTROL_TIMEOUT,
        };
        if self.mode == Mode::Recheck {
            // A recheck takes every GPU: never while jobs run on the node.
            match slurm.show() {
                Ok(n) if n.busy() => {
                    let msg = format!(
                        "recheck on {}: skipped, jobs run on the node (State={})",
                        self.facts.node, n.state
                    );
                    self.log.info(&msg);
                    return self.finish(
                        decide::decide(self.mode, Found::NothingToCheck, self.policy(), false),
                        &msg,
                    );
                }
                Ok(_) => {}
                Err(e) => self.log.warn(&format!(
                    "recheck: cannot read the node's state ({e}); checking anyway"
                )),
            }
        }
        let sel = match self.select() {
            Ok(Some(s)) => s,
            Ok(None) => {
                let msg =
                    format!("{whom}: no GPUs allocated to the job; not checked (gpus = \"job\")");
                self.log.info(&msg);
                return self.finish(
                    decide::decide(self.mode, Found::NothingToCheck, self.policy(), false),
                    &msg,
                );
            }
            Err(e) => return self.error_without_run(&e, &whom),
        };
        let fingerprint = cache::fingerprint(
            &format!("{:?}", self.cfg),
            &[&self.cfg.worker, &self.cfg.worker_config],
        );

        // The cached path: a few file reads, no process started.
        if self.mode == Mode::Prolog {
            if let Some(ids) = &sel.identities {
                let c = cache::read(&state_dir);
                if let Some(age) = c.lookup(ids, &fingerprint, start, self.cfg.cache_seconds) {
                    let msg = format!(
                        "PASS (cached) {whom} on {}: {} passed {age:.0} s ago (cache_seconds = {})",
                        self.facts.node, sel.label, self.cfg.cache_seconds
                    );
                    self.log.info(&msg);
                    return self.finish(
                        decide::decide(self.mode, Found::CachedPass, self.policy(), sel.all),
                        &msg,
                    );
                }
            }
        }

        let req = worker::Request {
            worker: self.cfg.worker.clone(),
            plan: self.cfg.plan.clone(),
            json: state_dir.join("report.json"),
            timeout_s: self.cfg.worker_timeout(),
            budget: Duration::from_secs(self.cfg.budget_seconds),
            config: self
                .cfg
                .worker_config
                .exists()
                .then(|| self.cfg.worker_config.clone()),
            gpus: sel.indices.clone(),
            env: self.cfg.env.clone(),
            log: state_dir.join("worker.log"),
        };
        self.log.info(&format!(
            "{whom} on {}: checking {}: {} {}",
            self.facts.node,
            sel.label,
            req.worker.display(),
            req.args().display()
        ));
        let run = worker::run(&req);
        let verdict = run.verdict;
        let report = run.report.as_ref().ok();
        if let Some(r) = report {
            if r.verdict != verdict {
                self.log.warn(&format!(
                    "the report says {} but the worker exited {:?}; the exit status decides ({verdict})",
                    r.verdict, run.exit_code
                ));
            }
        }

        // Cache only a pass of exactly the GPUs we meant (a different set would mean Slurm's and
        // CUDA's GPU order disagree on this node).
        let mut cacheable = sel.identities.clone();
        if let (Some(ids), Some(measured)) = (&sel.identities, report.and_then(report::uuids)) {
            let mut ids = ids.clone();
            ids.sort();
            if ids.iter().all(|i| i.starts_with("GPU-")) && ids != measured {
                self.log.warn(&format!(
                    "the worker measured GPUs {measured:?} but {} are {ids:?} in PCI order; not cached",
                    sel.label
                ));
                cacheable = None;
            }
        }

        let actions = decide::decide(self.mode, Found::Measured(verdict), self.policy(), sel.all);
        let elapsed = run.elapsed.as_secs_f64();
        let detail = |r: Option<&report::Report>| {
            r.map(|r| r.summary.trim().to_string())
                .filter(|s| !s.is_empty())
                .or_else(|| run.problem.clone())
                .or_else(|| (!run.output_tail.is_empty()).then(|| run.output_tail.clone()))
                .unwrap_or_else(|| format!("worker exit {:?}", run.exit_code))
        };
        let mut reason = None;
        let msg = match verdict {
            Verdict::Pass => {
                let bw: Vec<String> = report
                    .map(|r| {
                        r.avg_busbw
                            .iter()
                            .map(|(c, b)| format!("{c} {b:.1} GB/s"))
                            .collect()
                    })
                    .unwrap_or_default();
                format!(
                    "PASS {whom} on {}: {} in {elapsed:.2} s{}{}",
                    self.facts.node,
                    sel.label,
                    if bw.is_empty() {
                        String::new()
                    } else {
                        format!(", busbw {}", bw.join(", "))
                    },
                    report
                        .map(|r| format!(" ({})", r.summary.trim()))
                        .unwrap_or_default()
                )
            }
            Verdict::Fail => {
                let r = drain::reason(report, job);
                let m = format!(
                    "FAIL {whom} on {}: {} in {elapsed:.2} s: {}{}",
                    self.facts.node,
                    sel.label,
                    r,
                    match (self.mode, actions.exit_code) {
                        (Mode::Recheck, _) => "",
                        (_, 0) => "; draining, the job runs (on_fail = \"run\")",
                        _ => "; draining, Slurm requeues the job",
                    }
                );
                reason = Some(r);
                m
            }
            Verdict::Error => format!(
                "ERROR {whom} on {}: {} (worker exit {}): {}; not drained{}",
                self.facts.node,
                sel.label,
                run.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into()),
                detail(report),
                match (self.mode, actions.exit_code) {
                    (Mode::Recheck, _) => "",
                    (_, 0) => ", the job runs",
                    _ => ", exit 1 (on_error = \"fail\")",
                }
            ),
        };
        match verdict {
            Verdict::Pass => self.log.info(&msg),
            Verdict::Fail | Verdict::Error => self.log.error(&msg),
        }

        if self.dry_run {
            self.print_plan(&actions, reason.as_deref());
            return self.finish(actions, &msg);
        }
        match actions.cache {
            CacheAction::StorePass => {
                if let Some(ids) = cacheable.filter(|_| self.cfg.cache_seconds > 0) {
                    let mut c = cache::read(&state_dir);
                    c.record(&ids, &fingerprint, start);
                    if let Err(e) = cache::write(&state_dir, &c) {
                        self.log
                            .warn(&format!("cache {}: {e}", cache::path(&state_dir).display()));
                    }
                }
            }
            CacheAction::Clear => {
                if let Err(e) = cache::clear(&state_dir) {
                    self.log
                        .warn(&format!("cache {}: {e}", cache::path(&state_dir).display()));
                }
                let _ = std::fs::copy(&req.json, state_dir.join("fail-report.json"));
            }
            CacheAction::Keep => {}
        }
        if let (true, Some(r)) = (actions.drain, reason.as_deref()) {
            let out = slurm.drain(&state_dir, r, now_unix());
            let m = match &out {
                drain::Outcome::Drained => format!("drained {}: {r}", self.facts.node),
                drain::Outcome::AlreadyRequested => format!(
                    "{} drain already requested in the last {} s; not asked again",
                    self.facts.node,
                    drain::RECENT
                ),
                drain::Outcome::AlreadyDrained(why) => {
                    format!(
                        "{} is drained already ({why}); left as it is",
                        self.facts.node
                    )
                }
                other => format!("drain of {} failed: {other:?}", self.facts.node),
            };
            match out {
                drain::Outcome::Failed(_) => self.log.error(&m),
                _ => self.log.info(&m),
            }
        }
        if actions.resume_own_drain {
            let out = slurm.resume_own(&state_dir, start, self.mode == Mode::Recheck);
            match out {
                drain::Outcome::Resumed => self.log.info(&format!(
                    "resumed {}: every GPU passed again after nccl-check drained it",
                    self.facts.node
                )),
                drain::Outcome::NotOurs(why) => self.log.info(&format!(
                    "{} stays drained: not drained by nccl-check ({why})",
                    self.facts.node
                )),
                drain::Outcome::Failed(e) => self.log.error(&format!("resume: {e}")),
                _ => {}
            }
        }
        if let Some(p) = self.cfg.metrics_file_for(&self.facts.node) {
            let empty = Default::default();
            let sample = metrics::Sample {
                verdict,
                exit_code: run.exit_code,
                avg_busbw: report.map(|r| &r.avg_busbw).unwrap_or(&empty),
                finished_unix: now_unix(),
                duration_s: elapsed,
            };
            if let Err(e) = metrics::write(&p, &sample) {
                self.log.warn(&format!("metrics_file {}: {e}", p.display()));
            }
        }
        self.finish(actions, &msg)
    }

    fn policy(&self) -> Policy {
        Policy::from(self.cfg)
    }

    /// The GPUs to check; `Ok(None)` = the job has none.
    fn select(&self) -> Result<Option<Selection>, String> {
        let node_gpus = gpus::read(&self.cfg.gpu_info_dir);
        let known = (!node_gpus.is_empty())
            .then(|| node_gpus.iter().map(|g| g.identity()).collect::<Vec<_>>());
        if self.mode == Mode::Recheck || self.cfg.gpus == GpuPolicy::All {
            return Ok(Some(Selection {
                indices: None,
                identities: known,
                all: true,
                label: "all GPUs".into(),
            }));
        }
        let job = gpus::parse_job_gpus(self.facts.cuda_visible_devices.as_deref())?;
        if job.is_empty() {
            return Ok(None);
        }
        let identities = known
            .as_ref()
            .and_then(|k| job.iter().map(|&i| k.get(i).cloned()).collect());
        let all = known
            .as_ref()
            .is_some_and(|k| job.len() == k.len() && job.iter().all(|&i| i < k.len()));
        let list: Vec<String> = job.iter().map(|i| i.to_string()).collect();
        Ok(Some(Selection {
            indices: Some(job),
            identities,
            all,
            label: format!("GPUs {}", list.join(",")),
        }))
    }

    /// A setup problem found before the worker could run.
    fn error_without_run(&mut self, problem: &str, whom: &str) -> i32 {
        let a = decide::decide(
            self.mode,
            Found::Measured(Verdict::Error),
            self.policy(),
            false,
        );
        let msg = format!(
            "ERROR {whom} on {}: {problem}; not drained",
            self.facts.node
        );
        self.log.error(&msg);
        if self.dry_run {
            self.print_plan(&a, None);
        }
        self.finish(a, &msg)
    }

    fn print_plan(&self, a: &Actions, reason: Option<&str>) {
        println!("dry run: nothing below was done");
        println!(
            "  cache:  {}",
            match a.cache {
                CacheAction::StorePass => "record this pass",
                CacheAction::Clear => "forget every recorded pass",
                CacheAction::Keep => "unchanged",
            }
        );
        if a.drain {
            println!(
                "  drain:  {} reason=\"{}\" (unless already drained)",
                self.facts.node,
                reason.unwrap_or("")
            );
        } else {
            println!("  drain:  no");
        }
        println!(
            "  resume: {}",
            if a.resume_own_drain {
                "yes, if nccl-check drained this node"
            } else {
                "no"
            }
        );
        println!("  exit:   {} (a dry run exits 0)", a.exit_code);
    }

    fn finish(&mut self, a: Actions, msg: &str) -> i32 {
        log::stderr_line(msg);
        a.exit_code
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
            "nccl-check:",
            "Exit codes",
        ] {
            assert!(help.contains(needle), "{needle} missing from --help");
        }
    }

    #[test]
    fn unknown_arguments_are_rejected() {
        assert!(Cli::try_parse_from(["nccl-check-prolog", "--bogus"]).is_err());
        let c = Cli::try_parse_from(["nccl-check-prolog", "--config", "/x.toml", "--dry-run"])
            .expect("valid");
        assert_eq!(c.config, Some(PathBuf::from("/x.toml")));
        assert!(c.dry_run && !c.recheck);
    }

    #[test]
    fn facts_prefer_the_explicit_node_name() {
        assert_eq!(Facts::read(Some("n9".into())).node, "n9");
    }
}
