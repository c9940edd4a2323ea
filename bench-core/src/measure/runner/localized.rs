//! The adaptive node-pair plan of a multi-node check, on real GPUs: phase A is the GPU pair
//! matrix of every node at once (on each node's own communicator), phase B the plan's collective
//! over every rank (measured just before), then the localizer's rounds, each a set of disjoint
//! rank pairs exchanging with NCCL sendrecv on the check's communicator.
//!
//! The rounds' records travel by NCCL, not through the coordinator: after each round (phase A's
//! too) every rank puts the results it leads into the round's vector (`conduct::slots`), one
//! all_reduce (sum, f64) on the check's communicator gives every rank the same vector, and each
//! GPU thread's own copy of the localizer decides its next place (`conduct::decide_here`). The
//! control plane keeps the beats, the aborts and the naming of a process that stops answering.
use super::busbw;
use super::gpu_time::settled_mean;
use super::pair_matrix::{gpu_rounds, gpu_row, sized_by_rate, RoundSize, RoundTimes};
use super::sink::Show;
use super::timed::Measurer;
use super::{GpuOutcome, RunError, Start};
use crate::localize::conduct::{
    decide_here, follow, keeper, slots, Conductor, ConductorStep, FollowError, Place,
};
use crate::localize::layout::Layout;
use crate::localize::{LocalizeConfig, Localizer};
use crate::measure::rows::PairRow;
use crate::model::datatype::{DataType, RedOp};
use crate::model::floors::PairFloors;
use crate::model::localization::NodeFindings;
use crate::model::localization::{LocalizeSummary, Phase};

/// Node `i`'s phase-A number: its slowest GPU pair. A node with one GPU has no pair and cannot
/// be slow on its own: it gets the best value, so it neither fails nor lowers the reference.
pub(super) fn local_values(nodes: &[String], rows: &[PairRow]) -> Vec<f64> {
    let worst: Vec<Option<f64>> = nodes
        .iter()
        .map(|n| {
            rows.iter()
                .filter(|r| r.gpus().is_some_and(|g| g.0 == n))
                .map(PairRow::delivered_busbw)
                .reduce(f64::min)
        })
        .collect();
    let best = worst.iter().flatten().copied().fold(1.0, f64::max);
    worst.into_iter().map(|w| w.unwrap_or(best)).collect()
}

