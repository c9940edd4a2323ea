//! What a run says besides its line: `gate.json` and the metrics where their directories passed
//! the checks, and the endings of a run that measured nothing (skipped, a setup error).

use super::{now_unix, Gate, Places};
use crate::decide::Found;
use crate::drain;
use crate::status::{self, GateState, Status};
use crate::words;
use crate::{metrics, prom};
use nccl_check_contract::verdict::Verdict;
use std::path::Path;

impl Gate<'_> {
    /// `gate.json` and the metrics file, where their directories passed the checks.
    pub(super) fn publish(&mut self, places: &Places, st: &Status, sample: &metrics::Sample) {
        if let Some(d) = &places.state_dir {
            let st = Status {
                faults: self.faults.clone(),
                metrics_error: places.metrics_error.clone(),
                ..st.clone()
            };
            if let Err(e) = status::write(d, &st) {
                self.log
                    .warn(&format!("{}: {e}", d.join(status::FILE).display()));
            }
        }
        if let Some(p) = &places.metrics {
            if let Err(e) = prom::write(p, &metrics::render(sample)) {
                let shown = places.metrics_shown();
                self.log.warn(&format!("metrics_file {shown}: {e}"));
            }
        }
        if let (Some(why), Some(d)) = (&places.metrics_error, &places.state_dir) {
            let p = d.join(metrics::FALLBACK);
            if let Err(e) = prom::write(&p, &metrics::render_fallback(sample, why)) {
                self.log.warn(&format!("{}: {e}", p.display()));
            }
        }
    }

    /// [`Self::publish`] for a run that measured nothing (skipped, a setup error before the
    /// worker, a hardware fault's FAIL): no run directory, no numbers.
    pub(super) fn publish_unmeasured(
        &mut self,
        places: &Places,
        st: &Status,
        verdict: Option<Verdict>,
    ) {
        let sample = metrics::Sample::unmeasured(st.state, verdict, Some(self.cfg.cache_seconds));
        self.publish(places, st, &sample);
    }

    /// Nothing to check is never silent: gate.json says `skipped` and why, the metric too, and
    /// syslog has the line (a gate that is off unnoticed checks no job).
    pub(super) fn nothing_to_check(
        &mut self,
        places: &Places,
        whom: &str,
        why: Option<String>,
    ) -> i32 {
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
            self.publish_unmeasured(places, &self.status(GateState::Skipped, &msg), None);
        }
        let a = self.decide(Found::NothingToCheck, false);
        self.finish(a, &msg)
    }

    /// A setup problem found before the worker could run.
    pub(super) fn error_without_run(&mut self, places: &Places, problem: &str, whom: &str) -> i32 {
        let a = self.decide(Found::Measured(Verdict::Error), false);
        let msg = self.line(whom, "", &a).error_without_run(problem);
        self.log.error(&msg);
        if self.dry_run {
            words::print_plan(&self.facts.node, &a, None);
        } else {
            let st = self.status(GateState::Error, &msg);
            self.publish_unmeasured(places, &st, Some(Verdict::Error));
        }
        self.finish(a, &msg)
    }

    /// The recheck's reading of Slurm's node state, for the alert on allocated nodes that the
    /// gate has not run on (`metrics::render_node`). Not on a dry run.
    pub(super) fn write_node_state(&mut self, places: &Places, n: &drain::NodeState) {
        if let (Some(m), false) = (&places.metrics, self.dry_run) {
            if let Err(e) = prom::write(
                &metrics::node_path(m),
                &metrics::render_node(n.busy(), &n.state, now_unix()),
            ) {
                self.log.warn(&format!(
                    "metrics_file (node state) {}: {e}",
                    metrics::node_path(Path::new(&places.metrics_shown())).display()
                ));
            }
        }
    }
}
