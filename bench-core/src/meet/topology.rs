//! Where every NCCL rank of a check runs: its node, its index on that node and its process,
//! derived once from the rendezvous members. A node is the member's host: `NCCL_HOSTID` when set
//! (NCCL treats such processes as separate nodes, and so does the verdict), else Slurm's node
//! name, else the host name; so several processes with the same name are one node and their
//! ranks are numbered on across them.

use crate::meet::rendezvous::Member;

/// One rank's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    /// Index into `Topology::nodes`.
    node: usize,
    /// Index on its node (GPU0, GPU1, ...), in rank order.
    local: usize,
    /// The process that drives it.
    proc_rank: u32,
}

/// Every rank's node, local index and process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// Per global rank.
    places: Vec<Place>,
    /// Node names in order of their first rank.
    nodes: Vec<String>,
    /// Every member's pid: this check's own processes, never another process on a GPU.
    pids: Vec<u32>,
}

impl Topology {
    /// From the rendezvous members (any order; each holds ranks `first_rank .. + ngpus`).
    pub fn new(members: &[Member]) -> Topology {
        let mut members: Vec<&Member> = members.iter().collect();
        members.sort_by_key(|m| m.first_rank);
        let mut t = Topology::default();
        let mut on_node: Vec<usize> = Vec::new();
        for m in members {
            t.pids.push(m.pid);
            let node = match t.nodes.iter().position(|n| *n == m.host) {
                Some(i) => i,
                None => {
                    t.nodes.push(m.host.clone());
                    on_node.push(0);
                    t.nodes.len() - 1
                }
            };
            for _ in 0..m.ngpus {
                t.places.push(Place {
                    node,
                    local: on_node[node],
                    proc_rank: m.proc_rank,
                });
                on_node[node] += 1;
            }
        }
        t
    }

    /// Number of ranks (GPUs) in the check.
    pub fn nranks(&self) -> u32 {
        self.places.len() as u32
    }

    /// Number of nodes; at least 1 (a check runs somewhere, even before the processes met).
    pub fn node_count(&self) -> u32 {
        self.nodes.len().max(1) as u32
    }

    /// Node names in order of their first rank.
    pub fn node_names(&self) -> &[String] {
        &self.nodes
    }

    /// The node of `rank`.
    pub fn node_of(&self, rank: usize) -> Option<&str> {
        self.places.get(rank).map(|p| self.nodes[p.node].as_str())
    }

    /// The position of `rank`'s node in [`Topology::node_names`].
    pub fn node_index(&self, rank: usize) -> Option<usize> {
        self.places.get(rank).map(|p| p.node)
    }

    /// `rank`'s index on its node.
    pub fn local_index(&self, rank: usize) -> Option<usize> {
        self.places.get(rank).map(|p| p.local)
    }

    /// The process rank that drives `rank`.
    pub fn process_of(&self, rank: usize) -> Option<u32> {
        self.places.get(rank).map(|p| p.proc_rank)
    }

    /// The process rank of every global rank, in rank order.
    pub fn processes_by_rank(&self) -> Vec<u32> {
        self.places.iter().map(|p| p.proc_rank).collect()
    }

    /// Global ranks on the node at `node` (an index into [`Topology::node_names`]), by local index.
    pub fn ranks_of(&self, node: usize) -> Vec<usize> {
        (0..self.places.len())
            .filter(|&r| self.places[r].node == node)
            .collect()
    }

    /// The pids of the check's processes (on emulated nodes, several share one host and GPU).
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Whether ranks `a` and `b` are on one node (false for an unknown rank).
    pub fn same_node(&self, a: usize, b: usize) -> bool {
        matches!((self.node_index(a), self.node_index(b)), (Some(x), Some(y)) if x == y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(proc_rank: u32, host: &str, ngpus: u32, first_rank: u32) -> Member {
        Member {
            proc_rank,
            host: host.into(),
            pid: 100 + proc_rank,
            ngpus,
            first_rank,
        }
    }

    #[test]
    fn two_nodes_of_four_gpus() {
        let t = Topology::new(&[member(0, "n1", 4, 0), member(1, "n2", 4, 4)]);
        assert_eq!((t.nranks(), t.node_count()), (8, 2));
        assert_eq!(t.node_names(), ["n1", "n2"]);
        assert_eq!(t.node_of(5), Some("n2"));
        assert_eq!((t.node_index(5), t.local_index(5)), (Some(1), Some(1)));
        assert_eq!(t.ranks_of(1), vec![4, 5, 6, 7]);
        assert_eq!(t.process_of(3), Some(0));
        assert!(t.same_node(4, 7) && !t.same_node(3, 4));
    }

    #[test]
    fn processes_with_one_node_name_share_the_node_and_number_on() {
        // One process per GPU (srun --ntasks-per-node=4), members listed out of order.
        let t = Topology::new(&[
            member(2, "n1", 1, 2),
            member(0, "n1", 1, 0),
            member(3, "n2", 1, 3),
            member(1, "n1", 1, 1),
        ]);
        assert_eq!(t.node_names(), ["n1", "n2"]);
        assert_eq!(t.ranks_of(0), vec![0, 1, 2]);
        assert_eq!(
            (0..4).map(|r| t.local_index(r)).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(0)]
        );
        assert_eq!(t.process_of(2), Some(2));
        assert_eq!(t.node_count(), 2);
    }

    #[test]
    fn nccl_hostid_nodes_on_one_host_are_separate_nodes_and_gpus_may_be_uneven() {
        // Two emulated nodes (NCCL_HOSTID=a / b) of 3 and 1 GPUs, then a second process of `a`.
        let t = Topology::new(&[
            member(0, "a", 3, 0),
            member(1, "b", 1, 3),
            member(2, "a", 2, 4),
        ]);
        assert_eq!(t.node_names(), ["a", "b"]);
        assert_eq!(t.ranks_of(0), vec![0, 1, 2, 4, 5]);
        assert_eq!(t.ranks_of(1), vec![3]);
        assert_eq!(t.local_index(4), Some(3));
        assert_eq!(t.local_index(3), Some(0));
        assert!(t.same_node(0, 5) && !t.same_node(2, 3));
    }

    #[test]
    fn unknown_ranks_and_no_members() {
        let t = Topology::new(&[member(0, "n1", 2, 0)]);
        assert_eq!((t.node_of(2), t.process_of(2)), (None, None));
        assert!(!t.same_node(0, 2));
        let empty = Topology::new(&[]);
        assert_eq!((empty.nranks(), empty.node_count()), (0, 1));
        assert!(empty.ranks_of(0).is_empty());
    }
}
