//! One cause across processes: a node's own finding (a GPU another process holds, a starved
//! worker, a missing GPU, a busy host) is the cause every process reports for that node; the
//! network reading (the localizer's `node_slow` "every node pair it is in is slow on all N
//! NICs", `node_pair_slow`, `rail_slow`; the full pair matrix's `node_outlier`,
//! `node_pair_outlier`) is only for nodes with none. Seen on 4 emulated nodes: e2's own report
//! said `GPU0: busy: 1 other process (pid ...)`, the coordinator's verdict said `e2: every node
//! pair it is in is slow on all 1 NICs`: right node, wrong cause.
//!
//! The findings travel as numbers in one sum over every rank ([`exchange`]: NCCL's all_reduce
//! on the GPUs, the control plane's sum in the simulation): after the localizer's rounds or a
//! slow node pair of the full matrix, else once at the end of every multi-node check (one small
//! all_reduce), because a node's busy or missing GPU fails that node whether or not the
//! collectives over the network felt it, and every process must say so ([`standalone_findings`]),
//! not only the node's own. [`WIDTH`]
//! slots per *process*, filled by that process alone (one of its ranks), so each slot's sum is
//! one value plus zeros, exact. Per process, not per node: a node of several processes (one per
//! GPU) has each process's GPUs known to that process only. Typed and compact: the code is the
//! slot, the values are the GPU, the pid, the memory, the share; a sentence is built again on
//! every rank ([`decode_findings`]), never carried. What a process knows of its node by then:
//! `facts::known`; where the sums run: `measure::runner` (`localized.rs`, `pair_matrix.rs`,
//! `timed.rs`); where the findings win: [`own_findings_win`] (every node's readings),
//! [`standalone_findings`] (findings that fail their node alone), [`own_node_wins`] (a process's
//! own node), called by `judge::overall`, and [`blame_starved`] (a starved worker's node over the
//! node pairs it slowed).

use crate::meet::topology::Topology;
use crate::model::localization::NodeFindings;
use nccl_check_contract::report::culprit::Culprit;
use nccl_check_contract::report::reason::{Reason, ReasonCode};
use std::collections::HashSet;

/// Slots per process: GPU held (its index on the node + 1), its first other pid, its GiB held,
/// the share of the check its worker could not run, GPUs missing, host load (CPUs busy with
/// others' processes), the largest such consumer's pid and its CPUs, the held GPU's local probe
/// (copy GB/s) and that probe's floor.
pub const WIDTH: usize = 10;

/// A node's own finding, as it travels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OwnFinding {
    /// GPU `gpu` of the node (its index among the node's checked GPUs) held by `pid`;
    /// `probe`: its local probe (copy GB/s) and the probe's floor, when both are known.
    GpuBusy {
        gpu: u32,
        pid: u32,
        gib: f64,
        probe: Option<(f64, f64)>,
    },
    /// The node's worker could not run for `share` of the check.
    Starved { share: f64 },
    /// `missing` GPUs fewer than the node should have.
    GpuMissing { missing: u32 },
    /// Its CPUs were busy with `cpus` CPUs' worth of others' processes; `top`: the largest
    /// consumer (pid, CPUs).
    HostBusy { cpus: f64, top: Option<(u32, f64)> },
}

/// The sum entries of process `process` (its index among the check's processes) for its
/// findings; at most one of each kind (the first).
pub fn encode_findings(process: usize, findings: &[OwnFinding]) -> Vec<(u64, f64)> {
    let at = |slot: usize| (process * WIDTH + slot) as u64;
    let mut out: Vec<(u64, f64)> = Vec::new();
    let mut put = |slot: usize, v: f64| {
        if !out.iter().any(|(i, _)| *i == at(slot)) {
            out.push((at(slot), v));
        }
    };
    for f in findings {
        match *f {
            OwnFinding::GpuBusy {
                gpu,
                pid,
                gib,
                probe,
            } => {
                put(0, f64::from(gpu) + 1.0);
                put(1, f64::from(pid));
                put(2, gib);
                if let Some((rate, floor)) = probe {
                    put(8, rate);
                    put(9, floor);
                }
            }
            OwnFinding::Starved { share } => put(3, share),
            OwnFinding::GpuMissing { missing } => put(4, f64::from(missing)),
            OwnFinding::HostBusy { cpus, top } => {
                put(5, cpus);
                if let Some((pid, used)) = top {
                    put(6, f64::from(pid));
                    put(7, used);
                }
            }
        }
    }
    out
}

