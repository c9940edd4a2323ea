//! The pair matrix: GPU pairs inside each node (rounds of disjoint pairs, every node at once),
//! then node pairs (GPU i of one node with GPU i of the other, all GPUs at once). The schedule
//! and the rows are pure functions of the topology and the measured times; the measuring is
//! `exchanges`'.

use super::busbw;
use super::gpu_time::{faster_end, settled_mean};
use crate::measure::rows::{Ends, PairRow};
use crate::meet::topology::Topology;
use crate::model::time_budget::{self, Sizing, StepBudget};

mod exchanges;

/// One round of node pairs: the rank pairs measured at once, and the node pairs (indices into
/// the topology's node names) they make up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeRound {
    pub ranks: Vec<(usize, usize)>,
    pub nodes: Vec<(usize, usize)>,
}

/// Every round of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Schedule {
    /// Per round: disjoint GPU pairs (global ranks) of every node.
    pub gpu_rounds: Vec<Vec<(usize, usize)>>,
    pub node_rounds: Vec<NodeRound>,
}

/// Rounds of GPU pairs inside nodes, every node at once (round k of every node together).
pub(super) fn gpu_rounds(t: &Topology) -> Vec<Vec<(usize, usize)>> {
    let mut gpu_rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    for node in 0..t.node_names().len() {
        let locals = t.ranks_of(node);
        for (k, round) in crate::model::pairs::rounds(locals.len())
            .into_iter()
            .enumerate()
        {
            gpu_rounds.resize_with(gpu_rounds.len().max(k + 1), Vec::new);
            gpu_rounds[k].extend(round.into_iter().map(|(a, b)| (locals[a], locals[b])));
        }
    }
    gpu_rounds
}

pub(super) fn schedule(t: &Topology) -> Schedule {
    let gpu_rounds = gpu_rounds(t);
    let node_rounds = crate::model::pairs::rounds(t.node_names().len())
        .into_iter()
        .map(|round| {
            let mut ranks = Vec::new();
            for &(a, b) in &round {
                let (ra, rb) = (t.ranks_of(a), t.ranks_of(b));
                ranks.extend(ra.into_iter().zip(rb));
            }
            NodeRound {
                ranks,
                nodes: round,
            }
        })
        .collect();
    Schedule {
        gpu_rounds,
        node_rounds,
    }
}

/// The partners `me` meets in `rounds`, to connect at once before the rounds: none with fewer
/// than two (its one round's warm-up connects it as early) or more than a buffer of `buffer`
/// bytes has bytes (one byte per partner).
pub(super) fn connect_first(rounds: &[Vec<(usize, usize)>], me: usize, buffer: u64) -> Vec<usize> {
    let partners: Vec<usize> = rounds
        .iter()
        .filter_map(|r| crate::model::pairs::partner(r, me))
        .collect();
    if partners.len() < 2 || partners.len() as u64 > buffer {
        return Vec::new();
    }
    partners
}

/// Each rank's seconds in one round, by both clocks (0 and nothing for ranks without a
/// partner).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RoundTimes {
    /// Per operation by the host's clock around the whole loop, as nccl-tests times it.
    pub host: Vec<f64>,
    /// Each operation's seconds by the GPU's clock (`gpu_time`).
    pub gpu: Vec<Vec<f64>>,
}

impl RoundTimes {
    /// A pair's seconds per operation: the slower end by the host's clock; by the GPUs' each
    /// operation at its faster end (`gpu_time::faster_end`), the first left out
    /// (`gpu_time::settled_mean`). None when the GPUs timed nothing.
    pub fn pair(&self, a: usize, b: usize) -> (f64, Option<f64>) {
        let host = self.host[a].max(self.host[b]);
        let ops = faster_end(&self.gpu[a], &self.gpu[b]);
        let gpu = Some(settled_mean(&ops)).filter(|&g| g > 0.0);
        (host, gpu)
    }

