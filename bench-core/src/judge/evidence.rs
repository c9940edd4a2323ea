//! The node's facts in the verdict: their faults as FAIL reasons (`gpu_missing`,
//! NVML's codes, NIC state, the local probe), the fact that explains a slow bandwidth cited in
//! its reason, the node-pair bandwidth held against the NICs' rate, and host interference told
//! apart from a slow GPU or link. Pure: a function of the report, like `judge`, which calls it.
//!
//! Host interference policy: a retested row, or a pair of the pair matrix, that is below its
//! floor by the host's clock (the number reported, as nccl-tests reports it) but at or above it
//! by the GPU's clock (`GpuSide`, `PairRow::gpu_busbw`) was slowed by its host (CPU load, a
//! descheduled launching thread, a late peer), not by its GPUs or links. It is a WARN
//! (`host_interference` in `warnings`): never FAIL, never drains, and the verdict stays what the
//! rest of the check says.
//!
//! Foreign processes policy ([`foreign_processes`]): other processes on the GPUs this process
//! measured (NVML's list, `gpus[].health.processes`, the worker's own pid left out), in every
//! mode: a job on such a GPU will meet them, so they are always named (pid, user, memory). Where
//! slow results on the GPU (or the whole check) made the verdict FAIL, the process is their
//! cause (`gpu_busy`, class busy: end it, do not replace the GPU); where the GPU measured fine,
//! the process was idle and is a warning (`foreign_process`), never a FAIL. Whether a busy node
//! drains is the prolog's rule (`stray_processes`), not the worker's.
//!
//! Busy host policy: which slow readings a busy host explains is `judge::load`'s table.

use crate::facts::gpu_health::{self, HealthFacts};
use crate::facts::local_probe::{self, Probed};
use crate::facts::node::NodeFacts;
use crate::judge::analysis::{slow_pairs, Floor};
use crate::measure::rows::{GpuSide, PairRow, Row};
use crate::meet::rendezvous::Member;
use crate::model::finding::Finding;
use crate::report::json::GpuEntry;
use nccl_check_contract::report::cause::is_speed_reading;
use nccl_check_contract::report::culprit::Culprit;
use nccl_check_contract::report::process::{busy_prefix, GpuProcess};
use nccl_check_contract::report::reason::{Reason, ReasonCode};

/// Whether CUDA can map device `b`'s memory from device `a` (`cuda::can_access_peer`).
pub type PeerAccess<'a> = &'a dyn Fn(usize, usize) -> bool;

/// What a fact is about, for citing it in a bandwidth reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The GPU at this position among the process's GPUs (rank order): `GPU{k}` in pair names.
    Gpu(usize),
    /// The node's NICs.
    Net,
    /// The node as a whole (inventory).
    Node,
}

/// The process's GPUs in rank order (their position is the `GPUk` of the pair matrix).
pub(crate) fn in_rank_order(gpus: &[GpuEntry]) -> Vec<&GpuEntry> {
    let mut g: Vec<&GpuEntry> = gpus.iter().collect();
    g.sort_by_key(|e| e.rank);
    g
}

/// Every fault the facts show (the node's, `facts`; each GPU's, `gpus`), with what it is about.
pub fn node_findings(
    gpus: &[GpuEntry],
    facts: Option<&NodeFacts>,
    fraction: f64,
) -> Vec<(Scope, Finding)> {
    let mut out = Vec::new();
    let gpus = in_rank_order(gpus);
    if let Some(f) = facts {
        out.extend(f.findings.iter().cloned().map(|x| (Scope::Node, x)));
    }
    let health: Vec<_> = gpus.iter().filter_map(|g| g.health.clone()).collect();
    if !health.is_empty() {
        let facts = HealthFacts::Available {
            driver_version: String::new(),
            gpus: health,
        };
        for f in gpu_health::classify(&facts, gpu_health::Context::default()) {
            let slot = gpus.iter().position(|g| {
                g.health
                    .as_ref()
                    .is_some_and(|h| f.subject == format!("GPU {} ({})", h.index, h.bus_id))
            });
            out.push((slot.map_or(Scope::Node, Scope::Gpu), f));
        }
    }
    // The probed GPUs, and the position among `gpus` of each.
    let (slots, probed): (Vec<usize>, Vec<Probed>) = gpus
        .iter()
        .enumerate()
        .filter_map(|(k, g)| {
            let probed = Probed {
                subject: format!("GPU{k}"),
                gpu_name: &g.info.name,
                device_id: g
                    .info
                    .pci_device_id
                    .or_else(|| g.health.as_ref().and_then(|h| h.pci_device_id)),
                probe: g.local_probe.as_ref()?,
                others: g.health.as_ref().map_or(&[], |h| h.processes.as_slice()),
            };
            Some((k, probed))
        })
        .unzip();
    for f in local_probe::slow_probes(&probed, fraction) {
        let slot = probed.iter().position(|p| p.subject == f.subject);
        out.push((slot.map_or(Scope::Node, |i| Scope::Gpu(slots[i])), f));
    }
    if let Some(net) = facts.and_then(|f| f.net.as_ref()) {
        out.extend(net.findings.iter().cloned().map(|x| (Scope::Net, x)));
    }
    out
}