/// The node of every process of the check, by process rank (`names[p]` for [`decode_findings`]).
pub fn process_nodes(t: &Topology) -> Vec<String> {
    let by_rank = t.processes_by_rank();
    let n = by_rank.iter().map(|&p| p as usize + 1).max().unwrap_or(0);
    let mut names = vec![String::new(); n];
    for (rank, &p) in by_rank.iter().enumerate().rev() {
        names[p as usize] = t.node_of(rank).unwrap_or_default().to_string();
    }
    names
}

/// One sum over every rank of this process's findings (`mine`: empty on all but one rank of each
/// process), then every node's findings decoded (see [`decode_findings`]); this process's own
/// left out unless `include_own` (the worker judges its own node itself, with the pid's user
/// and the whole check's window: `judge::evidence`). `sum` is the caller's
/// sum over every rank; every rank of the check must call this, or none.
pub fn exchange<E>(
    process: usize,
    node_of_process: &[String],
    mine: &[OwnFinding],
    include_own: bool,
    sum: impl FnOnce(&[f64]) -> Result<Vec<f64>, E>,
) -> Result<Vec<NodeFindings>, E> {
    let mut vector = vec![0.0; node_of_process.len() * WIDTH];
    if process < node_of_process.len() {
        for (i, v) in encode_findings(process, mine) {
            vector[i as usize] = v;
        }
    }
    let mut sums = sum(&vector)?;
    if !include_own {
        for x in sums.iter_mut().skip(process * WIDTH).take(WIDTH) {
            *x = 0.0;
        }
    }
    Ok(decode_findings(node_of_process, &sums))
}

/// The findings of every node from the summed vector (`names[p]` is process p's node; a node of
/// several processes gets all of theirs); nodes without any are left out. A value that is not a
/// finite, positive number is no finding.
pub fn decode_findings(names: &[String], sums: &[f64]) -> Vec<NodeFindings> {
    let mut out: Vec<NodeFindings> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let v = |slot: usize| {
            sums.get(i * WIDTH + slot)
                .copied()
                .filter(|x| x.is_finite() && *x > 0.0)
        };
        let reasons = process_reasons(name, &v);
        if reasons.is_empty() {
            continue;
        }
        match out.iter_mut().find(|f| f.node == *name) {
            Some(known) => known.reasons.extend(reasons),
            None => out.push(NodeFindings {
                node: name.clone(),
                reasons,
            }),
        }
    }
    out
}

/// The reasons of one process's slots (`v(slot)`: the slot's value when it is a finding).
fn process_reasons(name: &str, v: &dyn Fn(usize) -> Option<f64>) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if let Some(g) = v(0) {
        let gpu = (g.round() as u32).saturating_sub(1);
        let pid = v(1).map_or(String::new(), |p| format!("pid {}", p.round() as u64));
        let gib = v(2).map_or(String::new(), |g| format!(", {g:.1} GiB"));
        // Below its floor with the process on it: the node's own verdict fails it as busy
        // (`judge::foreign`), and so does every other process's (`standalone_findings`).
        let slowed = v(8).zip(v(9)).filter(|(rate, floor)| rate < floor);
        let message = match slowed {
            Some((rate, floor)) => format!(
                "{name} GPU{gpu}: busy: another process ({pid}{gib}): device-local copy \
                 {rate:.0} GB/s < {floor:.0} GB/s with it on the GPU: that process's load, not \
                 the GPU's hardware"
            ),
            None => format!(
                "{name} GPU{gpu}: busy: another process ({pid}{gib}): the node pairs it \
                 was in were slow by that process's load, not its hardware's"
            ),
        };
        reasons.push(Reason {
            code: ReasonCode::GpuBusy,
            message,
            subject: Some(Culprit::Gpu {
                node: Some(name.to_string()),
                gpu,
            }),
            measured: slowed.map(|(rate, _)| rate),
            limit: slowed.map(|(_, floor)| floor),
        });
    }
    // The node-wide findings: the node is their subject.
    let of_node = |code: ReasonCode, message: String, measured: Option<f64>| Reason {
        code,
        message,
        subject: Some(Culprit::Node(name.to_string())),
        measured,
        limit: None,
    };
    if let Some(share) = v(3) {
        let message = format!(
            "node {name}: its worker could not run for {:.0}% of the check \
             (worker_starved): a starved node, not a path",
            100.0 * share
        );
        reasons.push(of_node(ReasonCode::WorkerStarved, message, Some(share)));
    }
    if let Some(n) = v(4) {
        let message = format!(
            "node {name}: {} GPU(s) fewer than it should have",
            n.round()
        );
        reasons.push(of_node(ReasonCode::GpuMissing, message, None));
    }
    if let Some(cpus) = v(5) {
        let top = v(6).zip(v(7)).map_or(String::new(), |(pid, used)| {
            format!(" (the largest: pid {}, {used:.1} CPU)", pid.round() as u64)
        });
        let message = format!(
            "node {name}: host busy: its CPUs were busy with {cpus:.1} CPUs of other \
             processes{top}: the node pairs it was in were slow by its host, not its network"
        );
        reasons.push(of_node(ReasonCode::HostBusy, message, Some(cpus)));
    }
    reasons
}

