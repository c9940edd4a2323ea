//! One run of the gate with a valid config, in order: check the directories it writes, pick the
//! GPUs, answer from the cache or run the worker in a private run directory, decide
//! ([`crate::decide`]), update the cache under the lock, drain or resume, then say what happened
//! (stderr, syslog, `gate.json`, metrics). Everything within one budget ([`crate::budget`]).
//! By stage: this file the run's order, its places and the cache's answer; `fault_pass.rs` the
//! hardware faults; `measurement.rs` the worker and the consequences of its verdict; `publish.rs`
//! `gate.json`, metrics and the runs that measure nothing.

use crate::budget::Deadline;
use crate::config::{GateConfig, GpuPolicy};
use crate::decide::{self, Actions, Found, Mode, Policy};
use crate::drain;
use crate::job_env::{self, Facts, Selection};
use crate::log::{self, Log};
use crate::status::{GateState, Status};
use crate::words::Line;
use crate::{cache, faults, gpus, secure, shared};
use std::path::{Path, PathBuf};

mod fault_pass;
mod measurement;
mod publish;

pub use crate::status::now_unix;

pub struct Gate<'a> {
    pub cfg: &'a GateConfig,
    pub facts: &'a Facts,
    pub mode: Mode,
    pub dry_run: bool,
    pub log: &'a mut Log,
    /// The whole run ends by then: `budget_seconds` from the start plus a moment for the drain.
    pub deadline: Deadline,
    /// Why `cfg.budget_seconds` is below the file's: Slurm's PrologEpilogTimeout
    /// ([`crate::budget::effective`]); added to a timeout's ERROR.
    pub budget_cut: Option<String>,
    /// The hardware fault pass of this run (set by the run; `gate.json` shows it).
    pub faults: Option<faults::Summary>,
    /// What an ERROR for a missing NCCL tells the admin ([`crate::words::missing_nccl_fix`]).
    pub nccl_hint: &'a str,
}

/// Where the run may write its state: the directories that passed [`secure`]'s checks.
#[derive(Default)]
struct Places {
    state_dir: Option<PathBuf>,
    /// `metrics_file`, reached through its open directory ([`secure::TextfileDir::file`]).
    metrics: Option<PathBuf>,
    /// Holds that directory open while the run writes into it.
    metrics_dir: Option<secure::TextfileDir>,
    /// Why `metrics_file` cannot be written: an error of the monitoring, never of the gate. The
    /// run goes on; its metrics go to [`crate::metrics::FALLBACK`] in the state directory, with
    /// `nccl_check_metrics_file_error 1`, and `gate.json` says why.
    metrics_error: Option<String>,
}

/// What the cache is keyed by and where the run writes: the same for every stage of one run.
struct RunKeys<'k> {
    pub places: &'k Places,
    pub state_dir: &'k Path,
    pub slurm: &'k drain::Slurm,
    pub fingerprint: &'k str,
    pub start: f64,
    pub whom: &'k str,
}

/// A stage's value, or the run's exit code where the run ends at that stage (not a failure:
/// a cached PASS ends the run there too).
type Stage<T> = Result<T, i32>;

/// A stage that says `Some(exit code)` where the run ends there, as a [`Stage`].
fn ends(code: Option<i32>) -> Stage<()> {
    code.map_or(Ok(()), Err)
}

impl Places {
    /// `metrics_file` as configured, for messages (not the path the writes go through).
    fn metrics_shown(&self) -> String {
        match (&self.metrics_dir, &self.metrics) {
            (Some(d), Some(m)) => d
                .shown
                .join(m.file_name().unwrap_or_default())
                .display()
                .to_string(),
            _ => String::new(),
        }
    }
}

impl<'a> Gate<'a> {
    /// What this run's mode and policy do with `found` (`all`: every GPU of the node checked).
    fn decide(&self, found: Found, all: bool) -> Actions {
        decide::decide(self.mode, found, Policy::from(self.cfg), all)
    }

    /// `gate.json` of this run in `state` saying `message`: nothing drained, no run directory
    /// (the callers that have them set them); [`Self::publish`] adds the faults and metrics error.
    fn status(&self, state: GateState, message: &str) -> Status {
        Status::new(state, message, self.facts, self.mode)
    }

