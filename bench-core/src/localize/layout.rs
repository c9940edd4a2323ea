//! The localizer's view of a real check's ranks: which node and rail each global rank is, and
//! which two global ranks each group of a round pairs. Shared by the coordinator's conductor
//! (`conduct.rs`), the GPU runner and the GPU-less scale test.

use super::Group;
use crate::meet::topology::Topology;

/// The nodes of a check and their ranks, in the order the localizer numbers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub names: Vec<String>,
    /// Global ranks of every node, by local index.
    pub ranks: Vec<Vec<usize>>,
    /// Rails the localizer measures: the GPU count of the node with the fewest (GPU r of one
    /// node only ever meets GPU r of another, so a rail beyond that has no partner).
    pub rails: usize,
    /// Every global rank's node and index there.
    by_rank: Vec<Option<(usize, usize)>>,
}

impl Layout {
    pub fn new(t: &Topology) -> Layout {
        let names = t.node_names().to_vec();
        let mut ranks: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
        let mut by_rank = vec![None; t.nranks() as usize];
        for (r, at) in by_rank.iter_mut().enumerate() {
            if let Some(n) = t.node_index(r) {
                *at = Some((n, ranks[n].len()));
                ranks[n].push(r);
            }
        }
        let rails = ranks.iter().map(Vec::len).min().unwrap_or(0);
        Layout {
            names,
            ranks,
            rails,
            by_rank,
        }
    }

    /// Rank `rank`'s node and rail, if the localizer measures it (a rail below `rails`).
    pub fn locate(&self, rank: usize) -> Option<(usize, usize)> {
        self.by_rank
            .get(rank)?
            .filter(|&(_, rail)| rail < self.rails)
    }

    /// Rank `rank`'s node.
    pub fn node_of_rank(&self, rank: usize) -> Option<usize> {
        self.by_rank.get(rank)?.map(|(node, _)| node)
    }

    /// The global ranks of a pair group's two ends; `None` for other groups or out-of-range
    /// indices (a schedule bug, never a panic).
    pub fn pair_ranks(&self, group: &Group) -> Option<(usize, usize)> {
        let ((a, rail_a), (b, rail_b)) = group.ends()?;
        Some((
            *self.ranks.get(a)?.get(rail_a)?,
            *self.ranks.get(b)?.get(rail_b)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::Member;

    fn topology(nodes: usize, gpus: u32) -> Topology {
        let members: Vec<Member> = (0..nodes)
            .map(|i| Member {
                proc_rank: i as u32,
                host: format!("host{i:02}"),
                pid: 1,
                ngpus: gpus,
                first_rank: i as u32 * gpus,
            })
            .collect();
        Topology::new(&members)
    }

    #[test]
    fn groups_map_to_the_ranks_of_their_rails_and_back() {
        let layout = Layout::new(&topology(4, 2));
        assert_eq!(layout.rails, 2);
        let g = Group::Pair {
            a: (1, 1),
            b: (3, 1),
        };
        assert_eq!(layout.pair_ranks(&g), Some((3, 7)));
        assert_eq!(
            (layout.locate(3), layout.locate(7)),
            (Some((1, 1)), Some((3, 1)))
        );
        assert_eq!(layout.node_of_rank(6), Some(3));
        assert_eq!((layout.locate(8), layout.node_of_rank(8)), (None, None));
        let bad = Group::Pair {
            a: (9, 0),
            b: (0, 0),
        };
        assert_eq!(layout.pair_ranks(&bad), None);
    }

    #[test]
    fn rails_are_the_fewest_gpus_of_any_node() {
        let members = [("a", 4), ("b", 2)]
            .iter()
            .enumerate()
            .map(|(i, &(h, g))| Member {
                proc_rank: i as u32,
                host: h.into(),
                pid: 1,
                ngpus: g,
                first_rank: if i == 0 { 0 } else { 4 },
            })
            .collect::<Vec<_>>();
        assert_eq!(Layout::new(&Topology::new(&members)).rails, 2);
    }
}