/// The nodes a network reading names: the localizer's (`node_slow`, `node_pair_slow`,
/// `rail_slow`) and the full pair matrix's (`node_outlier`, `node_pair_outlier`, a node pair
/// below its floor); empty for any other reason.
fn network_nodes(r: &Reason) -> Vec<String> {
    let network = match r.code {
        ReasonCode::NodeSlow
        | ReasonCode::NodePairSlow
        | ReasonCode::RailSlow
        | ReasonCode::NodeOutlier
        | ReasonCode::NodePairOutlier => true,
        ReasonCode::BusbwBelowThreshold => {
            matches!(r.subject, Some(Culprit::NodePair(..)))
        }
        _ => false,
    };
    match r.subject.clone().filter(|_| network) {
        Some(Culprit::Node(n)) | Some(Culprit::Rail { node: n, .. }) => vec![n],
        Some(Culprit::NodePair(a, b)) => vec![a, b],
        _ => Vec::new(),
    }
}

/// The node a reason is about, when it names one (a GPU, a GPU pair or a rail of a named node,
/// or a node).
fn node_named(r: &Reason) -> Option<String> {
    match r.subject.clone()? {
        Culprit::Gpu { node, .. } | Culprit::GpuPair { node, .. } => node,
        Culprit::Node(n) | Culprit::Rail { node: n, .. } => Some(n),
        _ => None,
    }
}

/// The other nodes' own findings in a process's verdict: [`own_findings_win`] over the network
/// readings, then [`standalone_findings`].
pub fn other_nodes_findings(reasons: &mut Vec<Reason>, own: &[NodeFindings]) {
    own_findings_win(reasons, own);
    standalone_findings(reasons, own);
}

/// Another node's own findings that fail that node by themselves, in every process's verdict
/// (first, each once): a GPU another process holds whose local probe fell below its floor, and
/// GPUs missing. The node's own verdict fails on them (`judge::foreign`, the inventory), so the
/// check's other processes say the same, not PASS. Starved workers and busy hosts only explain
/// readings ([`own_findings_win`]); an idle holder is the node's own warning.
pub fn standalone_findings(reasons: &mut Vec<Reason>, own: &[NodeFindings]) {
    let fails = |r: &Reason| match r.code {
        ReasonCode::GpuBusy => matches!((r.measured, r.limit), (Some(m), Some(l)) if m < l),
        ReasonCode::GpuMissing => true,
        _ => false,
    };
    let new: Vec<Reason> = own
        .iter()
        .flat_map(|f| f.reasons.iter())
        .filter(|r| fails(r))
        .filter(|r| {
            !reasons
                .iter()
                .any(|have| have.code == r.code && have.subject == r.subject)
        })
        .cloned()
        .collect();
    reasons.splice(0..0, new);
}

/// Each network reading that names a node with its own findings becomes those findings (a
/// node pair with one such end becomes that end's; the partner is not named again); readings
/// of nodes with none stay. Each finding is named once.
pub fn own_findings_win(reasons: &mut Vec<Reason>, own: &[NodeFindings]) {
    let of = |n: &str| own.iter().find(|f| f.node == n).map(|f| &f.reasons);
    let mut out: Vec<Reason> = Vec::new();
    for r in reasons.drain(..) {
        let nodes = network_nodes(&r);
        // A busy host is weighed against the node's peers (`judge::load`), not a cause that
        // wins by itself: an outlier among equally loaded nodes stays the node's.
        let found: Vec<&Reason> = (nodes.iter().filter_map(|n| of(n)).flatten())
            .filter(|f| f.code != ReasonCode::HostBusy)
            .collect();
        if found.is_empty() {
            out.push(r);
        } else {
            out.extend(found.into_iter().cloned());
        }
    }
    first_of_each(&mut out);
    *reasons = out;
}

/// Keeps the first reason of each code and subject.
fn first_of_each(reasons: &mut Vec<Reason>) {
    let mut seen = HashSet::new();
    reasons.retain(|r| seen.insert((r.code, r.subject.clone())));
}

