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

/// What a pair of the pair matrix joins, as the report writes it (`kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairKind {
    /// Two GPUs of one node.
    #[default]
    Gpu,
    /// Two nodes: GPU i of one with GPU i of the other, all at once.
    Node,
}

/// What a pair of the pair matrix joins, typed: two GPUs of a node by their index on it, or
/// two nodes. The report writes it as `kind`, `node`, `a` and `b` (`GPU2`, `GPU3` for GPUs, the
/// node's name empty for node pairs: [`EndsWire`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "EndsWire", try_from = "EndsWire")]
pub enum Ends {
    Gpus {
        node: String,
        a: u32,
        b: u32,
    },
    /// GPU i of one node with GPU i of the other, all at once.
    Nodes(String, String),
}

impl Default for Ends {
    fn default() -> Ends {
        Ends::Nodes(String::new(), String::new())
    }
}

/// [`Ends`] as the report writes them (read back in `read.rs`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct EndsWire {
    pub kind: PairKind,
    pub node: String,
    pub a: String,
    pub b: String,
}

impl From<Ends> for EndsWire {
    fn from(ends: Ends) -> EndsWire {
        let (kind, node, a, b) = match ends {
            Ends::Gpus { node, a, b } => {
                (PairKind::Gpu, node, format!("GPU{a}"), format!("GPU{b}"))
            }
            Ends::Nodes(a, b) => (PairKind::Node, String::new(), a, b),
        };
        EndsWire { kind, node, a, b }
    }
}

/// One pair of the pair matrix (two GPUs of a node or two nodes, [`Ends`]), with sendrecv.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PairRow {
    #[serde(flatten)]
    pub ends: Ends,
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
    /// A GPU pair's node and its two GPUs; `None` for a node pair.
    pub fn gpus(&self) -> Option<(&str, u32, u32)> {
        let Ends::Gpus { node, a, b } = &self.ends else {
            return None;
        };
        Some((node, *a, *b))
    }

    /// A node pair's two nodes; `None` for a GPU pair.
    pub fn nodes(&self) -> Option<(&str, &str)> {
        let Ends::Nodes(a, b) = &self.ends else {
            return None;
        };
        Some((a, b))
    }

    /// What a slow pair blames, typed: two GPUs of a node (the node named when the check spans
    /// several), or two nodes.
    pub fn culprit(&self, multi_node: bool) -> Culprit {
        match &self.ends {
            Ends::Gpus { node, a, b } => Culprit::GpuPair {
                node: multi_node.then(|| node.clone()),
                a: *a,
                b: *b,
                directed: false,
            },
            Ends::Nodes(a, b) => Culprit::NodePair(a.clone(), b.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_blames_its_two_gpus_or_its_two_nodes_as_written_before() {
        let pair = |ends| PairRow {
            ends,
            ..PairRow::default()
        };
        let gpus = pair(Ends::Gpus {
            node: "n7".into(),
            a: 2,
            b: 3,
        });
        assert_eq!(gpus.culprit(false).to_string(), "GPU2<->GPU3");
        assert_eq!(gpus.culprit(true).to_string(), "n7 GPU2<->GPU3");
        let nodes = pair(Ends::Nodes("n1".into(), "n2".into()));
        assert_eq!(
            nodes.culprit(true),
            Culprit::NodePair("n1".into(), "n2".into())
        );
        assert_eq!(nodes.culprit(true).to_string(), "n1<->n2");
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
