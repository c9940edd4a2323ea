//! Every path between nodes: an alltoall beside the all_reduce decides whether every node pair
//! is measured, and the pairs it then measures are judged against each other.
//!
//! The all_reduce's ring uses only the node pairs that are neighbours in node order, and
//! screening measures only those, so a slow path between two other nodes slowed nothing the
//! check measured; an alltoall job (expert parallelism) on that allocation runs at that path's
//! speed. So a multi-node check of `MIN_PATH_NODES..=MAX_PATH_NODES` nodes (below 4 the ring
//! is every node pair) also runs one alltoall over every rank (`alltoall_size`, bit-exact
//! like every collective) and compares its busbw with the all_reduce's of the same run:
//!
//! - Both are bounded by each node's NICs. Per node the all_reduce's busbw is about the NICs'
//!   rate; an alltoall sends (N-1)/N of each rank's data, G ranks a node, over the node's NICs,
//!   so its busbw is about the NICs' rate x `N/(G (N-1)) x (NG-1)/(NG)`
//!   ([`expected_alltoall_ratio`]: 1.0 for 1-GPU nodes, 0.16 for 4 nodes of 8 GPUs).
//! - A path between two nodes shaped to R carries one flow of the alltoall, S/N bytes of each
//!   operation of S: the alltoall then reads about (N-1) x R busbw, whatever the healthy rate.
//!   It slows the alltoall only when R is below a flow's share of a node's NICs (about
//!   1/(N-1) of them): a path faster than that is no fault for an alltoall job either.
//! - The alltoall is slow when it is below `[outliers] alltoall_fraction` (0.5 built in) of that
//!   expectation, by both clocks (the host's and the GPUs'). Only then, or where some node's host
//!   is busy (its scheduler paces both collectives alike: [`measures_every_path`]), are the node pairs measured ([`Paths`]): a
//!   round-robin tournament, every node pair once, G node matchings a round (one a rail), at
//!   the alltoall's size.
//!
//! What sank the first version of these rounds (the paths rounds at a sixteenth of the pair
//! size on every multi-node check, judged against limits that did not come from the paths
//! themselves: on real NCCL between emulated nodes the coordinating node's pairs read 0.5x the
//! others and every healthy fabric FAILed,
//! bench-core/benchmarks/results/2026-11-27-h200x2-cross-paths): here the pairs are measured
//! only after a slow alltoall (a healthy check measures none), a quarter of the plan's pair size
//! with three timed exchanges back to back (each after the first waits for the one before to
//! drain, so the settled ones are bounded by the path, not by NCCL's buffers), and judged only against each other: slow is below
//! `fraction` x the median of every pair of the tournament; a slow pair is measured once more,
//! on the next rail (a path is slow on every rail, a slow NIC on its own);
//! and a path is named only when both its nodes are fast with most of their other partners. A
//! node slow with most of its partners (the coordinating node whose exchanges start late, or a
//! slow NIC) is never named a path, and the tournament names no node: the all_reduce and
//! screening judge nodes.
//!
//! Cost of a healthy check: one alltoall (two untimed and six timed operations at a quarter of
//! the pair size), no pair round on an idle host; under a busy host the tournament too. The fabric simulation (`sim`) models the alltoall from the
//! same per-pair rates as its pairs, with no dependence on message size or timing: it shows the
//! decisions, not that real readings behave.

use super::assess::quantile;
use super::{Code, Group, LocalizeFinding};
use crate::model::localization::Phase;
use crate::model::stats::{num, num_vs};
use nccl_check_contract::report::culprit::Culprit;

/// Fewest nodes the alltoall runs for: with 2 or 3 nodes the all_reduce's ring uses every node
/// pair.
pub const MIN_PATH_NODES: usize = 4;
/// Most nodes: the tournament costs ceil((N-1)/G) rounds when the alltoall is slow, and the
/// alltoall connects every rank with every other (NCCL connects peers on first use).
pub const MAX_PATH_NODES: usize = 32;
/// Retest rounds of the tournament's slow pairs at most (disjoint pairs each).
const MAX_RETEST_ROUNDS: usize = 2;