impl Measurer<'_> {
    pub(super) fn run_localized(
        &self,
        plan: RoundSize,
        budget: Option<f64>,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let layout = Layout::new(&start.topology);
        let first = gpu_rounds(&start.topology)
            .into_iter()
            .next()
            .unwrap_or_default();
        let local = self.budgeted_round(("gpu_pairs", &first, true), plan, budget, start, out)?;
        let rows = self.gpu_pairs_at_once(local.0, local.1, start, out)?;
        let allocation = out.last_collective;
        let (bytes, loops) = self.round_size(plan, budget, start, out);
        // The localizer's settings: the outlier fraction and the floors for the pairs and for
        // the allocation-wide collective measured just before (collective, size, busbw).
        let outliers = &self.opts().config.outliers;
        let at = allocation.map(|(c, size, _)| (c, size));
        let floors = start.floors().localization(local.0, !rows.is_empty(), at);
        let cfg = LocalizeConfig {
            fraction: outliers.fraction,
            floors,
            retest: outliers.retest,
            ..LocalizeConfig::default()
        };
        let cfg = self.agreed(cfg, start)?;
        // Every node pair at once: when the alltoall is slow, the localizer measures each
        // (`localize::paths`).
        let shape = (layout.names.len(), layout.rails.max(1));
        let paths = self.paths_wanted(bytes, shape, start, out)?;
        let cfg = LocalizeConfig {
            paths: paths.as_ref().is_some_and(|p| p.measured),
            paths_above: paths.as_ref().and_then(|p| p.pairs_limit),
            ..cfg
        };
        // Every process has every node's rows (phase A's all_reduce), so every copy of the
        // localizer starts from the same numbers.
        let locals = local_values(&layout.names, &rows);
        // Without a collective over every rank before the pairs, B has no number and no
        // floor: the localizer then screens (it never passes B unjudged).
        let allocation_busbw = allocation.map_or(0.0, |a| a.2);
        let setup = Setup {
            layout,
            cfg,
            locals,
            allocation_busbw,
            retest_more: budget.is_some(),
        };
        let (mut summary, noise) = self.conduct_rounds(bytes, loops, start, out, &setup)?;
        summary.paths = paths;
        // The run's own noise: the widest spread any rank's retest read (every rank joins).
        let noise = self.slowest(noise)?;
        out.localization_noise = (noise > 0.0).then_some(noise);
        // Every process has the same verdict (its reasons are empty in all or in none), so all
        // agree whether these sums run; otherwise the findings are shared once at the end of
        // the plan (`Measurer::share_findings`).
        if !summary.reasons.is_empty() {
            let starved = self.starved_nodes(start, &setup.layout.names)?;
            crate::localize::own::blame_starved(&mut summary.reasons, &starved);
            let own = self.keep_own_findings(start, out)?;
            crate::localize::own::own_findings_win(&mut summary.reasons, &own);
        }
        // The check's last NCCL operation: a rank whose all_reduce is done may still owe its ring
        // neighbours data in flight, and a process that left now would cut it (seen on one H100 with
        // emulated nodes: fab07 exited and fab06, fab08 ended in ERROR "Connection closed by remote
        // peer"). The control plane's barrier lets nobody leave before every rank has its sums.
        self.team.barrier().map_err(|e| self.team_err(e))?;
        if start.printer {
            print_localized(start.show.as_ref(), &rows, local, &summary);
        }
        if start.recorder {
            // As before the rounds left the star: the coordinator's report keeps every node's
            // pairs, every other process's its own node's.
            let t = &start.topology;
            let node = t
                .node_index(self.rank as usize)
                .and_then(|n| setup.layout.names.get(n));
            let keeps_all = self.team.coordinates();
            out.pairs.extend(
                rows.into_iter().filter(|r| {
                    keeps_all || r.gpus().is_some_and(|g| node.is_some_and(|n| n == g.0))
                }),
            );
            out.localization = Some(summary);
        }
        Ok(())
    }

    /// The localizer's rounds' size: with a budget, from the busbw of the collective over every
    /// rank just measured (the team's sums: every rank has the same; a node pair's sendrecv
    /// moves about what the all_reduce's slowest link does), recorded in the report; without one
    /// (or with no collective before), the plan's.
    fn round_size(
        &self,
        plan: RoundSize,
        budget: Option<f64>,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> RoundSize {
        let (Some(seconds), Some((name, size, busbw))) = (budget, out.last_collective) else {
            return plan;
        };
        let from = format!(
            "{name} {}'s busbw, every rank's sum",
            crate::model::size::human(size)
        );
        // No rule covers one GPU pair across two nodes: node pairs are judged by their peers.
        let held = |_: u64| false;
        // Never below ROUND_MIN_BYTES: a round's pairs are judged against each other, and small
        // exchanges on a busy host read its scheduler, not the link.
        let (sized, sizing) = sized_by_rate(
            "localization_rounds",
            (busbw * 1e9, from),
            (plan, ROUND_MIN_BYTES),
            seconds,
            &held,
        );
        start.record_sizing(sizing, out);
        sized
    }

    /// The sum over every rank of this rank's round vector (see `conduct::slots`): one NCCL
    /// all_reduce (sum, f64), in place in the receive buffer (idle between rounds), on the
    /// check's communicator, waited as every measurement is (NCCL's async error, the team
    /// failing, the deadline). One rank per GPU thread, each on its own communicator, as every
    /// collective of the check is issued.
    pub(super) fn sum_over_ranks(&self, vector: &[f64], what: &str) -> Result<Vec<f64>, RunError> {
        if vector.is_empty() {
            return Ok(Vec::new());
        }
        let bytes = std::mem::size_of_val(vector) as u64;
        let room = self.opts().max_bytes.max(16);
        if bytes > room {
            return Err(self.err_runtime(
                what,
                format!("{bytes} bytes do not fit the {room}-byte buffer"),
            ));
        }
        self.gpu
            .copy_in(self.recv, vector)
            .map_err(|e| self.err_runtime(what, e))?;
        let count = vector.len() as u64;
        let (f64_, sum) = (DataType::Double.code(), RedOp::Sum.code());
        let stream = self.gpu.raw_stream();
        self.comm
            .all_reduce(self.recv, self.recv, count, f64_, sum, stream)
            .map_err(|e| self.err_runtime(what, e))?;
        // `vector` lives until here: the copy in is complete once the stream is.
        self.wait(what)?;
        let mut sums = vec![0.0; vector.len()];
        self.gpu
            .copy_out(self.recv, &mut sums)
            .map_err(|e| self.err_runtime(what, e))?;
        Ok(sums)
    }

    /// Every node whose workers could not run for at least `off_cpu::STARVED_SHARE` of the
    /// check so far, with that share: one sum over every rank of a vector of 2 slots a node (the
    /// share of each rank's process, and 1), so a node of several processes gets their mean.
    fn starved_nodes(
        &self,
        start: &Start,
        names: &[String],
    ) -> Result<Vec<(String, f64)>, RunError> {
        let n = names.len();
        let mut mine = vec![0.0; 2 * n];
        let node = start.topology.node_index(self.rank as usize);
        if let (Some(k), Some(share)) = (node.filter(|&k| k < n), self.thread.own.starved_share()) {
            mine[k] = share;
            mine[n + k] = 1.0;
        }
        let sums = self.sum_over_ranks(&mine, "the nodes' off-CPU shares")?;
        Ok((0..n)
            .filter_map(|k| {
                let (total, ranks) = (sums[k], sums[n + k]);
                let mean = total / ranks;
                (ranks > 0.0 && mean >= super::off_cpu::STARVED_SHARE)
                    .then(|| (names[k].clone(), mean))
            })
            .collect())
    }

    /// Every node's own findings (a GPU another process holds, a starved worker, a missing GPU,
    /// a busy host), in every process: one sum over every rank of one block of slots per
    /// process, filled by that process's recorder thread (`localize::own::exchange`); this
    /// process's own node is judged by its own verdict (`judge::evidence`).
    pub(super) fn own_findings(&self, start: &Start) -> Result<Vec<NodeFindings>, RunError> {
        let t = &start.topology;
        let me = self.rank as usize;
        let process = t.process_of(me).unwrap_or(0) as usize;
        let mine = match start.recorder {
            true => self.thread.own.findings_now(t, me),
            false => Vec::new(),
        };
        let names = crate::localize::own::process_nodes(t);
        crate::localize::own::exchange(process, &names, &mine, false, |v| {
            self.sum_over_ranks(v, "the nodes' own findings (all_reduce)")
        })
    }

    /// [`Measurer::own_findings`], marked shared (`findings_shared`) and kept by the recorder
    /// thread for the report.
    pub(super) fn keep_own_findings(
        &self,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<Vec<NodeFindings>, RunError> {
        let own = self.own_findings(start)?;
        out.findings_shared = true;
        if start.recorder {
            out.node_findings = own.clone();
        }
        Ok(own)
    }

    /// The coordinator's localization settings, the same bits in every process: each process
    /// looks its floors up by its own GPU, and copies of the localizer that disagreed on them
    /// would hand out different rounds. One sum over the team that only the coordinator's
    /// recorder thread puts numbers into (exact: one value plus zeros).
    fn agreed(&self, cfg: LocalizeConfig, start: &Start) -> Result<LocalizeConfig, RunError> {
        let speaks = self.team.coordinates() && start.recorder;
        let mine = settings(&cfg);
        let put = if speaks { mine } else { vec![0.0; mine.len()] };
        let sums = self.team.sum(&put).map_err(|e| self.team_err(e))?;
        Ok(with_settings(cfg, &sums))
    }

    /// Phase A: every node's GPU pair matrix at once, each round's pair seconds summed over
    /// every rank (one slot per pair, its first rank's): every node's rows, in every process.
    fn gpu_pairs_at_once(
        &self,
        bytes: u64,
        loops: (u32, u32),
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<Vec<PairRow>, RunError> {
        let t = &start.topology;
        let me = self.rank as usize;
        start.phase(&format!(
            "phase A: every node's GPU pairs at once, sendrecv {}",
            crate::model::size::human(bytes)
        ));
        let mut rows = Vec::new();
        for round in &gpu_rounds(t) {
            let partner = crate::model::pairs::partner(round, me);
            let (secs, gpu_ops) = self.timed_exchange(partner, bytes, loops, true, start, out)?;
            let gpu_secs = settled_mean(&gpu_ops);
            // Three slots per pair (one sum for thousands of nodes stays small): the host's time
            // by its first rank, then each end's GPU time per operation, the first left out;
            // the pair's GPU number is its faster end's (`RoundTimes::pair`).
            let n = round.len();
            let mut led: Vec<(u64, f64)> = Vec::new();
            for (i, &(a, b)) in round.iter().enumerate() {
                if a == me {
                    led.push((i as u64, secs));
                    led.push(((n + i) as u64, gpu_secs));
                } else if b == me {
                    led.push(((2 * n + i) as u64, gpu_secs));
                }
            }
            let vector = slots(3 * n, &led).map_err(RunError::Runtime)?;
            let sums = self.sum_over_ranks(&vector, "phase A's pair times (all_reduce)")?;
            for (i, &pair) in round.iter().enumerate() {
                // Each end as one settled operation (a leading zero stands for the first).
                let times = RoundTimes {
                    host: vec![sums[i], sums[i]],
                    gpu: vec![vec![0.0, sums[n + i]], vec![0.0, sums[2 * n + i]]],
                };
                rows.push(gpu_row(t, pair, times.pair(0, 1), bytes));
            }
        }
        Ok(rows)
    }

    /// The localizer's rounds: after each, the round's results summed over every rank, from
    /// which this thread's own conductor (made at the first step) decides where its rank
    /// stands next; every process decides the same, so the pairs meet. A retest round of a
    /// budgeted plan takes twice the exchanges; returns beside the summary the widest spread (`time_budget::spread`)
    /// of this rank's retest exchanges by the GPU's clock (0 without one).
    fn conduct_rounds(
        &self,
        bytes: u64,
        loops: (u32, u32),
        start: &Start,
        out: &mut GpuOutcome,
        setup: &Setup,
    ) -> Result<(LocalizeSummary, f64), RunError> {
        let mut noise = 0.0f64;
        let t = &start.topology;
        let me = self.rank as usize;
        let process = t.process_of(me).unwrap_or(0);
        let keeps = keeper(process, self.team.coordinates());
        let (layout, cfg) = (&setup.layout, &setup.cfg);
        let new_conductor = || -> Result<Conductor, String> {
            let localizer = Localizer::new(layout.names.len(), layout.rails.max(1), cfg.clone())
                .map_err(|e| format!("localization: {e}"))?;
            let (locals, alloc) = (setup.locals.clone(), setup.allocation_busbw);
            let known = Box::new(move |round: &crate::localize::Round| match round.phase {
                Phase::Local => locals.clone(),
                _ => vec![alloc; round.groups.len()],
            });
            Ok(Conductor::new(
                localizer,
                layout.clone(),
                t.processes_by_rank(),
                keeps,
                "adaptive",
                cfg.floors.allocation,
                known,
            ))
        };
        let mut conductor = None;
        let gather = |len: usize, led: &[(u64, f64)]| -> Result<ConductorStep, RunError> {
            let vector = slots(len, led).map_err(RunError::Runtime)?;
            let sums =
                self.sum_over_ranks(&vector, "the localization round's results (all_reduce)")?;
            decide_here(&mut conductor, new_conductor, &sums, process, &[me])
                .map_err(RunError::Runtime)
        };
        let measure = |index: u32, ph: Phase, groups: u32, places: &[Place]| {
            start.phase(&format!(
                "localization round {index} ({ph:?}): {groups} node-rail pairs"
            ));
            let partner = places.first().map(|p| p.peer as usize);
            // The tournament after a slow alltoall: at the alltoall's size, judged only
            // against its own pairs.
            let (bytes, loops) = match ph {
                Phase::Paths | Phase::PathRetest => crate::localize::paths::path_round(bytes),
                _ => (bytes, loops),
            };
            let retest = matches!(ph, Phase::Retest | Phase::PathRetest);
            let more = if retest && setup.retest_more { 2 } else { 1 };
            let loops = (loops.0, more * loops.1);
            let (secs, gpu_ops) = self.timed_exchange(partner, bytes, loops, false, start, out)?;
            let gpu_secs = settled_mean(&gpu_ops);
            if retest && gpu_ops.len() > 2 {
                noise = noise.max(crate::model::time_budget::spread(&gpu_ops[1..]));
            }
            // What the path delivered by the faster of the two clocks: the host's can only be
            // slowed by the host (a late launch, a descheduled thread), the GPU's only by
            // waiting inside the first operation, which `settled_mean` leaves out. A busy host
            // that also slows the GPUs' clock (NCCL's proxy threads feed the network) is named
            // by the host's own fact (`facts::host_load`), not by these rounds.
            let delivered = busbw(bytes as f64, secs).max(busbw(bytes as f64, gpu_secs));
            Ok(vec![delivered; places.len()])
        };
        let summary =
            follow(&[me], self.nranks as usize, gather, measure).map_err(|e| match e {
                FollowError::Caller(e) => e,
                FollowError::BadStep(why) => {
                    RunError::Runtime(format!("localization: this rank's step: {why}"))
                }
            })?;
        Ok((summary, noise))
    }
}

/// The smallest exchange of a budgeted localization round. Why: one H200, 8 emulated nodes,
/// two busy loops per core: the all_reduce read 0.016 GB/s (its ring paced by the scheduler),
/// so the rounds sized from it took 4 MiB x 3, and healthy pairs read 0.13-0.26 GB/s: 5 of 9
/// healthy runs FAILed a node or pair; counted at 32 MiB the same pairs read within 3%
/// (bench-core/benchmarks/results/2026-12-02-h200x1-fabric-budgeted). At 1 GB/s 16 MiB is 16 ms.
const ROUND_MIN_BYTES: u64 = 16 << 20;

/// What every thread's conductor is made from: the layout, the localizer's settings, phase
/// A's number per node and the allocation-wide collective's busbw (0 when none was measured).
struct Setup {
    layout: Layout,
    cfg: LocalizeConfig,
    locals: Vec<f64>,
    allocation_busbw: f64,
    /// Whether a retest round takes twice the exchanges (a budgeted plan: its counts are its
    /// own; a counted plan's retests keep the plan's count).
    retest_more: bool,
}

/// The printer's part: phase A's pair table and one line with what the localizer found.
fn print_localized(
    show: &dyn Show,
    rows: &[PairRow],
    (bytes, loops): RoundSize,
    summary: &LocalizeSummary,
) {
    show.pairs(rows, bytes, loops.1, false);
    let found = if summary.reasons.is_empty() {
        "no slow node, rail or node pair".to_string()
    } else {
        summary
            .reasons
            .iter()
            .map(|r| r.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    show.line(&format!(
        "# localization: {} nodes x {} rails, {} rounds ({} after the allocation-wide collective), {found}\n",
        summary.nodes, summary.rails, summary.rounds, summary.localization_rounds,
    ));
}

/// The localization settings one process puts into the team's sum (see `Measurer::agreed`):
/// the fraction, retest, and each floor as (present, value).
fn settings(cfg: &LocalizeConfig) -> Vec<f64> {
    let f = &cfg.floors;
    let mut v = vec![cfg.fraction, cfg.retest as u8 as f64];
    for floor in [f.local, f.allocation, f.pair] {
        v.extend([floor.is_some() as u8 as f64, floor.unwrap_or(0.0)]);
    }
    v
}

/// `cfg` with the settings summed over the team (one process's [`settings`]).
fn with_settings(cfg: LocalizeConfig, v: &[f64]) -> LocalizeConfig {
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    let floor = |i: usize| (at(i) > 0.0).then(|| at(i + 1));
    LocalizeConfig {
        fraction: at(0),
        retest: at(1) > 0.0,
        floors: PairFloors {
            local: floor(2),
            allocation: floor(4),
            pair: floor(6),
        },
        ..cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rows::Ends;

    fn row(node: &str, busbw: f64) -> PairRow {
        PairRow {
            expected: None,
            ends: Ends::Gpus {
                node: node.into(),
                a: 0,
                b: 1,
            },
            ranks: (0, 1),
            bytes: 1,
            time_us: 1.0,
            busbw,
            gpu_busbw: None,
            first_busbw: None,
        }
    }

    #[test]
    fn a_node_is_its_slowest_gpu_pair_and_a_one_gpu_node_is_never_slow() {
        let nodes: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let rows = [row("a", 300.0), row("a", 120.0), row("b", 310.0)];
        assert_eq!(local_values(&nodes, &rows), vec![120.0, 310.0, 310.0]);
        assert_eq!(local_values(&nodes, &[]), vec![1.0; 3]);
    }

    #[test]
    fn the_coordinators_settings_survive_the_sum_bit_for_bit() {
        let cfg = LocalizeConfig {
            fraction: 0.85,
            retest: false,
            floors: PairFloors {
                local: Some(255.1),
                allocation: None,
                pair: Some(0.1 + 0.2),
            },
            ..LocalizeConfig::default()
        };
        // Every other process puts zeros in: the sum is the coordinator's numbers.
        let zeros = vec![0.0; settings(&cfg).len()];
        let summed: Vec<f64> = settings(&cfg)
            .iter()
            .zip(&zeros)
            .map(|(a, b)| a + b + b)
            .collect();
        let other = LocalizeConfig {
            fraction: 0.5,
            ..LocalizeConfig::default()
        };
        assert_eq!(with_settings(other, &summed), cfg);
    }

    #[test]
    fn one_gpu_nodes_have_no_phase_a_floor_and_are_not_slow() {
        let nodes: Vec<String> = ["nA", "nB"].map(String::from).to_vec();
        let rules = [crate::model::floors::tests::rule("sendrecv", 2, 1, 255.0)];
        let floors = crate::model::floors::Floors {
            rules: &rules,
            gpu: crate::model::thresholds::GpuKey::by_name("NVIDIA H200"),
            nodes: 2,
            gpus: 2,
            min_busbw: None,
            in_network_algorithms: false,
        };
        assert_eq!(floors.localization(1 << 28, false, None).local, None);
        assert_eq!(floors.localization(1 << 28, true, None).local, Some(255.0));
        // What the localizer sees for two 1-GPU nodes: equal placeholders, no floor.
        let cfg = crate::localize::LocalizeConfig {
            floors: floors.localization(1 << 28, false, None),
            ..crate::localize::LocalizeConfig::default()
        };
        let (bad, _) = crate::localize::assess::local_bad(&local_values(&nodes, &[]), &cfg);
        assert_eq!(bad, vec![false, false]);
    }
}
