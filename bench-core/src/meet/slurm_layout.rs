//! How many tasks each node of a Slurm step should start (`SLURM_STEP_NODELIST` with
//! `SLURM_STEP_TASKS_PER_NODE`), whatever the task distribution (block, cyclic, arbitrary): what
//! the rendezvous coordinator holds the joined processes against, to name a node whose processes
//! never came. Read only from the environment; anything absent or inconsistent is `None`, never
//! an error (the rendezvous then names ranks only).

use nccl_check_host::hostlist::{self, Hostlist};
use std::collections::HashSet;

/// Longest tasks-per-node text read, in bytes (as long as the longest hostlist read).
pub const MAX_TASKS_TEXT: usize = hostlist::MAX_INPUT_LEN;

/// Slurm's compressed tasks-per-node form, `2(x3),1` = `[2, 2, 2, 1]`: comma-separated entries,
/// each `N` or `N(xM)`, N and M positive decimal numbers. `None` for anything else, for a
/// count that does not fit a `u32`, and for more than [`hostlist::MAX_HOSTS`] nodes (checked
/// before anything is expanded).
pub fn tasks_per_node(text: &str) -> Option<Vec<u32>> {
    if text.is_empty() || text.len() > MAX_TASKS_TEXT {
        return None;
    }
    let mut runs = Vec::new();
    let mut nodes = 0u64;
    for entry in text.split(',') {
        let (count, repeat) = match entry.split_once("(x") {
            Some((count, rest)) => (count, positive(rest.strip_suffix(')')?)?),
            None => (entry, 1),
        };
        let count = positive(count)?;
        nodes = nodes
            .checked_add(u64::from(repeat))
            .filter(|&n| n <= hostlist::MAX_HOSTS)?;
        runs.push((count, repeat));
    }
    let mut out = Vec::with_capacity(nodes as usize);
    for (count, repeat) in runs {
        out.extend(std::iter::repeat_n(count, repeat as usize));
    }
    Some(out)
}

/// A positive decimal number of ASCII digits only (`u32::from_str` would also take a `+`).
fn positive(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&n| n > 0)
}