/// Whether a check of `nodes` nodes runs the alltoall (and, when it is slow, the tournament).
pub fn checks_paths(nodes: usize) -> bool {
    (MIN_PATH_NODES..=MAX_PATH_NODES).contains(&nodes)
}

/// The alltoall's message size and the tournament's, from the plan's pair size: a quarter of
/// it, at least 1 MiB (never more than the plan's own).
pub fn alltoall_size(bytes: u64) -> u64 {
    (bytes / 4).max(1 << 20).min(bytes)
}

/// The tournament's smallest exchange. Why: under a busy host a 4 MiB exchange reads the
/// scheduler as much as the path (one H200, 8 emulated nodes, two busy loops per core: healthy
/// pairs at 4 MiB spread over 0.13-0.26 GB/s, bench-core/benchmarks/results/
/// 2026-12-02-h200x1-fabric-budgeted), and the tournament runs under a busy host ([`measures_every_path`]).
const PATH_MIN_BYTES: u64 = 8 << 20;

/// The tournament's rounds: the message size (the alltoall's, at least [`PATH_MIN_BYTES`],
/// never more than the plan's) and the (warm-up, timed) exchanges.
pub fn path_round(bytes: u64) -> (u64, (u32, u32)) {
    (alltoall_size(bytes).max(PATH_MIN_BYTES).min(bytes), (1, 3))
}

/// The node-pair median at and above which the alltoall (busbw `alltoall`) is slow against
/// the localizer's other rounds: below `fraction` x what those pairs predict
/// (`expected_alltoall_ratio` x `gpus` x their median: a node's all_reduce rides all its
/// GPUs' NICs, a node pair's sendrecv one). Why a second reference: the all_reduce can be
/// bound by its ring's steps, not the NICs, where the alltoall and the pairs (one exchange
/// each) are not (one H200, 8 emulated nodes, no load: the all_reduce at 4 MiB read 0.12
/// GB/s, the node pairs at 16 MiB 0.37-0.40, the alltoall over a path shaped to 60 Mbit/s
/// 0.072: 0.59x the all_reduce, not slow; 0.19x the pairs). None where not judged.
pub fn pairs_limit(alltoall: f64, (nodes, gpus): (usize, usize), fraction: f64) -> Option<f64> {
    let per = fraction * expected_alltoall_ratio(nodes, gpus) * gpus.max(1) as f64;
    (checks_paths(nodes) && alltoall.is_finite() && alltoall >= 0.0 && per > 0.0)
        .then(|| alltoall / per)
}

/// Whether the node pairs measured so far (`pairs`, busbw) put the alltoall below its share
/// of them: their median at or above `limit` (`pairs_limit`).
pub fn slow_against_pairs(limit: Option<f64>, pairs: impl Iterator<Item = f64>) -> bool {
    let median = quantile(pairs, 0.5);
    matches!((limit, median), (Some(l), Some(m)) if m >= l)
}

/// Whether every node pair is measured (the [`PathsDecision`]'s `measured`): when the alltoall
/// is slow against the all_reduce (`alltoall_slow`), or when some node's host is busy
/// (`host_busy`, agreed over every process). Why the second: a busy host paces both
/// collectives by its scheduler, so the alltoall reads like the all_reduce whatever one path
/// delivers (one H200, 8 emulated nodes, one or two busy loops per core: the all_reduce read
/// 0.03 GB/s, the alltoall over a path shaped to 60 Mbit/s 1.1-2.4x it, and the far path
/// PASSed). A fast-looking alltoall there is no evidence that every path is healthy, so the
/// paths are measured directly, each against the others of the same rounds.
///
/// [`PathsDecision`]: crate::model::localization::PathsDecision
pub fn measures_every_path(alltoall_slow: bool, host_busy: bool) -> bool {
    alltoall_slow || host_busy
}

/// The alltoall's busbw per unit of the all_reduce's on a fabric bounded by each node's NICs
/// (`nodes` nodes of `gpus` GPUs; see the module's doc).
pub fn expected_alltoall_ratio(nodes: usize, gpus: usize) -> f64 {
    let (n, g) = (nodes.max(2) as f64, gpus.max(1) as f64);
    n / (g * (n - 1.0)) * (n * g - 1.0) / (n * g)
}