    /// The spread (`time_budget::spread`) of a pair's operations by the GPUs' clock, each at
    /// its faster end, the first left out (as `pair` takes them).
    pub fn spread(&self, a: usize, b: usize) -> f64 {
        let ops = faster_end(&self.gpu[a], &self.gpu[b]);
        time_budget::spread(ops.get(1..).unwrap_or_default())
    }

    /// The widest spread of `round`'s pairs.
    pub fn widest(&self, round: &[(usize, usize)]) -> f64 {
        round
            .iter()
            .map(|&(a, b)| self.spread(a, b))
            .fold(0.0, f64::max)
    }
}

/// The rows of one round of GPU pairs.
pub(super) fn gpu_rows(
    t: &Topology,
    round: &[(usize, usize)],
    times: &RoundTimes,
    bytes: u64,
) -> Vec<PairRow> {
    round
        .iter()
        .map(|&(a, b)| gpu_row(t, (a, b), times.pair(a, b), bytes))
        .collect()
}

/// The row of one GPU pair that took `secs` per operation by the host's clock (and `gpu_secs`
/// by the GPUs').
pub(super) fn gpu_row(
    t: &Topology,
    (a, b): (usize, usize),
    (secs, gpu_secs): (f64, Option<f64>),
    bytes: u64,
) -> PairRow {
    let local = |r| t.local_index(r).unwrap_or(0);
    PairRow {
        expected: None,
        ends: Ends::Gpus {
            node: t.node_of(a).unwrap_or_default().to_string(),
            a: local(a) as u32,
            b: local(b) as u32,
        },
        ranks: (a as u32, b as u32),
        bytes,
        time_us: secs * 1e6,
        busbw: busbw(bytes as f64, secs),
        gpu_busbw: gpu_secs.map(|g| busbw(bytes as f64, g)),
        first_busbw: None,
    }
}

/// The rows of one round of node pairs: a node pair's time is its slowest GPU's, its bandwidth
/// the sum over its GPUs (all at once); the same by the GPUs' clock.
pub(super) fn node_rows(
    t: &Topology,
    round: &NodeRound,
    times: &RoundTimes,
    bytes: u64,
) -> Vec<PairRow> {
    let names = t.node_names();
    round
        .nodes
        .iter()
        .map(|&(na, nb)| {
            let members: Vec<(usize, usize)> = round
                .ranks
                .iter()
                .copied()
                .filter(|&(a, b)| t.node_index(a) == Some(na) && t.node_index(b) == Some(nb))
                .collect();
            let each: Vec<(f64, Option<f64>)> =
                members.iter().map(|&(a, b)| times.pair(a, b)).collect();
            let secs = each.iter().map(|e| e.0).fold(0.0, f64::max);
            let gpu_secs = each
                .iter()
                .map(|e| e.1)
                .try_fold(0.0, |m: f64, g| g.map(|g| m.max(g)));
            PairRow {
                expected: None,
                ends: Ends::Nodes(names[na].clone(), names[nb].clone()),
                ranks: members
                    .first()
                    .map_or((0, 0), |&(a, b)| (a as u32, b as u32)),
                bytes,
                time_us: secs * 1e6,
                busbw: busbw(bytes as f64 * members.len() as f64, secs),
                gpu_busbw: gpu_secs
                    .filter(|_| !members.is_empty())
                    .map(|g| busbw(bytes as f64 * members.len() as f64, g)),
                first_busbw: None,
            }
        })
        .collect()
}

/// A round's message size and (warm-up, timed) exchanges.
pub(super) type RoundSize = (u64, (u32, u32));

