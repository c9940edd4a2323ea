//! What a reason blames, typed: a GPU, a GPU pair, a node, a node pair, a NIC (rail), a process,
//! a path across nodes, nodes left unplaced, the allocation, or an NCCL algorithm. The report
//! writes it as text in `reasons[].subject` (`GPU2<->GPU3`, `node017<->node018`,
//! `n7 GPU3 NIC`); [`Culprit::parse`] is the one place that reads that text
//! back, and [`Culprit::short`] is the drain reason's compact form (`GPU2-3`), so no caller takes
//! the string apart itself.

use std::fmt;

/// Longest short form: what `sinfo -R` shows of a drain reason is 20 characters, most of them
/// the culprit.
pub const SHORT_MAX: usize = 24;

/// What a reason blames.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Culprit {
    /// One GPU (`GPU2`), on a named node when the check spans several (`n7 GPU2`).
    Gpu { node: Option<String>, gpu: u32 },
    /// Two GPUs of one node: a pair of the pair matrix (`GPU2<->GPU3`) or a path NCCL took from
    /// one to the other (`GPU0->GPU1`, `directed`).
    GpuPair {
        node: Option<String>,
        a: u32,
        b: u32,
        directed: bool,
    },
    /// A node, by the name Slurm knows it.
    Node(String),
    /// The path between two nodes (`node017<->node018`).
    NodePair(String, String),
    /// One GPU's NIC on a node (`n7 GPU3 NIC`): a rail.
    Rail { node: String, gpu: u32 },
    /// One process of the check (`process 3`).
    Process(u32),
    /// A path NCCL took from a GPU of one node to a GPU of another (`n1 GPU0->n2 GPU1`).
    Path {
        from: String,
        a: u32,
        to: String,
        b: u32,
    },
    /// Nodes the localizer suspected and could not place (`n1,n2`; one name reads back as
    /// [`Culprit::Node`]).
    Nodes(Vec<String>),
    /// The whole allocation (`allocation`).
    Allocation,
    /// Every GPU pair of the one node measured (`all GPU pairs`).
    AllGpuPairs,
    /// NCCL's CollNet (SHARP) algorithm (`CollNet`).
    CollNet,
    /// NCCL's NVLink SHARP algorithm (`NVLS`).
    Nvls,
    /// What a node's fact names in its own words (`eth1`, `GPU 3 (0000:9b:00.0)`), or a subject
    /// this reader does not know, as written.
    Other(String),
}

