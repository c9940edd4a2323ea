//! What the measuring hands back, as the report records it: the nccl-tests-compatible rows, the
//! pair matrix's rows, the retests by the GPU's clock and each phase's time (read by `report`,
//! `judge` and `render`, which come after this stage).

use nccl_check_contract::report::culprit::Culprit;
use serde::{Deserialize, Serialize};

/// A name the worker fills from its own tables (`all_reduce`, `float`, `p2p`) and a report read
/// back holds as its own copy: borrowed when written, owned when read, never leaked.
pub type Name = std::borrow::Cow<'static, str>;

/// Wall-clock milliseconds of each phase of this process (parallel phases: the slowest GPU).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Phases {
    /// cuInit and device count (the driver's own start).
    pub cuda_init_ms: f64,
    /// dlopen of libnccl, overlapped with cuda_init.
    pub nccl_load_ms: f64,
    /// Primary context and stream per GPU, in parallel (the check kernels load after it, beside
    /// NCCL's init when the processes have met by then).
    pub contexts_ms: f64,
    /// Meeting the other processes (0 for one process), overlapped with contexts.
    pub rendezvous_ms: f64,
    /// ncclCommInitRankConfig until the communicator is ready.
    pub nccl_init_ms: f64,
    /// Send and receive buffers (ncclMemAlloc).
    pub allocation_ms: f64,
    /// The global warm-up sweep and the untimed operation before each measurement.
    pub warmup_ms: f64,
    /// The timed loops (what the table's times are made of).
    pub timed_loop_ms: f64,
    /// Filling, running and comparing the checked operation.
    pub verification_ms: f64,
    /// The local probe (device-local copies), the slowest GPU.
    pub probe_ms: f64,
    /// The whole pair step (connections, warm-ups, barriers, timed rounds, sums), included in
    /// `warmup_ms` and `timed_loop_ms` for its parts.
    pub pairs_ms: f64,
    /// Process start to the moment the last of this process's communicators was ready: the
    /// setup a check pays before its first collective, for time-to-verdict comparisons.
    pub comms_ready_at_ms: f64,
    /// Process start to the moment the report was written.
    pub total_ms: f64,
}

/// A retested row's busbw by the GPU's clock: per rank the summed per-operation GPU time of the
/// same timed loop, the smallest over ranks (a rank whose host was late waited least).
#[derive(Debug, Clone, Serialize)]
pub struct GpuSide {
    pub collective: &'static str,
    pub size: u64,
    pub out_of_place_busbw: f64,
    pub in_place_busbw: f64,
}

/// One placement (out-of-place or in-place) of one row, combined over all ranks.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Placement {
    /// Seconds per operation, averaged over ranks (nccl-tests `-a 1`), in microseconds.
    pub time_us: f64,
    /// GB/s, GB = 1e9 bytes.
    pub algbw: f64,
    pub busbw: f64,
    /// Elements that differ bitwise from the expected output, summed over ranks; `None` = not
    /// checked (in-place alltoall and sendrecv, or `--check 0`).
    pub wrong: Option<u64>,
    /// When this result was slow and measured once more: the first measurement's busbw (the
    /// fields above are the second's, which the verdict uses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_busbw: Option<f64>,
}

/// One printed line of the table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Row {
    pub collective: Name,
    /// What the row was held against (filled by the verdict; None: no floor at this size, the
    /// outlier rule alone judged it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
    /// Bytes: max(send, recv), as nccl-tests prints.
    pub size: u64,
    /// The count passed to NCCL.
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: Name,
    pub redop: Name,
    pub root: i32,
    pub out_of_place: Placement,
    pub in_place: Placement,
}

impl Row {
    pub fn wrong(&self) -> u64 {
        self.out_of_place.wrong.unwrap_or(0) + self.in_place.wrong.unwrap_or(0)
    }
}

/// What a pair of the pair matrix joins.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PairKind {
    /// Two GPUs of one node.
    #[default]
    Gpu,
    /// Two nodes: GPU i of one with GPU i of the other, all at once.
    Node,
}

/// One pair of the pair matrix: two GPUs of a node (`kind = "gpu"`) or two nodes
/// (`kind = "node"`, GPU i of one with GPU i of the other, all at once), with sendrecv.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PairRow {
    pub kind: PairKind,
    /// The node of a GPU pair; empty for node pairs.
    pub node: String,
    /// `GPU2` / `GPU3` for GPU pairs; node names for node pairs.
    pub a: String,
    pub b: String,
    /// Global NCCL ranks of the (first) two endpoints.
    pub ranks: (u32, u32),
    pub bytes: u64,
    /// Slower of the two endpoints, per operation.
    pub time_us: f64,
    pub busbw: f64,
    /// The same by the GPUs' clock (`runner::gpu_time`): a pair slow by the host's clock and
    /// not by this one was slowed by its host, not its link (`judge::evidence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busbw: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_busbw: Option<f64>,
    /// What this pair was held against (filled by the verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
}

