//! The pair matrix measured: the pair step (the full matrix, or the localizer's rounds on many
//! nodes), each round's communicators connected first, its exchanges timed by the host's and the
//! GPU's clocks, a budgeted round sized by a probe. The schedule and the rows it turns the times
//! into are `pair_matrix`'s.

use super::{connect_first, gpu_rows, node_rows, schedule, sized_by_rate, RoundSize, RoundTimes};
use crate::measure::nccl::Comm;
use crate::measure::rows::PairRow;
use crate::measure::runner::gpu_time::{timed_op, GpuTimer};
use crate::measure::runner::timed::Measurer;
use crate::measure::runner::{ms, GpuOutcome, RunError, Start};
use crate::model::collectives::{Collective, SendRecv};
use crate::model::time_budget;
use std::time::Instant;

impl Measurer<'_> {
    /// The pair step: the full matrix, or the localizer's rounds on many nodes; its wall time
    /// goes to the phases' `pairs_ms`. With a `budget`, each round is sized by it.
    pub(in crate::measure::runner) fn run_pairs(
        &self,
        bytes: u64,
        (warmup, iters): (u32, u32),
        budget: Option<f64>,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let o = self.opts();
        let began = Instant::now();
        let plan = (bytes, (warmup, iters));
        let ran = if o.pair_matrix.full_for(start.topology.node_count()) {
            self.run_matrix(plan, budget, start, out)
        } else {
            self.run_localized(plan, budget, start, out)
        };
        out.phases.pairs_ms += ms(began.elapsed());
        ran
    }

    /// The size of a budgeted step's rounds of pairs like `round` (every rank's same round): a
    /// probe exchange of `time_budget::PROBE_BYTES` on it, its slowest pair's time (agreed), sized
    /// by `sized_by_rate`; recorded in the report. Without a budget or pairs: `plan`.
    pub(in crate::measure::runner) fn budgeted_round(
        &self,
        (step, round, in_node): (&str, &[(usize, usize)], bool),
        plan: RoundSize,
        budget: Option<f64>,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<RoundSize, RunError> {
        let Some(seconds) = budget.filter(|_| !round.is_empty()) else {
            return Ok(plan);
        };
        let partner = crate::model::pairs::partner(round, self.rank as usize);
        let probe = time_budget::PROBE_BYTES.min(plan.0);
        let (secs, _) = self.timed_exchange(partner, probe, (1, 1), in_node, start, out)?;
        let slowest = self.slowest(secs)?;
        let rate = probe as f64 / slowest;
        let from = format!(
            "probe: sendrecv {} on the first round, its slowest pair",
            crate::model::size::human(probe)
        );
        let floors = start.floors();
        let held = |b: u64| floors.floor(SendRecv.name(), 2, b).is_some();
        let (sized, sizing) = sized_by_rate(
            step,
            (rate, from),
            (plan, time_budget::MIN_BYTES),
            seconds,
            &held,
        );
        start.record_sizing(sizing, out);
        Ok(sized)
    }

    /// Measures the matrix; slow pairs, by the floors and outlier rule the verdict uses, make
    /// the whole matrix run once more.
    fn run_matrix(
        &self,
        plan: RoundSize,
        budget: Option<f64>,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let o = self.opts();
        start.phase(&format!(
            "pair matrix, sendrecv {}",
            crate::model::size::human(plan.0)
        ));
        let s = schedule(&start.topology);
        let gpu_round = s.gpu_rounds.first().cloned().unwrap_or_default();
        let node_round = (s.node_rounds.first()).map_or(Vec::new(), |r| r.ranks.clone());
        let sizes = [
            self.budgeted_round(("gpu_pairs", &gpu_round, true), plan, budget, start, out)?,
            self.budgeted_round(("node_pairs", &node_round, false), plan, budget, start, out)?,
        ];
        let (bytes, iters) = (sizes[0].0, sizes[0].1 .1);
        let (mut rows, mut spread) = self.pair_matrix(sizes, start, out)?;
        let floors = start.floors();
        let floor = |c: &str, g: u32, b: u64| floors.floor(c, g, b);
        // Held as the verdict holds them: at what each path delivered by the faster clock.
        let delivered: Vec<PairRow> = rows
            .iter()
            .map(|r| PairRow {
                busbw: r.delivered_busbw(),
                ..r.clone()
            })
            .collect();
        let slow = (start.slow_pairs)(&delivered, o.config.outliers.fraction, &floor);
        // Across nodes, a slow node pair's node may have its own finding: every node's is
        // shared then (`localize::own`), so each process's verdict names that cause, not the
        // path. Every process agrees whether (the team's sum), so all or none join the sum.
        let multi = start.topology.node_count() > 1;
        let agreed = (o.config.outliers.retest || multi) && self.agree_slow(slow)?;
        if multi && agreed {
            self.keep_own_findings(start, out)?;
        }
        let retested = o.config.outliers.retest && agreed;
        if retested {
            start.phase("slow pairs: measuring the pair matrix once more");
            // Budgeted, twice the exchanges: enough to tell the path's noise from a fault.
            let more = |(b, (w, n)): RoundSize| (b, (w, if budget.is_some() { 2 * n } else { n }));
            let again;
            (again, spread) = self.pair_matrix(sizes.map(more), start, out)?;
            for (r, a) in rows.iter_mut().zip(again) {
                let first = r.busbw;
                *r = a;
                r.first_busbw = Some(first);
            }
        }
        if start.printer {
            start
                .show
                .pairs(&rows, bytes, iters, start.topology.node_count() > 1);
        }
        if start.recorder {
            out.pairs.extend(rows);
            // The budgeted steps' records get the spread their last measurement read.
            let last = [(sizes[0], "gpu_pairs"), (sizes[1], "node_pairs")];
            for (((_, (_, n)), step), spread) in last.into_iter().zip(spread) {
                for s in out.sizing.iter_mut().filter(|s| s.step == step) {
                    s.spread = spread;
                    s.samples = if retested { 2 * n } else { n };
                }
            }
        }
        Ok(())
    }

    /// Every round of the matrix: GPU pairs at `sizes[0]`, node pairs at `sizes[1]`; the rows,
    /// and the widest spread of the GPU pairs' and of the node pairs' operations.
    fn pair_matrix(
        &self,
        [(gpu_bytes, gpu_loops), (node_bytes, node_loops)]: [RoundSize; 2],
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(Vec<PairRow>, [f64; 2]), RunError> {
        let t = &start.topology;
        let plan = schedule(t);
        let mut rows = Vec::new();
        let mut spread = [0.0f64; 2];
        // bytes as int8, like nccl-tests sendrecv -d int8 would count them
        self.connect_gpu_pairs(&plan.gpu_rounds, start, out)?;
        for round in &plan.gpu_rounds {
            let times = self.pair_round(round, gpu_bytes, gpu_loops, true, start, out)?;
            spread[0] = spread[0].max(times.widest(round));
            rows.extend(gpu_rows(t, round, &times, gpu_bytes));
        }
        for round in &plan.node_rounds {
            let times = self.pair_round(&round.ranks, node_bytes, node_loops, false, start, out)?;
            spread[1] = spread[1].max(times.widest(&round.ranks));
            rows.extend(node_rows(t, round, &times, node_bytes));
        }
        Ok((rows, spread))
    }

    /// Connects this rank with every GPU it meets in `rounds`, all at once, before the rounds:
    /// otherwise each round's warm-up connects its pairs in turn, one round after the other.
    /// NCCL connects every point-to-point channel of a peer at the first operation with it,
    /// whatever its size (NCCL 2.28.9 `src/enqueue.cc`, "Mark channels that need
    /// pre-connect"), and all the peers of one group in one setup. Every rank of a node
    /// has the same partners' count, so all of a node's ranks take part or none.
    fn connect_gpu_pairs(
        &self,
        rounds: &[Vec<(usize, usize)>],
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let me = self.rank as usize;
        let partners = connect_first(rounds, me, self.opts().max_bytes.max(16));
        if partners.is_empty() || self.thread.old_setup("pairs-by-round") {
            return Ok(());
        }
        let (comm, peer_of) = self.pair_comm(true, start);
        let peers: Vec<u32> = partners.into_iter().map(peer_of).collect();
        self.status("connecting its GPU pairs");
        let t = Instant::now();
        comm.connect_peers(&peers, self.send, self.recv, self.gpu.raw_stream())
            .map_err(|e| self.err_runtime("connecting the GPU pairs", e))?;
        self.wait("connecting the GPU pairs")?;
        out.phases.warmup_ms += ms(t.elapsed());
        Ok(())
    }

    /// The communicator a pair exchange runs on and how a partner's global rank is named
    /// there: inside a node, the node's own communicator when there is one (peers by local
    /// index); else the check's.
    fn pair_comm<'s>(
        &'s self,
        in_node: bool,
        start: &'s Start,
    ) -> (&'s Comm<'s>, Box<dyn Fn(usize) -> u32 + 's>) {
        match (in_node, self.node_comm) {
            (true, Some(c)) => (
                c,
                Box::new(move |p: usize| start.topology.local_index(p).unwrap_or(0) as u32),
            ),
            _ => (self.comm, Box::new(|p: usize| p as u32)),
        }
    }

    /// One round: every rank in a pair exchanges `count` bytes with its partner (send and
    /// receive at once, as nccl-tests sendrecv with 2 GPUs), the others wait. Returns each
    /// rank's seconds per operation by both clocks (0 for ranks without a partner), the same on
    /// every rank (one sum over the control plane).
    fn pair_round(
        &self,
        round: &[(usize, usize)],
        count: u64,
        loops: (u32, u32),
        in_node: bool,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<RoundTimes, RunError> {
        let me = self.rank as usize;
        let n = self.nranks as usize;
        let iters = loops.1 as usize;
        let partner = crate::model::pairs::partner(round, me);
        let (secs, gpu_ops) = self.timed_exchange(partner, count, loops, in_node, start, out)?;
        // One vector for the control plane's sum: every rank's host time, then every rank's
        // operations by its GPU's clock (each rank fills its own slots).
        let mut mine = vec![0.0; n + n * iters];
        mine[me] = secs;
        for (k, d) in gpu_ops.iter().take(iters).enumerate() {
            mine[n + me * iters + k] = *d;
        }
        let sums = self.team.sum(&mine).map_err(|e| self.team_err(e))?;
        if sums.len() != mine.len() {
            return Err(RunError::Runtime(format!(
                "the pair round's times: {} values summed, {} sent",
                sums.len(),
                mine.len()
            )));
        }
        let gpu = (0..n)
            .map(|r| sums[n + r * iters..n + (r + 1) * iters].to_vec())
            .collect();
        Ok(RoundTimes {
            host: sums[..n].to_vec(),
            gpu,
        })
    }

    /// This rank's part of a round: `count` bytes each way with `partner` (none: it waits),
    /// after a warm-up and a barrier; seconds per operation by the host's clock around the
    /// loop, and each operation's seconds by the GPU's (`gpu_time`); 0 and none without a
    /// partner.
    pub(in crate::measure::runner) fn timed_exchange(
        &self,
        partner: Option<usize>,
        count: u64,
        (warmup, iters): (u32, u32),
        in_node: bool,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(f64, Vec<f64>), RunError> {
        let (comm, peer_of) = self.pair_comm(in_node, start);
        let what = match partner {
            Some(p) => format!("sendrecv with rank {p}"),
            None => "pair round (idle)".into(),
        };
        self.status(&what);
        let exchange = |iter: u64| -> Result<(), RunError> {
            let Some(p) = partner else { return Ok(()) };
            let steps = (self.opts().max_bytes / count.max(1)).max(1);
            let shift = count * (iter % steps);
            comm.send_recv(
                self.send + shift,
                peer_of(p),
                self.recv + shift,
                peer_of(p),
                count,
                0,
                self.gpu.raw_stream(),
            )
            .map_err(|e| self.err_runtime(SendRecv.name(), e))
        };
        let t = Instant::now();
        for iter in 0..warmup.max(1) as u64 {
            exchange(iter)?;
        }
        self.wait(&what)?;
        out.phases.warmup_ms += ms(t.elapsed());
        let timing = |e| self.err_runtime("timing the exchange on the GPU", e);
        // Created before the barrier, so making events is not timed.
        let mut timer = (partner.map(|_| GpuTimer::new(self.gpu, iters)))
            .transpose()
            .map_err(timing)?;
        self.team.barrier().map_err(|e| self.team_err(e))?;
        let t = Instant::now();
        for iter in 0..iters as u64 {
            timed_op(&mut timer, self.gpu, timing, || exchange(iter))?;
        }
        self.wait(&what)?;
        let elapsed = t.elapsed();
        out.phases.timed_loop_ms += ms(elapsed);
        let Some(timer) = timer else {
            return Ok((0.0, Vec::new()));
        };
        let gpu_ops = timer.durations().map_err(timing)?;
        Ok((elapsed.as_secs_f64() / iters as f64, gpu_ops))
    }
}
