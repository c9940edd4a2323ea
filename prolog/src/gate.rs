//! One run of the gate with a valid config, in order: check the directories it writes, pick the
//! GPUs, answer from the cache or run the worker in a private run directory, decide
//! ([`crate::decide`]), update the cache under the lock, drain or resume, then say what happened
//! (stderr, syslog, `gate.json`, metrics). Everything within one budget ([`crate::budget`]).

use crate::budget::Deadline;
use crate::config::{Config, GpuPolicy};
use crate::decide::{self, Actions, CacheAction, Found, Mode, Policy};
use crate::drain::{self, Outcome};
use crate::facts::{self, Facts, Selection};
use crate::log::{self, Log};
use crate::status::{GateState, Status};
use crate::words::{self, Line};
use crate::{
    cache, faults, gpus, metrics, reason, report, secure, shared, state, status, stray, worker,
};
use nccl_check_contract::verdict::Verdict;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub struct Gate<'a> {
    pub cfg: &'a Config,
    pub facts: &'a Facts,
    pub mode: Mode,
    pub dry_run: bool,
    pub log: &'a mut Log,
    /// The whole run ends by then: `budget_seconds` from the start plus a moment for the drain.
    pub deadline: Deadline,
    /// The hardware fault pass of this run (set by the run; `gate.json` shows it).
    pub faults: Option<faults::Summary>,
}

/// Where the run may write its state: the directories that passed [`secure`]'s checks.
#[derive(Default)]
struct Places {
    state_dir: Option<PathBuf>,
    metrics: Option<PathBuf>,
}

