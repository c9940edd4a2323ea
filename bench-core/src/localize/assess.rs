//! Judging what the rounds measured: a reference per kind of group, which results are slow, which
//! node-rails are cleared or bad, and the findings that explain every slow result. Pure and
//! deterministic: the same results give the same findings on every rank.

use super::{Code, Group, GroupKind, LocalizeConfig, LocalizeFinding};
use crate::model::stats::num_vs;
use nccl_check_contract::report::culprit::Culprit;
use std::collections::BTreeMap;

/// One measured group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub group: Group,
    pub busbw: f64,
}

/// Nearest-rank quantile `q` of `values`; `None` for none.
pub(crate) fn quantile(values: impl Iterator<Item = f64>, q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The busbw below which a result of one kind is slow: the stricter of `fraction` x the
/// reference (the `reference_quantile` of the kind's results) and the kind's floor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit(f64);

impl Limit {
    pub fn new(
        values: impl Iterator<Item = f64>,
        floor: Option<f64>,
        cfg: &LocalizeConfig,
    ) -> Limit {
        let rel = quantile(values, cfg.reference_quantile).map_or(0.0, |r| cfg.fraction * r);
        Limit(rel.max(floor.unwrap_or(0.0)))
    }

    /// The busbw a result must reach.
    pub fn value(&self) -> f64 {
        self.0
    }

    pub fn slow(&self, busbw: f64) -> bool {
        busbw < self.0
    }
}

/// Phase A: which nodes are slow on their own GPUs.
pub(crate) fn local_bad(local: &[f64], cfg: &LocalizeConfig) -> (Vec<bool>, Limit) {
    let limit = Limit::new(local.iter().copied(), cfg.floors.local, cfg);
    (local.iter().map(|&v| limit.slow(v)).collect(), limit)
}

/// What the pair results say about every node-rail.
pub(crate) struct Assessment {
    pub g: usize,
    pub slow: Vec<bool>,
    pub rail_limit: Limit,
    /// Some pair of this node on this rail is fast.
    pub cleared: Vec<bool>,
    /// Some pair of this node on this rail is slow.
    pub touched_slow: Vec<bool>,
    pub bad: Vec<bool>,
}

impl Assessment {
    pub fn new(n: usize, g: usize, pairs: &[Measured], cfg: &LocalizeConfig) -> Assessment {
        let of_kind = |k: GroupKind| {
            pairs
                .iter()
                .filter(move |m| m.group.kind() == k)
                .map(|m| m.busbw)
        };
        let rail_limit = Limit::new(of_kind(GroupKind::RailPair), cfg.floors.pair, cfg);
        let cross_limit = Limit::new(of_kind(GroupKind::CrossRail), cfg.floors.pair, cfg);
        let slow: Vec<bool> = pairs
            .iter()
            .map(|m| match m.group.kind() {
                GroupKind::CrossRail => cross_limit.slow(m.busbw),
                _ => rail_limit.slow(m.busbw),
            })
            .collect();
        let mut cleared = vec![false; n * g];
        let mut touched_slow = vec![false; n * g];
        for (a, b, r, _, s) in rail_pairs(pairs, &slow) {
            let seen = if s { &mut touched_slow } else { &mut cleared };
            seen[a * g + r] = true;
            seen[b * g + r] = true;
        }
        // Bad: no fast pair on the rail, and slow with at least two cleared partners (one slow
        // pair with a cleared partner may be the link between them).
        let mut cleared_slow_partners = vec![0u32; n * g];
        for (a, b, r, _, _) in rail_pairs(pairs, &slow).filter(|p| p.4) {
            cleared_slow_partners[a * g + r] += u32::from(cleared[b * g + r]);
            cleared_slow_partners[b * g + r] += u32::from(cleared[a * g + r]);
        }
        let mut bad: Vec<bool> = (0..n * g)
            .map(|i| !cleared[i] && cleared_slow_partners[i] >= 2)
            .collect();
        // Two nodes: the cross-rail round places a slow rail. Group (0:r, 1:r+1) holds node 0's
        // NIC r, group (0:r-1, 1:r) node 1's NIC r; the slow one of the two names the owner.
        if n == 2 && g >= 2 {
            let cross: BTreeMap<(usize, usize), bool> = pairs
                .iter()
                .zip(&slow)
                .filter_map(|(m, &s)| match m.group.ends()? {
                    ((0, rail_a), (1, rail_b)) if rail_a != rail_b => Some(((rail_a, rail_b), s)),
                    _ => None,
                })
                .collect();
            for r in 0..g {
                let prev = (r + g - 1) % g;
                let (Some(&mine0), Some(&mine1)) =
                    (cross.get(&(r, (r + 1) % g)), cross.get(&(prev, r)))
                else {
                    continue;
                };
                if touched_slow[r] && !cleared[r] && mine0 && !mine1 {
                    bad[r] = true;
                }
                if touched_slow[g + r] && !cleared[g + r] && mine1 && !mine0 {
                    bad[g + r] = true;
                }
            }
        }
        Assessment {
            g,
            slow,
            rail_limit,
            cleared,
            touched_slow,
            bad,
        }
    }

    /// Node-rails that are slow, not cleared and not yet decided: each node with its rails.
    pub fn undecided(&self, local_bad: &[bool]) -> Vec<(usize, Vec<usize>)> {
        let g = self.g;
        let open = |i: usize| self.touched_slow[i] && !self.cleared[i] && !self.bad[i];
        (0..local_bad.len())
            .filter(|&x| !local_bad[x])
            .map(|x| (x, (0..g).filter(|&r| open(x * g + r)).collect::<Vec<_>>()))
            .filter(|(_, rails)| !rails.is_empty())
            .collect()
    }
}

/// Each same-rail pair: its nodes, rail and busbw, and whether it is slow.
fn rail_pairs<'a>(
    pairs: &'a [Measured],
    slow: &'a [bool],
) -> impl Iterator<Item = (usize, usize, usize, f64, bool)> + 'a {
    pairs.iter().zip(slow).filter_map(|(m, &s)| {
        let ((a, rail_a), (b, rail_b)) = m.group.ends()?;
        (rail_a == rail_b).then_some((a, b, rail_a, m.busbw, s))
    })
}

