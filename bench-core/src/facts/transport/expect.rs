//! The site's expectation of the paths, and the findings that turn a silent fallback into FAIL.

use super::{Transport, TransportSummary};
use crate::config::network::{NetExpect, TransportExpectation};
use nccl_check_contract::report::culprit::Culprit;

impl NetExpect {
    fn accepts(&self, t: &Transport) -> bool {
        match (self, t) {
            (NetExpect::Ib, Transport::NetIb) | (NetExpect::Socket, Transport::NetSocket) => true,
            (NetExpect::Plugin(want), Transport::NetOther(name)) => name
                .to_ascii_lowercase()
                .contains(&want.to_ascii_lowercase()),
            _ => false,
        }
    }
}

/// One fallback: becomes a FAIL reason with code `transport_fallback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFinding {
    /// The path at fault (`GPU0->GPU1`), or the communicator (`CollNet`, `NVLS`).
    pub subject: Culprit,
    /// `GPU0->GPU1 used SHM, NVLink P2P expected`.
    pub message: String,
}

/// Holds the summary against the expectation. `same_node(a, b)` says whether ranks a and b run
/// on one node (the caller knows: from Slurm or the rendezvous; NCCL's host names do not, since
/// `NCCL_HOSTID` makes one host look like several nodes). Paths NCCL never connected are not judged (a ring connects neighbours only).
/// An empty summary gives no findings: check [`TransportSummary::has_connections`] first.
pub fn check_transports(
    summary: &TransportSummary,
    same_node: &dyn Fn(u32, u32) -> bool,
    expect: &TransportExpectation,
) -> Vec<TransportFinding> {
    let mut out = Vec::new();
    for (&(from, to), pair) in &summary.pairs {
        let intra = same_node(from, to);
        // Between nodes: the profile's network, if it names one; within a node: NVLink P2P.
        let inter = expect.inter_node_net.as_ref().filter(|_| !intra);
        let wrong = |t: &&Transport| match inter {
            Some(want) => t.is_net() && !want.accepts(t),
            None => intra && expect.intra_node_p2p && !matches!(t, Transport::P2p { .. }),
        };
        let bad: Vec<String> = (pair.transports.iter().filter(wrong))
            .map(|t| t.to_string())
            .collect();
        if bad.is_empty() {
            continue;
        }
        let want = inter.map_or("NVLink P2P".to_string(), |w| w.to_string());
        let path = summary.path(from, to);
        out.push(TransportFinding {
            subject: path.clone(),
            message: format!("{path} used {}, {want} expected", bad.join(" and ")),
        });
    }
    if expect.collnet && !summary.collnet_used() {
        let why = (summary.collnet_disabled.as_ref()).map(|w| format!(" (NCCL: {w})"));
        let why = why.unwrap_or_default();
        let message =
            format!("CollNet (SHARP) did not carry the collectives, CollNet expected{why}");
        let subject = Culprit::CollNet;
        out.push(TransportFinding { subject, message });
    }
    if expect.nvls && !summary.nvls_used() {
        let why = match summary.nvls_available {
            Some(false) => " (NCCL: NVLS multicast support is not available)",
            _ => "",
        };
        let message = format!("NVLS did not carry the collectives, NVLS expected{why}");
        let subject = Culprit::Nvls;
        out.push(TransportFinding { subject, message });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::network::NetworkProfile;

    fn profile(expect_nvlink: Option<bool>, expect_collnet: bool) -> NetworkProfile {
        NetworkProfile {
            name: "ib".into(),
            description: None,
            partitions: Vec::new(),
            nodes: Vec::new(),
            env: Default::default(),
            expect_net: Some("ib".into()),
            expect_nvlink,
            expect_collnet,
            expect_nvls: false,
        }
    }

    #[test]
    fn the_expectation_comes_from_the_profile_and_the_options() {
        let none = TransportExpectation::new(None, false, true);
        assert_eq!(
            none,
            TransportExpectation {
                intra_node_p2p: true,
                inter_node_net: None,
                collnet: false,
                nvls: true,
            }
        );
        let p = profile(Some(false), true);
        let e = TransportExpectation::new(Some(&p), false, false);
        assert_eq!(
            (e.intra_node_p2p, e.inter_node_net, e.collnet, e.nvls),
            (false, Some(NetExpect::Ib), true, false)
        );
        assert!(
            TransportExpectation::new(Some(&profile(None, false)), false, false).intra_node_p2p
        );
    }
}
