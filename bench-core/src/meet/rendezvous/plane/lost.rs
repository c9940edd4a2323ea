//! Who is to blame when processes stop answering mid-check: the one sentence the coordinator
//! ends with (and sends every process it can still reach), naming nodes, bounded in length.
//!
//! Which process decides: the coordinator, the one process that hears every other. A member
//! hears only the coordinator: when that goes quiet it names the coordinator. When the
//! coordinator hears none of two or more others, the likeliest single cause is its own node
//! (its link is down): it says so instead of naming everyone. Always an ERROR, never a FAIL: a
//! link that is down may be a cable, a switch port or a reboot; nothing was measured there.

use super::link::Gone;
use crate::meet::rendezvous::absent::listed;
use crate::meet::rendezvous::Member;
use nccl_check_host::text::escape_control;

/// Most nodes named in one sentence; the rest are counted.
const MAX_NAMED: usize = 8;

/// "node fab04 (process rank 3)", "nodes fab04, fab06 (process ranks 3, 5)", with at most
/// [`MAX_NAMED`] nodes and ranks named.
fn nodes(members: &[&Member]) -> String {
    let mut hosts: Vec<String> = Vec::new();
    for m in members {
        let h = escape_control(&m.host);
        if !hosts.contains(&h) {
            hosts.push(h);
        }
    }
    let ranks = members.iter().map(|m| m.proc_rank.to_string());
    format!(
        "{} {} (process rank{} {})",
        if hosts.len() == 1 { "node" } else { "nodes" },
        listed(hosts.iter().cloned(), hosts.len(), MAX_NAMED),
        if members.len() == 1 { "" } else { "s" },
        listed(ranks, members.len(), MAX_NAMED)
    )
}

/// The coordinator's sentence for `lost` (each with why), out of `peers` other processes;
/// `host` is the coordinator's node.
pub fn at_coordinator(host: &str, lost: &[(&Member, &Gone)], peers: usize) -> String {
    let quiet = lost
        .iter()
        .filter_map(|(_, g)| match g {
            Gone::Silent(d) => Some(d.as_secs_f64()),
            Gone::Broken(_) => None,
        })
        .fold(0.0, f64::max);
    // Only silence points at this node: a connection that broke with an error (closed, or a
    // frame tampered with on the way) says what happened at the other end or between.
    let all_silent = lost.iter().all(|(_, g)| matches!(g, Gone::Silent(_)));
    if peers >= 2 && lost.len() == peers && all_silent {
        return format!(
            "none of the other {peers} processes answered the control plane (for {quiet:.1} s or more): \
             this node ({}) lost its network (its link is down?) or this process was stopped",
            escape_control(host)
        );
    }
    let silent: Vec<&Member> = lost
        .iter()
        .filter(|(_, g)| matches!(g, Gone::Silent(_)))
        .map(|(m, _)| *m)
        .collect();
    let broken: Vec<(&Member, String)> = lost
        .iter()
        .filter_map(|(m, g)| match g {
            Gone::Broken(e) => Some((*m, e.to_string())),
            Gone::Silent(_) => None,
        })
        .collect();
    let mut parts = Vec::new();
    if !silent.is_empty() {
        parts.push(format!(
            "{} stopped answering the control plane for {quiet:.1} s \
             (its link is down, it rebooted, or its process hung or was stopped)",
            nodes(&silent)
        ));
    }
    if let Some((_, why)) = broken.first() {
        let who: Vec<&Member> = broken.iter().map(|(m, _)| *m).collect();
        parts.push(format!("{} went away: {why}", nodes(&who)));
    }
    parts.join("; ")
}

