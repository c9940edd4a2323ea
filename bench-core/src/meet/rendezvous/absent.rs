//! What the coordinator says at its deadline about the processes that never joined: first the
//! nodes with fewer joined processes than the step's layout expects (an admin acts on a node, not
//! a rank), then the ranks; a few of each and a count of the rest, so the message stays short at
//! any number of processes.

use std::collections::HashMap;

/// Nodes named one by one; the rest are counted.
pub const MAX_NODES_NAMED: usize = 8;
/// Ranks named one by one; the rest are counted.
pub const MAX_RANKS_NAMED: usize = 16;

/// `no process of node n17 joined (0 of 1), process rank(s) 16 of 64 never joined`.
///
/// `expected` is every node with its task count; `joined` the host of every process that is in
/// (the coordinator's own included); `absent` the ranks that are not. The nodes are named only
/// when the joined processes fit the layout (each on one of its nodes, none over its count):
/// a member that names its node otherwise (`NCCL_HOSTID`, a host name that is not Slurm's node
/// name) would make a node look short that is not, so then only the ranks are named.
pub fn describe(
    expected: Option<&[(String, u32)]>,
    joined: &[&str],
    absent: &[u32],
    world: u32,
) -> String {
    let ranks = ranks(absent, world);
    match expected.and_then(|e| short_nodes(e, joined)) {
        Some(nodes) if !nodes.is_empty() => format!("{}, {ranks}", name_nodes(&nodes)),
        _ => ranks,
    }
}

/// The nodes with fewer joined processes than expected, in the layout's order, each with
/// (joined, expected); `None` when the joined processes do not fit the layout.
fn short_nodes<'a>(
    expected: &'a [(String, u32)],
    joined: &[&str],
) -> Option<Vec<(&'a str, u32, u32)>> {
    let mut count: HashMap<&str, u32> = expected.iter().map(|(n, _)| (n.as_str(), 0)).collect();
    for host in joined {
        *count.get_mut(host)? += 1;
    }
    let mut short = Vec::new();
    for (node, want) in expected {
        let have = count[node.as_str()];
        if have > *want {
            return None;
        }
        if have < *want {
            short.push((node.as_str(), have, *want));
        }
    }
    Some(short)
}

fn name_nodes(nodes: &[(&str, u32, u32)]) -> String {
    match nodes {
        [(node, 0, want)] => format!("no process of node {node} joined (0 of {want})"),
        [(node, have, want)] => {
            format!("not every process of node {node} joined ({have} of {want})")
        }
        _ => {
            let each =
                (nodes.iter()).map(|(node, have, want)| format!("{node} ({have} of {want})"));
            format!(
                "processes of {} nodes never joined: {}",
                nodes.len(),
                listed(each, nodes.len(), MAX_NODES_NAMED)
            )
        }
    }
}

/// `process rank(s) 1, 2, ... and K more of N never joined`.
fn ranks(absent: &[u32], world: u32) -> String {
    let named = listed(
        absent.iter().map(u32::to_string),
        absent.len(),
        MAX_RANKS_NAMED,
    );
    format!("process rank(s) {named} of {world} never joined")
}

/// The first `max` of `each` (one of `all`), comma-separated, then " and K more" where `all` is
/// over `max` (also the control plane's).
pub(super) fn listed(each: impl Iterator<Item = String>, all: usize, max: usize) -> String {
    let named = each.take(max).collect::<Vec<_>>().join(", ");
    match all.saturating_sub(max) {
        0 => named,
        k => format!("{named} and {k} more"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(n: u32, each: u32) -> Vec<(String, u32)> {
        (1..=n).map(|i| (format!("n{i}"), each)).collect()
    }

    #[test]
    fn one_missing_node_is_named_before_its_rank() {
        let hosts: Vec<String> = (1..=64)
            .filter(|&i| i != 17)
            .map(|i| format!("n{i}"))
            .collect();
        let joined: Vec<&str> = hosts.iter().map(String::as_str).collect();
        assert_eq!(
            describe(Some(&layout(64, 1)), &joined, &[16], 64),
            "no process of node n17 joined (0 of 1), process rank(s) 16 of 64 never joined"
        );
        // Without a layout: the ranks, as before.
        assert_eq!(
            describe(None, &joined, &[16], 64),
            "process rank(s) 16 of 64 never joined"
        );
    }

    #[test]
    fn a_node_with_some_of_its_processes_is_named_with_the_count() {
        // n2 runs ranks 1 and 3 (cyclic); rank 3 never came.
        let e = describe(Some(&layout(2, 2)), &["n1", "n2", "n1"], &[3], 4);
        assert_eq!(
            e,
            "not every process of node n2 joined (1 of 2), process rank(s) 3 of 4 never joined"
        );
    }

    #[test]
    fn many_missing_nodes_name_eight_then_count_the_rest() {
        // Only n1's two processes are in; 19 nodes of 2 processes each are missing.
        let absent: Vec<u32> = (2..40).collect();
        let e = describe(Some(&layout(20, 2)), &["n1", "n1"], &absent, 40);
        assert_eq!(
            e,
            "processes of 19 nodes never joined: n2 (0 of 2), n3 (0 of 2), n4 (0 of 2), \
             n5 (0 of 2), n6 (0 of 2), n7 (0 of 2), n8 (0 of 2), n9 (0 of 2) and 11 more, \
             process rank(s) 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17 and 22 more \
             of 40 never joined"
        );
    }

    #[test]
    fn joined_processes_that_do_not_fit_the_layout_leave_the_ranks_alone() {
        let ranks_only = "process rank(s) 2 of 3 never joined";
        // A host outside the layout (NCCL_HOSTID, or the host name instead of Slurm's node name).
        assert_eq!(
            describe(Some(&layout(3, 1)), &["n1", "gpu-a"], &[2], 3),
            ranks_only
        );
        // More processes on a node than it should have.
        assert_eq!(
            describe(Some(&layout(3, 1)), &["n1", "n1"], &[2], 3),
            ranks_only
        );
    }

    #[test]
    fn the_message_is_bounded_at_any_size() {
        // 100,000 processes of which one is in, with the longest node names a member may send.
        let long = |i: u32| format!("{i:0>255}");
        let expected: Vec<(String, u32)> = (0..100_000).map(|i| (long(i), 1)).collect();
        let absent: Vec<u32> = (1..100_000).collect();
        let first = long(0);
        let e = describe(Some(&expected), &[first.as_str()], &absent, 100_000);
        assert!(e.len() < 8 * 270 + 300, "{} bytes", e.len());
        assert!(e.contains(" and 99991 more, process rank(s) 1, 2,"), "{e}");
        assert!(
            e.ends_with("16 and 99983 more of 100000 never joined"),
            "{e}"
        );
    }
}
