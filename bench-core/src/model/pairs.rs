//! The pair schedule: every pair of n members exactly once, as rounds of disjoint pairs (the
//! circle method of round-robin tournaments), so a round measures n/2 pairs at once and the
//! whole matrix costs n-1 rounds (n rounds when n is odd: one member rests each round).

/// Rounds of disjoint pairs `(a, b)` with `a < b`, over members `0..n`.
pub fn rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // With an odd count, a phantom member `n` makes it even; whoever meets it rests.
    let m = n + n % 2;
    let mut ring: Vec<usize> = (1..m).collect();
    let mut out = Vec::with_capacity(round_count(n));
    for _ in 0..m - 1 {
        let mut round = Vec::with_capacity(m / 2);
        let mut pair = |a: usize, b: usize| {
            if a < n && b < n {
                round.push((a.min(b), a.max(b)));
            }
        };
        pair(0, ring[0]);
        for i in 1..m / 2 {
            pair(ring[i], ring[m - 1 - i]);
        }
        round.sort_unstable();
        out.push(round);
        ring.rotate_right(1);
    }
    out
}

/// How many rounds [`rounds`] makes for `n` members, without making them (at 65,536 members
/// the rounds hold two billion pairs).
pub fn round_count(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        n => n + n % 2 - 1,
    }
}

/// This member's partner in `round`, if it has one.
pub fn partner(round: &[(usize, usize)], me: usize) -> Option<usize> {
    round.iter().find_map(|&(a, b)| match me {
        x if x == a => Some(b),
        x if x == b => Some(a),
        _ => None,
    })
}

/// `--pair-matrix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairMatrix {
    Auto,
    Adaptive,
    Full,
}

impl PairMatrix {
    pub fn parse(v: &str) -> Result<PairMatrix, String> {
        match v {
            "auto" => Ok(PairMatrix::Auto),
            "adaptive" => Ok(PairMatrix::Adaptive),
            "full" => Ok(PairMatrix::Full),
            _ => Err(format!(
                "invalid pair-matrix '{v}': expected auto, adaptive or full"
            )),
        }
    }

    /// Whether `nodes` nodes measure every node pair: up to 3 nodes the full matrix measures the
    /// ring's pairs in as many rounds (1 and 3) and keeps the node-pair table.
    pub fn full_for(self, nodes: u32) -> bool {
        match self {
            PairMatrix::Full => true,
            PairMatrix::Adaptive => false,
            PairMatrix::Auto => nodes <= 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn round_count_is_the_number_of_rounds_made() {
        for n in 0..=67 {
            assert_eq!(round_count(n), rounds(n).len(), "n={n}");
        }
    }

    #[test]
    fn every_pair_exactly_once_and_no_member_twice_in_a_round() {
        for n in 0..=17 {
            let r = rounds(n);
            let expected_rounds = match n {
                0 | 1 => 0,
                n if n % 2 == 0 => n - 1,
                n => n,
            };
            assert_eq!(r.len(), expected_rounds, "n={n}");
            let mut seen = BTreeSet::new();
            for round in &r {
                let mut members = BTreeSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n, "n={n} {a},{b}");
                    assert!(
                        members.insert(a) && members.insert(b),
                        "n={n}: twice in {round:?}"
                    );
                    assert!(seen.insert((a, b)), "n={n}: pair {a},{b} twice");
                }
                assert_eq!(round.len(), n / 2, "n={n}: a round leaves a pair idle");
            }
            assert_eq!(
                seen.len(),
                n * n.saturating_sub(1) / 2,
                "n={n}: pairs missing"
            );
        }
    }

    #[test]
    fn four_gpus_take_three_rounds_of_two_pairs() {
        let r = rounds(4);
        assert_eq!(r.len(), 3);
        assert_eq!(partner(&r[0], 0), Some(1));
        assert_eq!(partner(&r[0], 1), Some(0));
        assert_eq!(partner(&[(0, 1)], 2), None);
    }
}
