//! What this process knows of its own node when the check found a node or node pair slow, for
//! the sum that tells every process each node's own finding (`localize::own::exchange`): the
//! other processes NVML listed on this process's GPUs and the GPUs the inventory misses (both
//! known before the processes meet, [`ThisNode::record`]), each GPU's local probe, and, read at
//! the sum, the share of the check this process could not run (`measure::runner::off_cpu`) and
//! the host's load so far (`host_load`; the check's own processes, several on one host with
//! emulated nodes, are not others). One [`ThisNode`] per check, made by the flow and handed to
//! its GPU threads (`measure::runner::OwnNode`): each reads it at the sum.

use crate::config::expected_gpus::bus_id;
use crate::facts::gpu_health::HealthFacts;
use crate::facts::host_load::{self, HostLoad, HostSample};
use crate::facts::local_probe::copy_floor;
use crate::facts::node::NodeFacts;
use crate::localize::own::OwnFinding;
use crate::measure::gpu::GpuInfo;
use crate::measure::runner::off_cpu::{self, SoFar};
use crate::meet::topology::Topology;
use nccl_check_contract::report::process::GpuProcess;
use nccl_check_contract::report::reason::ReasonCode;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// This process's node as known before the processes meet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnownBefore {
    /// Per GPU of this process, in its thread order: the other processes NVML listed on it.
    pub held: Vec<Vec<GpuProcess>>,
    /// GPUs the node should have and does not (the inventory's `gpu_missing`).
    pub missing: u32,
    /// Per GPU of this process, in its thread order: its CUDA ordinal and its local probe's
    /// floor (`facts::local_probe::copy_floor`), when the model is known.
    pub probe_floor: Vec<(usize, Option<f64>)>,
}

/// What one check's process knows of its node as it runs; its GPU threads write their probes
/// and read the findings through `measure::runner::OwnNode`.
#[derive(Default)]
pub struct ThisNode {
    before: OnceLock<KnownBefore>,
    /// Each GPU's local probe (CUDA ordinal, copy GB/s), kept by its thread as it measures.
    probed: Mutex<Vec<(usize, f64)>>,
    /// The off-CPU watch so far ([`ThisNode::watch`] starts it).
    off_cpu: Arc<SoFar>,
    /// The host's `/proc` at the start of the measurement ([`ThisNode::watch`]).
    load_start: OnceLock<HostSample>,
    /// The last busy load this process told the other nodes (`findings_now`): its own
    /// verdict judges the node by the same evidence (`load_for_report`).
    told_busy: Mutex<Option<HostLoad>>,
}

impl ThisNode {
    /// Keeps what NVML (`nvml`) and the inventory (`facts`) said of this process's GPUs (CUDA
    /// ordinals `devices`, in thread order). Only the first call counts.
    pub fn record(&self, devices: &[usize], nvml: &HealthFacts, facts: Option<&NodeFacts>) {
        let ours: Vec<_> = (devices.iter())
            .map(|&d| (d, crate::measure::cuda::gpu_info(d).ok()))
            .collect();
        let _ = self.before.set(known_before(&ours, nvml, facts));
    }

    /// Starts the watches of this process's CPU time (None when no thread can be started) and
    /// of the host's load; what they see is what the findings read so far.
    pub fn watch(&self) -> Option<off_cpu::Watch> {
        let off_cpu = off_cpu::Watch::start(self.off_cpu.clone());
        if let Some(s) = host_load::sample(Path::new("/proc"), std::process::id()) {
            let _ = self.load_start.set(s);
        }
        off_cpu
    }

    /// How busy the host's CPUs were since [`ThisNode::watch`], and with whom, the check's
    /// processes `check` (every process of the step, this one among them) not counted as others;
    /// None before the watch or when `/proc` could not be read.
    pub fn load_so_far(&self, check: &[u32]) -> Option<HostLoad> {
        host_load::load_since(self.load_start.get()?, check)
    }

    /// The host load the report keeps: the load so far, unless it no longer reads busy where
    /// this process told the other nodes its host was busy; then that load. Why: the peers
    /// judged this node by what it told them (one H200, 8 emulated nodes, one node's worker
    /// confined with busy loops: its threads waited 0.5x the rounds' window for a CPU, 0.44x
    /// the whole check's, and its own verdict blamed its network where every peer's said its
    /// host was busy).
    pub fn load_for_report(&self, check: &[u32]) -> Option<HostLoad> {
        let now = self.load_so_far(check);
        let told = self.told_busy.lock().ok().and_then(|t| t.clone());
        match (now, told) {
            (Some(now), _) if now.busy() => Some(now),
            (_, Some(told)) => Some(told),
            (now, None) => now,
        }
    }
}

