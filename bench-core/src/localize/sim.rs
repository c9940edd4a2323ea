//! A deterministic fabric simulation for the localizer: N nodes x G GPUs with per-GPU, per-NVLink,
//! per-NIC (rail) and per-node-pair bandwidth factors, faults injected from a table, and a model
//! of what each group of a round measures. A test and planning harness: the real worker measures
//! real NCCL; the real `Localizer` runs against this model unchanged.
//!
//! The model: a node's local collective runs at `local_nominal` x its slowest GPU or NVLink; a
//! pair of GPUs on two nodes at `nic_nominal` x the slower of their NICs x the factor of the
//! node pair's path (never faster than either GPU); the allocation-wide collective is a ring in
//! node order over every rail, so it runs at its slowest node or ring edge. Every result carries
//! a deterministic noise of +-`noise` from a seeded PRNG, so the relative rule meets spread.

use super::{Group, Round};
use std::collections::HashMap;

/// One fault; factors multiply nominal bandwidth (0.5: half as fast).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// One GPU slow at everything (throttled).
    Gpu {
        node: usize,
        gpu: usize,
        factor: f64,
    },
    /// Every GPU of a node slow (the node shows in phase A).
    NodeLocal { node: usize, factor: f64 },
    /// The NVLink between two GPUs of a node.
    NvLink {
        node: usize,
        a: usize,
        b: usize,
        factor: f64,
    },
    /// GPU `rail`'s NIC on one node.
    Nic {
        node: usize,
        rail: usize,
        factor: f64,
    },
    /// Every NIC of a node (e.g. a PCIe switch trained down): invisible in phase A.
    NodeNet { node: usize, factor: f64 },
    /// The path between two nodes, on every rail.
    Link { a: usize, b: usize, factor: f64 },
    /// Others' processes keep the host's CPUs busy (what every process's `host_busy` fact
    /// says), and its scheduler paces every collective over every rank to at most `pace` x
    /// the healthy allocation-wide busbw (the all_reduce and the alltoall alike: what one H200
    /// with one or two busy loops per core showed; 1.0 where the load paces nothing).
    HostBusy { pace: f64 },
}

#[derive(Debug, Clone)]
pub struct Fabric {
    pub nodes: usize,
    pub gpus: usize,
    /// Healthy busbw of a node's local collective, GB/s.
    pub local_nominal: f64,
    /// Healthy busbw of a rail-wise GPU pair across two nodes (one NIC each way), GB/s.
    pub nic_nominal: f64,
    /// Healthy busbw of the allocation-wide collective, GB/s.
    pub allocation_nominal: f64,
    /// Relative half-width of the measurement noise.
    pub noise: f64,
    gpu: Vec<f64>,
    nic: Vec<f64>,
    nvlink: HashMap<(usize, usize, usize), f64>,
    link: HashMap<(usize, usize), f64>,
    /// `Fault::HostBusy`'s pace, when injected.
    busy_pace: Option<f64>,
    rng: u64,
}

impl Fabric {
    /// A healthy fabric of 8x H100-like nodes with 400 Gb/s NICs: 480 GB/s local all_reduce
    /// (shared/notes/peer-tools.md sec. 5), 48 GB/s per NIC (400 Gb/s line rate, est.), 370 GB/s
    /// multi-node all_reduce (CoreWeave H100 8 nodes average 373, same note sec. 1.9).
    pub fn healthy(nodes: usize, gpus: usize, seed: u64) -> Fabric {
        Fabric {
            nodes,
            gpus,
            local_nominal: 480.0,
            nic_nominal: 48.0,
            allocation_nominal: 370.0,
            noise: 0.02,
            gpu: vec![1.0; nodes * gpus],
            nic: vec![1.0; nodes * gpus],
            nvlink: HashMap::new(),
            link: HashMap::new(),
            busy_pace: None,
            rng: seed,
        }
    }

    pub fn inject(&mut self, fault: Fault) {
        let g = self.gpus;
        let scale =
            |factors: &mut [f64], factor: f64| factors.iter_mut().for_each(|f| *f *= factor);
        match fault {
            Fault::Gpu { node, gpu, factor } => self.gpu[node * g + gpu] *= factor,
            Fault::NodeLocal { node, factor } => scale(&mut self.gpu[node * g..][..g], factor),
            Fault::NvLink { node, a, b, factor } => {
                *self.nvlink.entry((node, a.min(b), a.max(b))).or_insert(1.0) *= factor;
            }
            Fault::Nic { node, rail, factor } => self.nic[node * g + rail] *= factor,
            Fault::NodeNet { node, factor } => scale(&mut self.nic[node * g..][..g], factor),
            Fault::Link { a, b, factor } => {
                *self.link.entry((a.min(b), a.max(b))).or_insert(1.0) *= factor;
            }
            Fault::HostBusy { pace } => {
                self.busy_pace = Some(self.busy_pace.map_or(pace, |p| p.min(pace)));
            }
        }
    }