/// Whether the alltoall (its busbw by the faster of the two clocks) is slow against the
/// all_reduce of the same run: below `fraction` (`[outliers] alltoall_fraction`, 0.5 built in: a
/// path at half a flow's share slows an alltoall job 2x) of what the all_reduce predicts. `false` where it cannot be judged (a
/// node count outside `checks_paths`, no all_reduce).
pub fn alltoall_slow(
    alltoall: f64,
    all_reduce: f64,
    (nodes, gpus): (usize, usize),
    fraction: f64,
) -> bool {
    checks_paths(nodes)
        && all_reduce > 0.0
        && alltoall.is_finite()
        && alltoall < fraction * expected_alltoall_ratio(nodes, gpus) * all_reduce
}

/// The tournament: `rounds` node matchings (`model::pairs::rounds`) `g` at once, matching i
/// of a round on rail i, so each GPU (and its NIC) is in one pair a round.
pub(crate) fn tournament(n: usize, g: usize) -> Vec<Vec<Group>> {
    crate::model::pairs::rounds(n)
        .chunks(g.max(1))
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .flat_map(|(rail, m)| m.iter().map(move |&(a, b)| Group::rail_pair(a, b, rail)))
                .collect()
        })
        .collect()
}

/// The tournament's state: its rounds, what they read, the retests.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    n: usize,
    g: usize,
    fraction: f64,
    retest: bool,
    rounds: Vec<Vec<Group>>,
    next: usize,
    readings: Vec<(Group, f64)>,
    /// Node pairs measured again: each with the rail of its retest and the median of the
    /// control pairs measured beside it (none where no two nodes were free).
    retested: Vec<((usize, usize), usize, Option<f64>)>,
    retest_rounds: usize,
}

impl Paths {
    pub fn new(n: usize, g: usize, fraction: f64, retest: bool) -> Paths {
        Paths {
            n,
            g: g.max(1),
            fraction,
            retest,
            rounds: tournament(n, g),
            next: 0,
            readings: Vec::new(),
            retested: Vec::new(),
            retest_rounds: 0,
        }
    }

    /// Whether node pair `(a, b)` was measured again: the rail of its retest and its round's
    /// control median.
    fn retest_of(&self, a: usize, b: usize) -> Option<(usize, Option<f64>)> {
        let key = (a.min(b), a.max(b));
        self.retested
            .iter()
            .find(|r| r.0 == key)
            .map(|r| (r.1, r.2))
    }

    /// The next round: the tournament's, then the retests of its isolated slow pairs, each on
    /// the next rail (GPU r+1 of both nodes): a path is slow on every rail, a slow NIC on its
    /// own (with one GPU a node, the same rail again); the controls after them ([`Self::retest_plan`]).
    pub fn next_round(&self) -> Option<(Phase, Vec<Group>)> {
        if let Some(groups) = self.rounds.get(self.next) {
            return Some((Phase::Paths, groups.clone()));
        }
        if !self.retest || self.retest_rounds >= MAX_RETEST_ROUNDS {
            return None;
        }
        let (retests, controls) = self.retest_plan();
        (!retests.is_empty()).then(|| (Phase::PathRetest, [retests, controls].concat()))
    }