/// Everything `finish` needs besides the pairs.
pub(crate) struct Inputs<'a> {
    pub n: usize,
    pub g: usize,
    pub cfg: &'a LocalizeConfig,
    pub local: &'a [f64],
    pub pairs: &'a [Measured],
    /// Phase B's busbw and whether it was below its floor.
    pub allocation: Option<(f64, bool)>,
    /// Each node's name, by index: what the findings call it (the topology's names).
    pub names: &'a [String],
}

impl Inputs<'_> {
    /// Node `x`'s name.
    fn name(&self, x: usize) -> String {
        self.names[x].clone()
    }
}

/// The findings that explain every slow result: nodes and rails first, then node pairs, then
/// what stays unexplained.
pub(crate) fn findings(inp: &Inputs) -> Vec<LocalizeFinding> {
    let n = inp.n;
    let mut out = Vec::new();
    let (local_bad, local_limit) = if inp.local.len() == n {
        local_bad(inp.local, inp.cfg)
    } else {
        (vec![false; n], Limit(0.0))
    };
    out.extend(local_findings(inp, &local_bad, &local_limit));
    let a = Assessment::new(n, inp.g, inp.pairs, inp.cfg);
    out.extend(node_rail_findings(inp, &a, &local_bad));
    // Slow pairs no bad node-rail explains: one finding per slow link, then one for the nodes
    // left unresolved.
    let (links, unresolved) = unexplained_pairs(inp, &a, &local_bad);
    out.extend(link_findings(inp, links, a.rail_limit.value()));
    out.extend(unresolved_finding(inp, &unresolved, a.rail_limit.value()));
    if out.is_empty() {
        out.extend(allocation_finding(inp));
    }
    out
}

/// Nodes whose own GPUs were slow in phase A: nothing measured between nodes can clear them.
fn local_findings(inp: &Inputs, local_bad: &[bool], local_limit: &Limit) -> Vec<LocalizeFinding> {
    let mut out = Vec::new();
    for (x, _) in local_bad.iter().enumerate().filter(|(_, &b)| b) {
        let (value, limit) = num_vs(inp.local[x], local_limit.value());
        out.push(LocalizeFinding {
            code: Code::NodeSlow,
            nodes: vec![x],
            subject: Culprit::Node(inp.name(x)),
            message: format!(
                "{}: its own GPUs: local busbw {value} GB/s < {limit} GB/s (phase A, every node at once)",
                inp.name(x),
            ),
            measured: Some(inp.local[x]),
            limit: Some(local_limit.value()),
        });
    }
    out
}