impl crate::measure::runner::OwnNode for ThisNode {
    fn probed(&self, device: usize, copy_gbs: f64) {
        if let Ok(mut p) = self.probed.lock() {
            p.retain(|(d, _)| *d != device);
            p.push((device, copy_gbs));
        }
    }

    fn starved_share(&self) -> Option<f64> {
        self.off_cpu.share()
    }

    fn findings_now(&self, t: &Topology, first_rank: usize) -> Vec<OwnFinding> {
        let none = KnownBefore::default();
        let known = self.before.get().unwrap_or(&none);
        let host = self.load_so_far(t.pids());
        if let (Some(h), Ok(mut told)) = (host.as_ref().filter(|h| h.busy()), self.told_busy.lock())
        {
            *told = Some(h.clone());
        }
        let starved = self.off_cpu.share();
        let probed = self.probed.lock().map(|p| p.clone()).unwrap_or_default();
        findings_of(known, &probed, t, first_rank, starved, host.as_ref())
    }

    fn busy_by_others(&self, t: &Topology) -> bool {
        let host = self.load_so_far(t.pids());
        host.is_some_and(|h| h.busy() && !h.only_the_checks_own())
    }
}

/// See [`ThisNode::record`]; `ours`: this process's GPUs in thread order (CUDA ordinal, what
/// CUDA says of it).
pub fn known_before(
    ours: &[(usize, Option<GpuInfo>)],
    nvml: &HealthFacts,
    facts: Option<&NodeFacts>,
) -> KnownBefore {
    let held = (ours.iter())
        .map(|(_, info)| match (info, nvml) {
            (Some(info), HealthFacts::Available { gpus, .. }) => {
                let mine = bus_id(&info.pci_bus_id);
                gpus.iter()
                    .find(|h| mine.is_some() && bus_id(&h.bus_id) == mine)
                    .map(|h| h.processes.clone())
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        })
        .collect();
    let missing = facts.map_or(0, |f| {
        f.findings
            .iter()
            .filter(|x| x.code == ReasonCode::GpuMissing)
            .map(|x| match (x.measured, x.limit) {
                (Some(have), Some(want)) if want > have => (want - have).round() as u32,
                _ => 1,
            })
            .sum()
    });
    let probe_floor = (ours.iter())
        .map(|(d, info)| {
            let floor = info
                .as_ref()
                .and_then(|i| copy_floor(i.pci_device_id, &i.name));
            (*d, floor.map(|(f, _)| f))
        })
        .collect();
    KnownBefore {
        held,
        missing,
        probe_floor,
    }
}

/// This process's findings now (`first_rank`: its first GPU's rank) from what they read: the
/// facts known before, the local probes so far (CUDA ordinal, copy GB/s), the share this process
/// could not run so far and the host's load so far.
/// A GPU held only by the check's own processes (emulated nodes sharing one GPU) is not busy.
pub fn findings_of(
    known: &KnownBefore,
    probed: &[(usize, f64)],
    t: &Topology,
    first_rank: usize,
    starved: Option<f64>,
    host: Option<&HostLoad>,
) -> Vec<OwnFinding> {
    let mut out = Vec::new();
    for (slot, held) in known.held.iter().enumerate() {
        let Some(other) = held.iter().find(|p| !t.pids().contains(&p.pid)) else {
            continue;
        };
        let gpu = t.local_index(first_rank + slot).unwrap_or(slot) as u32;
        let probe = known.probe_floor.get(slot).and_then(|&(device, floor)| {
            let rate = probed.iter().find(|(d, _)| *d == device)?.1;
            Some((rate, floor?))
        });
        out.push(OwnFinding::GpuBusy {
            gpu,
            pid: other.pid,
            gib: other
                .used_bytes
                .map_or(0.0, |b| b as f64 / (1u64 << 30) as f64),
            probe,
        });
    }
    if known.missing > 0 {
        out.push(OwnFinding::GpuMissing {
            missing: known.missing,
        });
    }
    if let Some(share) = starved.filter(|s| *s >= off_cpu::STARVED_SHARE) {
        out.push(OwnFinding::Starved { share });
    }
    if let Some(load) = host.filter(|h| h.busy()) {
        out.push(OwnFinding::HostBusy {
            cpus: load.others_share * f64::from(load.cpus),
            top: load.top.first().map(|c| (c.pid, c.cpus)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::Member;

    fn topology() -> Topology {
        let m = |p: u32, host: &str, pid: u32| Member {
            proc_rank: p,
            host: host.into(),
            pid,
            ngpus: 1,
            first_rank: p,
        };
        Topology::new(&[m(0, "e1", 100), m(1, "e2", 101), m(2, "e2", 102)])
    }

    fn held(pid: u32) -> GpuProcess {
        GpuProcess {
            pid,
            user: "root".into(),
            used_bytes: Some(17 << 29),
        }
    }

    /// Process 2 drives e2's second GPU: its finding names GPU1 of e2 and the foreign pid; the
    /// check's own workers on the GPU (emulated nodes sharing it) are no finding.
    #[test]
    fn a_gpu_another_process_holds_is_named_by_its_index_on_the_node_and_the_checks_own_are_not() {
        let t = topology();
        let known = KnownBefore {
            held: vec![vec![held(101), held(4242)]],
            missing: 0,
            probe_floor: Vec::new(),
        };
        assert_eq!(
            findings_of(&known, &[], &t, 2, None, None),
            [OwnFinding::GpuBusy {
                gpu: 1,
                pid: 4242,
                gib: 8.5,
                probe: None,
            }]
        );
        let ours = KnownBefore {
            held: vec![vec![held(100), held(102)]],
            missing: 0,
            probe_floor: Vec::new(),
        };
        assert!(findings_of(&ours, &[], &t, 2, Some(0.1), None).is_empty());
        let starved = findings_of(&KnownBefore::default(), &[], &t, 0, Some(0.7), None);
        assert_eq!(starved, [OwnFinding::Starved { share: 0.7 }]);
    }

    /// The held GPU's local probe and its floor travel with the finding (CUDA ordinal 3 is this
    /// process's only GPU); a GPU not probed yet, or of no known model, carries none.
    #[test]
    fn a_held_gpus_probe_and_floor_travel_with_its_finding() {
        let t = topology();
        let known = KnownBefore {
            held: vec![vec![held(4242)]],
            missing: 0,
            probe_floor: vec![(3, Some(1440.0))],
        };
        let probe = |probed: &[(usize, f64)]| match findings_of(&known, probed, &t, 2, None, None)[..]
        {
            [OwnFinding::GpuBusy { probe, .. }] => probe,
            ref other => panic!("not one GPU busy: {other:?}"),
        };
        assert_eq!(probe(&[(3, 600.0)]), Some((600.0, 1440.0)));
        assert_eq!(probe(&[(0, 600.0)]), None);
        let unknown_model = KnownBefore {
            probe_floor: vec![(3, None)],
            ..known.clone()
        };
        assert!(matches!(
            findings_of(&unknown_model, &[(3, 600.0)], &t, 2, None, None)[..],
            [OwnFinding::GpuBusy { probe: None, .. }]
        ));
    }

    #[test]
    fn the_report_keeps_the_busy_load_this_node_told_its_peers() {
        let node = ThisNode::default();
        assert_eq!(node.load_for_report(&[]), None);
        // Its threads waited 0.6x the rounds' window for a CPU when it told the others; the
        // whole check's window, read later, may have fallen below the rule.
        let told = HostLoad {
            window_s: 3.0,
            cpus: 16,
            others_share: 0.14,
            check_share: 0.5,
            own_wait_share: Some(0.6),
            others_on_own_cpus: None,
            top: Vec::new(),
        };
        assert!(told.busy());
        *node.told_busy.lock().unwrap() = Some(told.clone());
        assert_eq!(node.load_for_report(&[]), Some(told));
    }

    /// What a check knows of its node is a value of its own, handed to its GPU threads: another
    /// check in the same process (the tests, the simulation) starts from nothing, where the
    /// process-wide statics it replaced kept the first one's facts and probes.
    #[test]
    fn each_check_knows_only_what_was_handed_to_it() {
        use crate::measure::runner::OwnNode;
        let t = topology();
        let first = ThisNode::default();
        let _ = first.before.set(KnownBefore {
            held: vec![vec![held(4242)]],
            missing: 0,
            probe_floor: vec![(3, Some(1440.0))],
        });
        let probe = |node: &ThisNode| match node.findings_now(&t, 2)[..] {
            [OwnFinding::GpuBusy { probe, .. }] => probe,
            ref other => panic!("not one GPU busy: {other:?}"),
        };
        first.probed(3, 600.0);
        assert_eq!(probe(&first), Some((600.0, 1440.0)));
        first.probed(3, 700.0);
        assert_eq!(
            probe(&first),
            Some((700.0, 1440.0)),
            "a new probe replaces the old"
        );
        let second = ThisNode::default();
        second.probed(3, 100.0);
        assert!(second.findings_now(&t, 2).is_empty());
        assert_eq!(probe(&first), Some((700.0, 1440.0)));
        // Neither watch started: no share of the check lost and no host load read yet.
        assert_eq!(
            (first.starved_share(), first.load_so_far(&[])),
            (None, None)
        );
    }
}