impl PairRow {
    /// What the pair's path delivered at least: the faster of the host's and the GPUs' clock.
    /// The host's number can only be slowed by the host and the GPUs' only by a partner's late
    /// host in the first operation (left out), so neither ever reads faster than the link.
    pub fn delivered_busbw(&self) -> f64 {
        self.gpu_busbw.map_or(self.busbw, |g| g.max(self.busbw))
    }
}

/// What a result was held against, beside it in the report and the table (one definition,
/// the contract's): the floor, the margin (the result's busbw / the floor: 1.18 is 18% above
/// it, 0.50 half of it) and where the floor comes from (a built-in rule and its source, the
/// admin's rule file:line, `--min-busbw`, or the outlier rule's median of its peers).
pub use nccl_check_contract::report::Expected;

/// `>= 400 GB/s (1.18x; built-in [<built-in defaults.toml>:91])` for a table or a summary.
pub fn expected_short(e: &Expected) -> String {
    let margin = if e.margin.is_finite() {
        format!("{:.2}x", e.margin)
    } else {
        "no floor".into()
    };
    let from = e.source.split(": ").next().unwrap_or(&e.source);
    format!(
        ">= {} GB/s ({margin}; {from})",
        crate::model::stats::num(e.floor_gbs)
    )
}

impl PairRow {
    /// What a slow pair blames, typed: two GPUs of a node (the node named when the check spans
    /// several), or two nodes.
    pub fn culprit(&self, multi_node: bool) -> Culprit {
        match self.kind {
            PairKind::Gpu => match (gpu_index(&self.a), gpu_index(&self.b)) {
                (Some(a), Some(b)) => Culprit::GpuPair {
                    node: multi_node.then(|| self.node.clone()),
                    a,
                    b,
                    directed: false,
                },
                // Not a name this worker gives its GPUs: kept as written, never guessed.
                _ => Culprit::Other(format!("{}<->{}", self.a, self.b)),
            },
            PairKind::Node => Culprit::NodePair(self.a.clone(), self.b.clone()),
        }
    }

    /// [`PairRow::culprit`] as the report writes it: `GPU2<->GPU3`, `n7 GPU2<->GPU3`,
    /// `node1<->node2`.
    pub fn subject(&self, multi_node: bool) -> String {
        self.culprit(multi_node).to_string()
    }
}

/// The worker's name of a GPU (`GPU2`, [`gpu_label`]) back to its index.
pub fn gpu_index(name: &str) -> Option<u32> {
    match Culprit::parse(name) {
        Culprit::Gpu { node: None, gpu } => Some(gpu),
        _ => None,
    }
}

/// A GPU as the worker names it in pairs and reasons: `GPU2`.
pub fn gpu_label(index: u32) -> String {
    Culprit::Gpu {
        node: None,
        gpu: index,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_blames_its_two_gpus_or_its_two_nodes_as_written_before() {
        let pair = |kind, node: &str, a: &str, b: &str| PairRow {
            kind,
            node: node.into(),
            a: a.into(),
            b: b.into(),
            ..PairRow::default()
        };
        let gpus = pair(PairKind::Gpu, "n7", &gpu_label(2), &gpu_label(3));
        assert_eq!(gpus.subject(false), "GPU2<->GPU3");
        assert_eq!(gpus.subject(true), "n7 GPU2<->GPU3");
        for multi in [false, true] {
            assert_eq!(Culprit::parse(&gpus.subject(multi)), gpus.culprit(multi));
        }
        let nodes = pair(PairKind::Node, "", "n1", "n2");
        assert_eq!(
            nodes.culprit(true),
            Culprit::NodePair("n1".into(), "n2".into())
        );
        assert_eq!(nodes.subject(true), "n1<->n2");
        assert_eq!(
            (gpu_index("GPU12"), gpu_index("n1"), gpu_index("GPU")),
            (Some(12), None, None)
        );
    }

    #[test]
    fn pair_kinds_are_written_as_before() {
        let text = |k: PairKind| serde_json::to_string(&k).expect("serializes");
        assert_eq!(
            (text(PairKind::Gpu), text(PairKind::Node)),
            (r#""gpu""#.into(), r#""node""#.into())
        );
        let back: PairKind = serde_json::from_str(r#""node""#).expect("parses");
        assert_eq!(back, PairKind::Node);
    }
}
