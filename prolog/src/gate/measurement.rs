//! The measuring stage of a run: a run directory, the worker with the selected GPUs, stray
//! processes on them, then the consequences of the verdict in order: the cache, the drain, the
//! resume of our own drain, the line and `gate.json`.

use super::{now_unix, Gate, Places, RunKeys, Stage};
use crate::budget::Deadline;
use crate::decide::{self, Actions, CacheAction, Mode, Whose};
use crate::drain::{self, DrainOutcome};
use crate::job_env::Selection;
use crate::status::{GateState, Status};
use crate::stray::cpu_busy::{self, CpuScan, Named};
use crate::stray::owner::Owners;
use crate::words::{self, Line};
use crate::{cache, metrics, reason, state, stray, worker};
use nccl_check_contract::report::cause::CauseClass;
use nccl_check_contract::report::Report;
use nccl_check_contract::verdict::Verdict;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The worker's run, judged: the verdict after strays, and what to say and do about it.
struct Judged<'r> {
    run: &'r worker::Run,
    report: Option<&'r Report>,
    verdict: Verdict,
    stray_warning: Option<String>,
    drain_reason: Option<String>,
    /// A FAIL of a busy node that is not drained: why not.
    busy_kept: Option<&'static str>,
    /// Why a FAIL could not be held against the node (GPUs other jobs may load): then nothing
    /// is drained and the line says `NOT JUDGED`.
    unjudged: Option<String>,
    actions: Actions,
}

/// The strays found on the node (GPU processes of no job, `stray`) and the warning of busy
/// CPUs not this job's (`stray::cpu_busy`, never a drain).
struct Strays {
    verdict: Verdict,
    drain_reason: Option<String>,
    warning: Option<String>,
    whose: Whose,
}

