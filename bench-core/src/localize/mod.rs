//! Stage 4, localize: the measurements of node-level rounds in, findings out (the node, node pair
//! or NIC rail to blame), in O(log N) rounds that every process decides alike from the same summed
//! results (`conduct`). The `--explain-plan` model (`plan`, `site`, `cli`) stays beside the
//! schedule it replays.
//!
//! Localization that scales: which node, node pair or NIC rail makes an allocation slow, named in
//! a number of node-level rounds that does not grow with the number of nodes. Pure: no GPU, no
//! sockets; a runner (or the fabric simulation) measures the rounds this module hands out.
//!
//! # The schedule
//! - **Phase A** (always): every node's own GPUs at once (the local collective and GPU pair matrix of
//!   today); one number per node, judged against the other nodes (a GPU, NVLink or a throttled
//!   node shows here and is named `node_slow` without any inter-node round).
//! - **Phase B** (N >= 2): one collective over the whole allocation. It is a single number, so only
//!   an absolute floor can judge it; when it is at or above its floor the check ends: a healthy
//!   allocation costs zero localization rounds. The floor is a threshold rule for the check's node
//!   count (`min_nodes = 2` covers every allocation size: `crate::model::floors::PairFloors::localization`).
//!   Without a floor B cannot be judged and screening always runs (two rounds on a healthy
//!   allocation).
//! - **Screening** (B slow): the edges of the ring B's collective runs over (node i with node i+1)
//!   in two rounds of disjoint node pairs (even edges, odd edges; three when N is odd), each node
//!   pair measured rail-wise: GPU r of one node with GPU r of the other, through both GPUs' NICs.
//! - **Retest** (only if needed): a slow node pair whose two ends are both cleared by another
//!   pair is measured once more (disjoint pairs, usually one round); the second reading replaces
//!   the first, as for every other retested result.
//! - **Confirmation** (only if needed): a node-rail whose screening pairs are all slow, but which
//!   has fewer than two slow pairs with cleared partners, is paired with a cleared node it has not
//!   met yet; disjoint pairs, all suspects at once, until every suspect is decided or the round cap
//!   `2*floor(log2 N)+4` is reached (the rest is reported as unresolved, never guessed). A node
//!   pair the confirmations leave slow between two cleared nodes is retested as the screening's
//!   are: no path is named on one reading (8 emulated nodes under one busy loop per core named a
//!   healthy path from its one confirmation reading, 0.83x its limit).
//! - **Paths** (4..=32 nodes, only after an alltoall beside B read slow against B, and only when
//!   the rounds above named nothing): every node pair once, a round-robin tournament with G node
//!   matchings a round (one a rail), judged only against its own pairs' median; a slow pair is
//!   measured once more (`PathRetest`, beside control pairs of the nodes it leaves free, and
//!   slow only below them too) and named when both its nodes are fast with most of their
//!   other partners (`paths`). A healthy check runs the alltoall and no pair round.
//!
//! # Why it does not grow with N
//! Each round measures up to N/2 node pairs in parallel, so screening costs 2-3 rounds whatever N
//! is, and one confirmation round decides up to as many suspects as there are cleared nodes. One
//! or two faults take 2-3 rounds at N = 4096 as at N = 8; the cap (O(log N)) only bounds the
//! pathological case of more suspects than cleared nodes. The `Paths` tournament is the
//! exception, and bounded by its node range: ceil((N-1)/G) rounds and at most two retest rounds,
//! beyond the cap, only after a slow alltoall of 4..=32 nodes (1 round at 8 GPUs a node up to 9
//! nodes, 4 at 32; 31 between 32 emulated 1-GPU nodes).
//!
//! # The rule, and what each fault looks like
//! A result is slow when it is below `fraction` x the reference of its kind (an upper quantile of
//! every result of that kind so far, so it stays healthy while up to 3/4 are slow) or below the
//! kind's floor. Node x is *cleared* on rail r when any of its pairs on r is fast; it is *bad* on r
//! when none is and at least two of its slow pairs on r are with cleared partners.
//! - slow node (all NICs): both ring edges slow on every rail, neighbours cleared by their other edge;
//! - slow rail (GPU r's NIC): both ring edges slow on rail r only;
//! - slow node pair: one edge slow, both ends cleared by their other edge;
//! - two bad nodes: two such patterns; adjacent ones leave each with one cleared partner, and one
//!   confirmation round against fresh cleared nodes decides both.
//!
//! # What it cannot tell apart
//! - N = 2: a node whose NICs are all slow, both nodes slow, and a slow path between them all look
//!   the same (one pair, nothing to compare with); named `node_pair_slow` unless phase A names a
//!   node. A single slow rail is still placed on its node by one cross-rail round (GPU r of node 0
//!   with GPU r+1 of node 1), which needs G >= 2.
//! - N = 3 with two bad nodes, and generally half the ring slow: no healthy reference is left;
//!   the finding is `allocation_slow` (or `suspects_unresolved` when a pair floor is set).
//! - A slow node pair that B's ring does not use (not neighbours in node order) does not slow B:
//!   it is found only through the alltoall beside B (4..=32 nodes), so only when it slows an
//!   alltoall, i.e. when it carries less than about 1/(N-1) of a node's NIC rate (a flow's share);
//!   a path slower than its ring neighbours but above that share slows no alltoall job and is not
//!   named. Above 32 nodes
//!   no alltoall runs. Among the tournament's pairs, a node slow with most of its partners is not
//!   told apart from a slow path of its: none of its pairs is named (screening and B judge nodes).
//! - A suspect whose confirmation partner happens to share a second, independent link fault.

