//! Where the ranks of one Slurm step meet without talking first: `HOST:PORT`, HOST the first node
//! of the step's node list and PORT derived from (job id, step id). The one definition, used by
//! the worker's Slurm defaults and by the SPANK plugin, so both always name the same address.
//!
//! With a step secret (the plugin's, the batch check's, or the user's `NCCL_CHECK_SECRET`) the
//! candidate ports come from the secret instead ([`secret_candidates`]): another user, who can
//! compute anything from the public job and step ids, cannot tell which ports to squat.
//!
//! Without one (MUNGE), the port is `job offset + step` within the range, wrapping: the steps of one job get distinct
//! ports (up to the size of the range) and neighbouring steps never share one, while the job
//! offset spreads concurrent jobs over the range. The default range is [`PortRange::DEFAULT`],
//! 29501-29999; PyTorch's default `MASTER_PORT` 29500 is never chosen, even from a range that
//! includes it, so a check never takes the port a job's own `torchrun` is about to bind.

use std::fmt;

use nccl_check_host::hostlist::{self, HostlistError};

/// PyTorch's default `MASTER_PORT` (torch.distributed, torchrun, DeepSpeed): never chosen.
pub const PYTORCH_MASTER_PORT: u16 = 29500;

/// An inclusive range of TCP ports, 1024 <= lo <= hi, with at least one port other than
/// [`PYTORCH_MASTER_PORT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    lo: u16,
    hi: u16,
}

/// A port range that cannot be used, with the text given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRangeError(pub String);

impl fmt::Display for PortRangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "port range '{}' must be LO-HI with 1024 <= LO <= HI <= 65535 and a port other than \
             {PYTORCH_MASTER_PORT}",
            self.0.escape_debug()
        )
    }
}

impl std::error::Error for PortRangeError {}

impl PortRange {
    /// 29501-29999: the ports next to PyTorch's (the range nccl-check always used) without 29500,
    /// below Linux's ephemeral ports (32768-60999) so outgoing connections never hold them.
    pub const DEFAULT: PortRange = PortRange {
        lo: 29501,
        hi: 29999,
    };

    pub fn new(lo: u16, hi: u16) -> Result<PortRange, PortRangeError> {
        let range = PortRange { lo, hi };
        if lo < 1024 || lo > hi || range.usable() == 0 {
            return Err(PortRangeError(format!("{lo}-{hi}")));
        }
        Ok(range)
    }

    /// `LO-HI`, as in the plugin's `port_range=` argument.
    pub fn parse(text: &str) -> Result<PortRange, PortRangeError> {
        let err = || PortRangeError(text.to_string());
        let (lo, hi) = text.split_once('-').ok_or_else(err)?;
        let port = |s: &str| s.parse().map_err(|_| err());
        PortRange::new(port(lo)?, port(hi)?).map_err(|_| err())
    }

    pub fn lo(&self) -> u16 {
        self.lo
    }

    pub fn hi(&self) -> u16 {
        self.hi
    }

    fn skips_pytorch(&self) -> bool {
        (self.lo..=self.hi).contains(&PYTORCH_MASTER_PORT)
    }

    /// How many ports may be chosen.
    fn usable(&self) -> u32 {
        u32::from(self.hi - self.lo) + 1 - u32::from(self.skips_pytorch())
    }

    /// The `k`-th port that may be chosen (`k < usable()`).
    fn nth(&self, k: u32) -> u16 {
        // k < usable() <= 65536 - 1024, so lo + k (+ 1) <= hi fits a u16.
        let port = u32::from(self.lo) + k;
        let skip = self.skips_pytorch() && port >= u32::from(PYTORCH_MASTER_PORT);
        (port + u32::from(skip)) as u16
    }
}

/// `LO-HI`, as [`PortRange::parse`] reads it back.
impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.lo, self.hi)
    }
}

impl Default for PortRange {
    fn default() -> Self {
        PortRange::DEFAULT
    }
}

/// The rendezvous port of a step. Every node computes it alone, so it must not change between
/// machines, Rust versions or releases (std's hasher may): splitmix64's finaliser of the job id.
pub fn port(job: u32, step: u32, range: PortRange) -> u16 {
    let n = u64::from(range.usable());
    let offset = mix(u64::from(job)) % n;
    range.nth(((offset + u64::from(step) % n) % n) as u32)
}

/// How many ports a step tries when its own is taken (by another job, or squatted).
pub const CANDIDATES: u32 = 8;
/// Distance between a step's candidates, prime so they are distinct for any range of more
/// than [`CANDIDATES`] usable ports, and large so they rarely meet the next steps' own ports.
const CANDIDATE_STRIDE: u64 = 97;

/// The step's port first, then the others its coordinator may bind if that one is taken;
/// members try them in this order.
pub fn candidates(job: u32, step: u32, range: PortRange) -> Vec<u16> {
    let n = u64::from(range.usable());
    let first = (mix(u64::from(job)) % n + u64::from(step) % n) % n;
    let mut ports: Vec<u16> = (0..u64::from(CANDIDATES))
        .map(|k| range.nth(((first + k * CANDIDATE_STRIDE) % n) as u32))
        .collect();
    // In a range smaller than the stride times the count, candidates repeat: keep the first of each.
    let mut seen = std::collections::HashSet::new();
    ports.retain(|p| seen.insert(*p));
    ports
}

