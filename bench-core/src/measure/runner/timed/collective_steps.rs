//! The plan's collective steps, one after the other: a counted step times every size as
//! nccl-tests does (its header, global warm-up and footer), a budgeted one probes first and
//! samples the one size that fits its seconds (`model::time_budget`); a size every rank finds
//! below its floor is measured once more. The timed loop of one size is `timed`'s.

use super::{sizing_line, Measurer, RowSamples, Timing};
use crate::measure::rows::Row;
use crate::measure::runner::sink::TableHead;
use crate::measure::runner::{ms, GpuOutcome, RunError, Start};
use crate::model::collectives::Collective;
use crate::model::step::Step;
use crate::model::time_budget::{self, Sizing, StepBudget};
use std::time::Instant;

impl Measurer<'_> {
    pub(in crate::measure::runner) fn run_plan(
        &self,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let o = self.opts();
        self.team.barrier().map_err(|e| self.team_err(e))?;
        for (ci, step) in o.steps.iter().enumerate() {
            match step {
                Step::Collective {
                    collective,
                    sizes,
                    iters,
                    budget: Some(b),
                    ..
                } => self.run_budgeted(ci, *collective, (sizes[0], *iters), *b, start, out)?,
                Step::Collective {
                    collective,
                    sizes,
                    warmup,
                    iters,
                    budget: None,
                } => self.run_collective(ci, *collective, sizes, *warmup, *iters, start, out)?,
                Step::Pairs {
                    bytes,
                    warmup,
                    iters,
                    budget,
                } => self.run_pairs(*bytes, (*warmup, *iters), *budget, start, out)?,
            }
        }
        self.share_findings(start, out)
    }

    /// Every multi-node check ends with the nodes' own findings shared (unless a node pair or a
    /// localization round shared them already), so every process's verdict names a node's own
    /// finding: beside a slow collective it explains, and on its own where it fails that node
    /// (a GPU held and slow by its local probe, a GPU missing: `localize::own`), where the
    /// collectives over sockets or a fast fabric never felt it. One all_reduce of
    /// `localize::own::WIDTH` numbers a process: far below a millisecond next to the check.
    /// Every rank takes the same branch (the node count and `findings_shared` are agreed), so
    /// all or none join the sum; the barrier after it lets nobody leave with data owed.
    fn share_findings(&self, start: &Start, out: &mut GpuOutcome) -> Result<(), RunError> {
        if start.topology.node_count() < 2 || out.findings_shared {
            return Ok(());
        }
        self.keep_own_findings(start, out)?;
        self.team.barrier().map_err(|e| self.team_err(e))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_collective(
        &self,
        ci: usize,
        coll: &'static dyn Collective,
        sizes: &[u64],
        warmup: u32,
        iters: u32,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let (min_bytes, max_bytes) = (sizes[0], sizes[sizes.len() - 1]);
        self.announce_collective(coll, (min_bytes, max_bytes), warmup, iters, start);
        self.global_warmup(coll, (min_bytes, max_bytes), warmup, out)?;
        let mut busbw_sum = 0.0;
        let mut wrong_ranks = 0.0;
        for (si, &size) in sizes.iter().enumerate() {
            let at = (ci, si, size, Timing::Count(iters));
            let (row, _) = self.measure_size(at, at.3, coll, start, out, &mut wrong_ranks)?;
            busbw_sum += row.out_of_place.busbw + row.in_place.busbw;
            if start.printer {
                start.show.row(&row, &self.held_against(coll, &row, start));
            }
            if start.recorder {
                out.rows.push(row);
            }
        }
        if start.printer {
            let rows = (sizes.len() * 2) as f64;
            start.show.footer(
                &coll.nccl_tests_binary(),
                wrong_ranks as u64,
                busbw_sum / rows,
            );
        }
        Ok(())
    }

    /// The phase line and, on the printer, nccl-tests' header for this collective's sizes.
    fn announce_collective(
        &self,
        coll: &'static dyn Collective,
        (min_bytes, max_bytes): (u64, u64),
        warmup: u32,
        iters: u32,
        start: &Start,
    ) {
        let o = self.opts();
        start.phase(&format!(
            "{} {}..{}",
            coll.name(),
            crate::model::size::human(min_bytes),
            crate::model::size::human(max_bytes)
        ));
        if start.printer {
            start.show.collective(&TableHead {
                binary: &coll.nccl_tests_binary(),
                nthreads: self.nranks as usize,
                min_bytes,
                max_bytes,
                step_factor: o.step_factor,
                warmup,
                iters,
                check: o.check,
            });
        }
    }

    /// nccl-tests' warm-up before the timed sizes, its time added to the phases' warm-up.
    fn global_warmup(
        &self,
        coll: &'static dyn Collective,
        (min_bytes, max_bytes): (u64, u64),
        warmup: u32,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let elt = self.opts().datatype.size();
        self.status(&format!("{} warm-up", coll.name()));
        let t = Instant::now();
        // nccl-tests' global warm-up (TimeTest): every size from min to max by doubling,
        // out-of-place, at rotating offsets, completing each size before the next.
        let mut size = min_bytes;
        while size <= max_bytes {
            let c = coll.counts(size / elt, elt, self.nranks as u64);
            for iter in 0..warmup as u64 {
                self.issue(coll, &c, false, iter)?;
            }
            self.wait(&format!("{} warm-up", coll.name()))?;
            if size == 0 {
                break;
            }
            size = size.saturating_mul(2);
        }
        out.phases.warmup_ms += ms(t.elapsed());
        Ok(())
    }

    /// One size's row; when every rank agrees it is below its floor (and retests are on), the
    /// row measured once more (timed by `retest`), by the GPU's clock too, keeping the first
    /// try's busbw. Returns the row and the samples of its last measurement.
    fn measure_size(
        &self,
        at: (usize, usize, u64, Timing),
        retest: Timing,
        coll: &'static dyn Collective,
        start: &Start,
        out: &mut GpuOutcome,
        wrong_ranks: &mut f64,
    ) -> Result<(Row, RowSamples), RunError> {
        let (mut row, _, mut samples) = self.measure_row(at, coll, false, out, wrong_ranks)?;
        let floor = start.floors().floor(coll.name(), self.nranks, row.size);
        let slow = floor.is_some_and(|f| row.out_of_place.busbw.min(row.in_place.busbw) < f);
        if self.opts().config.outliers.retest && self.agree_slow(slow)? {
            start.phase(&format!(
                "{} {}: below threshold, measuring once more",
                coll.name(),
                crate::model::size::human(row.size)
            ));
            let at = (at.0, at.1, at.2, retest);
            let (again, gpu, more) = self.measure_row(at, coll, true, out, wrong_ranks)?;
            if start.recorder {
                out.gpu_side.extend(gpu);
            }
            let first = (row.out_of_place.busbw, row.in_place.busbw);
            row = again;
            samples = more;
            row.out_of_place.first_busbw = Some(first.0);
            row.in_place.first_busbw = Some(first.1);
        }
        out.last_collective = Some((
            coll.name(),
            row.size,
            row.out_of_place.busbw.min(row.in_place.busbw),
        ));
        Ok((row, samples))
    }

    /// A collective step sized by a time budget (`model::time_budget`): a probe at
    /// `time_budget::PROBE_BYTES` (its slowest rank's time: every rank chooses the same), then the
    /// size and samples that fit `seconds`, sampled one operation at a time until stable; a
    /// retest takes twice the samples, all of them, so its spread tells noise from a fault.
    fn run_budgeted(
        &self,
        ci: usize,
        coll: &'static dyn Collective,
        (max_bytes, most): (u64, u32),
        seconds: f64,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let (probe_bytes, probe_s) = self.probe_collective(coll, max_bytes, out)?;
        let rate = probe_bytes as f64 / probe_s;
        let b = StepBudget {
            seconds,
            max_bytes,
            min_bytes: time_budget::MIN_BYTES,
            max_samples: most,
            extra_ops: 1 + self.opts().check as u32,
            placements: 2,
        };
        let choice = time_budget::choose(&b, rate);
        self.announce_collective(coll, (choice.bytes, choice.bytes), 0, choice.samples, start);
        let timing = Timing::Sampled {
            least: time_budget::MIN_SAMPLES,
            most: choice.samples,
            allowance_s: seconds / 2.0,
        };
        let retest = (2 * choice.samples).max(2 * time_budget::MIN_SAMPLES);
        let retest = Timing::Sampled {
            least: retest,
            most: retest,
            allowance_s: f64::INFINITY,
        };
        let mut wrong = 0.0;
        let at = (ci, 0, choice.bytes, timing);
        let (row, samples) = self.measure_size(at, retest, coll, start, out, &mut wrong)?;
        let floor_held = start
            .floors()
            .floor(coll.name(), self.nranks, row.size)
            .is_some();
        let sizing = Sizing {
            step: coll.name().into(),
            budget_s: seconds,
            rate_gbs: rate / 1e9,
            rate_from: format!(
                "probe: {} {}, the slowest rank's time",
                coll.name(),
                crate::model::size::human(probe_bytes)
            ),
            bytes: row.size,
            why: choice.why,
            samples: samples.samples,
            spread: samples.spread,
            stopped: samples.stopped,
            floor_held,
        };
        if start.printer {
            start.show.row(&row, &self.held_against(coll, &row, start));
            start.show.line(&sizing_line(&sizing));
            let busbw = row.out_of_place.busbw + row.in_place.busbw;
            start
                .show
                .footer(&coll.nccl_tests_binary(), wrong as u64, busbw / 2.0);
        }
        if start.recorder {
            out.rows.push(row);
            out.sizing.push(sizing);
        }
        Ok(())
    }

    /// The probe of a budgeted collective: one operation to connect, then one timed, of
    /// `time_budget::PROBE_BYTES` (at most the step's size); its bytes and the slowest rank's seconds.
    fn probe_collective(
        &self,
        coll: &'static dyn Collective,
        max_bytes: u64,
        out: &mut GpuOutcome,
    ) -> Result<(u64, f64), RunError> {
        let elt = self.opts().datatype.size();
        let size = time_budget::PROBE_BYTES.min(max_bytes);
        let c = coll.counts(size / elt, elt, self.nranks as u64);
        let what = format!("{} probe", coll.name());
        let t = Instant::now();
        self.issue(coll, &c, false, 0)?;
        self.wait(&what)?;
        self.team.barrier().map_err(|e| self.team_err(e))?;
        let timed = Instant::now();
        self.issue(coll, &c, false, 1)?;
        self.wait(&what)?;
        let secs = self.slowest(timed.elapsed().as_secs_f64())?;
        out.phases.warmup_ms += ms(t.elapsed());
        Ok((c.bytes(elt), secs))
    }

    /// The `#` line under a row saying what it is held against (or that no floor applies).
    fn held_against(&self, coll: &'static dyn Collective, row: &Row, start: &Start) -> String {
        // What it is held against, on a `#` line nccl-tests parsers skip.
        start
            .floors()
            .expectation(coll.name(), self.nranks, row.size)
            .map(|e| {
                let busbw = row.out_of_place.busbw.min(row.in_place.busbw);
                format!(
                    "#  ^ held against {}",
                    crate::measure::rows::expected_short(&crate::measure::rows::Expected::new(
                        busbw, e.floor, e.source
                    ))
                )
            })
            .unwrap_or_else(|| "#  ^ no floor at this size".to_string())
    }
}
