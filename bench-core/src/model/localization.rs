//! What the node-level localization of a multi-node check leaves behind, in the shapes the
//! measuring loop carries and the report keeps: why each round ran (`Phase`), the summary of the
//! rounds, and each node's own findings as every process decoded them. The localizer (`localize`)
//! fills them; the measuring loop only hands them on.

use nccl_check_contract::report::reason::Reason;
use serde::{Deserialize, Serialize};

/// Why a round exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    Local,
    Allocation,
    Screen,
    CrossRail,
    Confirm,
    Matrix,
    /// Node pairs that read slow once, with both ends fast elsewhere, measured again.
    Retest,
    /// Every node pair once (a round-robin tournament, `paths`), after a slow alltoall.
    Paths,
    /// Slow `Paths` pairs with both ends fast elsewhere, measured again at their size.
    PathRetest,
}

impl Phase {
    /// Localization rounds are the ones the bound counts: everything after phase B.
    pub fn is_localization(self) -> bool {
        !matches!(self, Phase::Local | Phase::Allocation)
    }
}

/// What the node-level localization of a multi-node check did, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalizeSummary {
    /// `adaptive` (screening + confirmation) or `full` (every node pair).
    pub plan: String,
    pub nodes: usize,
    pub rails: usize,
    /// Every round, phases A and B included.
    pub rounds: usize,
    /// Rounds after phase B (bounded by `2*log2(N)+4`).
    pub localization_rounds: usize,
    /// Phase B's busbw (GB/s) and the floor it was held against, if one applies.
    pub allocation_busbw: Option<f64>,
    pub allocation_floor: Option<f64>,
    /// Node-rail pair groups measured over all rounds.
    pub pair_groups: usize,
    pub reasons: Vec<Reason>,
    /// Reasons left out of this process's report (the coordinator's report has them all).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasons_omitted: usize,
    /// This process's time per round, in order: its measurement, then the gather that follows
    /// (which includes waiting for the slowest process). What `--explain-plan`'s per-round
    /// constants are calibrated from (tests/gpu/fabric.sh's committed reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub round_times: Vec<RoundTime>,
    /// Whether every node pair was measured, and why (`localize::paths`): what the alltoall
    /// read against the all_reduce, and whether a node's host was busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathsDecision>,
}

/// The alltoall beside the all_reduce, and what it decided (`localize::paths::measures_every_path`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathsDecision {
    /// The alltoall's size and busbw (GB/s, by the faster of the two clocks), and the
    /// all_reduce's busbw it was held against.
    pub alltoall_bytes: u64,
    pub alltoall_busbw: f64,
    pub all_reduce_busbw: f64,
    /// The alltoall below its share of the all_reduce (`paths::alltoall_slow`).
    pub alltoall_slow: bool,
    /// Some node's host was busy when the alltoall ran (its own `host_busy` fact).
    pub host_busy: bool,
    /// Every node pair measured: the alltoall slow, or a host busy (where both collectives
    /// read the scheduler's pace, a fast-looking alltoall is no evidence of every path).
    pub measured: bool,
    /// Else measured where the other rounds' node-pair median reaches this (GB/s,
    /// `paths::pairs_limit`); the rounds in `round_times` say whether it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs_limit: Option<f64>,
}

/// One round's time in one process, and what the pairs its ranks led read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundTime {
    pub round: u32,
    pub phase: Phase,
    pub measure_ms: f64,
    pub gather_ms: f64,
    /// Each pair this process's ranks led: (rank, peer, busbw GB/s). Why: a fault the rounds
    /// did not find (one H200, 8 emulated nodes under one busy loop per core: a node at 1 Gbit/s
    /// PASSed) can only be told from load evening the pairs by the readings themselves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readings: Vec<(u32, u32, f64)>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One node's own findings as every process decodes them from the sum, as reasons (the report's
/// `node_findings`: what that node's network reading gives way to).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeFindings {
    pub node: String,
    pub reasons: Vec<Reason>,
}