impl<'a> Gate<'a> {
    fn policy(&self) -> Policy {
        Policy::from(self.cfg)
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
        }
    }

    pub fn run(mut self) -> i32 {
        let start = now_unix();
        let whom = self.facts.whom(self.mode);
        let mut places = Places::default();
        let state_dir = match self.cfg.state_dir_for(&self.facts.node) {
            Ok(d) => d,
            Err(e) => return self.error_without_run(&places, &e, &whom),
        };
        if let Err(e) = secure::ensure_dir(&state_dir) {
            return self.error_without_run(&places, &format!("state_dir {e}"), &whom);
        }
        places.state_dir = Some(state_dir.clone());
        let metrics = match self.cfg.metrics_file_for(&self.facts.node) {
            Ok(m) => m,
            Err(e) => return self.error_without_run(&places, &e, &whom),
        };
        if let Some(m) = metrics {
            let dir = m.parent().unwrap_or(Path::new("/"));
            if let Err(e) = secure::check_dir(dir) {
                return self.error_without_run(&places, &format!("metrics_file {e}"), &whom);
            }
            places.metrics = Some(m);
        }
        let slurm = drain::Slurm {
            scontrol: self.cfg.scontrol.clone(),
            node: self.facts.node.clone(),
            slurm_conf: self.facts.slurm_conf.clone(),
            deadline: self.deadline,
        };
        if self.mode == Mode::Recheck {
            // A recheck takes every GPU: never while jobs run on the node. A quarter of the
            // budget at most for the question.
            let ask = Deadline::after(self.deadline.remaining() / 4);
            match (drain::Slurm {
                deadline: ask,
                ..slurm.clone()
            })
            .show()
            {
                Ok(n) if n.busy() => {
                    self.write_node_state(&places, &n);
                    let msg = format!(
                        "recheck on {}: skipped, jobs run on the node (State={})",
                        self.facts.node, n.state
                    );
                    self.log.info(&msg);
                    let a = decide::decide(self.mode, Found::NothingToCheck, self.policy(), false);
                    return self.finish(a, &msg);
                }
                Ok(n) => self.write_node_state(&places, &n),
                Err(e) => self.log.warn(&format!(
                    "recheck: cannot read the node's state ({e}); checking anyway"
                )),
            }
        }
        if self.cfg.fault_checks {
            let settings = faults::Settings {
                root: self.cfg.fault_root.clone(),
                aer: self.cfg.aer_limits,
                ib: self.cfg.ib_limits,
            };
            // A dry run reads but keeps no position: the next real run judges the same events.
            let f = faults::check(&settings, &state_dir, !self.dry_run);
            let line = f.line();
            // Only what was found is logged (gate.json keeps every pass, with its sources).
            if f.failed() {
                self.log.error(&line);
            } else if !f.findings.is_empty() {
                self.log.warn(&line);
            }
            if let (Some(m), false) = (&places.metrics, self.dry_run) {
                if let Err(e) = faults::metrics::write(m, &f, now_unix()) {
                    self.log
                        .warn(&format!("metrics_file (faults) {}: {e}", m.display()));
                }
            }
            let failed = f.failed();
            self.faults = Some(f);
            if failed {
                return self.fault_fail(&places, &state_dir, &slurm, &whom);
            }
        }
        let mut sel = match facts::select(self.cfg, self.facts, self.mode, None) {
            Ok(Some(s)) => s,
            Ok(None) => return self.nothing_to_check(&places, &whom, None),
            Err(e) => return self.error_without_run(&places, &e, &whom),
        };
        let fingerprint = cache::fingerprint(
            &format!("{:?}", self.cfg),
            &[&self.cfg.worker, &self.cfg.worker_config],
        );

        // The cached path: a few file reads, no process started, nothing written.
        if let Some(code) = self.cached(&sel, &state_dir, &fingerprint, start, &whom) {
            return code;
        }
        // A shared node under gpus = "all": other jobs' GPUs are left out (asked of Slurm only
        // now, so a cached pass of every GPU costs no Slurm call).
        if self.cfg.gpus == GpuPolicy::All && self.mode != Mode::Recheck {
            sel = match self.leave_out_other_jobs(&places, &slurm, &whom) {
                Ok(s) => s,
                Err(code) => return code,
            };
            if sel.indices.is_some() {
                if let Some(code) = self.cached(&sel, &state_dir, &fingerprint, start, &whom) {
                    return code;
                }
            }
        }
        self.measure(&places, &state_dir, &slurm, sel, &fingerprint, start, &whom)
    }

    /// The selection without the GPUs Slurm gave other jobs ([`shared`]), asked within a
    /// quarter of what is left of the budget; `Err` is the run's exit code when nothing is left
    /// to check (or the selection fails).
    fn leave_out_other_jobs(
        &mut self,
        places: &Places,
        slurm: &drain::Slurm,
        whom: &str,
    ) -> Result<Selection, i32> {
        let asked = shared::ask(
            &drain::Slurm {
                deadline: Deadline::after(self.deadline.remaining() / 4),
                ..slurm.clone()
            },
            self.facts.job.as_deref(),
        );
        let plan = shared::plan(asked, gpus::read(&self.cfg.gpu_info_dir).len());
        if let Err(why) = &plan.strays_judged {
            self.log.warn(&format!("{}: {why}", self.facts.node));
        }
        let sel = match facts::select(self.cfg, self.facts, self.mode, Some(&plan)) {
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
    fn cached(
        &mut self,
        sel: &Selection,
        state_dir: &Path,
        fingerprint: &str,
        start: f64,
        whom: &str,
    ) -> Option<i32> {
        if self.mode != Mode::Prolog {
            return None;
        }
        let ids = sel.identities.as_ref()?;
        let age = cache::read(state_dir).lookup(ids, fingerprint, start, self.cfg.cache_seconds)?;
        let msg = format!(
            "PASS (cached) {whom} on {}: {} passed {age:.0} s ago (cache_seconds = {})",
            self.facts.node, sel.label, self.cfg.cache_seconds
        );
        self.log.info(&msg);
        let a = decide::decide(self.mode, Found::CachedPass, self.policy(), sel.all);
        Some(self.finish(a, &msg))
    }

    #[allow(clippy::too_many_arguments)]
    fn measure(
        &mut self,
        places: &Places,
        state_dir: &Path,
        slurm: &drain::Slurm,
        sel: Selection,
        fingerprint: &str,
        start: f64,
        whom: &str,
    ) -> i32 {
        let tag = state::tag(self.facts.job.as_deref(), self.mode == Mode::Recheck);
        let budget = Duration::from_secs(self.cfg.budget_seconds);
        state::prune(state_dir, budget + Duration::from_secs(60));
        // A state dir that cannot be written (read-only, full) must not turn a FAIL into an
        // ERROR: the run goes to root's fallback directory instead, and the drain needs no file.
        let dir = match state::RunDir::create_with_room(state_dir, &tag) {
            Ok(d) => d,
            Err(why) => {
                let fallback = Path::new(state::FALLBACK_DIR);
                state::prune(fallback, budget + Duration::from_secs(60));
                match state::RunDir::create(fallback, &tag) {
                    Ok(d) => {
                        self.log.warn(&format!(
                            "{why}; this run's report and worker.log go to {} instead",
                            d.path.display()
                        ));
                        d
                    }
                    Err(e) => {
                        let p = format!(
                            "{why}, and cannot create one in {} either: {e}",
                            fallback.display()
                        );
                        return self.error_without_run(places, &p, whom);
                    }
                }
            }
        };
        let req = worker::Request {
            worker: self.cfg.worker.clone(),
            plan: self.cfg.plan.clone(),
            dir: dir.path.clone(),
            timeout_s: self.cfg.worker_timeout(),
            budget: budget.min(self.deadline.remaining()),
            config: self
                .cfg
                .worker_config
                .exists()
                .then(|| self.cfg.worker_config.clone()),
            gpus: sel.indices.clone(),
            env: self.cfg.env.clone(),
        };
        self.log.info(&format!(
            "{whom} on {}: checking {}: {} {}",
            self.facts.node,
            sel.label,
            req.worker.display(),
            req.args().display()
        ));
        let run = worker::run(&req);
        let report = run.report.as_ref().ok();
        let job = self.facts.job_label(self.mode);
        let (verdict, stray_reason, stray_warning) =
            self.strays(run.verdict, report, &sel.strays_judged, job.as_deref());
        if let Some(p) = run
            .problem
            .as_deref()
            .filter(|p| p.starts_with("contradiction"))
        {
            self.log.error(p);
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
        let line = self.line(whom, &sel.label, &actions);
        let drain_reason = (verdict == Verdict::Fail)
            .then(|| stray_reason.unwrap_or_else(|| reason::drain_reason(report, job.as_deref())));
        if self.dry_run {
            let msg = match verdict {
                Verdict::Pass => line.pass(&run, report),
                Verdict::Fail => line.fail(&run, drain_reason.as_deref().unwrap_or(""), None),
                Verdict::Error => line.error(&run, report),
            };
            self.log.info(&msg);
            words::print_plan(&self.facts.node, &actions, drain_reason.as_deref());
            return self.finish(actions, &msg);
        }
        // The steps after the measurement must happen even when it used the whole budget.
        let late = self.deadline.with_grace();
        let cache_result = match actions.cache {
            CacheAction::StorePass => cacheable
                .filter(|_| self.cfg.cache_seconds > 0)
                .map(|ids| cache::update(state_dir, late, |c| c.record(&ids, fingerprint, start))),
            CacheAction::Clear => Some(cache::update(state_dir, late, |c| {
                c.forget(sel.identities.as_deref())
            })),
            CacheAction::Keep => None,
        };
        if let Some(Err(e)) = cache_result {
            self.log
                .warn(&format!("cache {}: {e}", cache::path(state_dir).display()));
        }
        let slurm = drain::Slurm {
            deadline: late,
            ..slurm.clone()
        };
        let mut drain_said = None;
        if let (true, Some(r)) = (actions.drain, drain_reason.as_deref()) {
            drain_said = Some(words::drain_outcome(
                &slurm.drain(state_dir, r, now_unix()),
                &self.facts.node,
            ));
        }
        let msg = match verdict {
            Verdict::Pass => match &stray_warning {
                Some(w) => format!("{}; WARNING {w}", line.pass(&run, report)),
                None => line.pass(&run, report),
            },
            Verdict::Fail => line.fail(
                &run,
                drain_reason.as_deref().unwrap_or(""),
                drain_said.as_deref(),
            ),
            Verdict::Error => line.error(&run, report),
        };
        match verdict {
            Verdict::Pass => self.log.info(&msg),
            Verdict::Fail | Verdict::Error => self.log.error(&msg),
        }
        if actions.resume_own_drain {
            self.resume(&slurm, state_dir, start);
        }
        let gate = match verdict {
            Verdict::Pass => GateState::Pass,
            Verdict::Fail => GateState::Fail,
            Verdict::Error => GateState::Error,
        };
        let st = Status {
            state: gate,
            message: msg.clone(),
            node: self.facts.node.clone(),
            job: self.facts.job.clone(),
            time_unix: now_unix(),
            drain_reason,
            drain: drain_said,
            run_dir: Some(dir.path.clone()),
            context: self.mode.as_str(),
            faults: None,
        };
        let empty = Default::default();
        let margins = report.map(report::margins).unwrap_or_default();
        let sample = metrics::Sample {
            gate,
            verdict: Some(verdict),
            exit_code: run.exit_code,
            avg_busbw: report.map(|r| &r.avg_busbw).unwrap_or(&empty),
            margins: &margins,
            finished_unix: now_unix(),
            duration_s: run.elapsed.as_secs_f64(),
        };
        self.publish(places, &st, &sample);
        self.finish(actions, &msg)
    }

    /// A hardware fault over its limit: FAIL without measuring (the node is drained with the
    /// fault, its source and its PCI address or port in the reason).
    fn fault_fail(
        &mut self,
        places: &Places,
        state_dir: &Path,
        slurm: &drain::Slurm,
        whom: &str,
    ) -> i32 {
        let reason = self
            .faults
            .as_ref()
            .and_then(|f| f.drain_reason(self.facts.job_label(self.mode).as_deref()))
            .unwrap_or_default();
        let a = decide::decide(
            self.mode,
            Found::Measured(Verdict::Fail),
            self.policy(),
            false,
        );
        let node = self.facts.node.clone();
        if self.dry_run {
            let msg =
                format!("FAIL {whom} on {node}: hardware fault: {reason}; would drain (dry run)");
            self.log.info(&msg);
            words::print_plan(&node, &a, Some(&reason));
            return self.finish(a, &msg);
        }
        let late = self.deadline.with_grace();
        if let Err(e) = cache::update(state_dir, late, |c| c.forget(None)) {
            self.log
                .warn(&format!("cache {}: {e}", cache::path(state_dir).display()));
        }
        let said = words::drain_outcome(
            &drain::Slurm {
                deadline: late,
                ..slurm.clone()
            }
            .drain(state_dir, &reason, now_unix()),
            &node,
        );
        let msg = format!(
            "FAIL {whom} on {node}: hardware fault: {reason}; {said}{}",
            words::job_fate(self.mode, a.exit_code, true)
        );
        self.log.error(&msg);
        let st = Status {
            state: GateState::Fail,
            message: msg.clone(),
            node,
            job: self.facts.job.clone(),
            time_unix: now_unix(),
            drain_reason: Some(reason),
            drain: Some(said),
            run_dir: None,
            context: self.mode.as_str(),
            faults: None,
        };
        let empty = Default::default();
        let sample = metrics::Sample {
            gate: GateState::Fail,
            verdict: Some(Verdict::Fail),
            exit_code: None,
            avg_busbw: &empty,
            margins: &empty,
            finished_unix: now_unix(),
            duration_s: 0.0,
        };
        self.publish(places, &st, &sample);
        self.finish(a, &msg)
    }

    /// Other processes on the checked GPUs (`stray`): logged always; with `stray_processes =
    /// "fail"` a PASS becomes a FAIL and the drain reason says `busy`. Only where every checked
    /// GPU is this job's or no job's (`judged`): the job's GPUs (`gpus = "job"`), a recheck
    /// (which runs only on a node without jobs), or `gpus = "all"` with the GPUs Slurm gave
    /// other jobs left out ([`crate::shared`]). Where Slurm could not say, a GPU may be another
    /// job's, whose processes are not strays: warned, never drained.
    fn strays(
        &mut self,
        verdict: Verdict,
        report: Option<&nccl_check_contract::report::Report>,
        judged: &Result<(), String>,
        job: Option<&str>,
    ) -> (Verdict, Option<String>, Option<String>) {
        let Some(report) = report else {
            return (verdict, None, None);
        };
        let worker = self.cfg.worker.clone();
        let strays = stray::find(report, &|pid| stray::is_our_worker(pid, &worker));
        if strays.is_empty() {
            return (verdict, None, None);
        }
        let reason = stray::drain_reason(&strays, job);
        let fail = judged.is_ok() && self.cfg.stray_processes == stray::Policy::Fail;
        let why = match judged {
            _ if fail => String::new(),
            Err(e) => format!(" (warned only: {e})"),
            Ok(()) => " (warned only: stray_processes = \"warn\")".to_string(),
        };
        let warning = format!(
            "{}{why}",
            reason.split_once('|').map_or(reason.as_str(), |(_, s)| s)
        );
        self.log.warn(&format!("{}: {warning}", self.facts.node));
        match (fail, verdict) {
            (true, Verdict::Pass | Verdict::Fail) => (Verdict::Fail, Some(reason), None),
            _ => (verdict, None, Some(warning)),
        }
    }

    fn resume(&mut self, slurm: &drain::Slurm, state_dir: &Path, start: f64) {
        match slurm.resume_own(state_dir, start, self.mode == Mode::Recheck) {
            Outcome::Resumed => self.log.info(&format!(
                "resumed {}: every GPU passed again after nccl-check drained it",
                self.facts.node
            )),
            Outcome::NotOurs(why) => self.log.info(&format!(
                "{} stays drained: not drained by nccl-check ({why})",
                self.facts.node
            )),
            Outcome::Failed(e) => self.log.error(&format!("resume FAILED: {e}")),
            _ => {}
        }
    }

    /// `gate.json` and the metrics file, where their directories passed the checks.
    fn publish(&mut self, places: &Places, st: &Status, sample: &metrics::Sample) {
        if let Some(d) = &places.state_dir {
            let st = Status {
                faults: self.faults.clone(),
                ..st.clone()
            };
            if let Err(e) = status::write(d, &st) {
                self.log
                    .warn(&format!("{}: {e}", d.join(status::FILE).display()));
            }
        }
        if let Some(p) = &places.metrics {
            if let Err(e) = metrics::write(p, sample) {
                self.log.warn(&format!("metrics_file {}: {e}", p.display()));
            }
        }
    }

    /// [`Self::publish`] for a run that measured nothing (skipped, or a setup error before the
    /// worker): no drain, no run directory, no numbers.
    fn publish_unmeasured(
        &mut self,
        places: &Places,
        gate: GateState,
        verdict: Option<Verdict>,
        msg: &str,
    ) {
        let st = Status {
            state: gate,
            message: msg.to_string(),
            node: self.facts.node.clone(),
            job: self.facts.job.clone(),
            time_unix: now_unix(),
            drain_reason: None,
            drain: None,
            run_dir: None,
            context: self.mode.as_str(),
            faults: None, // publish() fills in this run's faults
        };
        let empty = Default::default();
        let sample = metrics::Sample {
            gate,
            verdict,
            exit_code: None,
            avg_busbw: &empty,
            margins: &empty,
            finished_unix: now_unix(),
            duration_s: 0.0,
        };
        self.publish(places, &st, &sample);
    }

    /// Nothing to check is never silent: gate.json says `skipped` and why, the metric too, and
    /// syslog has the line (a gate that is off unnoticed checks no job).
    fn nothing_to_check(&mut self, places: &Places, whom: &str, why: Option<String>) -> i32 {
        let msg = if let Some(why) = why {
            format!("SKIPPED {whom} on {}: {why}", self.facts.node)
        } else if self.dry_run && self.facts.cuda_visible_devices.is_none() {
            "dry run: gpus = \"job\", but CUDA_VISIBLE_DEVICES (the job's GPUs, set by slurmd) \
             is unset: nothing to check. Name GPUs to check them now (CUDA_VISIBLE_DEVICES=0,1 \
             nccl-check-prolog --dry-run), or check every GPU with --recheck --dry-run"
                .to_string()
        } else {
            format!(
                "SKIPPED {whom} on {}: not checked, no GPUs allocated to the job (gpus = \"job\" \
                 checks the job's gres/gpu GPUs only; without gres/gpu set gpus = \"all\")",
                self.facts.node
            )
        };
        self.log.info(&msg);
        if !self.dry_run {
            self.publish_unmeasured(places, GateState::Skipped, None, &msg);
        }
        let a = decide::decide(self.mode, Found::NothingToCheck, self.policy(), false);
        self.finish(a, &msg)
    }

    /// A setup problem found before the worker could run.
    fn error_without_run(&mut self, places: &Places, problem: &str, whom: &str) -> i32 {
        let a = decide::decide(
            self.mode,
            Found::Measured(Verdict::Error),
            self.policy(),
            false,
        );
        let msg = self.line(whom, "", &a).error_without_run(problem);
        self.log.error(&msg);
        if self.dry_run {
            words::print_plan(&self.facts.node, &a, None);
        } else {
            self.publish_unmeasured(places, GateState::Error, Some(Verdict::Error), &msg);
        }
        self.finish(a, &msg)
    }

    /// The verdict line on stderr (slurmd's log keeps it when the prolog exits non-zero); a dry
    /// run has printed it on stdout already.
    /// The recheck's reading of Slurm's node state, for the alert on allocated nodes that the
    /// gate has not run on (`metrics::render_node`). Not on a dry run.
    fn write_node_state(&mut self, places: &Places, n: &drain::NodeState) {
        if let (Some(m), false) = (&places.metrics, self.dry_run) {
            if let Err(e) = metrics::write_node(m, n.busy(), &n.state, now_unix()) {
                self.log.warn(&format!(
                    "metrics_file (node state) {}: {e}",
                    metrics::node_path(m).display()
                ));
            }
        }
    }

    fn finish(&mut self, a: Actions, msg: &str) -> i32 {
        if !self.dry_run {
            log::stderr_line(msg);
        }
        a.exit_code
    }
}
