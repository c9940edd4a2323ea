//! One cause across processes: a node's own finding (a GPU another process holds, a starved
//! worker, a missing GPU, a busy host) is the cause the coordinator reports for that node; the
//! network reading (`node_slow` "every node pair it is in is slow on all N NICs",
//! `node_pair_slow`, `rail_slow`) is only for nodes with none. Seen on 4 emulated nodes: e2's own
//! report said `GPU0: busy: 1 other process (pid ...)`, the coordinator's verdict said `e2: every
//! node pair it is in is slow on all 1 NICs`: right node, wrong cause.
//!
//! The findings travel as numbers, so they fit the control plane's bounded gather (a vector
//! summed at the coordinator, `Team::gather`): [`WIDTH`] slots per node, filled by one rank of
//! that node only (its first), so the sum is that rank's values. Typed and compact: the code is
//! the slot, the values are the GPU, the pid, the memory, the share; a sentence is built again
//! at the coordinator ([`decode_findings`]), never carried.

use crate::report::json::{Reason, ReasonCode};
use crate::report::Culprit;

/// Slots per node: GPU held (index + 1), its first other pid, its GiB held, the share of the
/// check its worker could not run, GPUs missing, host load (busy CPUs of others).
pub const WIDTH: usize = 6;

/// A node's own finding, as it travels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OwnFinding {
    /// GPU `gpu` of the node (its index among the node's checked GPUs) held by `pid`.
    GpuBusy { gpu: u32, pid: u32, gib: f64 },
    /// The node's worker could not run for `share` of the check.
    Starved { share: f64 },
    /// `missing` GPUs fewer than the node should have.
    GpuMissing { missing: u32 },
    /// Its CPUs were busy with `cpus` CPUs' worth of others' processes.
    HostBusy { cpus: f64 },
}

/// The gather entries of node `node` (its index among the check's nodes) for its findings; at
/// most one of each kind (the first).
pub fn encode_findings(node: usize, findings: &[OwnFinding]) -> Vec<(u64, f64)> {
    let at = |slot: usize| (node * WIDTH + slot) as u64;
    let mut out: Vec<(u64, f64)> = Vec::new();
    let mut put = |slot: usize, v: f64| {
        if !out.iter().any(|(i, _)| *i == at(slot)) {
            out.push((at(slot), v));
        }
    };
    for f in findings {
        match *f {
            OwnFinding::GpuBusy { gpu, pid, gib } => {
                put(0, f64::from(gpu) + 1.0);
                put(1, f64::from(pid));
                put(2, gib);
            }
            OwnFinding::Starved { share } => put(3, share),
            OwnFinding::GpuMissing { missing } => put(4, f64::from(missing)),
            OwnFinding::HostBusy { cpus } => put(5, cpus),
        }
    }
    out
}

/// The findings of every node from the summed vector (`names[i]` is node i); nodes without
/// any are left out. A value that is not a finite, positive number is no finding.
pub fn decode_findings(names: &[String], sums: &[f64]) -> Vec<(String, Vec<Reason>)> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let v = |slot: usize| {
            sums.get(i * WIDTH + slot)
                .copied()
                .filter(|x| x.is_finite() && *x > 0.0)
        };
        let mut reasons = Vec::new();
        if let Some(g) = v(0) {
            let gpu = (g.round() as u32).saturating_sub(1);
            let pid = v(1).map_or(String::new(), |p| format!("pid {}", p.round() as u64));
            let gib = v(2).map_or(String::new(), |g| format!(", {g:.1} GiB"));
            reasons.push(Reason {
                code: ReasonCode::GpuBusy,
                message: format!(
                    "{name} GPU{gpu}: busy: another process ({pid}{gib}): the node pairs it \
                     was in were slow by that process's load, not its hardware's"
                ),
                subject: Some(format!("{name} GPU{gpu}")),
                measured: None,
                limit: None,
            });
        }
        if let Some(share) = v(3) {
            reasons.push(Reason {
                code: ReasonCode::WorkerStarved,
                message: format!(
                    "node {name}: its worker could not run for {:.0}% of the check \
                     (worker_starved): a starved node, not a path",
                    100.0 * share
                ),
                subject: Some(name.clone()),
                measured: Some(share),
                limit: None,
            });
        }
        if let Some(n) = v(4) {
            reasons.push(Reason {
                code: ReasonCode::GpuMissing,
                message: format!(
                    "node {name}: {} GPU(s) fewer than it should have",
                    n.round()
                ),
                subject: Some(name.clone()),
                measured: None,
                limit: None,
            });
        }
        if let Some(cpus) = v(5) {
            reasons.push(Reason {
                code: ReasonCode::HostBusy,
                message: format!(
                    "node {name}: its CPUs were busy with {cpus:.1} CPUs of other processes"
                ),
                subject: Some(name.clone()),
                measured: Some(cpus),
                limit: None,
            });
        }
        if !reasons.is_empty() {
            out.push((name.clone(), reasons));
        }
    }
    out
}

