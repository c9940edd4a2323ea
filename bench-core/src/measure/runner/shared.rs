//! Processes of one check that drive the same physical GPU (same UUID). In production that is a
//! setup mistake: the two measure each other, not the GPU (their local probes overlap and read
//! 4-8x slow), so it is an ERROR naming the GPU and the processes. Emulated nodes on one GPU
//! (tests, labs: `NCCL_HOSTID` per process) declare it with `--shared-gpus`; their probes then
//! take turns, one group member at a time, between barriers every rank passes alike.
//!
//! Found with one gather of the control plane: each rank puts a 52-bit hash of its GPU's UUID
//! at its own index (exact as an f64); the coordinator groups equal hashes and tells everyone.

use serde::{Deserialize, Serialize};

/// Ranks that drive one physical GPU, for every GPU driven by two or more ranks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sharing {
    pub groups: Vec<Vec<u32>>,
}

impl Sharing {
    /// The group `rank` is in, if its GPU is shared.
    pub fn group_of(&self, rank: u32) -> Option<&[u32]> {
        self.groups
            .iter()
            .find(|g| g.contains(&rank))
            .map(Vec::as_slice)
    }

    /// Turns the probes need: the largest group (1 when nothing is shared).
    pub fn turns(&self) -> usize {
        self.groups.iter().map(Vec::len).max().unwrap_or(1)
    }
}

/// 52 bits of a UUID's hash (FNV-1a), exact in an f64; 0 is never produced (0 = no entry).
pub fn uuid_key(uuid: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uuid.trim().to_ascii_lowercase().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ((h >> 12) | 1) as f64
}

/// The groups of ranks whose keys are equal (`keys[rank]`; 0: unknown, never grouped).
pub fn groups(keys: &[f64]) -> Sharing {
    let mut by_key: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
    for (rank, &k) in keys.iter().enumerate() {
        if k > 0.0 {
            by_key.entry(k as u64).or_default().push(rank as u32);
        }
    }
    let mut groups: Vec<Vec<u32>> = by_key.into_values().filter(|g| g.len() >= 2).collect();
    groups.sort();
    Sharing { groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_on_one_uuid_are_grouped_and_others_are_not() {
        let a = uuid_key("GPU-8e0c5a3b-1111-2222-3333-444455556666");
        let b = uuid_key("GPU-8e0c5a3b-1111-2222-3333-444455556667");
        assert_ne!(a, b);
        assert_eq!(a, uuid_key(" gpu-8E0C5A3B-1111-2222-3333-444455556666 "));
        assert_eq!(a.fract(), 0.0);
        assert!(a < 2f64.powi(53));
        let s = groups(&[a, b, a, 0.0, a, 0.0]);
        assert_eq!(s.groups, vec![vec![0, 2, 4]]);
        assert_eq!(s.group_of(2), Some(&[0, 2, 4][..]));
        assert_eq!(s.group_of(1), None);
        assert_eq!(s.turns(), 3);
        assert_eq!(groups(&[a, b]).turns(), 1);
    }
}