    /// Whether others' processes keep the host busy (`Fault::HostBusy`).
    pub fn host_busy(&self) -> bool {
        self.busy_pace.is_some()
    }

    /// The most a collective over every rank reads on this host, GB/s.
    fn paced(&self) -> f64 {
        self.allocation_nominal * self.busy_pace.unwrap_or(f64::INFINITY)
    }

    /// What every group of `round` measures, in order.
    pub fn measure(&mut self, round: &Round) -> Vec<f64> {
        round.groups.iter().map(|g| self.measure_group(g)).collect()
    }

    /// What one group measures (with this fabric's noise).
    pub fn measure_group(&mut self, group: &Group) -> f64 {
        let exact = match *group {
            Group::Local { node } => self.local(node),
            Group::Allocation => self.allocation(),
            Group::Pair { a, b } => self.pair(a.0, a.1, b.0, b.1),
        };
        exact * (1.0 + self.noise * (2.0 * self.uniform() - 1.0))
    }

    /// What the alltoall beside the all_reduce measures (`localize::paths`), with noise: the
    /// allocation-wide busbw x the alltoall's expected share of it, slowed by the slowest NIC or
    /// GPU, or by a path below a flow's share of a node's NICs (1/(N-1)): a path at factor f
    /// carries one flow of every operation, so the alltoall runs at f x (N-1) of healthy. Like
    /// every reading here it does not depend on the message size or on when each process
    /// reaches the collective: the first paths rounds' slow readings on real NCCL (small,
    /// cold exchanges) could not show here, and neither could a real alltoall's own spread.
    pub fn alltoall(&mut self) -> f64 {
        let n = self.nodes;
        let nic = self.nic.iter().copied().fold(1.0, f64::min);
        let gpu = self.gpu.iter().copied().fold(1.0, f64::min);
        let flows = n.saturating_sub(1).max(1) as f64;
        let path = self.link.values().map(|&f| f * flows).fold(1.0, f64::min);
        let share = super::paths::expected_alltoall_ratio(n, self.gpus);
        let exact = (self.allocation_nominal * share * nic.min(gpu).min(path)).min(self.paced());
        exact * (1.0 + self.noise * (2.0 * self.uniform() - 1.0))
    }

    fn local(&self, x: usize) -> f64 {
        let g = self.gpus;
        let gpu = self.gpu[x * g..(x + 1) * g]
            .iter()
            .copied()
            .fold(1.0, f64::min);
        let nvlink = self
            .nvlink
            .iter()
            .filter(|(k, _)| k.0 == x)
            .map(|(_, &f)| f)
            .fold(1.0, f64::min);
        self.local_nominal * gpu.min(nvlink)
    }

    fn pair(&self, a: usize, ra: usize, b: usize, rb: usize) -> f64 {
        let g = self.gpus;
        let nic = self.nic[a * g + ra].min(self.nic[b * g + rb]);
        let path = self.link.get(&(a.min(b), a.max(b))).copied().unwrap_or(1.0);
        let gpu = self.gpu[a * g + ra].min(self.gpu[b * g + rb]);
        (self.nic_nominal * nic * path).min(self.local_nominal * gpu)
    }

    fn allocation(&self) -> f64 {
        let n = self.nodes;
        let ring = (0..n).filter(|_| n >= 2);
        let edges = ring.flat_map(|x| (0..self.gpus).map(move |r| (x, r)));
        let edge = |(x, r)| self.pair(x, r, (x + 1) % n, r) / self.nic_nominal;
        let worst = edges.map(edge).fold(1.0f64, f64::min);
        let local = (0..n).map(|x| self.local(x)).fold(f64::INFINITY, f64::min);
        (self.allocation_nominal * worst)
            .min(local)
            .min(self.paced())
    }

    /// splitmix64: a fixed, seeded sequence in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `cfg` with `paths` and `paths_above` set as the runner sets them (`paths::measures_every_path`,
/// `paths::pairs_limit`): the fabric's alltoall against its allocation-wide collective
/// (`paths::alltoall_slow` below `fraction`), a busy host, and the limit for the pairs.
pub fn with_alltoall(
    mut cfg: super::LocalizeConfig,
    fabric: &mut Fabric,
    fraction: f64,
) -> super::LocalizeConfig {
    let all_reduce = fabric.measure_group(&Group::Allocation);
    let alltoall = fabric.alltoall();
    let shape = (fabric.nodes, fabric.gpus);
    let slow = super::paths::alltoall_slow(alltoall, all_reduce, shape, fraction);
    cfg.paths = super::paths::measures_every_path(slow, fabric.host_busy());
    cfg.paths_above = super::paths::pairs_limit(alltoall, shape, fraction);
    cfg
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::simulate;