pub(crate) mod assess;
pub mod cli;
pub mod conduct;
pub mod layout;
pub mod own;
pub mod paths;
pub mod plan;
pub mod reasons;
mod schedule;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod site;

pub use plan::explain_plan;
pub use schedule::Localizer;

use crate::model::floors::PairFloors;
use crate::model::localization::Phase;

/// Largest allocation the localizer accepts (a bounded input: results arrive from the network).
pub const MAX_NODES: usize = 65_536;
/// Largest number of GPUs (and so NIC rails) per node.
pub const MAX_GPUS: usize = 64;

/// What one group of a round is: who takes part, and so what its busbw means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Phase A: the GPUs of one node, nothing else.
    Local { node: usize },
    /// Phase B: every GPU of every node, one collective.
    Allocation,
    /// Sendrecv between two ends, (node, rail) each: GPU `a.1` of node `a.0` and GPU `b.1` of
    /// node `b.0`, each through its own NIC. `a.1 == b.1` in every plan except the two-node
    /// cross-rail round.
    Pair {
        a: (usize, usize),
        b: (usize, usize),
    },
}

/// Results are compared only with results of the same kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupKind {
    Local,
    Allocation,
    RailPair,
    CrossRail,
}

impl Group {
    pub fn kind(&self) -> GroupKind {
        match self {
            Group::Local { .. } => GroupKind::Local,
            Group::Allocation => GroupKind::Allocation,
            Group::Pair { a, b } if a.1 == b.1 => GroupKind::RailPair,
            Group::Pair { .. } => GroupKind::CrossRail,
        }
    }

    /// GPU `rail` of node `a` with GPU `rail` of node `b`.
    pub fn rail_pair(a: usize, b: usize, rail: usize) -> Group {
        Group::Pair {
            a: (a, rail),
            b: (b, rail),
        }
    }

    /// A pair's two ends, (node, rail) each; `None` for other groups.
    pub fn ends(&self) -> Option<((usize, usize), (usize, usize))> {
        match *self {
            Group::Pair { a, b } => Some((a, b)),
            _ => None,
        }
    }
}