    /// A retest round: the isolated slow pairs not yet measured again, then control pairs of the
    /// nodes left free (each free node with the next free one whose tournament reading was not
    /// slow, rail 0). Why the controls: a retest round runs fewer exchanges at once than a
    /// tournament round, later, under what the host does then, so its readings are held against
    /// pairs measured beside them, not only against the tournament's (one H200, 32 emulated
    /// nodes over loopback: 14 pairs retested at once all read 0.060-0.073 GB/s against a
    /// tournament median of 0.094, and 28 healthy paths were named,
    /// bench-core/benchmarks/results/2026-12-03-h200x1-fabric-32). Deterministic: `record` plans
    /// it again to tell retests from controls.
    fn retest_plan(&self) -> (Vec<Group>, Vec<Group>) {
        let (limit, isolated) = self.judge();
        let mut busy = vec![false; self.n];
        let mut retests = Vec::new();
        for (i, &(group, _)) in self.readings.iter().enumerate() {
            let Some(((a, rail_a), (b, _))) = group.ends() else {
                continue;
            };
            if !isolated[i] || self.retest_of(a, b).is_some() || busy[a] || busy[b] {
                continue;
            }
            busy[a] = true;
            busy[b] = true;
            retests.push(Group::rail_pair(a, b, (rail_a + 1) % self.g));
        }
        let fast = |a: usize, b: usize| {
            self.readings.iter().any(|&(g, v)| {
                g.ends()
                    .is_some_and(|(x, y)| (x.0.min(y.0), x.0.max(y.0)) == (a, b))
                    && v >= limit
            })
        };
        let mut controls = Vec::new();
        for a in 0..self.n {
            if busy[a] {
                continue;
            }
            if let Some(b) = (a + 1..self.n).find(|&b| !busy[b] && fast(a, b)) {
                busy[a] = true;
                busy[b] = true;
                controls.push(Group::rail_pair(a, b, 0));
            }
        }
        (retests, controls)
    }

    /// The readings of the round `next_round` gave (`phase`, `groups`), in its order; a retest's
    /// reading replaces the node pair's first.
    pub fn record(&mut self, phase: Phase, groups: &[Group], results: &[f64]) {
        match phase {
            Phase::PathRetest => {
                let retests = self.retest_plan().0.len().min(groups.len());
                let control = quantile(results.iter().skip(retests).copied(), 0.5);
                self.retest_rounds += 1;
                for (&group, &busbw) in groups[..retests].iter().zip(results) {
                    let Some(((a, rail_a), (b, _))) = group.ends() else {
                        continue;
                    };
                    let same = |r: &&mut (Group, f64)| {
                        r.0.ends().is_some_and(|(x, y)| (x.0, y.0) == (a, b))
                    };
                    if let Some(r) = self.readings.iter_mut().find(same) {
                        r.1 = busbw;
                    }
                    self.retested.push(((a.min(b), a.max(b)), rail_a, control));
                }
            }
            _ => {
                self.next += 1;
                self.readings
                    .extend(groups.iter().copied().zip(results.iter().copied()));
            }
        }
    }

    /// The limit a reading of `group` is held against: the tournament's (`limit`), and for a pair
    /// measured again also `fraction` x the median of the controls beside its retest (slow only
    /// below both).
    fn limit_of(&self, group: Group, limit: f64) -> f64 {
        let Some(((a, _), (b, _))) = group.ends() else {
            return limit;
        };
        match self.retest_of(a, b).and_then(|r| r.1) {
            Some(control) => limit.min(self.fraction * control),
            None => limit,
        }
    }

    /// What the readings say: the limit, and per reading whether it is slow with both its nodes
    /// fast with most of their other partners.
    fn judge(&self) -> (f64, Vec<bool>) {
        let reference = quantile(self.readings.iter().map(|r| r.1), 0.5).unwrap_or(0.0);
        let limit = self.fraction * reference;
        let slow: Vec<bool> = self
            .readings
            .iter()
            .map(|&(g, v)| v < self.limit_of(g, limit))
            .collect();
        // Per node: its pairs' count and how many are fast.
        let mut pairs = vec![0u32; self.n];
        let mut fast = vec![0u32; self.n];
        for (&(group, _), &s) in self.readings.iter().zip(&slow) {
            if let Some(((a, _), (b, _))) = group.ends() {
                for x in [a, b].into_iter().filter(|&x| x < self.n) {
                    pairs[x] += 1;
                    fast[x] += u32::from(!s);
                }
            }
        }
        // Fast with most of its other partners: this pair left out of the node's count.
        let fast_elsewhere = |x: usize, this_slow: bool| {
            let others = pairs[x].saturating_sub(1);
            let fast_others = fast[x] - u32::from(!this_slow);
            others >= 2 && 2 * fast_others > others
        };
        let isolated = self
            .readings
            .iter()
            .zip(&slow)
            .map(|(&(group, _), &s)| match group.ends() {
                Some(((a, _), (b, _))) if s && a < self.n && b < self.n => {
                    fast_elsewhere(a, s) && fast_elsewhere(b, s)
                }
                _ => false,
            })
            .collect();
        (limit, isolated)
    }