/// In a process's own verdict: when the node `host` has its own finding among `reasons` (a
/// GPU busy, a starved worker, a missing GPU, a busy host: class busy or missing, about this
/// node or no node), the localizer's network readings of `host` (and of the pairs it is in)
/// give way to it. A finding of this node that came through the sum ([`exchange`], subject
/// `host GPUk` or `host`) and that this process also judged itself (subject `GPUk`, with the
/// pid, user and memory) is named once, in the richer local words. Another node's finding
/// (`e2 GPU0` in e1's verdict; `nodes`: the check's nodes) is no finding of `host`; it leads
/// the speed readings it explains (a collective over every rank), so the verdict line names it.
pub fn own_node_wins(reasons: &mut Vec<Reason>, host: &str, nodes: &[String]) {
    use nccl_check_contract::report::cause::{is_speed_reading, CauseClass};
    let elsewhere = |r: &Reason| node_named(r).is_some_and(|n| n != host && nodes.contains(&n));
    // A busy host already had its say (`judge::load`: what it explains became its
    // `host_busy`; an outlier among equally loaded peers stands beside it).
    let busy_or_missing = |r: &Reason| {
        matches!(r.cause(), CauseClass::Busy | CauseClass::Missing)
            && !matches!(r.code, ReasonCode::HostInterference | ReasonCode::HostBusy)
    };
    let own = reasons
        .iter()
        .any(|r| network_nodes(r).is_empty() && busy_or_missing(r) && !elsewhere(r));
    if own {
        reasons.retain(|r| !network_nodes(r).iter().any(|n| n == host));
    }
    let local: Vec<(ReasonCode, Culprit)> = reasons
        .iter()
        .filter(|r| node_named(r).is_none())
        .filter_map(|r| Some((r.code, r.subject.clone()?)))
        .collect();
    reasons.retain(|r| {
        let Some(Culprit::Gpu { node: Some(n), gpu }) = &r.subject else {
            return true;
        };
        let mine = Culprit::Gpu {
            node: None,
            gpu: *gpu,
        };
        !(n == host && local.iter().any(|(c, s)| *c == r.code && *s == mine))
    });
    // Another node's own finding explains the slow readings beside it (a collective over every
    // rank slowed by that node's busy GPU): it leads them, as this node's own findings do
    // (`judge::evidence::foreign_processes`), so the verdict line names it.
    let shared = |r: &Reason| busy_or_missing(r) && elsewhere(r);
    if let Some(at) = reasons.iter().position(|r| is_speed_reading(r.code)) {
        let (lead, rest): (Vec<Reason>, Vec<Reason>) = reasons.drain(at..).partition(|r| shared(r));
        reasons.extend(lead);
        reasons.extend(rest);
    }
    // A node-wide finding (starved, missing GPUs, busy host) this process judged and another
    // process of its node shared: the first, this process's own (its facts lead the reasons).
    let mut seen = HashSet::new();
    reasons.retain(|r| {
        let node_wide = matches!(
            r.code,
            ReasonCode::WorkerStarved | ReasonCode::GpuMissing | ReasonCode::HostBusy
        ) && matches!(&r.subject, Some(Culprit::Node(n)) if n == host);
        !node_wide || seen.insert(r.code)
    });
}

/// The localizer's `node_pair_slow` reasons with exactly one starved end (`starved`: node name
/// and off-CPU share, every node whose workers lost at least
/// `measure::runner::off_cpu::STARVED_SHARE`) become that
/// node's: a worker that cannot run slows every pair it is in, and with its stops coming and
/// going the localizer's retest may clear it with one partner and not another (seen on one H100 with
/// emulated nodes: a stopped fab03 made "fab02<->fab03" the culprit, which would drain fab02 too).
/// The partner is not named again (its other pairs were cleared).
pub fn blame_starved(reasons: &mut Vec<Reason>, starved: &[(String, f64)]) {
    let share = |n: &str| starved.iter().find(|(s, _)| s == n).map(|(_, x)| *x);
    for r in reasons
        .iter_mut()
        .filter(|r| r.code == ReasonCode::NodePairSlow)
    {
        let Some(Culprit::NodePair(a, b)) = r.subject.clone() else {
            continue;
        };
        let (node, lost) = match (share(&a), share(&b)) {
            (Some(x), None) => (a, x),
            (None, Some(x)) => (b, x),
            _ => continue,
        };
        r.code = ReasonCode::NodeSlow;
        r.message = format!(
            "node {node}: the node pairs it was in were slow, and its worker could not run for \
             {:.0}% of the check (worker_starved): a starved node, not a path",
            100.0 * lost
        );
        r.subject = Some(Culprit::Node(node));
    }
    first_of_each(reasons);
}

#[cfg(test)]
mod tests;
