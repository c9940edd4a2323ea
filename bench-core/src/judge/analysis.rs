//! From measurements to reasons: thresholds, the outlier rule, and localization (which GPU, link
//! or node is to blame). Pure: the same inputs always give the same reasons, on every rank.

use crate::measure::rows::{Ends, PairRow, Row};
use crate::model::collectives::{Collective, SendRecv};
use crate::model::stats::median;
use nccl_check_contract::report::culprit::Culprit;
use nccl_check_contract::report::reason::{Reason, ReasonCode};
use std::collections::BTreeMap;

/// The threshold that applies to (collective, GPUs in the measurement, bytes), if any.
pub type Floor<'a> = &'a dyn Fn(&str, u32, u64) -> Option<f64>;

/// Which pairs are slow: below their threshold, or below `fraction` x the median of their peers
/// (GPU pairs: the other pairs of the same node; node pairs: all node pairs). Used both to decide
/// a retest and to judge.
pub fn slow_pairs(pairs: &[PairRow], fraction: f64, floor: Floor) -> Vec<(usize, SlowWhy)> {
    let mut out = Vec::new();
    // GPU pairs by node first, then the node pairs.
    let mut groups: BTreeMap<(bool, &str), Vec<usize>> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        let node = p.gpus().map_or("", |g| g.0);
        groups
            .entry((p.nodes().is_some(), node))
            .or_default()
            .push(i);
    }
    for idx in groups.values() {
        let med = median(&idx.iter().map(|&i| pairs[i].busbw).collect::<Vec<_>>());
        for &i in idx {
            let p = &pairs[i];
            if let Some(min) = floor(SendRecv.name(), 2, p.bytes).filter(|_| p.gpus().is_some()) {
                if p.busbw < min {
                    out.push((i, SlowWhy::Threshold(min)));
                    continue;
                }
            }
            if idx.len() >= 2 && p.busbw < fraction * med {
                out.push((i, SlowWhy::Outlier(med)));
            }
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SlowWhy {
    Threshold(f64),
    Outlier(f64),
}

/// Every reason for FAIL in these results. `gpus` and `nodes` describe the whole check.
pub fn fail_reasons(
    rows: &[Row],
    pairs: &[PairRow],
    gpus: u32,
    nodes: u32,
    fraction: f64,
    floor: Floor,
) -> Vec<Reason> {
    let mut reasons = Vec::new();
    let multi = nodes > 1;
    // 1. Wrong data is always FAIL.
    for r in rows {
        for (name, p) in [("out-of-place", &r.out_of_place), ("in-place", &r.in_place)] {
            if let Some(w) = p.wrong.filter(|&w| w > 0) {
                reasons.push(Reason {
                    code: ReasonCode::WrongData,
                    message: format!(
                        "{} {} {name}: {w} wrong elements (data corrupted in transfer)",
                        r.collective,
                        crate::model::size::human(r.size)
                    ),
                    subject: None,
                    measured: Some(w as f64),
                    limit: Some(0.0),
                });
            }
        }
    }
    // 2. Localization first, so a slow collective can say who is responsible.
    let local = localize(pairs, fraction, floor, multi);
    let culprits: Vec<String> = local.subjects().collect();
    // 3. Collectives against their thresholds.
    for r in rows {
        let Some(min) = floor(&r.collective, gpus, r.size) else {
            continue;
        };
        let worst = r.out_of_place.busbw.min(r.in_place.busbw);
        if worst < min {
            let blame = if culprits.is_empty() {
                String::new()
            } else {
                format!("; responsible: {}", culprits.join(", "))
            };
            let retest = first_try(r.out_of_place.first_busbw);
            reasons.push(Reason {
                code: ReasonCode::BusbwBelowThreshold,
                message: format!(
                    "{} {} busbw {worst:.1}{retest} < {min:.1} GB/s ({:.0}% of the floor){blame}",
                    r.collective,
                    crate::model::size::human(r.size),
                    100.0 * worst / min
                ),
                // The culprits are named in the sentence; the subject of a collective is the
                // whole check.
                subject: None,
                measured: Some(worst),
                limit: Some(min),
            });
        }
    }
    // The first reason becomes the summary: data first, then the slow collective, then the
    // culprit with the widest scope: a node, a node whose GPU pairs are all slow, a GPU, a link.
    let rank = |r: &Reason| match (r.code, r.subject.is_some()) {
        (ReasonCode::WrongData, _) => 0,
        (ReasonCode::BusbwBelowThreshold, false) => 1,
        (ReasonCode::NodeOutlier, _) => 2,
        (ReasonCode::GpuOutlier, _) => 4,
        _ => 5,
    };
    let mut ranked: Vec<(u8, Reason)> = reasons.into_iter().map(|r| (rank(&r), r)).collect();
    ranked.extend(local.whole_nodes.into_iter().map(|r| (3, r)));
    ranked.extend(local.culprits.into_iter().map(|r| (rank(&r), r)));
    ranked.sort_by_key(|(k, _)| *k);
    ranked.into_iter().map(|(_, r)| r).collect()
}

/// What the pair matrix blames: nodes whose GPU pairs are all slow (one reason per node), then
/// nodes, GPUs and links.
struct Localized {
    whole_nodes: Vec<Reason>,
    culprits: Vec<Reason>,
}

impl Localized {
    fn subjects(&self) -> impl Iterator<Item = String> + '_ {
        self.whole_nodes
            .iter()
            .chain(&self.culprits)
            .filter_map(Reason::subject_text)
    }
}

/// Reasons naming links, GPUs and nodes from the pair matrix.
fn localize(pairs: &[PairRow], fraction: f64, floor: Floor, multi: bool) -> Localized {
    let slow = slow_pairs(pairs, fraction, floor);
    let (whole, whole_nodes) = whole_node_reasons(pairs, &slow, multi);
    let slow: Vec<(usize, SlowWhy)> = slow
        .into_iter()
        .filter(|&(i, _)| {
            !pairs[i]
                .gpus()
                .is_some_and(|g| whole_nodes.iter().any(|n| n == g.0))
        })
        .collect();
    let mut reasons = Vec::new();
    let bad = bad_ends(pairs, &slow);
    reasons.extend(end_reasons(pairs, &bad, fraction, multi));
    reasons.extend(link_reasons(pairs, &slow, &bad, fraction, multi));
    // Nodes: each node's median GPU-pair busbw against the median over nodes.
    if multi {
        reasons.extend(node_median_reasons(pairs, fraction));
    }
    Localized {
        whole_nodes: whole,
        culprits: reasons,
    }
}

/// ` (first try 12.3)` where a result was retested, else nothing.
fn first_try(first_busbw: Option<f64>) -> String {
    first_busbw.map_or(String::new(), |f| format!(" (first try {f:.1})"))
}

/// The sentence and limit for one slow pair, so a link reason says which rule it broke.
fn slow_pair_sentence(p: &PairRow, why: SlowWhy, fraction: f64, multi: bool) -> (String, f64) {
    let first = first_try(p.first_busbw);
    let (rule, limit) = match why {
        SlowWhy::Threshold(min) => (format!(" < {min:.1} GB/s"), min),
        SlowWhy::Outlier(med) => {
            let peers = if p.gpus().is_some() {
                "node"
            } else {
                "node-pair"
            };
            let rule = format!(" GB/s < {fraction:.2} x {peers} median {med:.1} GB/s");
            (rule, fraction * med)
        }
    };
    let size = crate::model::size::human(p.bytes);
    let sentence = format!(
        "{} sendrecv {size} busbw {:.1}{first}{rule}",
        p.culprit(multi),
        p.busbw
    );
    (sentence, limit)
}

/// Nodes whose every GPU pair is slow, with one reason each, so such a node is not reported
/// once per GPU. Returns the reasons and the names of those nodes.
fn whole_node_reasons(
    pairs: &[PairRow],
    slow: &[(usize, SlowWhy)],
    multi: bool,
) -> (Vec<Reason>, Vec<String>) {
    // Every GPU pair of a node slow (NVLink down or unused, e.g. NCCL_P2P_DISABLE): one reason
    // for the node, not one per GPU.
    let on = |p: &PairRow, node: &str| p.gpus().is_some_and(|g| g.0 == node);
    let whole_nodes = all_slow(pairs, slow, 3, |p| {
        Vec::from_iter(p.gpus().map(|g| g.0.to_string()))
    });
    let whole = whole_nodes.iter().map(|node| {
        let bws: Vec<f64> = pairs
            .iter()
            .filter(|p| on(p, node))
            .map(|p| p.busbw)
            .collect();
        let total = bws.len();
        let lo = bws.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = bws.iter().copied().fold(0.0, f64::max);
        let limit = slow
            .iter()
            .find_map(|&(i, w)| match w {
                SlowWhy::Threshold(m) if on(&pairs[i], node) => Some(m),
                _ => None,
            })
            .unwrap_or(0.0);
        let (subject, at) = if multi {
            (Culprit::Node(node.to_string()), format!("node {node}: "))
        } else {
            (Culprit::AllGpuPairs, String::new())
        };
        Reason {
            code: ReasonCode::BusbwBelowThreshold,
            message: format!(
                "{at}all {total} GPU pairs slow: sendrecv busbw {lo:.1}-{hi:.1} GB/s < {limit:.1} GB/s (NVLink down or not used)"
            ),
            subject: Some(subject),
            measured: Some(hi),
            limit: Some(limit),
        }
    });
    (whole.collect(), whole_nodes)
}

/// What `part` names (a node, a GPU, in its order) that at least `least` pairs involve and every
/// one of them is slow.
fn all_slow<K: Ord>(
    pairs: &[PairRow],
    slow: &[(usize, SlowWhy)],
    least: usize,
    part: impl Fn(&PairRow) -> Vec<K>,
) -> Vec<K> {
    let mut count: BTreeMap<K, (usize, usize)> = BTreeMap::new();
    for p in pairs {
        part(p)
            .into_iter()
            .for_each(|k| count.entry(k).or_default().0 += 1);
    }
    for &(i, _) in slow {
        part(&pairs[i])
            .into_iter()
            .for_each(|k| count.entry(k).or_default().1 += 1);
    }
    count
        .into_iter()
        .filter(|(_, (total, slow))| *total >= least && slow == total)
        .map(|(k, _)| k)
        .collect()
}

/// A pair's two ends as a reason blames them: two GPUs (with their node), or two nodes.
fn ends(p: &PairRow) -> [Culprit; 2] {
    match &p.ends {
        Ends::Gpus { node, a, b } => [*a, *b].map(|gpu| Culprit::Gpu {
            node: Some(node.clone()),
            gpu,
        }),
        Ends::Nodes(a, b) => [a, b].map(|n| Culprit::Node(n.clone())),
    }
}

/// The GPUs and nodes whose every pair is slow (and that have at least two): the end is to
/// blame rather than each of its pairs. GPUs first, by node, then nodes.
fn bad_ends(pairs: &[PairRow], slow: &[(usize, SlowWhy)]) -> Vec<Culprit> {
    all_slow(pairs, slow, 2, |p| ends(p).to_vec())
}

/// One reason per blamed GPU or node, the mean of its pairs against the median of its peers'
/// (a GPU's: the GPU pairs of its node; a node's: every node pair). With 3+ GPUs two bad GPUs
/// share a link; a GPU is named only if some of its peers are fine.
fn end_reasons(pairs: &[PairRow], bad: &[Culprit], fraction: f64, multi: bool) -> Vec<Reason> {
    bad.iter().map(|end| {
        let mine: Vec<&PairRow> = pairs.iter().filter(|p| ends(p).contains(end)).collect();
        let mean = mine.iter().map(|p| p.busbw).sum::<f64>() / mine.len() as f64;
        let home = mine[0].gpus().map(|g| g.0);
        let peers = pairs.iter().filter(|p| p.gpus().map(|g| g.0) == home);
        let med = median(&peers.map(|p| p.busbw).collect::<Vec<_>>());
        let pct = 100.0 * mean / med.max(1e-9);
        let (code, subject, message) = match end {
            Culprit::Gpu { node, gpu } => {
                let subject = Culprit::Gpu { node: node.clone().filter(|_| multi), gpu: *gpu };
                let message = format!("{subject}: every link slow, mean sendrecv busbw {mean:.1} GB/s vs node median {med:.1} GB/s ({pct:.0}%)");
                (ReasonCode::GpuOutlier, subject, message)
            }
            _ => (ReasonCode::NodeOutlier, end.clone(), format!("node {end}: every node pair slow, mean sendrecv busbw {mean:.1} GB/s vs node-pair median {med:.1} GB/s ({pct:.0}%)")),
        };
        Reason {
            code,
            message,
            subject: Some(subject),
            measured: Some(mean),
            limit: Some(fraction * med),
        }
    }).collect()
}

/// One reason per slow link that no blamed GPU or node already explains.
fn link_reasons(
    pairs: &[PairRow],
    slow: &[(usize, SlowWhy)],
    bad: &[Culprit],
    fraction: f64,
    multi: bool,
) -> Vec<Reason> {
    let blamed = |p: &PairRow| ends(p).iter().any(|e| bad.contains(e));
    let unexplained = slow.iter().map(|&(i, why)| (&pairs[i], why));
    unexplained
        .filter(|(p, _)| !blamed(p))
        .map(|(p, why)| {
            let (message, limit) = slow_pair_sentence(p, why, fraction, multi);
            Reason {
                code: match (&p.ends, why) {
                    (Ends::Gpus { .. }, SlowWhy::Threshold(_)) => ReasonCode::BusbwBelowThreshold,
                    (Ends::Gpus { .. }, SlowWhy::Outlier(_)) => ReasonCode::LinkOutlier,
                    (Ends::Nodes(..), _) => ReasonCode::NodePairOutlier,
                },
                message,
                subject: Some(p.culprit(multi)),
                measured: Some(p.busbw),
                limit: Some(limit),
            }
        })
        .collect()
}

/// Nodes whose median GPU-pair busbw is below `fraction` x that of the other nodes: a node slow
/// as a whole, even where no single pair stands out within it.
fn node_median_reasons(pairs: &[PairRow], fraction: f64) -> Vec<Reason> {
    let mut per_node: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for p in pairs {
        if let Some((node, ..)) = p.gpus() {
            per_node.entry(node).or_default().push(p.busbw);
        }
    }
    let meds: Vec<(&str, f64)> = per_node.iter().map(|(n, v)| (*n, median(v))).collect();
    let best = meds.iter().map(|m| m.1).fold(0.0, f64::max);
    let all = median(&meds.iter().map(|m| m.1).collect::<Vec<_>>());
    // With two nodes the median is their mean: compare with the better one instead.
    let reference = if meds.len() == 2 { best } else { all };
    let slow = meds
        .iter()
        .filter(|(_, m)| meds.len() >= 2 && *m < fraction * reference);
    slow.map(|(node, m)| {
            Reason {
                code: ReasonCode::NodeOutlier,
                message: format!(
                    "node {node}: GPU-pair sendrecv busbw median {m:.1} GB/s < {fraction:.2} x {reference:.1} GB/s of the other nodes"
                ),
                subject: Some(Culprit::Node(node.to_string())),
                measured: Some(*m),
                limit: Some(fraction * reference),
            }
    }).collect()
}

/// The widest noise a run may claim for itself: a result more than this below its limit is a
/// fault whatever the spread (a link at 0.8 x its peers' limit stays FAIL on the noisiest
/// network), so noise softens only a marginal reading.
pub const MAX_NOISE: f64 = 0.15;

/// Bandwidth reasons split by the run's own `noise` (the spread of its budgeted steps' samples
/// and of the localizer's retests: `overall::run_noise`): one whose measured value is within `noise` (at most
/// `MAX_NOISE`) of its limit cannot be told from the limit by these samples, so it becomes a
/// warning saying so, never a FAIL; the rest stay reasons. Returns (reasons, warnings).
pub fn within_noise(reasons: Vec<Reason>, noise: Option<f64>) -> (Vec<Reason>, Vec<Reason>) {
    let Some(noise) = noise.filter(|n| n.is_finite() && *n > 0.0) else {
        return (reasons, Vec::new());
    };
    let noise = noise.min(MAX_NOISE);
    let (mut kept, mut warned) = (Vec::new(), Vec::new());
    for mut r in reasons {
        match (r.measured, r.limit) {
            (Some(m), Some(l)) if m < l && m >= l * (1.0 - noise) => {
                r.message = format!(
                    "{} (within the run's own noise, +-{:.1}% by its samples: not held against the hardware)",
                    r.message,
                    noise * 100.0
                );
                warned.push(r);
            }
            _ => kept.push(r),
        }
    }
    (kept, warned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rows::Placement;

    fn pair_slow(measured: f64, limit: f64) -> Reason {
        Reason {
            code: ReasonCode::NodePairSlow,
            message: format!("e0<->e1: {measured} < {limit} GB/s"),
            subject: None,
            measured: Some(measured),
            limit: Some(limit),
        }
    }

    #[test]
    fn a_marginal_result_with_a_wide_spread_is_a_warning() {
        // Issue 44's run: 0.61 < 0.63 GB/s (3% below), its retest's samples +-5%.
        let (fail, warn) = within_noise(vec![pair_slow(0.61, 0.63)], Some(0.05));
        assert!(fail.is_empty(), "{fail:?}");
        assert_eq!(warn.len(), 1);
        assert_eq!(warn[0].code, ReasonCode::NodePairSlow);
        assert!(warn[0].message.contains("own noise"), "{}", warn[0].message);
    }

    #[test]
    fn a_result_far_below_or_with_a_tight_spread_stays_a_fault() {
        // Tight samples (+-1%): 3% below is a real shortfall.
        let (fail, warn) = within_noise(vec![pair_slow(0.61, 0.63)], Some(0.01));
        assert_eq!((fail.len(), warn.len()), (1, 0));
        // Far below (a link at 2 Gbit/s among 10): no spread excuses it, even a claimed 90%.
        let (fail, warn) = within_noise(vec![pair_slow(0.2, 0.63)], Some(0.9));
        assert_eq!((fail.len(), warn.len()), (1, 0));
        // 20% below stays FAIL at the widest noise allowed.
        let (fail, _) = within_noise(vec![pair_slow(0.8, 1.0)], Some(MAX_NOISE));
        assert_eq!(fail.len(), 1);
        // No retest, no noise: as before.
        let (fail, warn) = within_noise(vec![pair_slow(0.61, 0.63)], None);
        assert_eq!((fail.len(), warn.len()), (1, 0));
    }

    fn gpu_pair(node: &str, a: u32, b: u32, busbw: f64) -> PairRow {
        PairRow {
            expected: None,
            ends: Ends::Gpus {
                node: node.into(),
                a,
                b,
            },
            ranks: (a, b),
            bytes: 256 << 20,
            time_us: 0.0,
            busbw,
            gpu_busbw: None,
            first_busbw: None,
        }
    }

    fn matrix(node: &str, bw: impl Fn(u32, u32) -> f64) -> Vec<PairRow> {
        let mut v = Vec::new();
        for a in 0..4 {
            for b in a + 1..4 {
                v.push(gpu_pair(node, a, b, bw(a, b)));
            }
        }
        v
    }

    fn row(coll: &'static str, busbw: f64) -> Row {
        let p = Placement {
            time_us: 1.0,
            algbw: 1.0,
            busbw,
            wrong: Some(0),
            first_busbw: None,
        };
        Row {
            expected: None,
            collective: coll.into(),
            size: 256 << 20,
            count: 1,
            dtype: "float".into(),
            redop: "sum".into(),
            root: -1,
            out_of_place: p,
            in_place: p,
        }
    }

    const NO_FLOOR: Floor = &|_, _, _| None;

    #[test]
    fn a_healthy_node_has_no_reasons() {
        let pairs = matrix("n1", |a, b| 300.0 + (a * 3 + b) as f64);
        let floor: Floor = &|c, g, _| match (c, g) {
            ("all_reduce", 4) => Some(290.0),
            ("sendrecv", 2) => Some(255.0),
            _ => None,
        };
        assert!(fail_reasons(&[row("all_reduce", 338.0)], &pairs, 4, 1, 0.85, floor).is_empty());
    }

    #[test]
    fn one_slow_link_is_named_without_any_threshold() {
        let pairs = matrix("n1", |a, b| if (a, b) == (2, 3) { 41.2 } else { 302.1 });
        let r = fail_reasons(&[], &pairs, 4, 1, 0.85, NO_FLOOR);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].code, ReasonCode::LinkOutlier);
        assert_eq!(r[0].subject_text().as_deref(), Some("GPU2<->GPU3"));
        assert!(
            r[0].message.starts_with(
                "GPU2<->GPU3 sendrecv 256 MiB busbw 41.2 GB/s < 0.85 x node median 302.1 GB/s"
            ),
            "{}",
            r[0].message
        );
    }

    #[test]
    fn a_gpu_with_every_link_slow_is_named_instead_of_its_links() {
        let pairs = matrix("n1", |a, b| if a == 1 || b == 1 { 150.0 } else { 300.0 });
        let r = fail_reasons(&[], &pairs, 4, 1, 0.85, NO_FLOOR);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].code, r[0].subject_text().as_deref()),
            (ReasonCode::GpuOutlier, Some("GPU1"))
        );
    }

    #[test]
    fn a_slow_collective_names_the_responsible_link() {
        let pairs = matrix("n1", |a, b| if (a, b) == (0, 3) { 100.0 } else { 300.0 });
        let floor: Floor = &|c, _, _| (c == "all_reduce").then_some(290.0);
        let r = fail_reasons(&[row("all_reduce", 120.0)], &pairs, 4, 1, 0.85, floor);
        assert_eq!(r[0].code, ReasonCode::BusbwBelowThreshold);
        assert!(
            r[0].message.contains("responsible: GPU0<->GPU3"),
            "{}",
            r[0].message
        );
        assert_eq!(r[1].code, ReasonCode::LinkOutlier);
    }

    #[test]
    fn all_links_uniformly_slow_fail_on_thresholds_only() {
        // NCCL_P2P_DISABLE=1: every pair equally slow, no outlier; the floors catch it.
        let pairs = matrix("n1", |_, _| 20.0);
        let floor: Floor = &|c, g, _| match (c, g) {
            ("all_reduce", 4) => Some(290.0),
            ("sendrecv", 2) => Some(255.0),
            _ => None,
        };
        let r = fail_reasons(&[row("all_reduce", 24.7)], &pairs, 4, 1, 0.85, floor);
        assert!(
            r.iter().any(|x| x.code == ReasonCode::BusbwBelowThreshold
                && x.message
                    .starts_with("all_reduce 256 MiB busbw 24.7 < 290.0 GB/s (9% of the floor)")),
            "{r:?}"
        );
        assert!(
            r.iter().any(|x| x.code == ReasonCode::GpuOutlier)
                || r.iter()
                    .filter(|x| x.code == ReasonCode::BusbwBelowThreshold)
                    .count()
                    > 1,
            "{r:?}"
        );
    }

    #[test]
    fn the_slow_node_of_two_is_named() {
        let mut pairs = vec![
            gpu_pair("nodeA", 0, 1, 301.0),
            gpu_pair("nodeB", 0, 1, 24.0),
        ];
        pairs[1].ranks = (2, 3);
        let r = fail_reasons(&[], &pairs, 4, 2, 0.85, NO_FLOOR);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].code, r[0].subject_text().as_deref()),
            (ReasonCode::NodeOutlier, Some("nodeB"))
        );
    }

    /// What a blamed GPU and a blamed node say, word for word, with their measured value and
    /// limit (the same sentences since they were two rules).
    #[test]
    fn a_blamed_gpu_and_a_blamed_node_say_their_mean_against_their_peers() {
        let mut pairs = matrix("n1", |a, b| if a == 1 || b == 1 { 150.0 } else { 300.0 });
        pairs.extend(matrix("n2", |_, _| 300.0));
        for (a, b, busbw) in [
            ("n1", "n2", 40.0),
            ("n3", "n4", 20.0),
            ("n1", "n4", 40.0),
            ("n2", "n3", 20.0),
            ("n1", "n3", 20.0),
            ("n2", "n4", 40.0),
        ] {
            pairs.push(PairRow {
                ends: Ends::Nodes(a.into(), b.into()),
                busbw,
                ..pairs[0].clone()
            });
        }
        let said: Vec<_> = [1, 4]
            .into_iter()
            .flat_map(|nodes| fail_reasons(&[], &pairs, 8, nodes, 0.85, NO_FLOOR))
            .map(|x| (x.code, x.subject_text(), x.message, x.measured, x.limit))
            .collect();
        let gpu1 = |s: &str| {
            (ReasonCode::GpuOutlier, Some(s.to_string()), format!("{s}: every link slow, mean sendrecv busbw 150.0 GB/s vs node median 225.0 GB/s (67%)"), Some(150.0), Some(191.25))
        };
        let n3 = (ReasonCode::NodeOutlier, Some("n3".to_string()), "node n3: every node pair slow, mean sendrecv busbw 20.0 GB/s vs node-pair median 30.0 GB/s (67%)".to_string(), Some(20.0), Some(25.5));
        let n1 = (ReasonCode::NodeOutlier, Some("n1".to_string()), "node n1: GPU-pair sendrecv busbw median 225.0 GB/s < 0.85 x 300.0 GB/s of the other nodes".to_string(), Some(225.0), Some(255.0));
        assert_eq!(said, [n3.clone(), gpu1("GPU1"), n3, n1, gpu1("n1 GPU1")]);
    }

    #[test]
    fn the_node_in_every_slow_node_pair_is_named() {
        let node_pair = |a: &str, b: &str, busbw: f64| PairRow {
            expected: None,
            ends: Ends::Nodes(a.into(), b.into()),
            ranks: (0, 1),
            bytes: 256 << 20,
            time_us: 0.0,
            busbw,
            gpu_busbw: None,
            first_busbw: None,
        };
        // Measured on 4 emulated 1-GPU nodes over sockets with n3's GPU busy (2026-11-21).
        let pairs = vec![
            node_pair("n1", "n2", 2.15),
            node_pair("n3", "n4", 1.34),
            node_pair("n1", "n4", 2.40),
            node_pair("n2", "n3", 1.47),
            node_pair("n1", "n3", 1.43),
            node_pair("n2", "n4", 2.15),
        ];
        let r = fail_reasons(&[], &pairs, 4, 4, 0.85, NO_FLOOR);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].code, r[0].subject_text().as_deref()),
            (ReasonCode::NodeOutlier, Some("n3"))
        );
    }

    #[test]
    fn wrong_data_is_a_failure() {
        let mut r = row("all_gather", 300.0);
        r.in_place.wrong = Some(7);
        let reasons = fail_reasons(&[r], &[], 4, 1, 0.85, NO_FLOOR);
        assert_eq!(reasons[0].code, ReasonCode::WrongData);
    }

    #[test]
    fn the_widest_culprit_comes_first_whatever_order_it_was_found_in() {
        // Three nodes; every GPU pair of n3 is below its floor: n3 is a node outlier (found
        // last) and a node whose pairs are all slow (found first). The node comes first.
        let mut pairs = matrix("n1", |_, _| 300.0);
        pairs.extend(matrix("n2", |_, _| 305.0));
        pairs.extend(matrix("n3", |_, _| 20.0));
        let floor: Floor = &|c, g, _| (c == "sendrecv" && g == 2).then_some(255.0);
        let r = fail_reasons(&[], &pairs, 12, 3, 0.85, floor);
        let codes: Vec<(ReasonCode, Option<String>)> =
            r.iter().map(|x| (x.code, x.subject_text())).collect();
        assert_eq!(
            codes,
            [
                (ReasonCode::NodeOutlier, Some("n3".into())),
                (ReasonCode::BusbwBelowThreshold, Some("n3".into())),
            ]
        );
        assert!(
            r[1].message.starts_with("node n3: all 6 GPU pairs slow"),
            "{}",
            r[1].message
        );
    }

    /// What the outlier rule blames reaches the callers typed: the subject it writes reads back
    /// as the contract's culprit of the same kind (GPU, GPU pair, node), with the node named
    /// when the check spans several.
    #[test]
    fn every_culprit_is_written_as_its_typed_kind() {
        let culprit = |r: &Reason| r.subject.clone().expect("names something");
        let one = fail_reasons(
            &[],
            &matrix("n1", |a, b| if (a, b) == (2, 3) { 41.2 } else { 302.1 }),
            4,
            1,
            0.85,
            NO_FLOOR,
        );
        assert_eq!(
            culprit(&one[0]),
            Culprit::GpuPair {
                node: None,
                a: 2,
                b: 3,
                directed: false
            }
        );
        let mut pairs = matrix("n1", |_, _| 300.0);
        pairs.extend(matrix(
            "n2",
            |a, b| if a == 1 || b == 1 { 150.0 } else { 300.0 },
        ));
        let multi = fail_reasons(&[], &pairs, 8, 2, 0.85, NO_FLOOR);
        assert!(
            multi.iter().any(|r| culprit(r)
                == Culprit::Gpu {
                    node: Some("n2".into()),
                    gpu: 1
                }),
            "{multi:?}"
        );
        let mut pairs = vec![
            gpu_pair("nodeA", 0, 1, 301.0),
            gpu_pair("nodeB", 0, 1, 24.0),
        ];
        pairs[1].ranks = (2, 3);
        let node = fail_reasons(&[], &pairs, 4, 2, 0.85, NO_FLOOR);
        assert_eq!(culprit(&node[0]), Culprit::Node("nodeB".into()));
    }
}