/// A member's sentence when its one connection, to the coordinator (`peer`, as the session
/// names it), is gone.
pub fn at_member(peer: &str, gone: &Gone) -> String {
    match gone {
        Gone::Silent(d) => format!(
            "{peer} stopped answering the control plane for {:.1} s \
             (its node's link is down, it rebooted or hung, or this node's link is down)",
            d.as_secs_f64()
        ),
        Gone::Broken(e) => format!("{peer}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::wire::WireError;
    use std::time::Duration;

    fn m(r: u32, host: &str) -> Member {
        Member {
            proc_rank: r,
            host: host.into(),
            pid: r,
            ngpus: 1,
            first_rank: r,
        }
    }

    const QUIET: Gone = Gone::Silent(Duration::from_millis(5200));

    #[test]
    fn one_silent_node_is_named_with_its_rank_and_the_time() {
        let (me, f4) = (m(0, "fab01"), m(3, "fab04"));
        assert_eq!(
            at_coordinator(&me.host, &[(&f4, &QUIET)], 7),
            "node fab04 (process rank 3) stopped answering the control plane for 5.2 s \
             (its link is down, it rebooted, or its process hung or was stopped)"
        );
    }

    #[test]
    fn when_no_other_process_answers_the_coordinator_names_its_own_node() {
        let me = m(0, "fab01");
        let others: Vec<Member> = (1..8).map(|r| m(r, &format!("fab0{}", r + 1))).collect();
        let lost: Vec<(&Member, &Gone)> = others.iter().map(|o| (o, &QUIET)).collect();
        let s = at_coordinator(&me.host, &lost, 7);
        assert!(s.contains("this node (fab01) lost its network"), "{s}");
        assert!(!s.contains("fab04"), "{s}");
        // With one other process there is no telling which side: it is named.
        let s = at_coordinator(&me.host, &lost[..1], 1);
        assert!(s.starts_with("node fab02 (process rank 1) stopped"), "{s}");
    }

    #[test]
    fn silent_and_broken_nodes_are_told_apart_and_the_list_stays_bounded() {
        let me = m(0, "h0");
        let many: Vec<Member> = (1..40).map(|r| m(r, &format!("h{r}"))).collect();
        let closed = Gone::Broken(WireError::Closed);
        let mut lost: Vec<(&Member, &Gone)> = many[..30].iter().map(|o| (o, &QUIET)).collect();
        lost.push((&many[30], &closed));
        let s = at_coordinator(&me.host, &lost, 200);
        assert!(
            s.starts_with("nodes h1, h2, h3, h4, h5, h6, h7, h8 and 22 more (process ranks 1, 2, 3, 4, 5, 6, 7, 8 and 22 more) stopped"),
            "{s}"
        );
        assert!(
            s.contains("; node h31 (process rank 31) went away: the connection was closed"),
            "{s}"
        );
        assert!(s.len() < 400, "{} bytes", s.len());
    }

    /// Regression: tampered frames on every connection made the coordinator blame its own
    /// network; they are named as tampering, and whoever closed as gone.
    #[test]
    fn tampered_or_closed_connections_are_not_this_nodes_network() {
        let me = m(0, "fab01");
        let (a, b) = (m(1, "fab02"), m(2, "fab03"));
        let forged = Gone::Broken(WireError::Forged);
        let s = at_coordinator(&me.host, &[(&a, &QUIET), (&b, &forged)], 2);
        assert!(!s.contains("lost its network"), "{s}");
        assert!(s.contains("node fab03 (process rank 2) went away: a message failed its integrity check: it was tampered with"), "{s}");
        assert!(
            s.contains("node fab02 (process rank 1) stopped answering"),
            "{s}"
        );
    }

    #[test]
    fn a_host_name_with_control_characters_is_escaped() {
        let (me, bad) = (m(0, "h0"), m(1, "evil\x1b[2J"));
        let s = at_coordinator(&me.host, &[(&bad, &QUIET)], 3);
        assert!(!s.contains('\x1b'), "{s}");
    }

    #[test]
    fn a_member_names_the_coordinator() {
        let s = at_member("the coordinator (fab01:29501)", &QUIET);
        assert!(
            s.starts_with(
                "the coordinator (fab01:29501) stopped answering the control plane for 5.2 s"
            ),
            "{s}"
        );
    }
}
