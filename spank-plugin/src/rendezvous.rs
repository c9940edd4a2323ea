//! Where the worker ranks of one step meet: `HOST:PORT` with HOST the step's first node and PORT
//! derived from (job id, step id), so every task of the step computes the same address without
//! talking to the others, and two steps of one job do not collide on a port.

use crate::hostlist;

/// The `--rendezvous HOST:PORT` argument for a step.
pub fn address(
    step_nodelist: &str,
    job_id: u32,
    step_id: u32,
    port_lo: u16,
    port_hi: u16,
) -> Result<String, hostlist::HostlistError> {
    let host = hostlist::first_host(step_nodelist)?;
    Ok(format!(
        "{host}:{}",
        port(job_id, step_id, port_lo, port_hi)
    ))
}

/// `lo + fnv1a64(job_id LE bytes ++ step_id LE bytes) % (hi - lo + 1)`. FNV-1a because it is
/// stable across Rust versions and machines (std's hasher is not), and every node must agree.
pub fn port(job_id: u32, step_id: u32, lo: u16, hi: u16) -> u16 {
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let span = u64::from(hi - lo) + 1;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in job_id
        .to_le_bytes()
        .into_iter()
        .chain(step_id.to_le_bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // The remainder is < span <= 65536, and lo + remainder <= hi.
    lo + (hash % span) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_is_stable_and_inside_the_range() {
        assert_eq!(port(42, 0, 29500, 29999), port(42, 0, 29500, 29999));
        for job in 0..500 {
            for step in [0, 1, 7] {
                let p = port(job, step, 29500, 29999);
                assert!((29500..=29999).contains(&p));
            }
        }
        assert_eq!(port(1, 2, 40000, 40000), 40000);
        assert_eq!(
            port(u32::MAX, u32::MAX, 1024, u16::MAX),
            port(u32::MAX, u32::MAX, 1024, u16::MAX)
        );
    }

    #[test]
    fn steps_of_one_job_usually_get_different_ports() {
        let ports: std::collections::HashSet<u16> =
            (0..20).map(|s| port(1234, s, 29500, 29999)).collect();
        assert!(ports.len() >= 18, "{ports:?}");
    }

    #[test]
    fn address_uses_the_first_node_of_the_step() {
        let a = address("node[07-09]", 5, 0, 30000, 30000).expect("valid");
        assert_eq!(a, "node07:30000");
        assert!(address("node[07", 5, 0, 30000, 30000).is_err());
    }
}
