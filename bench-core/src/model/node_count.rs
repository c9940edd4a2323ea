//! The node counts a threshold rule holds for: `nodes = N` (exactly N; absent, 1) or a range
//! `min_nodes`..=`max_nodes` (either end may be left out), validated with the key at fault.
//!
//! A range exists because nccl-tests' busbw of a ring collective across nodes is, to first
//! order, independent of the node count (the bus factor removes the 2(n-1)/n): one rule
//! `min_nodes = 2` gives every multi-node allocation a floor, so a healthy one passes on the
//! allocation-wide collective alone, without a localization round.

use std::fmt;

/// Which checks a rule applies to, by their number of nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeCount {
    /// `nodes = N`, or no node key at all (1: a multi-node rule must say so).
    Exact(u32),
    /// `min_nodes`..=`max_nodes`, inclusive; `min` is 1 when only `max_nodes` is given, `max` is
    /// `None` when there is no upper end.
    Range { min: u32, max: Option<u32> },
}

/// A node key that cannot be accepted: which key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCountError {
    pub key: &'static str,
    pub message: String,
}

impl NodeCount {
    /// The rule's node count from its keys. `gpus` counts every GPU of the check, so next to a
    /// node range it would pin the node count after all (16 GPUs: 2 x 8 or 4 x 4 nodes) and
    /// silently leave the other counts without a floor: a range takes no `gpus`.
    pub fn from_keys(
        nodes: Option<u32>,
        min_nodes: Option<u32>,
        max_nodes: Option<u32>,
        gpus: Option<u32>,
    ) -> Result<NodeCount, NodeCountError> {
        let err = |key, message: String| Err(NodeCountError { key, message });
        for (key, v) in [
            ("nodes", nodes),
            ("min_nodes", min_nodes),
            ("max_nodes", max_nodes),
        ] {
            if v == Some(0) {
                return err(key, "must be at least 1".into());
            }
        }
        match (nodes, min_nodes, max_nodes) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => err(
                "nodes",
                "give `nodes` (one node count) or `min_nodes`/`max_nodes` (a range), not both"
                    .into(),
            ),
            (n, None, None) => Ok(NodeCount::Exact(n.unwrap_or(1))),
            (None, lo, hi) => {
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    if lo > hi {
                        return err(
                            "min_nodes",
                            format!("min_nodes {lo} is larger than max_nodes {hi}"),
                        );
                    }
                }
                if gpus.is_some() {
                    return err(
                        "gpus",
                        "a node range applies to every GPU count (`gpus` counts the whole check's \
                         GPUs and would pin the node count): leave `gpus` out, or give `nodes`"
                            .into(),
                    );
                }
                Ok(NodeCount::Range {
                    min: lo.unwrap_or(1),
                    max: hi,
                })
            }
        }
    }

    /// Whether a check of `nodes` nodes lies in this count or range.
    pub fn contains(self, nodes: u32) -> bool {
        match self {
            NodeCount::Exact(n) => n == nodes,
            NodeCount::Range { min, max } => nodes >= min && max.is_none_or(|hi| nodes <= hi),
        }
    }

    /// How narrowly the node count is named, for "the most specific rule wins": an exact count
    /// (2) beats a range with both ends (1), which beats a range open at the top (0).
    pub fn specificity(self) -> u32 {
        match self {
            NodeCount::Exact(_) => 2,
            NodeCount::Range { max: Some(_), .. } => 1,
            NodeCount::Range { max: None, .. } => 0,
        }
    }
}

/// `4`, `2..` or `2..64`, as `--explain-thresholds` shows it.
impl fmt::Display for NodeCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeCount::Exact(n) => write!(f, "{n}"),
            NodeCount::Range { min, max: None } => write!(f, "{min}.."),
            NodeCount::Range { min, max: Some(hi) } => write!(f, "{min}..{hi}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: Option<u32>, lo: Option<u32>, hi: Option<u32>) -> Result<NodeCount, NodeCountError> {
        NodeCount::from_keys(n, lo, hi, None)
    }

    #[test]
    fn a_count_or_a_range_and_what_each_contains() {
        assert_eq!(keys(None, None, None), Ok(NodeCount::Exact(1)));
        assert_eq!(keys(Some(4), None, None), Ok(NodeCount::Exact(4)));
        let from2 = keys(None, Some(2), None).unwrap();
        assert!(!from2.contains(1), "min_nodes = 2 never holds for one node");
        assert!(from2.contains(2) && from2.contains(64) && from2.contains(4096));
        assert!(from2.contains(u32::MAX));
        let upto = keys(None, None, Some(64)).unwrap();
        assert_eq!(
            upto,
            NodeCount::Range {
                min: 1,
                max: Some(64)
            }
        );
        assert!(upto.contains(1) && upto.contains(64) && !upto.contains(65));
        assert!(NodeCount::Exact(4).contains(4) && !NodeCount::Exact(4).contains(5));
        assert!(keys(None, Some(8), Some(8)).unwrap().contains(8));
    }

    #[test]
    fn contradictions_and_zero_name_their_key() {
        let key = |r: Result<NodeCount, NodeCountError>| r.unwrap_err().key;
        assert_eq!(key(keys(Some(2), Some(2), None)), "nodes");
        assert_eq!(key(keys(Some(2), None, Some(8))), "nodes");
        assert_eq!(key(keys(None, Some(9), Some(8))), "min_nodes");
        assert_eq!(key(keys(None, Some(0), None)), "min_nodes");
        assert_eq!(key(keys(None, None, Some(0))), "max_nodes");
        assert_eq!(key(keys(Some(0), None, None)), "nodes");
        let e = NodeCount::from_keys(None, Some(2), None, Some(16)).unwrap_err();
        assert_eq!(e.key, "gpus", "{e:?}");
        // An exact node count keeps its GPU count, as before ranges existed.
        assert_eq!(
            NodeCount::from_keys(Some(2), None, None, Some(16)),
            Ok(NodeCount::Exact(2))
        );
    }

    #[test]
    fn exact_beats_a_closed_range_beats_an_open_one_and_each_is_shown() {
        let closed = keys(None, Some(2), Some(64)).unwrap();
        let open = keys(None, Some(2), None).unwrap();
        assert!(NodeCount::Exact(64).specificity() > closed.specificity());
        assert!(closed.specificity() > open.specificity());
        assert_eq!(
            [
                NodeCount::Exact(1).to_string(),
                open.to_string(),
                closed.to_string()
            ],
            ["1", "2..", "2..64"]
        );
    }
}
