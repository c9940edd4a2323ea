//! One thread per GPU: context, buffers, communicator, then the measurement loop, exactly in the
//! order nccl-tests uses (global warm-up sweep; per size and placement: one untimed operation, a
//! barrier, the timed loop with rotating buffer offsets, then the bit-exact check).
//!
//! This module owns the thread's life (what it waits for, what it hands back); `comms` sets up
//! and aborts the communicators, `timed` runs the collectives' timed loops, `pair_matrix` the
//! GPU and node pairs, `sink` is what they print through (`render::output` draws it), `error`
//! says why a run ended in ERROR,
//! `probe` measures the GPU's local copy bandwidth, `gpu_time` times a retest by the GPU's clock.

mod all_paths;
mod comms;
mod gpu_time;
mod localized;
pub mod off_cpu;
mod pair_matrix;
pub mod probe;
mod run_error;
pub mod shared;
pub mod sink;
mod thread;
mod timed;

pub use run_error::RunError;

use crate::localize::own::OwnFinding;
use crate::measure::cuda::GpuInfo;
use crate::measure::nccl::{Nccl, UniqueId};
use crate::measure::rows::{PairRow, Phases, Row};
use crate::meet::team::Team;
use crate::meet::topology::Topology;
use crate::model::floors::Floors;
use crate::settings::options::Options;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What each GPU thread is doing now, for the watchdog's "waiting for ..." line.
pub type Status = Arc<Mutex<Vec<String>>>;

/// What the main thread sends each GPU thread once the processes have met.
pub struct Start {
    pub team: Arc<Team>,
    pub id: UniqueId,
    pub rank: u32,
    pub nranks: u32,
    /// Global rank 0 prints the table.
    pub printer: bool,
    /// Local thread 0 keeps the rows for this process's report.
    pub recorder: bool,
    /// Which node each global rank is on, and its index there.
    pub topology: Arc<Topology>,
    /// The GPU model and interconnect thresholds are looked up by (this process's first GPU).
    pub gpu: Arc<crate::model::thresholds::GpuModel>,
    pub opts: &'static Options,
    /// Where the printing rank's lines and tables go.
    pub show: Arc<dyn sink::Show>,
    /// Whether a pair matrix has a slow pair, as the verdict judges it: the retest asks it.
    pub slow_pairs: SlowPairs,
}

/// What this process knows of its own node while it measures, for the sum that tells the other
/// nodes (`localize::own`): handed in by the flow (`facts::known::ThisNode`), so the measuring
/// loop reads no node facts itself.
pub trait OwnNode: Send + Sync {
    /// Keeps GPU `device`'s local probe (CUDA ordinal, copy GB/s).
    fn probed(&self, device: usize, copy_gbs: f64);
    /// The share of the check so far that this process could not run (`off_cpu`).
    fn starved_share(&self) -> Option<f64>;
    /// This process's findings now (`first_rank`: its first GPU's rank).
    fn findings_now(&self, t: &Topology, first_rank: usize) -> Vec<OwnFinding>;
    /// Whether others' processes (not the check's: `t`'s) have made the host busy so far.
    fn busy_by_others(&self, t: &Topology) -> bool;
}

/// Whether any pair of `rows` is slow (the outlier fraction; the floor of (collective, GPUs,
/// bytes)): the verdict's rule, handed in by the flow, so the retest and the verdict cannot
/// disagree and the measuring loop names no judge.
pub type SlowPairs = fn(&[PairRow], f64, &dyn Fn(&str, u32, u64) -> Option<f64>) -> bool;

impl Start {
    /// A progress line, from the printing rank only.
    pub(crate) fn phase(&self, what: &str) {
        if self.printer {
            self.show.phase(what);
        }
    }

    /// The floors the retest holds measurements against: the verdict's (`floors`), before
    /// anyone knows whether CollNet or NVLS carried the collectives.
    pub fn floors(&self) -> Floors<'_> {
        Floors {
            rules: &self.opts.config.thresholds,
            gpu: self.gpu.gpu(),
            nodes: self.topology.node_count(),
            gpus: self.nranks,
            min_busbw: self.opts.min_busbw,
            in_network_algorithms: false,
        }
    }
}

/// What a GPU thread hands back.
#[derive(Default)]
pub struct GpuOutcome {
    pub info: Option<GpuInfo>,
    pub rank: Option<u32>,
    pub phases: Phases,
    pub rows: Vec<Row>,
    pub pairs: Vec<PairRow>,
    /// The local probe's result, or why it could not measure.
    pub probe: Option<Result<crate::model::local_copy::LocalProbe, String>>,
    /// With `--shared-gpus`: the ranks (this one among them) that drove this GPU.
    pub shared: Option<Vec<u32>>,
    /// Retested rows by the GPU's clock (`gpu_time`).
    pub gpu_side: Vec<crate::measure::rows::GpuSide>,
    /// What each budgeted step sized itself to (`model::time_budget`), recorder thread.
    pub sizing: Vec<crate::model::time_budget::Sizing>,
    /// The node-level localization (recorder thread of a multi-node adaptive check).
    pub localization: Option<crate::model::localization::LocalizeSummary>,
    /// The localizer's retests' noise, the same on every rank (`Report::localization_noise`).
    pub localization_noise: Option<f64>,
    /// The other processes' own findings of their nodes (recorder thread, multi-node checks:
    /// `localize::own`).
    pub node_findings: Vec<crate::model::localization::NodeFindings>,
    /// Whether the nodes' own findings were shared already (the same on every rank:
    /// `Measurer::share_findings`).
    pub findings_shared: bool,
    /// The last collective measured (name, bytes, busbw of the slower placement), the same on
    /// every rank: phase B of the localizer when the plan's collective ran over all ranks.
    pub last_collective: Option<(&'static str, u64, f64)>,
    pub error: Option<RunError>,
}

pub struct GpuThread {
    pub slot: usize,
    pub device: usize,
    pub nccl: &'static Nccl,
    pub opts: &'static Options,
    pub deadline: Instant,
    pub status: Status,
    /// What this process knows of its node: this GPU's local probe goes in, the node's own
    /// findings come out at the sum.
    pub own: Arc<dyn OwnNode>,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// GB/s of `bytes` moved in `secs` (0 when nothing was timed): a pair's bandwidth, a
/// collective's algbw.
fn busbw(bytes: f64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes / 1e9 / secs
    } else {
        0.0
    }
}
