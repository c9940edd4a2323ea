//! The hardware fault pass of a run (`crate::faults`): logged and counted, and a fault over its
//! limit is a FAIL that drains without measuring.

use super::{now_unix, Gate, Places};
use crate::decide::Found;
use crate::status::{GateState, Status};
use crate::{cache, drain, faults, prom, words};
use nccl_check_contract::verdict::Verdict;
use std::path::Path;

impl Gate<'_> {
    /// Reads the fault sources when `fault_checks` is on. `Some`: the run's exit code (a FAIL).
    pub(super) fn fault_pass(
        &mut self,
        places: &Places,
        state_dir: &Path,
        slurm: &drain::Slurm,
        whom: &str,
    ) -> Option<i32> {
        if !self.cfg.fault_checks {
            return None;
        }
        let settings = self.cfg.fault_settings();
        // A dry run reads but keeps no position: the next real run judges the same events.
        let f = faults::check(&settings, state_dir, !self.dry_run);
        let line = f.line();
        // Only what was found is logged (gate.json keeps every pass, with its sources).
        if f.failed() {
            self.log.error(&line);
        } else if !f.findings.is_empty() {
            self.log.warn(&line);
        }
        if let (Some(m), false) = (&places.metrics, self.dry_run) {
            if let Err(e) = prom::write(
                &faults::metrics::path_beside(m),
                &faults::metrics::render(&f, now_unix()),
            ) {
                let shown = places.metrics_shown();
                self.log
                    .warn(&format!("metrics_file (faults) {shown}: {e}"));
            }
        }
        let failed = f.failed();
        self.faults = Some(f);
        failed.then(|| self.fault_fail(places, state_dir, slurm, whom))
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
        let a = self.decide(Found::Measured(Verdict::Fail), false);
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
            &slurm.until(late).drain(state_dir, &reason, now_unix()),
            &node,
        );
        let msg = format!(
            "FAIL {whom} on {node}: hardware fault: {reason}; {said}{}",
            words::job_fate(self.mode, a.exit_code, true)
        );
        self.log.error(&msg);
        let st = Status {
            drain_reason: Some(reason),
            drain: Some(said),
            ..self.status(GateState::Fail, &msg)
        };
        self.publish_unmeasured(places, &st, Some(Verdict::Fail));
        self.finish(a, &msg)
    }
}