/// Bad node-rails: one finding for a node bad on every rail, else one per bad rail.
fn node_rail_findings(inp: &Inputs, a: &Assessment, local_bad: &[bool]) -> Vec<LocalizeFinding> {
    let (n, g) = (inp.n, inp.g);
    let limit = a.rail_limit.value();
    // For each node-rail, the best busbw among its slow same-rail pairs: the number a finding
    // quotes, since even that is below the limit.
    let mut best = vec![0.0f64; n * g];
    for (x, y, r, busbw, _) in rail_pairs(inp.pairs, &a.slow).filter(|p| p.4) {
        for z in [x, y] {
            best[z * g + r] = best[z * g + r].max(busbw);
        }
    }
    let mut out = Vec::new();
    for x in (0..n).filter(|&x| !local_bad[x]) {
        let rails: Vec<usize> = (0..g).filter(|&r| a.bad[x * g + r]).collect();
        let top = rails.iter().map(|&r| best[x * g + r]).fold(0.0, f64::max);
        if !rails.is_empty() && rails.len() == g {
            let (v, l) = num_vs(top, limit);
            out.push(LocalizeFinding {
                code: Code::NodeSlow,
                nodes: vec![x],
                subject: Culprit::Node(inp.name(x)),
                message: format!(
                    "{}: every node pair it is in is slow on all {g} NICs, with cleared partners: busbw <= {v} GB/s < {l} GB/s",
                    inp.name(x),
                ),
                measured: Some(top),
                limit: Some(limit),
            });
            continue;
        }
        for r in rails {
            let (v, l) = num_vs(best[x * g + r], limit);
            out.push(LocalizeFinding {
                code: Code::RailSlow,
                nodes: vec![x],
                subject: Culprit::Rail {
                    node: inp.name(x),
                    gpu: r as u32,
                },
                message: format!(
                    "{} rail {r} (GPU{r}'s NIC): every pair through it is slow, busbw <= {v} GB/s < {l} GB/s; its other rails are fine",
                    inp.name(x),
                ),
                measured: Some(best[x * g + r]),
                limit: Some(limit),
            });
        }
    }
    out
}

/// Slow node pairs between cleared ends, keyed by (node, node): their rails and worst busbw.
type SlowLinks = BTreeMap<(usize, usize), (Vec<usize>, f64)>;

/// Sorts the unexplained slow pairs into links (both ends cleared, or only two nodes) and the
/// node-rails still unresolved.
fn unexplained_pairs(
    inp: &Inputs,
    a: &Assessment,
    local_bad: &[bool],
) -> (SlowLinks, BTreeMap<usize, Vec<usize>>) {
    let (n, g) = (inp.n, inp.g);
    // Slow pairs no bad node-rail explains: a link when both ends are cleared, else unresolved.
    let explained = |x: usize, r: usize| a.bad[x * g + r] || local_bad[x];
    let mut links: SlowLinks = BTreeMap::new();
    let mut unresolved: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (x, y, r, busbw, _) in rail_pairs(inp.pairs, &a.slow).filter(|p| p.4) {
        if explained(x, r) || explained(y, r) {
            continue;
        }
        if n == 2 || (a.cleared[x * g + r] && a.cleared[y * g + r]) {
            let e = links
                .entry((x.min(y), x.max(y)))
                .or_insert((Vec::new(), f64::INFINITY));
            e.0.push(r);
            e.1 = e.1.min(busbw);
        } else {
            for z in [x, y].into_iter().filter(|&z| !a.cleared[z * g + r]) {
                unresolved.entry(z).or_default().push(r);
            }
        }
    }
    (links, unresolved)
}

/// One finding per slow link, saying why the link (and not a node) is blamed.
fn link_findings(inp: &Inputs, links: SlowLinks, limit: f64) -> Vec<LocalizeFinding> {
    let (n, g) = (inp.n, inp.g);
    let mut out = Vec::new();
    for ((x, y), (mut rails, worst)) in links {
        rails.sort_unstable();
        rails.dedup();
        let why = if n == 2 {
            "; with two nodes a slow NIC on either node and a slow path between them look the same"
        } else {
            ", both nodes fast with their other partners"
        };
        let (v, l) = num_vs(worst, limit);
        out.push(LocalizeFinding {
            code: Code::NodePairSlow,
            nodes: vec![x, y],
            subject: Culprit::NodePair(inp.name(x), inp.name(y)),
            message: format!(
                "{}<->{}: sendrecv busbw {v} GB/s < {l} GB/s on {} of {g} rails{why}",
                inp.name(x),
                inp.name(y),
                rails.len()
            ),
            measured: Some(worst),
            limit: Some(limit),
        });
    }
    out
}

/// One finding naming (the first 16 of) the nodes with slow pairs that could not be placed.
fn unresolved_finding(
    inp: &Inputs,
    unresolved: &BTreeMap<usize, Vec<usize>>,
    limit: f64,
) -> Option<LocalizeFinding> {
    if unresolved.is_empty() {
        return None;
    }
    let names: Vec<String> = unresolved.keys().take(16).map(|&z| inp.name(z)).collect();
    let more = unresolved.len().saturating_sub(16);
    // Whole names, as many as a shared reason's subject holds (`reasons::MAX_REASON_CHARS`).
    let mut chars = 0;
    let fit = names.iter().take_while(|n| {
        chars += n.chars().count() + 1;
        chars <= super::reasons::MAX_REASON_CHARS + 1
    });
    Some(LocalizeFinding {
        code: Code::SuspectsUnresolved,
        nodes: unresolved.keys().copied().collect(),
        subject: Culprit::Nodes(fit.cloned().collect()),
        message: format!(
            "slow pairs not placed on a node, rail or link (no cleared partner left, or the round cap reached): {}{}",
            names.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ),
        measured: None,
        limit: Some(limit),
    })
}

