//! The adaptive node-pair plan of a multi-node check, on real GPUs: phase A is the GPU pair
//! matrix of every node at once (on each node's own communicator), phase B the plan's collective
//! over every rank (measured just before), then the localizer's rounds, each a set of disjoint
//! rank pairs exchanging with NCCL sendrecv on the check's communicator.
//!
//! The control plane carries O(N) bytes a round: each process sends only the results its ranks
//! lead (a gather), and hears back only what concerns it: its node's GPU pairs in phase A, its
//! ranks' places in the next round after that. The coordinator alone runs the localizer
//! (`localize::conduct`), so no process ever holds every group's result but the coordinator.

use super::measure::Measurer;
use super::output::{pair_table, phase, print};
use super::pair_matrix::{busbw, gpu_rounds, gpu_row};
use super::{Outcome, RunError, Start};
use crate::localize::conduct::{decide_in, follow, Conductor, FollowError, Place, Step};
use crate::localize::layout::Layout;
use crate::localize::{Config, Localizer, Phase, Plan, Summary};
use crate::report::PairRow;
use crate::topology::Topology;

/// Node `i`'s phase-A number: its slowest GPU pair. A node with one GPU has no pair and cannot
/// be slow on its own: it gets the best value, so it neither fails nor lowers the reference.
pub(super) fn local_values(nodes: &[String], rows: &[PairRow]) -> Vec<f64> {
    let worst: Vec<Option<f64>> = nodes
        .iter()
        .map(|n| {
            rows.iter()
                .filter(|r| &r.node == n)
                .map(|r| r.busbw)
                .reduce(f64::min)
        })
        .collect();
    let best = worst.iter().flatten().copied().fold(1.0, f64::max);
    worst.into_iter().map(|w| w.unwrap_or(best)).collect()
}

impl Measurer<'_> {
    pub(super) fn run_localized(
        &self,
        bytes: u64,
        loops: (u32, u32),
        start: &Start,
        out: &mut Outcome,
    ) -> Result<(), RunError> {
        let layout = Layout::new(&start.topology);
        let rows = self.gpu_pairs_at_once(bytes, loops, start, out)?;
        let allocation = out.last_collective;
        let cfg = self.localization_config(bytes, start, &rows, allocation);
        // Only the coordinator's process has every node's rows (it is the one that decides).
        let locals = local_values(&layout.names, &rows);
        // Without a collective over every rank before the pairs, B has no number and no
        // floor: the localizer then screens (it never passes B unjudged).
        let allocation_busbw = allocation.map_or(0.0, |a| a.2);
        let setup = Setup {
            layout,
            cfg,
            locals,
            allocation_busbw,
        };
        let summary = self.conduct_rounds(bytes, loops, start, out, &setup)?;
        if start.printer {
            print_localized(&rows, bytes, loops, &summary);
        }
        if start.recorder {
            out.pairs.extend(rows);
            out.localization = Some(summary);
        }
        Ok(())
    }

    /// Phase A: every node's GPU pair matrix at once, each pair's seconds gathered to the
    /// processes that need them (see [`node_replies`]); the rows this process heard of.
    fn gpu_pairs_at_once(
        &self,
        bytes: u64,
        loops: (u32, u32),
        start: &Start,
        out: &mut Outcome,
    ) -> Result<Vec<PairRow>, RunError> {
        let t = &start.topology;
        let me = self.rank as usize;
        phase(
            start,
            &format!(
                "phase A: every node's GPU pairs at once, sendrecv {}",
                crate::size::human(bytes)
            ),
        );
        let mut rows = Vec::new();
        for round in &gpu_rounds(t) {
            let partner = crate::pairs::partner(round, me);
            let secs = self.timed_exchange(partner, bytes, loops, true, start, out)?;
            let led: Vec<(u64, f64)> = round
                .iter()
                .position(|&(a, _)| a == me)
                .map(|i| (i as u64, secs))
                .into_iter()
                .collect();
            let coordinator = t.process_of(me).unwrap_or(0);
            let got: Vec<(u64, f64)> = self
                .team
                .gather(round.len(), &led, |sums| {
                    Ok(node_replies(t, round, sums, coordinator))
                })
                .map_err(|e| self.team_err(e))?;
            for (i, secs) in got {
                if let Some(&pair) = round.get(i as usize) {
                    rows.push(gpu_row(t, pair, secs, bytes));
                }
            }
        }
        Ok(rows)
    }

    /// The localizer's settings: the outlier fraction and the floors for the pairs and for the
    /// allocation-wide collective measured just before (`allocation`: collective, size, busbw).
    fn localization_config(
        &self,
        bytes: u64,
        start: &Start,
        rows: &[PairRow],
        allocation: Option<(&'static str, u64, f64)>,
    ) -> Config {
        let floors = start.floors();
        Config {
            fraction: self.opts().config.outliers.fraction,
            floors: floors.localization(
                bytes,
                !rows.is_empty(),
                allocation.map(|(c, size, _)| (c, size)),
            ),
            plan: Plan::Adaptive,
            retest: self.opts().config.outliers.retest,
            ..Config::default()
        }
    }

    /// The localizer's rounds: the coordinator decides each step (its conductor is made on the
    /// first gather), every process measures its places and reports back, until the summary.
    fn conduct_rounds(
        &self,
        bytes: u64,
        loops: (u32, u32),
        start: &Start,
        out: &mut Outcome,
        setup: &Setup,
    ) -> Result<Summary, RunError> {
        let t = &start.topology;
        let me = self.rank as usize;
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
                t.process_of(me).unwrap_or(0),
                "adaptive",
                cfg.floors.allocation,
                known,
            ))
        };
        let gather = |len: usize, led: &[(u64, f64)]| -> Result<Step, RunError> {
            self.team
                .gather(len, led, |sums| {
                    let mut slot = start.conductor.lock().unwrap_or_else(|p| p.into_inner());
                    decide_in(&mut slot, new_conductor, sums)
                })
                .map_err(|e| self.team_err(e))
        };
        let measure = |index: u32, ph: Phase, groups: u32, places: &[Place]| {
            phase(
                start,
                &format!("localization round {index} ({ph:?}): {groups} node-rail pairs"),
            );
            let partner = places.first().map(|p| p.peer as usize);
            let secs = self.timed_exchange(partner, bytes, loops, false, start, out)?;
            Ok(vec![busbw(bytes as f64, secs); places.len()])
        };
        follow(&[me], self.nranks as usize, gather, measure).map_err(|e| match e {
            FollowError::Caller(e) => e,
            FollowError::BadStep(why) => {
                RunError::Runtime(format!("localization: the coordinator's step: {why}"))
            }
        })
    }
}