/// The nodes a network reading of the localizer names; empty for any other reason.
fn network_nodes(r: &Reason) -> Vec<String> {
    let network = matches!(
        r.code,
        ReasonCode::NodeSlow | ReasonCode::NodePairSlow | ReasonCode::RailSlow
    );
    match r.culprit().filter(|_| network) {
        Some(Culprit::Node(n)) | Some(Culprit::Rail { node: n, .. }) => vec![n],
        Some(Culprit::NodePair(a, b)) => vec![a, b],
        _ => Vec::new(),
    }
}

/// Each network reading that names a node with its own findings becomes those findings (a
/// node pair with one such end becomes that end's; the partner is not named again); readings
/// of nodes with none stay. Each finding is named once.
pub fn own_findings_win(reasons: &mut Vec<Reason>, own: &[(String, Vec<Reason>)]) {
    let of = |n: &str| own.iter().find(|(name, _)| name == n).map(|(_, r)| r);
    let mut out: Vec<Reason> = Vec::new();
    for r in reasons.drain(..) {
        let nodes = network_nodes(&r);
        let found: Vec<&Reason> = nodes.iter().filter_map(|n| of(n)).flatten().collect();
        if found.is_empty() {
            out.push(r);
        } else {
            out.extend(found.into_iter().cloned());
        }
    }
    let mut seen: Vec<(ReasonCode, Option<String>)> = Vec::new();
    out.retain(|r| {
        let key = (r.code, r.subject.clone());
        let first = !seen.contains(&key);
        seen.push(key);
        first
    });
    *reasons = out;
}