impl Gate<'_> {
    pub(super) fn measure(&mut self, k: &RunKeys, sel: Selection) -> Stage<i32> {
        let dir = self.run_dir(k)?;
        let req = self.request(&sel, &dir);
        self.log.info(&format!(
            "{} on {}: checking {}: {} {}",
            k.whom,
            self.facts.node,
            sel.label,
            req.worker.display(),
            req.args().display()
        ));
        // Before the worker, whose own load would hide a stray's.
        let cpu = self.cpu_scan();
        let mut run = worker::run(&req);
        // A budget cut by PrologEpilogTimeout says so where the timeout's ERROR is read.
        if let (Some(p), Some(cut), true) = (
            run.problem.as_mut(),
            self.budget_cut.as_deref(),
            run.out_of_budget,
        ) {
            p.push_str(&format!(" ({cut})"));
        }
        let j = self.judge(&run, &sel, k.slurm, &cpu);
        let cacheable = self.cacheable(&sel, j.report);
        let line = self.line(k.whom, &sel.label, &j.actions);
        if self.dry_run {
            let msg = match j.verdict {
                Verdict::Pass => line.pass(&run, j.report),
                Verdict::Fail => said(&line, &j, None),
                Verdict::Error => line.error(&run, j.report),
            };
            self.log.info(&msg);
            words::print_plan(&self.facts.node, &j.actions, j.drain_reason.as_deref());
            return Ok(self.finish(j.actions, &msg));
        }
        // The steps after the measurement must happen even when it used the whole budget.
        let late = self.deadline.with_grace();
        self.store(k, &j.actions, cacheable, &sel, late);
        let slurm = k.slurm.until(late);
        let drain_said = match (j.actions.drain, j.drain_reason.as_deref()) {
            (true, Some(r)) => Some(words::drain_outcome(
                &slurm.drain(k.state_dir, r, now_unix()),
                &self.facts.node,
            )),
            _ => None,
        };
        let msg = said(&line, &j, drain_said.as_deref());
        match (j.verdict, &j.unjudged) {
            (Verdict::Pass, None) => self.log.info(&msg),
            (_, Some(_)) => self.log.warn(&msg),
            (Verdict::Fail | Verdict::Error, None) => self.log.error(&msg),
        }
        if j.actions.resume_own_drain {
            self.resume(&slurm, k.state_dir, k.start);
        }
        self.publish_measured(k.places, &j, &msg, drain_said, &dir);
        Ok(self.finish(j.actions, &msg))
    }

    /// This run's directory under the state dir. A state dir that cannot be written (read-only,
    /// full) must not turn a FAIL into an ERROR: the run goes to root's fallback directory
    /// instead, and the drain needs no file. `Err`: the run's exit code when neither works.
    fn run_dir(&mut self, k: &RunKeys) -> Stage<PathBuf> {
        let tag = state::tag(self.facts.job.as_deref(), self.mode == Mode::Recheck);
        let keep = Duration::from_secs(self.cfg.budget_seconds) + Duration::from_secs(60);
        state::prune(k.state_dir, keep);
        let why = match state::create_run_dir_with_room(k.state_dir, &tag) {
            Ok(d) => return Ok(d),
            Err(why) => why,
        };
        let fallback = Path::new(state::FALLBACK_DIR);
        state::prune(fallback, keep);
        match state::create_run_dir(fallback, &tag) {
            Ok(d) => {
                self.log.warn(&format!(
                    "{why}; this run's report and worker.log go to {} instead",
                    d.display()
                ));
                Ok(d)
            }
            Err(e) => {
                let p = format!(
                    "{why}, and cannot create one in {} either: {e}",
                    fallback.display()
                );
                Err(self.error_without_run(k.places, &p, k.whom))
            }
        }
    }

    /// The worker's arguments: the config's plan and worker config, the selected GPUs, what is
    /// left of the budget.
    fn request(&self, sel: &Selection, dir: &Path) -> worker::Request {
        let budget = Duration::from_secs(self.cfg.budget_seconds);
        worker::Request {
            worker: self.cfg.worker.clone(),
            plan: self.cfg.plan.clone(),
            dir: dir.to_path_buf(),
            timeout_s: self.cfg.worker_timeout(),
            budget: budget.min(self.deadline.remaining()),
            config: self
                .cfg
                .worker_config
                .exists()
                .then(|| self.cfg.worker_config.clone()),
            gpus: sel.indices.clone(),
            env: self.cfg.env.clone(),
        }
    }

    /// The processes keeping the node's CPUs busy (`fault_root`'s `proc/`), the prolog's own
    /// and its earlier workers left out; named once Slurm has said whose they are.
    fn cpu_scan(&self) -> CpuScan {
        let root = nccl_check_host::read::under(&self.cfg.fault_root, "/proc");
        let worker = self.cfg.worker.clone();
        let me = std::process::id();
        cpu_busy::watch_cpus(&root, cpu_busy::WINDOW, &|pid| {
            pid == me || stray::is_our_worker(pid, &worker)
        })
    }

    /// Whose the processes are, as Slurm says now (`scontrol listpids`, after the worker read
    /// the GPUs' processes, so a process seen there that Slurm does not list is of no job), with
    /// a quarter of what is left of the budget. Asked only when there is a process to name.
    fn owners(&mut self, slurm: &drain::Slurm) -> Owners {
        let ask = slurm.until(Deadline::after(self.deadline.with_grace().remaining() / 4));
        let owners = Owners::new(
            ask.scontrol_listpids(),
            &nccl_check_host::read::under(&self.cfg.fault_root, "/proc"),
            self.facts.job.as_deref(),
            self.facts.sluid.as_deref(),
        );
        if let Some(e) = owners.not_listed() {
            self.log.warn(&format!(
                "{}: Slurm could not say whose the processes are ({e}); a process in no job's \
                 cgroup is then of a job not known, which never drains",
                self.facts.node
            ));
        }
        owners
    }

    /// The verdict after strays, the drain reason of a FAIL and what the mode does about it:
    /// the report's class of cause (the contract's `deciding` reason) read typed by `decide`.
    /// A hardware FAIL is held against the node only where every checked GPU is known to be this
    /// job's or no job's and no other running job's process is on one: else it is not judged.
    fn judge<'r>(
        &mut self,
        run: &'r worker::Run,
        sel: &Selection,
        slurm: &drain::Slurm,
        cpu: &CpuScan,
    ) -> Judged<'r> {
        let report = run.report.as_ref().ok();
        let job = self.facts.job_label(self.mode);
        let worker = self.cfg.worker.clone();
        let gpu = report
            .map(|r| stray::find(r, &|pid| stray::is_our_worker(pid, &worker)))
            .unwrap_or_default();
        let owners = (!gpu.is_empty() || !cpu.busy.is_empty()).then(|| self.owners(slurm));
        // Slurm's word on the GPUs first (which other jobs hold them), then on the processes.
        let mut judged = sel.strays_judged.clone();
        if let (Ok(()), Some(why)) = (
            &judged,
            owners.as_ref().and_then(|o| stray::not_judged(&gpu, o)),
        ) {
            judged = Err(why);
        }
        let cpu_said = owners.as_ref().and_then(|o| self.cpu_said(cpu, o));
        // A worker that found the node only busy ends busy (exit 8, an ERROR: the hardware was
        // not judged); the gate weighs it as the busy FAIL it was before: by whose the
        // processes are (`decide::found`), never as the hardware's.
        let busy = run.exit_code == Some(nccl_check_contract::exit::ExitCode::Busy.code());
        let verdict = if busy { Verdict::Fail } else { run.verdict };
        let st = self.strays(verdict, &gpu, &judged, job.as_deref(), cpu_said);
        if let Some(p) = run.problem.as_deref().filter(|_| run.contradicted) {
            self.log.error(p);
        }
        let cause = match &st.drain_reason {
            Some(_) => Some(CauseClass::Busy),
            None => report
                .and_then(|r| r.head.deciding_reason())
                .map(|r| r.cause()),
        };
        // A busy node is judged by whose the processes are (`decide::found`); a hardware FAIL
        // on GPUs other jobs may load is not judged at all.
        let unjudged = match (st.verdict, &judged, cause) {
            (Verdict::Fail, Err(why), None | Some(CauseClass::Hardware)) => Some(why.clone()),
            _ => None,
        };
        let found = match unjudged {
            Some(_) => decide::Found::Unjudged,
            None => decide::found(st.verdict, cause, st.whose),
        };
        let actions = self.decide(found, sel.all);
        let drain_reason = (st.verdict == Verdict::Fail && unjudged.is_none()).then(|| {
            st.drain_reason
                .unwrap_or_else(|| reason::drain_reason(report, job.as_deref()))
        });
        let busy_kept = match found {
            decide::Found::Busy(w) if !actions.drain => Some(match w {
                Whose::Unknown => "another job's processes, or whose is not known",
                Whose::NoJob => "stray_processes = \"warn\"",
                Whose::CpuLoad => "busy CPUs never drain: any user can load them",
            }),
            _ => None,
        };
        Judged {
            run,
            report,
            verdict: st.verdict,
            stray_warning: st.warning,
            drain_reason,
            busy_kept,
            unjudged,
            actions,
        }
    }

    /// Busy CPUs before the check, each named with whose it is (logged), and the sentence the
    /// verdict carries when those not this job's use a quarter of the CPUs: never a drain.
    fn cpu_said(&mut self, cpu: &CpuScan, owners: &Owners) -> Option<String> {
        if !cpu.busy.is_empty() {
            let all: Vec<String> = cpu
                .busy
                .iter()
                .take(8)
                .map(|p| Named(p, &owners.of(p.pid)).to_string())
                .collect();
            self.log.info(&format!(
                "{}: busy CPUs before the check ({} CPUs): {}",
                self.facts.node,
                cpu.cpus,
                all.join("; ")
            ));
        }
        let others = cpu.others(owners);
        (!others.is_empty()).then(|| cpu_busy::sentence(&others))
    }

    /// The identities a pass may be cached under: only a pass of exactly the GPUs we meant (a
    /// different set would mean Slurm's and CUDA's GPU order disagree on this node).
    fn cacheable(&mut self, sel: &Selection, report: Option<&Report>) -> Option<Vec<String>> {
        if let (Some(ids), Some(measured)) = (&sel.identities, report.and_then(Report::uuids)) {
            let mut ids = ids.clone();
            ids.sort();
            if ids.iter().all(|i| i.starts_with("GPU-")) && ids != measured {
                self.log.warn(&format!(
                    "the worker measured GPUs {measured:?} but {} are {ids:?} in PCI order; not cached",
                    sel.label
                ));
                return None;
            }
        }
        sel.identities.clone()
    }

    /// The cache after a verdict: a pass stored, a failure or error forgets the GPUs.
    fn store(
        &mut self,
        k: &RunKeys,
        actions: &Actions,
        cacheable: Option<Vec<String>>,
        sel: &Selection,
        late: Deadline,
    ) {
        let result = match actions.cache {
            CacheAction::StorePass => cacheable.filter(|_| self.cfg.cache_seconds > 0).map(|ids| {
                cache::update(k.state_dir, late, |c| {
                    c.record(&ids, k.fingerprint, k.start)
                })
            }),
            CacheAction::Clear => Some(cache::update(k.state_dir, late, |c| {
                c.forget(sel.identities.as_deref())
            })),
            CacheAction::Keep => None,
        };
        if let Some(Err(e)) = result {
            self.log.warn(&format!(
                "cache {}: {e}",
                cache::path(k.state_dir).display()
            ));
        }
    }

    /// `gate.json` and the metrics of a run that measured.
    fn publish_measured(
        &mut self,
        places: &Places,
        j: &Judged,
        msg: &str,
        drain: Option<String>,
        dir: &Path,
    ) {
        let gate = match (j.verdict, &j.unjudged) {
            // Measured but not judged: no verdict of the node's to publish.
            (_, Some(_)) => GateState::Skipped,
            (Verdict::Pass, None) => GateState::Pass,
            // A busy node left in service: the hardware was not judged, nothing drained, so
            // not "fail" (which says the node was or would be drained).
            (Verdict::Fail, None) if j.busy_kept.is_some() => GateState::Error,
            (Verdict::Fail, None) => GateState::Fail,
            (Verdict::Error, None) => GateState::Error,
        };
        let st = Status {
            drain_reason: j.drain_reason.clone(),
            drain,
            run_dir: Some(dir.to_path_buf()),
            ..self.status(gate, msg)
        };
        let empty = Default::default();
        let margins = j.report.map(Report::margins).unwrap_or_default();
        let sample = metrics::Sample {
            gate,
            verdict: j.unjudged.is_none().then_some(j.verdict),
            exit_code: j.run.exit_code,
            avg_busbw: j.report.map(|r| &r.body.avg_busbw).unwrap_or(&empty),
            margins: &margins,
            finished_unix: now_unix(),
            duration_s: j.run.elapsed.as_secs_f64(),
            cache_seconds: Some(self.cfg.cache_seconds),
        };
        self.publish(places, &st, &sample);
    }

    /// Other processes on the checked GPUs (`stray`) and busy CPUs not this job's
    /// (`stray::cpu_busy`): logged always. GPU processes count only where every checked GPU is
    /// this job's or no job's and Slurm says each process is this job's or of no job
    /// (`judged`): `gpus = "job"`, a recheck (which runs only on a node without jobs), or
    /// `gpus = "all"` with the GPUs Slurm gave other jobs left out ([`crate::shared`]); then
    /// with `stray_processes = "fail"` a PASS becomes a FAIL and the drain reason says `busy`.
    /// Otherwise they are warned, never drained. Busy CPUs (`cpu_said`) are only ever warned.
    /// `whose` is what `decide` reads for a FAIL of a busy node.
    fn strays(
        &mut self,
        verdict: Verdict,
        gpu: &[stray::Stray],
        judged: &Result<(), String>,
        job: Option<&str>,
        cpu_said: Option<String>,
    ) -> Strays {
        let whose = match (gpu.is_empty(), judged) {
            (false, Ok(())) => Whose::NoJob,
            (false, Err(_)) => Whose::Unknown,
            _ if cpu_said.is_some() => Whose::CpuLoad,
            _ => Whose::Unknown,
        };
        let cpu_warning = cpu_said.map(|c| format!("{c} (warned only: busy CPUs never drain)"));
        if let Some(w) = &cpu_warning {
            self.log.warn(&format!("{}: {w}", self.facts.node));
        }
        let quiet = |warning| Strays {
            verdict,
            drain_reason: None,
            warning,
            whose,
        };
        if gpu.is_empty() {
            return quiet(cpu_warning);
        }
        let reason = stray::drain_reason(gpu, job);
        let fail = judged.is_ok() && self.cfg.stray_processes == stray::Policy::Fail;
        let why = match judged {
            _ if fail => String::new(),
            Err(e) => format!(" (warned only: {e})"),
            Ok(()) => " (warned only: stray_processes = \"warn\")".to_string(),
        };
        let gpu_warning = format!(
            "{}{why}",
            reason.split_once('|').map_or(reason.as_str(), |(_, s)| s)
        );
        self.log
            .warn(&format!("{}: {gpu_warning}", self.facts.node));
        let warning = match cpu_warning {
            Some(c) => format!("{gpu_warning}; {c}"),
            None => gpu_warning,
        };
        match (fail, verdict) {
            (true, Verdict::Pass | Verdict::Fail) => Strays {
                verdict: Verdict::Fail,
                drain_reason: Some(reason),
                warning: None,
                whose,
            },
            _ => quiet(Some(warning)),
        }
    }

    fn resume(&mut self, slurm: &drain::Slurm, state_dir: &Path, start: f64) {
        match slurm.resume_own(state_dir, start, self.mode == Mode::Recheck) {
            DrainOutcome::Resumed => self.log.info(&format!(
                "resumed {}: every GPU passed again after nccl-check drained it",
                self.facts.node
            )),
            DrainOutcome::NotOurs(why) => self.log.info(&format!(
                "{} stays drained: not drained by nccl-check ({why})",
                self.facts.node
            )),
            DrainOutcome::Failed(e) => self.log.error(&format!("resume FAILED: {e}")),
            _ => {}
        }
    }
}

/// The run's line: the verdict, with the stray warning of a pass or the drain of a FAIL.
fn said(line: &Line, j: &Judged, drain_said: Option<&str>) -> String {
    if let Some(why) = &j.unjudged {
        return line.unjudged(j.run, j.report, why);
    }
    match j.verdict {
        Verdict::Pass => match &j.stray_warning {
            Some(w) => format!("{}; WARNING {w}", line.pass(j.run, j.report)),
            None => line.pass(j.run, j.report),
        },
        Verdict::Fail => match j.busy_kept {
            Some(why) => line.busy(j.run, j.drain_reason.as_deref().unwrap_or(""), why),
            None => line.fail(j.run, j.drain_reason.as_deref().unwrap_or(""), drain_said),
        },
        Verdict::Error => line.error(j.run, j.report),
    }
}