/// The size and exchanges of a budgeted round (`seconds` each) of a step that may measure up
/// to `plan` and at least `min_bytes`, on a path that moved `rate` bytes a second (`from` says what read it), and the
/// report's record of it. The probe connected the pairs: one warm-up exchange is left.
pub(super) fn sized_by_rate(
    step: &str,
    (rate, from): (f64, String),
    (plan, min_bytes): (RoundSize, u64),
    seconds: f64,
    floor_held: &dyn Fn(u64) -> bool,
) -> (RoundSize, Sizing) {
    let b = StepBudget {
        seconds,
        max_bytes: plan.0,
        min_bytes,
        max_samples: plan.1 .1,
        extra_ops: 1,
        placements: 1,
    };
    let choice = time_budget::choose(&b, rate);
    let sized = match choice.why {
        time_budget::SizeWhy::NoRate => plan,
        _ => (choice.bytes, (1, choice.samples)),
    };
    let sizing = Sizing {
        step: step.into(),
        budget_s: seconds,
        rate_gbs: rate / 1e9,
        rate_from: from,
        bytes: sized.0,
        why: choice.why,
        samples: sized.1 .1,
        spread: 0.0,
        stopped: None,
        floor_held: floor_held(sized.0),
    };
    (sized, sizing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::Member;

    fn topology(nodes: &[(&str, u32)]) -> Topology {
        let mut first = 0;
        let members: Vec<Member> = nodes
            .iter()
            .enumerate()
            .map(|(i, &(host, ngpus))| {
                let m = Member {
                    proc_rank: i as u32,
                    host: host.into(),
                    pid: 1,
                    ngpus,
                    first_rank: first,
                };
                first += ngpus;
                m
            })
            .collect();
        Topology::new(&members)
    }

    #[test]
    fn a_budgeted_round_fits_its_seconds_and_keeps_the_plan_without_a_rate() {
        let plan = (256 << 20, (2, 5));
        let held = |b: u64| b >= 256 << 20;
        // 0.5 GB/s over sockets, 0.15 s a round of 1 warm-up + 5 exchanges: 12.5 MB: 8 MiB.
        let (sized, s) = sized_by_rate(
            "node_pairs",
            (0.5e9, "x".into()),
            (plan, time_budget::MIN_BYTES),
            0.15,
            &held,
        );
        assert_eq!(sized, (8 << 20, (1, 5)));
        assert_eq!((s.bytes, s.samples, s.floor_held), (8 << 20, 5, false));
        assert!(6.0 * (8 << 20) as f64 / 0.5e9 <= 0.15);
        // NVLink: the plan's size (its floor holds), one warm-up fewer (the probe connected).
        let (fast, s) = sized_by_rate(
            "gpu_pairs",
            (200e9, "x".into()),
            (plan, time_budget::MIN_BYTES),
            0.15,
            &held,
        );
        assert_eq!((fast, s.floor_held), ((256 << 20, (1, 5)), true));
        // No rate: the plan as written.
        let (none, s) = sized_by_rate(
            "node_pairs",
            (0.0, "x".into()),
            (plan, time_budget::MIN_BYTES),
            0.15,
            &held,
        );
        assert_eq!((none, s.why), (plan, time_budget::SizeWhy::NoRate));
    }

    #[test]
    fn two_nodes_of_two_gpus_measure_their_gpu_pairs_at_once_then_the_node_pair() {
        let s = schedule(&topology(&[("a", 2), ("b", 2)]));
        assert_eq!(s.gpu_rounds, vec![vec![(0, 1), (2, 3)]]);
        assert_eq!(
            s.node_rounds,
            vec![NodeRound {
                ranks: vec![(0, 2), (1, 3)],
                nodes: vec![(0, 1)],
            }]
        );
    }

    #[test]
    fn uneven_nodes_pair_only_the_gpus_both_have() {
        let t = topology(&[("a", 3), ("b", 1)]);
        let s = schedule(&t);
        assert_eq!(s.gpu_rounds.len(), 3, "{s:?}");
        assert!(s.gpu_rounds.iter().all(|r| r.len() == 1));
        assert_eq!(s.node_rounds[0].ranks, vec![(0, 3)]);
        // One node: no node pairs at all.
        assert!(schedule(&topology(&[("a", 4)])).node_rounds.is_empty());
    }

    #[test]
    fn every_gpu_of_a_node_connects_its_partners_at_once_or_none_does() {
        let t = topology(&[("a", 4), ("b", 4)]);
        let rounds = gpu_rounds(&t);
        // Each of 4 GPUs meets its 3 node-mates, never a GPU of the other node.
        for me in 0..8 {
            let mut p = connect_first(&rounds, me, 1 << 20);
            p.sort();
            let mates: Vec<usize> = (me / 4 * 4..me / 4 * 4 + 4).filter(|&r| r != me).collect();
            assert_eq!(p, mates, "rank {me}");
        }
        // Two GPUs: one round, nothing to gain; a buffer smaller than the partners: none.
        assert!(connect_first(&gpu_rounds(&topology(&[("a", 2)])), 0, 1 << 20).is_empty());
        assert!(connect_first(&rounds, 0, 2).is_empty());
        assert_eq!(connect_first(&rounds, 0, 3).len(), 3);
    }

    #[test]
    fn rows_take_the_slower_endpoint_and_node_pairs_sum_their_gpus() {
        let t = topology(&[("a", 2), ("b", 2)]);
        let ops = |v: f64| vec![v, v];
        let times = RoundTimes {
            host: vec![0.001, 0.002, 0.001, 0.0],
            gpu: vec![ops(0.0005), ops(0.001), ops(0.0), ops(0.0)],
        };
        let gpu = gpu_rows(&t, &[(0, 1), (2, 3)], &times, 1_000_000);
        assert_eq!(gpu[0].gpus(), Some(("a", 0, 1)));
        assert_eq!((gpu[0].time_us, gpu[0].busbw), (2000.0, 0.5));
        // By the GPUs' clock the faster end: 0.5 ms, 2 GB/s; a pair whose GPUs timed nothing
        // has no GPU number.
        assert_eq!(gpu[0].gpu_busbw, Some(2.0));
        assert_eq!(gpu[1].gpu_busbw, None);
        assert_eq!(gpu[1].gpus(), Some(("b", 0, 1)));
        assert_eq!(gpu[1].ranks, (2, 3));
        let round = &schedule(&t).node_rounds[0];
        let node = node_rows(&t, round, &times, 1_000_000);
        assert_eq!(node.len(), 1);
        assert_eq!(node[0].nodes(), Some(("a", "b")));
        // Two GPU pairs of 1 MB each, the slower in 2 ms: 1 GB/s.
        assert_eq!((node[0].time_us, node[0].busbw), (2000.0, 1.0));
        // GPU 0<->2 timed 0.5 ms (rank 2's GPU nothing), 1<->3 1 ms: the slower, 2 MB in 1 ms.
        assert_eq!(node[0].gpu_busbw, Some(2.0));
        // Spread by the faster ends, the first operation left out: 0.5 ms twice (0), while
        // 1<->3 read 1 ms and rank 3 nothing: also steady.
        assert_eq!(times.spread(0, 1), 0.0);
        let jitter = RoundTimes {
            host: vec![0.0; 4],
            gpu: vec![vec![9.0, 0.9, 1.1], vec![9.0, 0.9, 1.1], vec![], vec![]],
        };
        assert!((jitter.widest(&[(0, 1), (2, 3)]) - 0.1).abs() < 1e-12);
        // Nothing timed: no bandwidth rather than infinity.
        let none = RoundTimes {
            host: vec![0.0; 4],
            gpu: vec![Vec::new(); 4],
        };
        assert_eq!(gpu_rows(&t, &[(0, 1)], &none, 1)[0].busbw, 0.0);
        assert_eq!(gpu_rows(&t, &[(0, 1)], &none, 1)[0].gpu_busbw, None);
    }
}