/// In a process's own verdict: when the node `host` has its own finding among `reasons` (a
/// GPU busy, a starved worker, a missing GPU, a busy host: class busy or missing), the
/// localizer's network readings of `host` (and of the pairs it is in) give way to it.
pub fn own_node_wins(reasons: &mut Vec<Reason>, host: &str) {
    use nccl_check_contract::report::cause::CauseClass;
    let own = reasons.iter().any(|r| {
        network_nodes(r).is_empty()
            && matches!(r.cause(), CauseClass::Busy | CauseClass::Missing)
            && r.code != ReasonCode::HostInterference
    });
    if own {
        reasons.retain(|r| !network_nodes(r).iter().any(|n| n == host));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("e{i}")).collect()
    }

    /// Sums the entries as the control plane does, over the ranks that put them.
    fn summed(len: usize, parts: &[Vec<(u64, f64)>]) -> Vec<f64> {
        let mut v = vec![0.0; len];
        for (i, x) in parts.iter().flatten() {
            v[*i as usize] += x;
        }
        v
    }

    fn network(code: ReasonCode, subject: &str) -> Reason {
        Reason {
            subject: Some(subject.into()),
            ..Reason::plain(code, format!("{subject}: every node pair it is in is slow"))
        }
    }

    /// The issue-33 case: 4 nodes, e2's GPU held by another process; the localizer blamed e2
    /// (and, on another run, the pair e2<->e3): the coordinator's reason is e2's GPU busy, with
    /// its pid, whatever the network reading.
    #[test]
    fn a_busy_gpu_on_one_node_is_that_nodes_cause_not_its_network() {
        let n = names(4);
        let e2 = encode_findings(
            1,
            &[OwnFinding::GpuBusy {
                gpu: 0,
                pid: 31337,
                gib: 8.5,
            }],
        );
        let sums = summed(
            4 * WIDTH,
            &[e2, encode_findings(0, &[]), encode_findings(2, &[])],
        );
        let own = decode_findings(&n, &sums);
        assert_eq!(own.len(), 1);
        assert_eq!(own[0].0, "e2");
        for reading in [
            network(ReasonCode::NodeSlow, "e2"),
            network(ReasonCode::NodePairSlow, "e2<->e3"),
            network(ReasonCode::RailSlow, "e2 GPU0 NIC"),
        ] {
            let mut reasons = vec![reading];
            own_findings_win(&mut reasons, &own);
            assert_eq!(reasons.len(), 1, "{reasons:?}");
            let r = &reasons[0];
            assert_eq!(r.code, ReasonCode::GpuBusy);
            assert_eq!(r.subject.as_deref(), Some("e2 GPU0"));
            assert_eq!(r.cause().as_str(), "busy");
            assert!(
                r.message
                    .starts_with("e2 GPU0: busy: another process (pid 31337, 8.5 GiB)"),
                "{}",
                r.message
            );
        }
        // A node with no own finding keeps its network reading.
        let mut reasons = vec![network(ReasonCode::NodeSlow, "e4")];
        own_findings_win(&mut reasons, &own);
        assert_eq!(reasons[0].code, ReasonCode::NodeSlow);
    }

    #[test]
    fn every_kind_travels_and_a_node_named_twice_is_named_once() {
        let n = names(3);
        let e1 = encode_findings(
            0,
            &[
                OwnFinding::Starved { share: 0.6 },
                OwnFinding::GpuMissing { missing: 1 },
                OwnFinding::HostBusy { cpus: 12.0 },
                OwnFinding::Starved { share: 0.9 },
            ],
        );
        assert_eq!(e1.len(), 3, "one of each kind");
        let own = decode_findings(&n, &summed(3 * WIDTH, &[e1]));
        let codes: Vec<ReasonCode> = own[0].1.iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [
                ReasonCode::WorkerStarved,
                ReasonCode::GpuMissing,
                ReasonCode::HostBusy
            ]
        );
        let mut reasons = vec![
            network(ReasonCode::NodePairSlow, "e1<->e2"),
            network(ReasonCode::NodePairSlow, "e1<->e3"),
            network(ReasonCode::NodePairSlow, "e2<->e3"),
        ];
        own_findings_win(&mut reasons, &own);
        let got: Vec<(ReasonCode, Option<&str>)> = reasons
            .iter()
            .map(|r| (r.code, r.subject.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (ReasonCode::WorkerStarved, Some("e1")),
                (ReasonCode::GpuMissing, Some("e1")),
                (ReasonCode::HostBusy, Some("e1")),
                (ReasonCode::NodePairSlow, Some("e2<->e3")),
            ]
        );
    }

    /// The busy node's own verdict names its GPU busy, not its network.
    #[test]
    fn a_process_with_its_own_finding_drops_the_network_reading_of_its_node() {
        let busy = Reason {
            subject: Some("GPU0".into()),
            ..Reason::plain(ReasonCode::GpuBusy, "GPU0: busy: 1 other process (pid 9)")
        };
        let mut reasons = vec![
            network(ReasonCode::NodeSlow, "e2"),
            busy.clone(),
            network(ReasonCode::NodePairSlow, "e3<->e4"),
            network(ReasonCode::NodePairSlow, "e1<->e2"),
        ];
        own_node_wins(&mut reasons, "e2");
        let subjects: Vec<&str> = reasons
            .iter()
            .filter_map(|r| r.subject.as_deref())
            .collect();
        assert_eq!(subjects, ["GPU0", "e3<->e4"]);
        let mut without = vec![network(ReasonCode::NodeSlow, "e2")];
        own_node_wins(&mut without, "e2");
        assert_eq!(
            without.len(),
            1,
            "no own finding: the network reading stays"
        );
    }

    #[test]
    fn values_that_are_not_positive_finite_numbers_are_no_finding() {
        let mut sums = vec![0.0; WIDTH];
        sums[3] = f64::NAN;
        sums[5] = -1.0;
        assert!(decode_findings(&names(1), &sums).is_empty());
        assert!(decode_findings(&names(2), &[]).is_empty());
    }
}