/// The candidate ports of a step whose processes share `secret`: [`CANDIDATES`] distinct ports
/// of the range drawn by HMAC-SHA256 keyed with the secret over the step's label and a counter,
/// so only holders of the secret know them. Every process computes the same list.
pub fn secret_candidates(secret: &[u8], label: &str, range: PortRange) -> Vec<u16> {
    use hmac::{Hmac, Mac};
    let n = u64::from(range.usable());
    let want = CANDIDATES.min(range.usable()) as usize;
    let mut ports: Vec<u16> = Vec::with_capacity(want);
    // Each draw is uniform over the range; 256 draws find 8 distinct ports of any range of 8 or
    // more with overwhelming probability, and the loop is bounded either way.
    for counter in 0u32..256 {
        if ports.len() == want {
            break;
        }
        let Ok(mut mac) = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret) else {
            break;
        };
        mac.update(b"nccl-check rendezvous ports\0");
        mac.update(label.as_bytes());
        mac.update(&counter.to_be_bytes());
        let tag = mac.finalize().into_bytes();
        let mut draw = [0u8; 8];
        draw.copy_from_slice(&tag[..8]);
        let port = range.nth((u64::from_be_bytes(draw) % n) as u32);
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// splitmix64's output function (Steele, Lea, Flood 2014): every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `--rendezvous HOST:PORT` of a step: the first host of `step_nodelist` (Slurm hostlist
/// syntax) and [`port`].
pub fn address(
    step_nodelist: &str,
    job: u32,
    step: u32,
    range: PortRange,
) -> Result<String, HostlistError> {
    let host = hostlist::first(step_nodelist)?;
    Ok(format!("{host}:{}", port(job, step, range)))
}

/// The rendezvous of a Slurm step from its environment: the coordinator's host (the step's first
/// node) and the candidate ports, the first of them the address the plugin passes. `ids` are the
/// job id, the step id and the step's secret: with a secret the ports come from it
/// ([`secret_candidates`]), without one from the ids ([`candidates`]).
pub fn of_step(
    nodes: &str,
    ids: (&str, &str, Option<&str>),
    range: PortRange,
) -> Result<(String, Vec<u16>), String> {
    let (job, step, secret) = ids;
    let id = |name: &str, v: &str| {
        v.parse::<u32>()
            .map_err(|_| format!("invalid {name} '{}': expected a number", v.escape_debug()))
    };
    let (job, step) = (id("SLURM_JOB_ID", job)?, id("SLURM_STEP_ID", step)?);
    let host = nccl_check_host::hostlist::first(nodes).map_err(|e| e.to_string())?;
    let ports = match secret {
        // The step's label as the rendezvous writes it (options.rs).
        Some(s) => secret_candidates(s.as_bytes(), &format!("slurm-{job}.{step}"), range),
        None => candidates(job, step, range),
    };
    Ok((host, ports))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_candidates_start_with_the_steps_port_and_stay_in_the_range() {
        for job in [0u32, 1, 1234, u32::MAX] {
            for step in [0u32, 1, 7] {
                let c = candidates(job, step, PortRange::DEFAULT);
                assert_eq!(c[0], port(job, step, PortRange::DEFAULT));
                assert_eq!(c.len(), CANDIDATES as usize);
                assert!(c.iter().all(|p| (29501..=29999).contains(p)), "{c:?}");
                assert_eq!(c.iter().collect::<HashSet<_>>().len(), c.len());
            }
        }
        // A range of 3 usable ports gives those 3, the step's own first.
        let small = PortRange::new(29499, 29502).unwrap();
        let c = candidates(5, 0, small);
        assert_eq!(c[0], port(5, 0, small));
        let mut sorted = c.clone();
        sorted.sort();
        assert_eq!(sorted, vec![29499, 29501, 29502]);
    }

    #[test]
    fn the_default_range_is_documented_and_leaves_out_pytorchs_port() {
        assert_eq!(
            (PortRange::DEFAULT.lo(), PortRange::DEFAULT.hi()),
            (29501, 29999)
        );
        assert_eq!(PortRange::default(), PortRange::DEFAULT);
        let all: HashSet<u16> = (0..20_000)
            .map(|j| port(j, 0, PortRange::DEFAULT))
            .collect();
        assert_eq!(all.len(), 499, "every port of the range is used");
        assert!(all.iter().all(|p| (29501..=29999).contains(p)));
    }

    #[test]
    fn secret_ports_are_distinct_in_the_range_and_differ_by_secret_and_step() {
        let a = secret_candidates(b"secret-a-0123456789", "slurm-7.0", PortRange::DEFAULT);
        assert_eq!(a.len(), CANDIDATES as usize);
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), a.len());
        assert!(a.iter().all(|p| (29501..=29999).contains(p)), "{a:?}");
        assert_eq!(
            a,
            secret_candidates(b"secret-a-0123456789", "slurm-7.0", PortRange::DEFAULT),
            "every process computes the same list"
        );
        let b = secret_candidates(b"secret-b-0123456789", "slurm-7.0", PortRange::DEFAULT);
        let c = secret_candidates(b"secret-a-0123456789", "slurm-7.1", PortRange::DEFAULT);
        assert_ne!(a, b);
        assert_ne!(a, c);
        // Not the ports anyone can compute from the ids.
        assert_ne!(a, candidates(7, 0, PortRange::DEFAULT));
        // A range of 3 usable ports gives those 3; one of 1 gives it.
        let small = PortRange::new(29499, 29502).unwrap();
        let mut s = secret_candidates(b"k", "l", small);
        s.sort();
        assert_eq!(s, vec![29499, 29501, 29502]);
        let one = PortRange::new(40000, 40000).unwrap();
        assert_eq!(secret_candidates(b"k", "l", one), vec![40000]);
    }

    #[test]
    fn ports_stay_inside_every_range_and_never_take_29500() {
        let ranges = [
            (29490, 29510),
            (29500, 29501),
            (1024, 65535),
            (40000, 40000),
            (65535, 65535),
            (29499, 29500),
            (1024, 1030),
        ];
        for (lo, hi) in ranges {
            let range = PortRange::new(lo, hi).expect("valid");
            let mut seen = HashSet::new();
            for job in (0..3000).chain([u32::MAX - 1, u32::MAX]) {
                for step in [0, 1, 2, 7, 0xffff_fffb, u32::MAX] {
                    let p = port(job, step, range);
                    assert!((lo..=hi).contains(&p), "{p} outside {lo}-{hi}");
                    assert_ne!(p, PYTORCH_MASTER_PORT, "{lo}-{hi} job {job} step {step}");
                    seen.insert(p);
                }
            }
            let want = usize::from(hi - lo) + 1 - usize::from((lo..=hi).contains(&29500));
            if want <= 64 {
                assert_eq!(seen.len(), want, "{lo}-{hi}: every allowed port reached");
            }
        }
    }

    #[test]
    fn jobs_spread_evenly_over_the_range() {
        // 499 ports, 49,900 consecutive job ids: 100 per port on average.
        let mut count = vec![0u32; 65536];
        for job in 1_000_000..1_049_900 {
            count[usize::from(port(job, 0, PortRange::DEFAULT))] += 1;
        }
        let used = &count[29501..=29999];
        let (min, max) = (used.iter().min(), used.iter().max());
        assert!(min >= Some(&60) && max <= Some(&140), "{min:?}..{max:?}");
    }

    #[test]
    fn steps_of_one_job_get_distinct_ports_and_neighbours_differ() {
        for job in [0, 1, 42, 1234, 7_654_321, u32::MAX] {
            let ports: HashSet<u16> = (0..499).map(|s| port(job, s, PortRange::DEFAULT)).collect();
            assert_eq!(ports.len(), 499, "job {job}: 499 steps, 499 ports");
            for step in [0, 498, 499, 100_000, u32::MAX - 1] {
                let (a, b) = (
                    port(job, step, PortRange::DEFAULT),
                    port(job, step + 1, PortRange::DEFAULT),
                );
                assert_ne!(a, b, "job {job} steps {step} and {}", step + 1);
            }
        }
    }

    #[test]
    fn the_port_of_a_step_is_the_same_on_every_node_and_release() {
        // Pinned: nodes of one cluster (and a plugin and worker of different releases during an
        // upgrade) must compute the same port. Changing these values breaks that; do it knowingly.
        let pinned = [(1234u32, 0u32), (1234, 1), (98765, 3), (u32::MAX, u32::MAX)]
            .map(|(j, s)| port(j, s, PortRange::DEFAULT));
        assert_eq!(pinned, [29748, 29749, 29902, 29536]);
        // splitmix64's first output for seed 0 (its reference implementation, Vigna's splitmix64.c).
        assert_eq!(mix(0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn ranges_are_validated() {
        assert_eq!(
            PortRange::parse("40000-40010"),
            PortRange::new(40000, 40010)
        );
        assert!(
            PortRange::parse("29500-29999").is_ok(),
            "29500 is skipped, not refused"
        );
        for bad in [
            "80-90",
            "30000-29000",
            "30000",
            "30000-70000",
            "29500-29500",
            "",
            "a-b",
            "-1-5",
        ] {
            let e = PortRange::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("1024 <= LO <= HI"), "{e}");
        }
    }

    #[test]
    fn the_address_is_the_first_host_of_the_list_and_the_port() {
        let range = PortRange::new(30000, 30000).expect("valid");
        assert_eq!(
            address("node[07-09]", 5, 0, range).as_deref(),
            Ok("node07:30000")
        );
        // The old parsers gave "rack2-n[1-2]" here.
        assert_eq!(
            address("rack[2-3]-n[1-2]", 5, 0, range).as_deref(),
            Ok("rack2-n1:30000")
        );
        assert!(address("node[07", 5, 0, range).is_err());
    }
}