    fn line<'b>(&self, whom: &'b str, label: &'b str, a: &Actions) -> Line<'b>
    where
        'a: 'b,
    {
        Line {
            whom,
            node: &self.facts.node,
            label,
            mode: self.mode,
            exit_code: a.exit_code,
            nccl_hint: self.nccl_hint,
        }
    }

    pub fn run(mut self) -> i32 {
        self.stages().unwrap_or_else(|code| code)
    }

    /// The run's stages in order; each may end the run with its exit code ([`Stage`]).
    fn stages(&mut self) -> Stage<i32> {
        let start = now_unix();
        let whom = self.facts.whom(self.mode);
        let (places, state_dir) = self.places(&whom)?;
        let slurm = drain::Slurm {
            scontrol: self.cfg.scontrol.clone(),
            node: self.facts.node.clone(),
            slurm_conf: self.facts.slurm_conf.clone(),
            deadline: self.deadline,
        };
        if self.mode == Mode::Recheck {
            ends(self.recheck_on_busy_node(&places, &slurm))?;
        }
        ends(self.fault_pass(&places, &state_dir, &slurm, &whom))?;
        let mut sel = match job_env::select(self.cfg, self.facts, self.mode, None) {
            Ok(Some(s)) => s,
            Ok(None) => return Err(self.nothing_to_check(&places, &whom, None)),
            Err(e) => return Err(self.error_without_run(&places, &e, &whom)),
        };
        // The budget says how long a check may take, not what it checks: a pass under a budget
        // cut by PrologEpilogTimeout (prolog, epilog) is the same pass as a recheck's.
        let checked = GateConfig {
            budget_seconds: 0,
            ..self.cfg.clone()
        };
        let fingerprint = cache::fingerprint(
            &format!("{checked:?}"),
            &[&self.cfg.worker, &self.cfg.worker_config],
        );
        let keys = RunKeys {
            places: &places,
            state_dir: &state_dir,
            slurm: &slurm,
            fingerprint: &fingerprint,
            start,
            whom: &whom,
        };
        // The cached path: a few file reads, no process started, nothing written.
        ends(self.cached(&sel, &keys))?;
        // A shared node under gpus = "all": other jobs' GPUs are left out (asked of Slurm only
        // now, so a cached pass of every GPU costs no Slurm call).
        if self.cfg.gpus == GpuPolicy::All && self.mode != Mode::Recheck {
            sel = self.leave_out_other_jobs(&places, &slurm, &whom)?;
            if sel.indices.is_some() {
                ends(self.cached(&sel, &keys))?;
            }
        }
        self.measure(&keys, sel)
    }

    /// The state directory, created or checked, and the metrics file's directory, checked.
    /// `Err`: the run's exit code (an ERROR said with what passed so far).
    fn places(&mut self, whom: &str) -> Stage<(Places, PathBuf)> {
        let mut places = Places::default();
        let state_dir = (self.cfg.state_dir_for(&self.facts.node))
            .map_err(|e| self.error_without_run(&places, &e, whom))?;
        if let Err(e) = secure::ensure_dir(&state_dir) {
            let p = format!("state_dir {e}");
            return Err(self.error_without_run(&places, &p, whom));
        }
        places.state_dir = Some(state_dir.clone());
        self.metrics_place(&mut places, &state_dir);
        Ok((places, state_dir))
    }

    /// `metrics_file`'s directory, opened; a refusal is logged and kept for `gate.json` and the
    /// fallback file, and the check runs all the same (monitoring never turns the gate off).
    fn metrics_place(&mut self, places: &mut Places, state_dir: &Path) {
        let m = match self.cfg.metrics_file_for(&self.facts.node) {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => return self.metrics_refused(places, state_dir, e),
        };
        let (Some(dir), Some(name)) = (m.parent(), m.file_name()) else {
            let e = format!("metrics_file {}: not a file path", m.display());
            return self.metrics_refused(places, state_dir, e);
        };
        match secure::open_textfile_dir(dir) {
            Ok(d) => {
                places.metrics = Some(d.file(name));
                places.metrics_dir = Some(d);
            }
            Err(e) => self.metrics_refused(places, state_dir, format!("metrics_file {e}")),
        }
    }