/// When phase B's collective was below its floor and nothing else explains it: a finding for
/// the whole allocation (or the one node pair), so a slow result is never left unexplained.
fn allocation_finding(inp: &Inputs) -> Option<LocalizeFinding> {
    let n = inp.n;
    let Some((busbw, true)) = inp.allocation else {
        return None;
    };
    let floor = inp.cfg.floors.allocation.unwrap_or(0.0);
    let (v, l) = num_vs(busbw, floor);
    let (code, nodes, subject, why) = if n == 2 {
        (
            Code::NodePairSlow,
            vec![0, 1],
            Culprit::NodePair(inp.name(0), inp.name(1)),
            "no rail stands out: with two nodes a slow node's NICs, both nodes, or the path between them look the same",
        )
    } else {
        (
            Code::AllocationSlow,
            (0..n).collect(),
            Culprit::Allocation,
            "no node, rail or ring link stands out: uniformly slow, or at least half of the ring slow (no healthy reference)",
        )
    };
    Some(LocalizeFinding {
        code,
        nodes,
        subject,
        message: format!("allocation-wide collective busbw {v} GB/s < floor {l} GB/s; {why}"),
        measured: Some(busbw),
        limit: Some(floor),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(v.iter().copied(), 0.5), Some(2.0));
        assert_eq!(quantile(v.iter().copied(), 0.75), Some(3.0));
        assert_eq!(quantile([5.0, 1.0].into_iter(), 0.75), Some(5.0));
        assert_eq!(quantile(std::iter::empty(), 0.75), None);
    }

    #[test]
    fn limit_takes_the_stricter_of_relative_and_floor() {
        let cfg = LocalizeConfig::default();
        let l = Limit::new([100.0, 100.0, 100.0].into_iter(), Some(90.0), &cfg);
        assert_eq!(l.value(), 90.0);
        assert!(l.slow(89.0) && !l.slow(90.0));
        let l = Limit::new([100.0].into_iter(), Some(50.0), &cfg);
        assert_eq!(l.value(), 85.0);
    }

    /// The unplaced suspects are named as a list of whole names, as many as a shared reason
    /// holds (20 names of 200 characters: the first 4).
    #[test]
    fn unplaced_suspects_are_a_list_of_whole_names_within_the_shared_bound() {
        let cfg = LocalizeConfig::default();
        let names: Vec<String> = (0..20).map(|i| format!("{i:0>200}")).collect();
        let inp = Inputs {
            n: 20,
            g: 1,
            cfg: &cfg,
            local: &[],
            pairs: &[],
            allocation: None,
            names: &names,
        };
        let unresolved: BTreeMap<usize, Vec<usize>> = (0..20).map(|z| (z, vec![])).collect();
        let f = unresolved_finding(&inp, &unresolved, 1.0).expect("a finding");
        assert_eq!(f.subject, Culprit::Nodes(names[..4].to_vec()));
        let short = Inputs {
            names: &["a", "b"].map(String::from),
            n: 2,
            ..inp
        };
        let two = BTreeMap::from([(0, vec![1]), (1, vec![0])]);
        let f = unresolved_finding(&short, &two, 1.0).expect("a finding");
        assert_eq!(f.subject.to_string(), "a,b");
    }

    fn pair(a: usize, b: usize, r: usize, busbw: f64) -> Measured {
        Measured {
            group: Group::Pair {
                a: (a, r),
                b: (b, r),
            },
            busbw,
        }
    }

    #[test]
    fn one_slow_pair_with_cleared_ends_is_a_link_not_a_node() {
        // Ring of 4, one rail: edge (1,2) slow.
        let pairs = [
            pair(0, 1, 0, 48.0),
            pair(2, 3, 0, 47.0),
            pair(1, 2, 0, 20.0),
            pair(0, 3, 0, 48.5),
        ];
        let cfg = LocalizeConfig::default();
        let a = Assessment::new(4, 1, &pairs, &cfg);
        assert_eq!(a.bad, vec![false; 4]);
        assert!(a.undecided(&[false; 4]).is_empty());
        let f = findings(&Inputs {
            n: 4,
            g: 1,
            cfg: &cfg,
            local: &[300.0; 4],
            pairs: &pairs,
            allocation: Some((20.0, true)),
            names: &["a", "b", "c", "d"].map(String::from),
        });
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].code, f[0].nodes.clone()),
            (Code::NodePairSlow, vec![1, 2])
        );
        assert_eq!(f[0].subject, Culprit::NodePair("b".into(), "c".into()));
        assert!(f[0].message.starts_with("b<->c: "), "{}", f[0].message);
    }
}