/// Every node of the step with the number of its tasks, in the node list's order: from
/// `SLURM_STEP_NODELIST` and `SLURM_STEP_TASKS_PER_NODE` (`SLURM_TASKS_PER_NODE`, the job's,
/// only when the step's is absent). `None` outside Slurm, and when the two do not agree with
/// each other or with `world` (as many counts as nodes, no node twice, `world` tasks in all).
pub fn expected(env: &dyn Fn(&str) -> Option<String>, world: u32) -> Option<Vec<(String, u32)>> {
    let nodes = Hostlist::parse(&env("SLURM_STEP_NODELIST")?).ok()?;
    let tasks = env("SLURM_STEP_TASKS_PER_NODE").or_else(|| env("SLURM_TASKS_PER_NODE"))?;
    let tasks = tasks_per_node(&tasks)?;
    let total: u64 = tasks.iter().map(|&t| u64::from(t)).sum();
    if nodes.len() != tasks.len() as u64 || total != u64::from(world) {
        return None;
    }
    let layout: Vec<(String, u32)> = nodes.iter().zip(tasks).collect();
    let mut seen = HashSet::with_capacity(layout.len());
    layout
        .iter()
        .all(|(n, _)| seen.insert(n.as_str()))
        .then_some(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compressed_form_expands_in_order() {
        assert_eq!(tasks_per_node("2(x3),1"), Some(vec![2, 2, 2, 1]));
        assert_eq!(tasks_per_node("1"), Some(vec![1]));
        assert_eq!(tasks_per_node("8(x2)"), Some(vec![8, 8]));
        assert_eq!(tasks_per_node("3,1(x2),4"), Some(vec![3, 1, 1, 4]));
        assert_eq!(tasks_per_node("1(x1024)").map(|v| v.len()), Some(1024));
    }

    #[test]
    fn malformed_tasks_per_node_is_none() {
        for bad in [
            "",
            ",",
            "1,",
            ",1",
            "1,,2",
            "0",
            "2(x0)",
            "x",
            "2(x)",
            "2(x3",
            "2x3",
            "2(3)",
            "(x3)",
            "+1",
            "-1",
            "1 ",
            " 1",
            "2(x 3)",
            "2(x+3)",
            "1.5",
            "2(x3)1",
            "2(x3))",
            "4294967296",
            "1(x4294967296)",
        ] {
            assert_eq!(tasks_per_node(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tasks_per_node_is_bounded_before_it_expands() {
        // 4 x 1e9 nodes would be 16 GB of counts: refused, not allocated.
        assert_eq!(tasks_per_node("1(x1000000000),1(x1000000000)"), None);
        assert_eq!(tasks_per_node(&"1,".repeat(MAX_TASKS_TEXT)), None);
        let most = format!("1(x{})", hostlist::MAX_HOSTS);
        assert_eq!(
            tasks_per_node(&most).map(|v| v.len() as u64),
            Some(hostlist::MAX_HOSTS)
        );
        assert_eq!(tasks_per_node(&format!("{most},1")), None);
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    fn layout(pairs: &[(&str, u32)]) -> Option<Vec<(String, u32)>> {
        Some(pairs.iter().map(|&(n, t)| (n.to_string(), t)).collect())
    }

    #[test]
    fn the_step_layout_pairs_nodes_with_their_counts() {
        let env = env_of(&[
            ("SLURM_STEP_NODELIST", "gpu[01-03],x7"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x3),1"),
            ("SLURM_TASKS_PER_NODE", "8(x4)"),
        ]);
        assert_eq!(
            expected(&env, 7),
            layout(&[("gpu01", 2), ("gpu02", 2), ("gpu03", 2), ("x7", 1)])
        );
        // The job's counts only when the step has none.
        let env = env_of(&[
            ("SLURM_STEP_NODELIST", "n[1-2]"),
            ("SLURM_TASKS_PER_NODE", "4,3"),
        ]);
        assert_eq!(expected(&env, 7), layout(&[("n1", 4), ("n2", 3)]));
    }

    #[test]
    fn an_absent_or_inconsistent_layout_is_none() {
        let cases: &[(&[(&str, &str)], u32)] = &[
            (&[], 4),
            (&[("SLURM_STEP_NODELIST", "n[1-4]")], 4),
            (&[("SLURM_STEP_TASKS_PER_NODE", "1(x4)")], 4),
            // the sum is not the world
            (
                &[
                    ("SLURM_STEP_NODELIST", "n[1-4]"),
                    ("SLURM_STEP_TASKS_PER_NODE", "1(x4)"),
                ],
                5,
            ),
            // more counts than nodes, and fewer
            (
                &[
                    ("SLURM_STEP_NODELIST", "n[1-3]"),
                    ("SLURM_STEP_TASKS_PER_NODE", "1(x4)"),
                ],
                4,
            ),
            (
                &[
                    ("SLURM_STEP_NODELIST", "n[1-4]"),
                    ("SLURM_STEP_TASKS_PER_NODE", "2,2"),
                ],
                4,
            ),
            // a node twice
            (
                &[
                    ("SLURM_STEP_NODELIST", "n1,n1"),
                    ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
                ],
                2,
            ),
            // malformed either side
            (
                &[
                    ("SLURM_STEP_NODELIST", "n[1-"),
                    ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
                ],
                2,
            ),
            (
                &[
                    ("SLURM_STEP_NODELIST", "n[1-2]"),
                    ("SLURM_STEP_TASKS_PER_NODE", "1(x2"),
                ],
                2,
            ),
        ];
        for (pairs, world) in cases {
            assert_eq!(
                expected(&env_of(pairs), *world),
                None,
                "{pairs:?} world {world}"
            );
        }
    }
}