    fn metrics_refused(&mut self, places: &mut Places, state_dir: &Path, why: String) {
        let why = format!(
            "{why}; the check runs, its metrics go to {} (nccl_check_metrics_file_error 1)",
            state_dir.join(crate::metrics::FALLBACK).display()
        );
        self.log.warn(&why);
        places.metrics_error = Some(why);
    }

    /// A recheck takes every GPU: never where jobs run or may run. Only a node that Slurm says
    /// is free of jobs (IDLE or DOWN) is measured; a busy node is skipped, and a node whose state
    /// Slurm does not give (the call fails, runs out of its time, or answers something else) is
    /// not checked either, without a verdict. A quarter of the budget at most for the question.
    /// `Some`: the run's exit code.
    fn recheck_on_busy_node(&mut self, places: &Places, slurm: &drain::Slurm) -> Option<i32> {
        let ask = Deadline::after(self.deadline.remaining() / 4);
        let shown = slurm.until(ask).show();
        let node = &self.facts.node;
        let (found, msg) = match shown {
            Ok(n) if n.busy() => {
                self.write_node_state(places, &n);
                let msg = format!(
                    "recheck on {node}: skipped, jobs run on the node (State={})",
                    n.state
                );
                (Found::NothingToCheck, msg)
            }
            Ok(n) if n.free_of_jobs() => {
                self.write_node_state(places, &n);
                return None;
            }
            Ok(n) => (
                Found::Unjudged,
                format!(
                    "recheck on {node}: not checked, no verdict: Slurm's state State={:?} does \
                     not say the node is free of jobs",
                    n.state
                ),
            ),
            Err(e) => (
                Found::Unjudged,
                format!(
                    "recheck on {node}: not checked, no verdict: cannot read the node's state \
                     ({e}), so jobs may run on it"
                ),
            ),
        };
        match found {
            Found::NothingToCheck => self.log.info(&msg),
            _ => self.log.error(&msg),
        }
        let a = self.decide(found, false);
        Some(self.finish(a, &msg))
    }

    /// The selection without the GPUs Slurm gave other jobs ([`shared`]), asked within a
    /// quarter of what is left of the budget; `Err` is the run's exit code when nothing is left
    /// to check (or the selection fails).
    fn leave_out_other_jobs(
        &mut self,
        places: &Places,
        slurm: &drain::Slurm,
        whom: &str,
    ) -> Stage<Selection> {
        let asked = shared::ask(
            &slurm.until(Deadline::after(self.deadline.remaining() / 4)),
            self.facts.job.as_deref(),
        );
        let plan = shared::plan(asked, gpus::read(&self.cfg.gpu_info_dir).len());
        if let Err(why) = &plan.strays_judged {
            self.log.warn(&format!("{}: {why}", self.facts.node));
        }
        let sel = match job_env::select(self.cfg, self.facts, self.mode, Some(&plan)) {
            Ok(Some(s)) => s,
            Ok(None) => return Err(self.nothing_to_check(places, whom, None)),
            Err(e) => return Err(self.error_without_run(places, &e, whom)),
        };
        if sel.indices.as_ref().is_some_and(|i| i.is_empty()) {
            let why = format!("not checked, every GPU is another job's: {}", plan.said());
            return Err(self.nothing_to_check(places, whom, Some(why)));
        }
        Ok(sel)
    }

    /// A prolog's answer from the cache, when every selected GPU passed recently.
    fn cached(&mut self, sel: &Selection, k: &RunKeys) -> Option<i32> {
        if self.mode != Mode::Prolog {
            return None;
        }
        let ids = sel.identities.as_ref()?;
        let age =
            cache::read(k.state_dir).lookup(ids, k.fingerprint, k.start, self.cfg.cache_seconds)?;
        let msg = format!(
            "PASS (cached) {} on {}: {} passed {age:.0} s ago (cache_seconds = {})",
            k.whom, self.facts.node, sel.label, self.cfg.cache_seconds
        );
        self.log.info(&msg);
        let a = self.decide(Found::CachedPass, sel.all);
        Some(self.finish(a, &msg))
    }

    /// The verdict line on stderr (slurmd's log keeps it when the prolog exits non-zero); a dry
    /// run has printed it on stdout already.
    fn finish(&mut self, a: Actions, msg: &str) -> i32 {
        if !self.dry_run {
            log::stderr_line(msg);
        }
        a.exit_code
    }
}