/// A finding as a FAIL reason; the subject is `GPUk` for a GPU of this process.
pub fn reason(scope: Scope, f: &Finding) -> Reason {
    Reason {
        code: f.code,
        message: f.message.clone(),
        // A fact names its subject in its own words (`GPU 3 (0000:9b:00.0)`, `eth1`): kept as
        // written, except a GPU of this process, which is named as every reason names it.
        subject: Some(match scope {
            Scope::Gpu(k) => Culprit::Gpu {
                node: None,
                gpu: k as u32,
            },
            _ => Culprit::Other(f.subject.clone()),
        }),
        measured: f.measured,
        limit: f.limit,
    }
}

/// The scopes a bandwidth reason's subject names: its GPUs (`GPU1`, `GPU2<->GPU3`, on any
/// node), else the network (a node, a node pair, a NIC); none (the whole check) when it names
/// nothing.
fn scopes_of(subject: Option<&Culprit>) -> Option<Vec<Scope>> {
    Some(match subject? {
        Culprit::Gpu { gpu, .. } => vec![Scope::Gpu(*gpu as usize)],
        Culprit::GpuPair { a, b, .. } => vec![Scope::Gpu(*a as usize), Scope::Gpu(*b as usize)],
        _ => vec![Scope::Net],
    })
}

/// Appends to each slow-bandwidth reason the facts that explain it: those of the GPUs it names,
/// the NICs for a node or node pair, every fact for the whole check (at most three).
pub fn cite(reasons: &mut [Reason], facts: &[(Scope, Finding)]) {
    for r in reasons
        .iter_mut()
        .filter(|r| r.code.is_bandwidth() && r.code != ReasonCode::LocalProbeSlow)
    {
        let scopes = scopes_of(r.subject.as_ref());
        let why: Vec<&str> = facts
            .iter()
            .filter(|(s, f)| {
                f.code != ReasonCode::LocalProbeSlow
                    && scopes.as_ref().is_none_or(|want| want.contains(s))
            })
            .map(|(_, f)| f.message.as_str())
            .take(3)
            .collect();
        if !why.is_empty() {
            r.message = format!("{} (explained by: {})", r.message, why.join("; "));
        }
    }
}

/// Rows slowed by their host (see the module comment): their warnings, and the rows'
/// (collective, size) so the threshold rule leaves them alone.
pub fn host_interference(
    rows: &[Row],
    gpu_side: &[GpuSide],
    floor: &dyn Fn(&str, u64) -> Option<f64>,
) -> (Vec<Reason>, Vec<(crate::measure::rows::Name, u64)>) {
    let slowed = rows.iter().filter_map(|r| {
        let min = floor(&r.collective, r.size)?;
        let side = (gpu_side.iter()).find(|g| g.collective == r.collective && g.size == r.size)?;
        let host = r.out_of_place.busbw.min(r.in_place.busbw);
        let gpu = side.out_of_place_busbw.min(side.in_place_busbw);
        (host < min && gpu >= min).then(|| {
            let warning = Reason {
                code: ReasonCode::HostInterference,
                message: format!(
                    "{} {} busbw {host:.1} < {min:.1} GB/s by the host's clock but {gpu:.1} by \
                     the GPUs': the host delayed the loop (CPU load or a late process), not the \
                     GPUs or links",
                    r.collective,
                    crate::model::size::human(r.size)
                ),
                subject: None,
                measured: Some(host),
                limit: Some(min),
            };
            (warning, (r.collective.clone(), r.size))
        })
    });
    slowed.unzip()
}