/// Groups measured at the same time; no GPU is in two groups of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub index: usize,
    pub phase: Phase,
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LocalizeConfig {
    /// Slow = below this fraction of the reference (defaults.toml `[outliers] fraction`).
    pub fraction: f64,
    /// The reference is this quantile of the results of one kind (nearest rank). 0.5 is the
    /// median; 0.75 keeps a healthy reference while up to 3/4 of results are slow, which the
    /// ring needs: two bad nodes among 8 slow half of its edges.
    pub reference_quantile: f64,
    pub floors: PairFloors,
    /// A slow node pair whose ends are both fast with their other partners is measured once
    /// more before it is named (defaults.toml `[outliers] retest`): one slow reading of one
    /// path is as often noise as a bad link (8 emulated nodes on one H100: 4 of 10 healthy
    /// checks FAILed on a single slow pair before this, tests/gpu/results/fabric).
    pub retest: bool,
    /// The alltoall measured beside the all_reduce was slow (`paths::alltoall_slow`), or a
    /// host busy (`paths::measures_every_path`): after rounds that name nothing, every node pair is
    /// measured (`paths`).
    pub paths: bool,
    /// The other rounds' node-pair median at and above which the alltoall reads slow against
    /// them (`paths::pairs_limit`): then every node pair is measured too.
    pub paths_above: Option<f64>,
}

impl Default for LocalizeConfig {
    fn default() -> Self {
        LocalizeConfig {
            fraction: 0.85,
            reference_quantile: 0.75,
            floors: PairFloors::default(),
            retest: true,
            paths: false,
            paths_above: None,
        }
    }
}

/// Stable finding codes; the report maps them onto its reason codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    NodeSlow,
    NodePairSlow,
    RailSlow,
    /// Phase B below its floor and no node, pair or rail stands out.
    AllocationSlow,
    /// Suspects left undecided (round cap reached or no cleared partner).
    SuspectsUnresolved,
}

/// One culprit. `nodes` are indices into the allocation's node list (the runner owns the names);
/// a rail is named by `subject` (`Culprit::Rail`: the GPU whose NIC is meant).
#[derive(Debug, Clone, PartialEq)]
pub struct LocalizeFinding {
    pub code: Code,
    pub nodes: Vec<usize>,
    pub subject: nccl_check_contract::report::culprit::Culprit,
    pub message: String,
    pub measured: Option<f64>,
    pub limit: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LocalizeVerdict {
    pub findings: Vec<LocalizeFinding>,
    /// Every round, phases A and B included.
    pub rounds: usize,
    /// Rounds after phase B (the ones `2*log2(N)+4` bounds).
    pub localization_rounds: usize,
    pub allocation_busbw: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LocalizeError {
    Shape { nodes: usize, gpus: usize },
    LocalizeConfig(&'static str),
    NoRoundPending,
    ResultCount { expected: usize, got: usize },
    BadValue { index: usize, value: f64 },
}

impl std::fmt::Display for LocalizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LocalizeError::Shape { nodes, gpus } => write!(
                f,
                "allocation of {nodes} nodes x {gpus} GPUs: need 1..={MAX_NODES} nodes and 1..={MAX_GPUS} GPUs per node"
            ),
            LocalizeError::LocalizeConfig(why) => write!(f, "localization config: {why}"),
            LocalizeError::NoRoundPending => write!(f, "results recorded with no round pending"),
            LocalizeError::ResultCount { expected, got } => {
                write!(f, "round has {expected} groups, {got} results recorded")
            }
            LocalizeError::BadValue { index, value } => {
                write!(f, "result {index} is {value}: busbw must be finite and >= 0")
            }
        }
    }
}

impl std::error::Error for LocalizeError {}

impl LocalizeError {
    /// An allocation of `nodes` x `gpus` the localizer takes (1..=[`MAX_NODES`] x
    /// 1..=[`MAX_GPUS`]), else [`LocalizeError::Shape`].
    pub(crate) fn check_shape(nodes: usize, gpus: usize) -> Result<(), LocalizeError> {
        match (1..=MAX_NODES).contains(&nodes) && (1..=MAX_GPUS).contains(&gpus) {
            true => Ok(()),
            false => Err(LocalizeError::Shape { nodes, gpus }),
        }
    }
}

/// The worst-case number of localization rounds: `2*floor(log2 N)+4` (0 for one node).
pub fn round_cap(nodes: usize) -> usize {
    if nodes < 2 {
        0
    } else {
        2 * nodes.ilog2() as usize + 4
    }
}

/// Node names in findings: `node7`; the runner swaps in host names.
pub(crate) fn node_name(i: usize) -> String {
    format!("node{i}")
}