/// `GPU<n>` → n.
fn gpu_index(s: &str) -> Option<u32> {
    let n = s.strip_prefix("GPU")?;
    (!n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// A node name as Slurm prints it: one word, no list or path punctuation, not a GPU.
fn node_name(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && gpu_index(s).is_none()
        && !s.contains(|c: char| c.is_whitespace() || matches!(c, ',' | '<' | '>' | '|' | ':'));
    ok.then(|| s.to_string())
}

/// `GPU2<->GPU3` or `GPU0->GPU1` → (2, 3, false) or (0, 1, true).
fn gpu_pair(s: &str) -> Option<(u32, u32, bool)> {
    if let Some((a, b)) = s.split_once("<->") {
        return Some((gpu_index(a)?, gpu_index(b)?, false));
    }
    let (a, b) = s.split_once("->")?;
    Some((gpu_index(a)?, gpu_index(b)?, true))
}

/// `GPU2`, `GPU2<->GPU3` or `GPU0->GPU1`, on `node` where the subject names one.
fn gpus(node: Option<String>, s: &str) -> Option<Culprit> {
    match gpu_pair(s) {
        Some((a, b, directed)) => Some(Culprit::GpuPair {
            node,
            a,
            b,
            directed,
        }),
        None => gpu_index(s).map(|gpu| Culprit::Gpu { node, gpu }),
    }
}

impl Culprit {
    /// Reads a reason's subject as the worker writes it; what it does not recognise is
    /// [`Culprit::Other`], never an error.
    pub fn parse(subject: &str) -> Culprit {
        let s = subject.trim();
        let words: Vec<&str> = s.split_whitespace().collect();
        let parsed = match words.as_slice() {
            [one] => Self::one_word(one),
            ["process", n] => n.parse().ok().map(Culprit::Process),
            [node, gpu] => node_name(node).and_then(|node| gpus(Some(node), gpu)),
            [node, gpu, "NIC"] => node_name(node)
                .zip(gpu_index(gpu))
                .map(|(node, gpu)| Culprit::Rail { node, gpu }),
            ["all", "GPU", "pairs"] => Some(Culprit::AllGpuPairs),
            [from, middle, b] => Self::path(from, middle, b),
            _ => None,
        };
        parsed.unwrap_or_else(|| Culprit::Other(s.to_string()))
    }

    /// `n1 GPU0->n2 GPU1`, as three words.
    fn path(from: &str, middle: &str, b: &str) -> Option<Culprit> {
        let (a, to) = middle.split_once("->")?;
        Some(Culprit::Path {
            from: node_name(from)?,
            a: gpu_index(a)?,
            to: node_name(to)?,
            b: gpu_index(b)?,
        })
    }

    fn one_word(s: &str) -> Option<Culprit> {
        match s {
            "allocation" => return Some(Culprit::Allocation),
            "CollNet" => return Some(Culprit::CollNet),
            "NVLS" => return Some(Culprit::Nvls),
            _ => {}
        }
        if s.contains(',') {
            let names: Option<Vec<String>> = s.split(',').map(node_name).collect();
            return names.map(Culprit::Nodes);
        }
        if let Some(gpu) = gpus(None, s) {
            return Some(gpu);
        }
        if let Some((a, b)) = s.split_once("<->") {
            return node_name(a)
                .zip(node_name(b))
                .map(|(a, b)| Culprit::NodePair(a, b));
        }
        node_name(s).map(Culprit::Node)
    }

    /// Whether it names `node`: the node, a pair or path it is in, a GPU or NIC on it, a list
    /// it is in (text as written names no node).
    pub fn names_node(&self, node: &str) -> bool {
        match self {
            Culprit::Node(n) | Culprit::Rail { node: n, .. } => n == node,
            Culprit::NodePair(a, b) | Culprit::Path { from: a, to: b, .. } => {
                a == node || b == node
            }
            Culprit::Gpu { node: n, .. } | Culprit::GpuPair { node: n, .. } => {
                n.as_deref() == Some(node)
            }
            Culprit::Nodes(names) => names.iter().any(|n| n == node),
            _ => false,
        }
    }

    /// The compact form a drain reason starts with: `GPU2-3`, `n1-n2`, `n7_GPU3_NIC`; at most
    /// [`SHORT_MAX`] characters, no spaces. Node names stay whole, as Slurm knows them. Each is
    /// its written form with `_` for spaces and `-` for arrows, a GPU pair's second `GPU` left out.
    pub fn short(&self) -> String {
        let s = match self {
            Culprit::GpuPair { node, a, b, .. } => match node {
                None => format!("GPU{a}-{b}"),
                Some(n) => format!("{n}_GPU{a}-{b}"),
            },
            _ => (self.to_string().replace("<->", "-").replace("->", "-"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join("_"),
        };
        s.chars().take(SHORT_MAX).collect()
    }
}

/// A subject as the report writes it, read as [`Culprit::parse`] reads it (for literals: a
/// culprit built by the worker comes from its parts, never from text).
impl From<&str> for Culprit {
    fn from(subject: &str) -> Culprit {
        Culprit::parse(subject)
    }
}

/// The form the report writes.
impl fmt::Display for Culprit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = |n: &Option<String>| n.as_ref().map(|n| format!("{n} ")).unwrap_or_default();
        match self {
            Culprit::Gpu { node: n, gpu } => write!(f, "{}GPU{gpu}", node(n)),
            Culprit::GpuPair {
                node: n,
                a,
                b,
                directed,
            } => {
                let arrow = if *directed { "->" } else { "<->" };
                write!(f, "{}GPU{a}{arrow}GPU{b}", node(n))
            }
            Culprit::Node(n) => f.write_str(n),
            Culprit::NodePair(a, b) => write!(f, "{a}<->{b}"),
            Culprit::Rail { node, gpu } => write!(f, "{node} GPU{gpu} NIC"),
            Culprit::Process(p) => write!(f, "process {p}"),
            Culprit::Path { from, a, to, b } => write!(f, "{from} GPU{a}->{to} GPU{b}"),
            Culprit::Nodes(names) => f.write_str(&names.join(",")),
            Culprit::Allocation => f.write_str("allocation"),
            Culprit::AllGpuPairs => f.write_str("all GPU pairs"),
            Culprit::CollNet => f.write_str("CollNet"),
            Culprit::Nvls => f.write_str("NVLS"),
            Culprit::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subject shape the worker writes reads as its kind and is written back the same.
    #[test]
    fn each_subject_the_worker_writes_reads_as_its_kind_and_writes_back_the_same() {
        let cases = [
            ("GPU2", Culprit::Gpu { node: None, gpu: 2 }, "GPU2"),
            (
                "n7 GPU2",
                Culprit::Gpu {
                    node: Some("n7".into()),
                    gpu: 2,
                },
                "n7_GPU2",
            ),
            (
                "GPU2<->GPU3",
                Culprit::GpuPair {
                    node: None,
                    a: 2,
                    b: 3,
                    directed: false,
                },
                "GPU2-3",
            ),
            (
                "GPU0->GPU1",
                Culprit::GpuPair {
                    node: None,
                    a: 0,
                    b: 1,
                    directed: true,
                },
                "GPU0-1",
            ),
            (
                "node017 GPU2<->GPU3",
                Culprit::GpuPair {
                    node: Some("node017".into()),
                    a: 2,
                    b: 3,
                    directed: false,
                },
                "node017_GPU2-3",
            ),
            (
                "gpu-node017",
                Culprit::Node("gpu-node017".into()),
                "gpu-node017",
            ),
            (
                "n1<->n2",
                Culprit::NodePair("n1".into(), "n2".into()),
                "n1-n2",
            ),
            (
                "n7 GPU3 NIC",
                Culprit::Rail {
                    node: "n7".into(),
                    gpu: 3,
                },
                "n7_GPU3_NIC",
            ),
            ("process 3", Culprit::Process(3), "process_3"),
            ("CollNet", Culprit::CollNet, "CollNet"),
            ("NVLS", Culprit::Nvls, "NVLS"),
            ("allocation", Culprit::Allocation, "allocation"),
            ("all GPU pairs", Culprit::AllGpuPairs, "all_GPU_pairs"),
            (
                "node1,node2",
                Culprit::Nodes(vec!["node1".into(), "node2".into()]),
                "node1,node2",
            ),
            (
                "node01 GPU0->node02 GPU1",
                Culprit::Path {
                    from: "node01".into(),
                    a: 0,
                    to: "node02".into(),
                    b: 1,
                },
                "node01_GPU0-node02_GPU1",
            ),
            ("n1,GPU2", Culprit::Other("n1,GPU2".into()), "n1,GPU2"),
            ("node 7", Culprit::Other("node 7".into()), "node_7"),
        ];
        for (text, want, short) in cases {
            let c = Culprit::parse(text);
            assert_eq!(c, want, "{text}");
            assert_eq!(c.to_string(), text, "{text}");
            assert_eq!(c.short(), short, "{text}");
        }
    }

    #[test]
    fn the_short_form_is_bounded_and_has_no_spaces() {
        let c = Culprit::parse(&format!("{} x", "n".repeat(100)));
        assert_eq!(c.short().chars().count(), SHORT_MAX);
        assert!(!c.short().contains(' '));
        assert_eq!(Culprit::parse("GPU99999999999").short(), "GPU99999999999");
    }
}