/// The pairs as the verdict judges them, each at what its path delivered by the faster clock
/// (`PairRow::delivered_busbw`), and a warning for the pairs slow only by the host's clock
/// (`multi`: the check spans several nodes, so GPU pairs carry their node's name).
pub fn pair_host_interference(
    pairs: &[PairRow],
    fraction: f64,
    floor: Floor,
    multi: bool,
) -> (Vec<PairRow>, Vec<Reason>) {
    let judged: Vec<PairRow> = pairs
        .iter()
        .map(|p| PairRow {
            busbw: p.delivered_busbw(),
            ..p.clone()
        })
        .collect();
    let still: Vec<usize> = slow_pairs(&judged, fraction, floor)
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    let spared: Vec<&PairRow> = slow_pairs(pairs, fraction, floor)
        .into_iter()
        .filter(|(i, _)| !still.contains(i))
        .map(|(i, _)| &pairs[i])
        .collect();
    let Some(worst) = spared.iter().min_by(|a, b| a.busbw.total_cmp(&b.busbw)) else {
        return (judged, Vec::new());
    };
    let names: Vec<String> = spared
        .iter()
        .take(4)
        .map(|p| p.culprit(multi).to_string())
        .collect();
    let more = match spared.len() - names.len() {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    let warning = Reason {
        code: ReasonCode::HostInterference,
        message: format!(
            "{} pair(s) slow by the host's clock only ({}{more}): {} sendrecv busbw {:.1} GB/s \
             by the host's clock, {:.1} by the GPUs': the host delayed the loop (CPU load or a \
             late process), not the GPUs or links",
            spared.len(),
            names.join(", "),
            worst.culprit(multi),
            worst.busbw,
            worst.delivered_busbw()
        ),
        subject: None,
        measured: Some(worst.busbw),
        limit: None,
    };
    (judged, vec![warning])
}

/// Node pairs below the share of the NICs' line rate NCCL's RDMA ports can carry
/// (`facts::net`); nothing over sockets or on one node.
pub fn node_pair_floor(pairs: &[PairRow], facts: Option<&NodeFacts>) -> Vec<Reason> {
    let net = facts.and_then(|f| f.net.as_ref());
    let Some((net, min)) = net.and_then(|n| Some((n, n.expected_pair_gbs?))) else {
        return Vec::new();
    };
    pairs
        .iter()
        .filter(|p| p.nodes().is_some() && p.delivered_busbw() < min)
        .map(|p| {
            let subject = p.culprit(true);
            Reason {
                code: ReasonCode::BusbwBelowThreshold,
                message: format!(
                    "node pair {subject}: sendrecv {:.1} GB/s < {min:.1} GB/s expected of the \
                     NICs NCCL used ({})",
                    p.busbw, net.note
                ),
                subject: Some(subject),
                measured: Some(p.busbw),
                limit: Some(min),
            }
        })
        .collect()
}

/// Whether `r` is a slow reading about GPU `k` of this process on `host`, its node, or the
/// whole check (no subject).
fn slows(r: &Reason, k: u32, host: &str) -> bool {
    if r.code == ReasonCode::GpuBusy {
        // The localizer's reading of this node gave way to its own finding, shared with every
        // process (`localize::own`): GPU k of this node busy, which this process names itself.
        return matches!(&r.subject, Some(Culprit::Gpu { node: Some(n), gpu }) if *gpu == k && n == host);
    }
    if !is_speed_reading(r.code) {
        return false;
    }
    let here = |n: &Option<String>| n.as_deref().is_none_or(|n| n == host);
    match r.subject.clone() {
        None => true,
        Some(Culprit::Gpu { node, gpu }) => gpu == k && here(&node),
        Some(Culprit::GpuPair { node, a, b, .. }) => (a == k || b == k) && here(&node),
        Some(Culprit::Node(n)) => n == host,
        Some(Culprit::NodePair(a, b)) => a == host || b == host,
        Some(Culprit::Rail { node, gpu }) => node == host && gpu == k,
        // A process, a path across nodes, the allocation, an algorithm, a fact's own words.
        Some(_) => false,
    }
}

/// This process's node as the check names it (the member that holds its first GPU's rank:
/// `NCCL_HOSTID` or Slurm's node name, what the localizer's reasons name), else `host`.
pub fn own_node(gpus: &[GpuEntry], processes: &[Member], host: &str) -> String {
    let first = gpus.iter().map(|g| g.rank).min();
    first
        .and_then(|r| {
            processes
                .iter()
                .find(|m| m.first_rank <= r && r < m.first_rank + m.ngpus)
        })
        .map_or_else(|| host.to_string(), |m| m.host.clone())
}

/// The reasons (`gpu_busy`, to lead the FAIL's reasons) and warnings (`foreign_process`) for
/// the other processes on this process's GPUs (`gpus`, on `node`; `processes` are the check's
/// own), given the FAIL reasons judged so far.
pub fn foreign_processes(
    gpus: &[GpuEntry],
    processes: &[Member],
    node: &str,
    reasons: &[Reason],
) -> (Vec<Reason>, Vec<Reason>) {
    let (mut busy, mut idle) = (Vec::new(), Vec::new());
    for (k, g) in in_rank_order(gpus).iter().enumerate() {
        let listed: &[GpuProcess] = g.health.as_ref().map_or(&[], |h| h.processes.as_slice());
        // The check's own processes are no other process (emulated nodes share one GPU).
        let others: Vec<GpuProcess> = listed
            .iter()
            .filter(|p| !processes.iter().any(|m| m.pid == p.pid))
            .cloned()
            .collect();
        if others.is_empty() {
            continue;
        }
        let subject = Culprit::Gpu {
            node: None,
            gpu: k as u32,
        };
        let named = busy_prefix(&subject.to_string(), &others);
        let named = named.trim_end().trim_end_matches(';');
        let already = reasons
            .iter()
            .any(|r| r.code == ReasonCode::GpuBusy && r.subject.as_ref() == Some(&subject));
        if already {
            continue;
        }
        if reasons.iter().any(|r| slows(r, k as u32, node)) {
            let message = format!(
                "{named}: the slow results on it are that process's load, not its hardware's"
            );
            busy.push(Reason {
                subject: Some(subject),
                ..Reason::plain(ReasonCode::GpuBusy, message)
            });
        } else {
            let held = named.replacen(": busy: ", ": ", 1);
            let message = format!("{held} on it, idle while measured: a job on it shares it");
            idle.push(Reason {
                subject: Some(subject),
                ..Reason::plain(ReasonCode::ForeignProcess, message)
            });
        }
    }
    (busy, idle)
}

#[cfg(test)]
mod foreign_tests;
/// FAIL reasons for silent fallbacks: SHM or sockets between GPUs that CUDA says can reach each
/// other directly, another network than the profile's between nodes, no CollNet/NVLS when they
/// were asked for.
pub fn transport_reasons(
    gpus: &[GpuEntry],
    topology: &crate::meet::topology::Topology,
    expect: &crate::config::network::TransportExpectation,
    log: &crate::facts::transport::TransportSummary,
    can_access_peer: PeerAccess,
) -> Vec<Reason> {
    if !log.has_connections() {
        return Vec::new();
    }
    // Only this process's GPUs can be asked to CUDA: the report lists their ranks and devices.
    let device_of = |rank: u32| gpus.iter().find(|g| g.rank == rank).map(|g| g.info.device);
    let p2p_possible = |a: u32, b: u32| match (device_of(a), device_of(b)) {
        (Some(da), Some(db)) => can_access_peer(da, db),
        _ => false,
    };
    // Judgement as intra-node only where P2P is possible; other same-node paths are left alone.
    let same_node =
        |a: u32, b: u32| topology.same_node(a as usize, b as usize) && p2p_possible(a, b);
    crate::facts::transport::check_transports(log, &same_node, expect)
        .into_iter()
        .map(|f| Reason {
            subject: Some(f.subject),
            ..Reason::plain(ReasonCode::TransportFallback, f.message)
        })
        .collect()
}

#[cfg(test)]
mod tests;