/// What the coordinator's conductor is made from: the layout, the localizer's settings, phase
/// A's number per node and the allocation-wide collective's busbw (0 when none was measured).
struct Setup {
    layout: Layout,
    cfg: Config,
    locals: Vec<f64>,
    allocation_busbw: f64,
}

/// The printer's part: phase A's pair table and one line with what the localizer found.
fn print_localized(rows: &[PairRow], bytes: u64, loops: (u32, u32), summary: &Summary) {
    print(&pair_table(rows, bytes, loops.1, false));
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
    print(&format!(
        "# localization: {} nodes x {} rails, {} rounds ({} after the allocation-wide collective), {found}\n",
        summary.nodes, summary.rails, summary.rounds, summary.localization_rounds,
    ));
}

/// Phase A's replies, in process-rank order: the coordinator (`coordinator`) gets every pair's
/// seconds (it judges every node), every other process the pairs of its own node.
fn node_replies(
    t: &Topology,
    round: &[(usize, usize)],
    sums: &[f64],
    coordinator: u32,
) -> Vec<Vec<(u64, f64)>> {
    let procs = t.processes_by_rank();
    let count = procs.iter().map(|&p| p as usize + 1).max().unwrap_or(1);
    let mut node_of_proc = vec![None; count];
    for (rank, &p) in procs.iter().enumerate() {
        node_of_proc[p as usize] = t.node_index(rank);
    }
    let mut by_node: std::collections::HashMap<usize, Vec<(u64, f64)>> = Default::default();
    for (i, (&(a, _), &secs)) in round.iter().zip(sums).enumerate() {
        if let Some(node) = t.node_index(a) {
            by_node.entry(node).or_default().push((i as u64, secs));
        }
    }
    (0..count)
        .map(|p| {
            if p == coordinator as usize {
                sums.iter()
                    .enumerate()
                    .map(|(i, &s)| (i as u64, s))
                    .collect()
            } else {
                node_of_proc[p]
                    .and_then(|n| by_node.get(&n).cloned())
                    .unwrap_or_default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PairKind;

    fn row(node: &str, busbw: f64) -> PairRow {
        PairRow {
            expected: None,
            kind: PairKind::Gpu,
            node: node.into(),
            a: "GPU0".into(),
            b: "GPU1".into(),
            ranks: (0, 1),
            bytes: 1,
            time_us: 1.0,
            busbw,
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
    fn one_gpu_nodes_have_no_phase_a_floor_and_are_not_slow() {
        let nodes: Vec<String> = ["nA", "nB"].map(String::from).to_vec();
        let rules = [crate::floors::tests::rule("sendrecv", 2, 1, 255.0)];
        let floors = crate::floors::Floors {
            rules: &rules,
            gpu: crate::thresholds::Gpu::by_name("NVIDIA H200"),
            nodes: 2,
            gpus: 2,
            min_busbw: None,
            in_network_algorithms: false,
        };
        assert_eq!(floors.localization(1 << 28, false, None).local, None);
        assert_eq!(floors.localization(1 << 28, true, None).local, Some(255.0));
        // What the localizer sees for two 1-GPU nodes: equal placeholders, no floor.
        let cfg = crate::localize::Config {
            floors: floors.localization(1 << 28, false, None),
            ..crate::localize::Config::default()
        };
        let (bad, _) = crate::localize::assess::local_bad(&local_values(&nodes, &[]), &cfg);
        assert_eq!(bad, vec![false, false]);
    }
}