    /// A slow path for every pair slow (again, when retests are on) whose two nodes are fast
    /// with most of their other partners.
    pub fn findings(&self, names: &[String]) -> Vec<LocalizeFinding> {
        let (tournament_limit, isolated) = self.judge();
        let name = |k: usize| names.get(k).cloned().unwrap_or_else(|| format!("node{k}"));
        let mut out = Vec::new();
        for (i, &(group, busbw)) in self.readings.iter().enumerate() {
            let Some(((a, rail_a), (b, _))) = group.ends() else {
                continue;
            };
            let again = self.retest_of(a, b);
            if !(isolated[i] && (again.is_some() || !self.retest)) {
                continue;
            }
            let rails = match again.map(|r| r.0).filter(|&r| r != rail_a) {
                Some(r) => format!("GPU rails {rail_a} and {r}"),
                None => format!("GPU rail {rail_a}"),
            };
            let limit_gbs = self.limit_of(group, tournament_limit);
            let beside = match again.and_then(|r| r.1) {
                Some(c) => format!(
                    ", and {} x the {} GB/s of the pairs measured beside its retest",
                    self.fraction,
                    num(c)
                ),
                None => String::new(),
            };
            let (x, y) = (a.min(b), a.max(b));
            let (value, limit) = num_vs(busbw, limit_gbs);
            out.push(LocalizeFinding {
                code: Code::NodePairSlow,
                nodes: vec![x, y],
                subject: Culprit::NodePair(name(x), name(y)),
                message: format!(
                    "{}<->{}: sendrecv busbw {value} GB/s < {limit} GB/s ({} x the median of every \
                     node pair, measured after a slow alltoall{beside}; {rails}), both nodes fast \
                     with most of their other partners (a path the all_reduce's ring does not use)",
                    name(x),
                    name(y),
                    self.fraction,
                ),
                measured: Some(busbw),
                limit: Some(limit_gbs),
            });
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Drives a tournament of `n` 1-GPU nodes where `reading(a, b)` is what pair (a, b) reads.
    fn run(n: usize, g: usize, reading: impl Fn(usize, usize) -> f64) -> (Paths, usize) {
        let mut p = Paths::new(n, g, 0.7, true);
        let mut rounds = 0;
        while let Some((phase, groups)) = p.next_round() {
            let results: Vec<f64> = groups
                .iter()
                .map(|g| match g.ends() {
                    Some(((a, _), (b, _))) => reading(a, b),
                    _ => unreachable!(),
                })
                .collect();
            p.record(phase, &groups, &results);
            rounds += 1;
            assert!(rounds < 100, "the tournament does not end");
        }
        (p, rounds)
    }

    /// `[outliers] alltoall_fraction` of the built-in configuration.
    pub(crate) fn built_in_fraction() -> f64 {
        let c = crate::config::worker::WorkerConfig::from_texts(None).expect("built-in config");
        c.outliers.alltoall_fraction
    }

    fn named(p: &Paths) -> BTreeSet<Vec<usize>> {
        p.findings(&[]).into_iter().map(|f| f.nodes).collect()
    }

    #[test]
    fn the_tournament_meets_every_node_pair_once_g_matchings_a_round() {
        for (n, g) in [(4, 1), (8, 1), (16, 1), (9, 1), (4, 8), (16, 8), (32, 4)] {
            let rounds = tournament(n, g);
            let mut met = BTreeSet::new();
            for round in &rounds {
                let mut gpus = BTreeSet::new();
                for group in round {
                    let Some(((a, rail_a), (b, rail_b))) = group.ends() else {
                        panic!("not a pair")
                    };
                    assert_eq!(rail_a, rail_b);
                    assert!(rail_a < g);
                    assert!(gpus.insert((a, rail_a)) && gpus.insert((b, rail_b)));
                    assert!(met.insert((a.min(b), a.max(b))), "n={n}: ({a},{b}) twice");
                }
            }
            assert_eq!(met.len(), n * (n - 1) / 2, "n={n} g={g}");
            let matchings = crate::model::pairs::round_count(n);
            assert_eq!(rounds.len(), matchings.div_ceil(g), "n={n} g={g}");
        }
    }

    #[test]
    fn a_slow_path_between_non_neighbours_is_named_after_its_retest() {
        // fab02<->fab07 of the fabric table: not neighbours in node order.
        let (p, rounds) = run(8, 1, |a, b| if (a, b) == (1, 6) { 0.03 } else { 0.25 });
        assert_eq!(named(&p), BTreeSet::from([vec![1, 6]]));
        assert_eq!(rounds, 7 + 1, "7 tournament rounds and one retest");
        let f = &p.findings(&[])[0];
        assert_eq!(f.code, Code::NodePairSlow);
        assert!(f.message.starts_with("node1<->node6: sendrecv busbw 0.03"));
    }

    #[test]
    fn a_slow_reading_that_is_fast_on_its_retest_is_not_named() {
        let first = std::cell::Cell::new(true);
        let (p, _) = run(8, 1, |a, b| {
            if (a, b) == (1, 6) && first.replace(false) {
                0.03
            } else {
                0.25
            }
        });
        assert!(named(&p).is_empty());
    }

    /// Drives a tournament of `n` 1-GPU nodes at `fraction` where `reading(phase, a, b)` is what
    /// pair (a, b) reads in a round of `phase`.
    fn run_phases(n: usize, fraction: f64, reading: impl Fn(Phase, usize, usize) -> f64) -> Paths {
        let mut p = Paths::new(n, 1, fraction, true);
        for _ in 0..100 {
            let Some((phase, groups)) = p.next_round() else {
                return p;
            };
            let results: Vec<f64> = groups
                .iter()
                .map(|g| match g.ends() {
                    Some(((a, _), (b, _))) => reading(phase, a.min(b), a.max(b)),
                    _ => unreachable!(),
                })
                .collect();
            p.record(phase, &groups, &results);
        }
        panic!("the tournament does not end")
    }

    #[test]
    fn a_retest_round_that_reads_slow_as_a_whole_names_no_path() {
        // 32 emulated nodes on one H200 over loopback (2026-12-03): tournament pairs at ~0.1
        // GB/s, some at 0.065; the retest round, every pair in it at 0.06-0.073, named 28
        // healthy paths against the tournament's 0.085 limit. Its controls read alike: none.
        let slowish = |a: usize, b: usize| (a * 5 + b * 3) % 17 == 0;
        let p = run_phases(32, 0.85, |phase, a, b| match phase {
            Phase::PathRetest => 0.065,
            _ if slowish(a, b) => 0.065,
            _ => 0.1,
        });
        assert!(p.retest_rounds > 0, "the slow pairs were measured again");
        assert!(named(&p).is_empty(), "{:?}", p.findings(&[]));
        // Without controls beside them (every node in a retest), the same readings are named:
        // what the controls change.
        let mut bare = Paths::new(32, 1, 0.85, true);
        while let Some((phase, groups)) = bare.next_round() {
            let (retests, _) = bare.retest_plan();
            let groups = if phase == Phase::PathRetest {
                retests
            } else {
                groups
            };
            let results: Vec<f64> = groups
                .iter()
                .map(|g| match g.ends() {
                    Some(((a, _), (b, _)))
                        if phase == Phase::PathRetest || slowish(a.min(b), a.max(b)) =>
                    {
                        0.065
                    }
                    _ => 0.1,
                })
                .collect();
            bare.record(phase, &groups, &results);
        }
        assert!(!named(&bare).is_empty());
    }

    #[test]
    fn a_slow_path_is_named_when_its_retest_round_reads_slow_as_a_whole() {
        // The same slow retest round, one path shaped far below it (fab05<->fab22 at 50 Mbit/s
        // in fabric-faults.txt): named, against the tournament and against its controls.
        let p = run_phases(32, 0.85, |phase, a, b| match (phase, (a, b)) {
            (_, (4, 21)) => 0.006,
            (Phase::PathRetest, _) => 0.065,
            _ => 0.1,
        });
        assert_eq!(named(&p), BTreeSet::from([vec![4, 21]]));
        let f = &p.findings(&[])[0];
        assert!(f.message.contains("beside its retest"), "{}", f.message);
        assert!(
            (f.limit.unwrap() - 0.85 * 0.065).abs() < 1e-9,
            "{:?}",
            f.limit
        );
    }

    #[test]
    fn a_node_slow_with_most_partners_is_never_named_a_path() {
        // The coordinating node's exchanges all read 0.5x (seen on real NCCL between emulated
        // nodes at a small message): no path named, and the tournament names no node either.
        let (p, rounds) = run(8, 1, |a, _| if a == 0 { 0.12 } else { 0.25 });
        assert!(named(&p).is_empty(), "{:?}", p.findings(&[]));
        assert_eq!(
            rounds, 7,
            "no retest: no slow pair has two ends fast elsewhere"
        );
        // Half of node 0's pairs slow, one of them a real slow path: still not named.
        let (p, _) = run(8, 1, |a, b| if a == 0 && b <= 4 { 0.12 } else { 0.25 });
        assert!(named(&p).is_empty(), "{:?}", p.findings(&[]));
    }

    #[test]
    fn spread_of_healthy_readings_names_nothing() {
        // Healthy pairs between 0.8x and 1.2x of each other (deterministic spread).
        let (p, rounds) = run(16, 1, |a, b| {
            0.1 * (0.8 + 0.4 * ((a * 7 + b * 3) % 11) as f64 / 10.0)
        });
        assert!(named(&p).is_empty(), "{:?}", p.findings(&[]));
        assert_eq!(rounds, 15);
    }

    #[test]
    fn with_several_gpus_a_slow_pair_is_retested_on_the_next_rail() {
        // 6 nodes of 8 GPUs: the tournament's 5 matchings in one round, node pair (1, 4) on
        // some rail r; its retest on rail r+1.
        let drive = |slow: &dyn Fn(usize, usize, usize) -> bool| {
            let mut p = Paths::new(6, 8, 0.7, true);
            let mut phases = Vec::new();
            while let Some((phase, groups)) = p.next_round() {
                let results: Vec<f64> = groups
                    .iter()
                    .map(|g| match g.ends() {
                        Some(((a, rail_a), (b, _))) if slow(a, b, rail_a) => 5.0,
                        _ => 45.0,
                    })
                    .collect();
                p.record(phase, &groups, &results);
                phases.push(phase);
            }
            (p, phases)
        };
        // The path between nodes 1 and 4, slow on every rail: named, on both rails.
        let (p, phases) = drive(&|a, b, _| (a, b) == (1, 4));
        assert_eq!(phases, vec![Phase::Paths, Phase::PathRetest]);
        assert_eq!(named(&p), BTreeSet::from([vec![1, 4]]));
        assert!(
            p.findings(&[])[0].message.contains("GPU rails"),
            "{:?}",
            p.findings(&[])
        );
        // Node 4's NIC of the rail the pair met on (fast on the next rail): not a path.
        let rail_met = tournament(6, 8)[0]
            .iter()
            .find_map(|g| match g.ends()? {
                ((1, rail_a), (4, _)) => Some(rail_a),
                _ => None,
            })
            .expect("the pair is met");
        let (p, phases) = drive(&|a, b, r| (a == 4 || b == 4) && r == rail_met);
        assert_eq!(phases, vec![Phase::Paths, Phase::PathRetest]);
        assert!(named(&p).is_empty(), "{:?}", p.findings(&[]));
    }

    #[test]
    fn two_slow_paths_are_both_named() {
        let slow = |a: usize, b: usize| (a, b) == (2, 11) || (a, b) == (0, 9);
        let (p, _) = run(16, 1, |a, b| if slow(a, b) { 0.01 } else { 0.1 });
        assert_eq!(named(&p), BTreeSet::from([vec![0, 9], vec![2, 11]]));
    }

    #[test]
    fn the_alltoall_is_judged_against_the_all_reduce_it_ran_beside() {
        assert_eq!(built_in_fraction(), 0.5);
        // 1-GPU nodes: the healthy alltoall reads about the all_reduce's busbw.
        assert!((expected_alltoall_ratio(8, 1) - 1.0).abs() < 1e-9);
        // 4 nodes of 8 GPUs: 4/(8*3) * 31/32.
        assert!((expected_alltoall_ratio(4, 8) - 4.0 / 24.0 * 31.0 / 32.0).abs() < 1e-9);
        // 8 emulated nodes, all_reduce 0.44 GB/s: one path at 100 Mbit/s (12.5 MB/s) carries one
        // flow, the alltoall reads ~7 x 12.5 MB/s (fabric-faults.txt shapes it to 60mbit).
        let t = built_in_fraction();
        assert!(alltoall_slow(7.0 * 0.0125, 0.44, (8, 1), t));
        assert!(!alltoall_slow(0.35, 0.44, (8, 1), t));
        // 16 nodes, all_reduce 0.148 GB/s: a path at 12 Mbit/s, below the emulated fabric's 0.25.
        assert!(alltoall_slow(15.0 * 0.0015, 0.148, (16, 1), 0.25));
        assert!(!alltoall_slow(0.05, 0.148, (16, 1), 0.25));
        // 4 nodes of 8 GPUs, all_reduce 370 GB/s: healthy alltoall ~60 GB/s, slow below ~30.
        assert!(!alltoall_slow(40.0, 370.0, (4, 8), t));
        assert!(alltoall_slow(25.0, 370.0, (4, 8), t));
        // Not judged: 3 nodes (the ring is every pair), 33 nodes, no all_reduce.
        assert!(!alltoall_slow(0.0, 0.44, (3, 1), t));
        assert!(!alltoall_slow(0.0, 0.44, (33, 1), t));
        assert!(!alltoall_slow(0.0, 0.0, (8, 1), t));
    }

    #[test]
    fn the_alltoall_and_the_tournament_use_a_quarter_of_the_pair_size() {
        assert_eq!(alltoall_size(32 << 20), 8 << 20);
        assert_eq!(alltoall_size(256 << 20), 64 << 20);
        assert_eq!(alltoall_size(2 << 20), 1 << 20);
        assert_eq!(alltoall_size(1 << 19), 1 << 19);
        assert_eq!(path_round(32 << 20), (8 << 20, (1, 3)));
        // The tournament never below 8 MiB (a busy host's scheduler), never above the plan's.
        assert_eq!(path_round(16 << 20), (8 << 20, (1, 3)));
        assert_eq!(path_round(4 << 20), (4 << 20, (1, 3)));
        assert_eq!(path_round(256 << 20), (64 << 20, (1, 3)));
    }

    #[test]
    fn the_alltoall_is_slow_against_pairs_that_predict_more_than_twice_it() {
        // One H200, 8 emulated nodes, no load: the alltoall over a far path at 0.072 GB/s,
        // the node pairs at 0.37-0.40 (the all_reduce's 0.12 did not see it).
        let limit = pairs_limit(0.072, (8, 1), 0.5);
        assert!((limit.unwrap() - 0.144).abs() < 1e-9, "{limit:?}");
        assert!(slow_against_pairs(limit, [0.396, 0.372].into_iter()));
        // A healthy alltoall reads about the pairs' rate: not slow.
        assert!(!slow_against_pairs(
            pairs_limit(0.35, (8, 1), 0.5),
            [0.396, 0.372].into_iter()
        ));
        // 8-GPU nodes: the pairs are one NIC's, the alltoall's share of all eight.
        let r = expected_alltoall_ratio(4, 8);
        assert!(!slow_against_pairs(
            pairs_limit(370.0 * r, (4, 8), 0.5),
            [48.0].into_iter()
        ));
        assert!(slow_against_pairs(
            pairs_limit(20.0 * r, (4, 8), 0.5),
            [48.0].into_iter()
        ));
        // Not judged: no pairs, 3 nodes, no reading.
        assert!(!slow_against_pairs(limit, std::iter::empty()));
        assert_eq!(pairs_limit(0.01, (3, 1), 0.5), None);
        assert_eq!(pairs_limit(f64::NAN, (8, 1), 0.5), None);
    }

    #[test]
    fn every_path_is_measured_after_a_slow_alltoall_or_under_a_busy_host() {
        assert!(!measures_every_path(false, false));
        assert!(measures_every_path(true, false));
        assert!(measures_every_path(false, true));
        assert!(measures_every_path(true, true));
    }
}
