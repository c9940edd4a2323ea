//! The adaptive node-pair plan of a multi-node check, on real GPUs: phase A is the GPU pair
//! matrix of every node at once (on each node's own communicator), phase B the plan's collective
//! over every rank (measured just before), then the localizer's rounds, each a set of disjoint
//! rank pairs exchanging with NCCL sendrecv on the check's communicator. Every round ends in one
//! sum as long as the round has groups (each rank writes only the groups it leads), never one
//! number per rank. Every rank runs the same localizer on the same sums, so all agree on the
//! next round without another message.

use super::measure::Measurer;
use super::output::{pair_table, phase, print};
use super::pair_matrix::{busbw, gpu_rows, schedule};
use super::{Outcome, RunError, Start};
use crate::localize::drive::{drive, DriveError, Layout};
use crate::localize::{self, Config, Floors, Localizer, Phase, Plan, Summary};
use crate::report::PairRow;

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

/// Phase A's floor: the GPU-pair rule, but only when some node had a GPU pair to measure. With one
/// GPU per node nothing was measured and every node's placeholder would sit below any floor (a
/// healthy 2 x 1-GPU check on 2x H200 FAILed as "nA: its own GPUs: local busbw 1.0 < 255.0").
pub(super) fn local_floor(rows: &[PairRow], pair_rule: Option<f64>) -> Option<f64> {
    if rows.is_empty() {
        None
    } else {
        pair_rule
    }
}

impl Measurer<'_> {
    pub(super) fn run_localized(
        &self,
        bytes: u64,
        loops: (u32, u32),
        start: &Start,
        out: &mut Outcome,
    ) -> Result<(), RunError> {
        let t = &start.topology;
        let layout = Layout::new(t);
        let me = self.rank as usize;
        phase(
            start,
            &format!(
                "phase A: every node's GPU pairs at once, sendrecv {}",
                crate::size::human(bytes)
            ),
        );
        let mut rows = Vec::new();
        for round in &schedule(t).gpu_rounds {
            let secs = self.pair_sums(round, bytes, loops, true, start, out)?;
            let mut times = vec![0.0; self.nranks as usize];
            for (&(a, b), &s) in round.iter().zip(&secs) {
                times[a] = s;
                times[b] = s;
            }
            rows.extend(gpu_rows(t, round, &times, bytes));
        }
        let floors = start.floors();
        let allocation = out.last_collective;
        let cfg = Config {
            fraction: self.opts().config.outliers.fraction,
            floors: Floors {
                local: local_floor(&rows, floors.floor("sendrecv", 2, bytes)),
                allocation: allocation.and_then(|(c, size, _)| floors.floor(c, self.nranks, size)),
                // No rule covers one GPU pair across two nodes (the sendrecv rule with 2 GPUs is
                // an NVLink pair's): node pairs are judged against each other only.
                pair: None,
            },
            plan: Plan::Adaptive,
            ..Config::default()
        };
        let localizer = Localizer::new(layout.names.len(), layout.rails.max(1), cfg.clone())
            .map_err(|e| RunError::Runtime(format!("localization: {e}")))?;
        let locals = local_values(&layout.names, &rows);
        let mut pair_groups = 0;
        let verdict = drive(localizer, |round| match round.phase {
            Phase::Local => Ok(locals.clone()),
            // Without a collective over every rank before the pairs, B has no number and no
            // floor: the localizer then screens (it never passes B unjudged).
            Phase::Allocation => Ok(vec![allocation.map_or(0.0, |a| a.2)]),
            _ => {
                phase(
                    start,
                    &format!(
                        "localization round {} ({:?}): {} node-rail pairs",
                        round.index,
                        round.phase,
                        round.groups.len()
                    ),
                );
                pair_groups += round.groups.len();
                let partner = layout.partner(round, me);
                let secs =
                    self.timed_exchange(partner.map(|p| p.1), bytes, loops, false, start, out)?;
                let mine = layout.contribution(round, me, |_| busbw(bytes as f64, secs));
                self.team.sum(&mine).map_err(|e| self.team_err(e))
            }
        })
        .map_err(|e| match e {
            DriveError::Measure(e) => e,
            DriveError::Localize(e) => RunError::Runtime(format!("localization: {e}")),
        })?;
        let reasons = localize::reasons::reasons(&verdict, &layout.names);
        if start.printer {
            print(&pair_table(&rows, bytes, loops.1, false));
            print(&format!(
                "# localization: {} nodes x {} rails, {} rounds ({} after the allocation-wide collective), {}\n",
                layout.names.len(),
                layout.rails,
                verdict.rounds,
                verdict.localization_rounds,
                if reasons.is_empty() {
                    "no slow node, rail or node pair".to_string()
                } else {
                    reasons.iter().map(|r| r.message.as_str()).collect::<Vec<_>>().join("; ")
                }
            ));
        }
        if start.recorder {
            out.pairs.extend(rows);
            out.localization = Some(Summary {
                plan: "adaptive".into(),
                nodes: layout.names.len(),
                rails: layout.rails,
                rounds: verdict.rounds,
                localization_rounds: verdict.localization_rounds,
                allocation_busbw: verdict.allocation_busbw,
                allocation_floor: cfg.floors.allocation,
                pair_groups,
                reasons,
            });
        }
        Ok(())
    }

    /// One round of disjoint rank pairs; every pair's seconds per operation, the same on every
    /// rank, from one sum as long as the round (each pair's first rank writes its time).
    fn pair_sums(
        &self,
        round: &[(usize, usize)],
        bytes: u64,
        loops: (u32, u32),
        in_node: bool,
        start: &Start,
        out: &mut Outcome,
    ) -> Result<Vec<f64>, RunError> {
        let me = self.rank as usize;
        let partner = crate::pairs::partner(round, me);
        let secs = self.timed_exchange(partner, bytes, loops, in_node, start, out)?;
        let mine: Vec<f64> = round
            .iter()
            .map(|&(a, _)| if a == me { secs } else { 0.0 })
            .collect();
        self.team.sum(&mine).map_err(|e| self.team_err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PairKind;

    fn row(node: &str, busbw: f64) -> PairRow {
        PairRow {
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
        assert_eq!(local_floor(&[], Some(255.0)), None);
        assert_eq!(local_floor(&[row("a", 300.0)], Some(255.0)), Some(255.0));
        // What the localizer sees for two 1-GPU nodes: equal placeholders, no floor.
        let cfg = crate::localize::Config {
            floors: crate::localize::Floors {
                local: local_floor(&[], Some(255.0)),
                allocation: None,
                pair: None,
            },
            ..crate::localize::Config::default()
        };
        let (bad, _) = crate::localize::assess::local_bad(&local_values(&nodes, &[]), &cfg);
        assert_eq!(bad, vec![false, false]);
    }
}
