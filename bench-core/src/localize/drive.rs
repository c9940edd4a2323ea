//! The localizer over a real check's ranks: which two global ranks each group of a round pairs,
//! what one rank contributes to a round's sum (only the groups it leads: a vector as long as the
//! round has groups, never one number per rank), and the loop that feeds the sums back. Shared by
//! the GPU runner (NCCL sendrecv) and the GPU-less scale test (the fabric simulation), so both run
//! the same schedule with the same control-plane traffic.

use super::{Group, LocalizeError, Localizer, Round, Verdict};
use crate::topology::Topology;

/// The nodes of a check and their ranks, in the order the localizer numbers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub names: Vec<String>,
    /// Global ranks of every node, by local index.
    pub ranks: Vec<Vec<usize>>,
    /// Rails the localizer measures: the GPU count of the node with the fewest (GPU r of one
    /// node only ever meets GPU r of another, so a rail beyond that has no partner).
    pub rails: usize,
}

impl Layout {
    pub fn new(t: &Topology) -> Layout {
        let names = t.node_names().to_vec();
        let mut ranks = vec![Vec::new(); names.len()];
        for r in 0..t.nranks() as usize {
            if let Some(n) = t.node_index(r) {
                ranks[n].push(r);
            }
        }
        let rails = ranks.iter().map(Vec::len).min().unwrap_or(0);
        Layout {
            names,
            ranks,
            rails,
        }
    }

    /// The global ranks of a pair group's two ends; `None` for other groups or out-of-range
    /// indices (a schedule bug, never a panic).
    pub fn pair_ranks(&self, group: &Group) -> Option<(usize, usize)> {
        match *group {
            Group::Pair {
                a,
                rail_a,
                b,
                rail_b,
            } => Some((
                *self.ranks.get(a)?.get(rail_a)?,
                *self.ranks.get(b)?.get(rail_b)?,
            )),
            _ => None,
        }
    }

    /// Rank `me`'s place in a round of pairs: the group it is in and its peer.
    pub fn partner(&self, round: &Round, me: usize) -> Option<(usize, usize)> {
        round.groups.iter().enumerate().find_map(|(i, g)| {
            let (a, b) = self.pair_ranks(g)?;
            (a == me)
                .then_some((i, b))
                .or_else(|| (b == me).then_some((i, a)))
        })
    }

    /// Whether `me` leads group `group` (writes its result into the round's sum): the first end
    /// of a pair, the first rank of a node, rank 0 for the allocation.
    pub fn leads(&self, group: &Group, me: usize) -> bool {
        match *group {
            Group::Local { node } => self.ranks.get(node).and_then(|r| r.first()) == Some(&me),
            Group::Allocation => me == 0,
            Group::Pair { .. } => self.pair_ranks(group).is_some_and(|(a, _)| a == me),
        }
    }

    /// Rank `me`'s contribution to a round's sum: `value(i)` at the groups it leads, 0 elsewhere.
    pub fn contribution(
        &self,
        round: &Round,
        me: usize,
        mut value: impl FnMut(usize) -> f64,
    ) -> Vec<f64> {
        round
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| if self.leads(g, me) { value(i) } else { 0.0 })
            .collect()
    }
}

/// Why driving the localizer stopped.
#[derive(Debug)]
pub enum DriveError<E> {
    /// Measuring or summing a round failed (the runner's own error).
    Measure(E),
    /// The localizer refused the results (a bug, or a corrupt sum).
    Localize(LocalizeError),
}

/// Runs `localizer` to its verdict; `round_results` measures one round and returns every group's
/// busbw (GB/s), the same on every rank.
pub fn drive<E>(
    mut localizer: Localizer,
    mut round_results: impl FnMut(&Round) -> Result<Vec<f64>, E>,
) -> Result<Verdict, DriveError<E>> {
    while let Some(round) = localizer.next_round() {
        let results = round_results(&round).map_err(DriveError::Measure)?;
        localizer.record(&results).map_err(DriveError::Localize)?;
    }
    Ok(localizer.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::localize::sim::{Fabric, Fault};
    use crate::localize::{Code, Config, Phase};
    use crate::rendezvous::Member;

    fn topology(nodes: usize, gpus: u32) -> Topology {
        let members: Vec<Member> = (0..nodes)
            .map(|i| Member {
                proc_rank: i as u32,
                host: format!("host{i:02}"),
                pid: 1,
                ngpus: gpus,
                first_rank: i as u32 * gpus,
            })
            .collect();
        Topology::new(&members)
    }

    #[test]
    fn groups_map_to_the_ranks_of_their_rails_and_are_led_once() {
        let layout = Layout::new(&topology(4, 2));
        assert_eq!(layout.rails, 2);
        let g = Group::Pair {
            a: 1,
            rail_a: 1,
            b: 3,
            rail_b: 1,
        };
        assert_eq!(layout.pair_ranks(&g), Some((3, 7)));
        let round = Round {
            index: 2,
            phase: Phase::Screen,
            groups: vec![g],
        };
        assert_eq!(layout.partner(&round, 7), Some((0, 3)));
        assert_eq!(layout.partner(&round, 3), Some((0, 7)));
        assert_eq!(layout.partner(&round, 0), None);
        assert_eq!(layout.contribution(&round, 3, |_| 5.0), vec![5.0]);
        assert_eq!(layout.contribution(&round, 7, |_| 5.0), vec![0.0]);
        let bad = Group::Pair {
            a: 9,
            rail_a: 0,
            b: 0,
            rail_b: 0,
        };
        assert_eq!(layout.pair_ranks(&bad), None);
    }

    #[test]
    fn rails_are_the_fewest_gpus_of_any_node() {
        let members = [("a", 4), ("b", 2)]
            .iter()
            .enumerate()
            .map(|(i, &(h, g))| Member {
                proc_rank: i as u32,
                host: h.into(),
                pid: 1,
                ngpus: g,
                first_rank: if i == 0 { 0 } else { 4 },
            })
            .collect::<Vec<_>>();
        assert_eq!(Layout::new(&Topology::new(&members)).rails, 2);
    }

    /// Every rank contributes only what it leads; the sum over ranks is the simulated round.
    #[test]
    fn sums_of_contributions_rebuild_each_round_and_name_the_slow_node() {
        let (n, g) = (16, 4);
        let layout = Layout::new(&topology(n, g as u32));
        let mut fabric = Fabric::healthy(n, g, 7);
        fabric.inject(Fault::NodeNet {
            node: 5,
            factor: 0.5,
        });
        let l = Localizer::new(n, g, Config::default()).unwrap();
        let v = drive::<()>(l, |round| {
            let exact = fabric.measure(round);
            let mut total = vec![0.0; round.groups.len()];
            for me in 0..n * g {
                let c = layout.contribution(round, me, |i| exact[i]);
                total.iter_mut().zip(c).for_each(|(t, v)| *t += v);
            }
            assert_eq!(total, exact, "round {}", round.index);
            Ok(total)
        })
        .unwrap();
        assert_eq!(v.findings.len(), 1, "{v:?}");
        assert_eq!(
            (v.findings[0].code, v.findings[0].nodes.clone()),
            (Code::NodeSlow, vec![5])
        );
    }
}
