//! Which slow readings a busy host explains: weighed, never overridden. One decision table
//! ([`weigh`]), from what loaded the check's nodes (`facts::host_load` on this node, the other
//! nodes' `host_busy` findings shared through `localize::own`) and the slow readings judged so
//! far, to the readings that stand as hardware and those a busy host explains (`host_busy`).
//!
//! Why: a busy host slows NCCL's proxy threads and every launch, so its slow readings may be
//! the load's. But a node, pair or rail that stands out against peers measured in the same
//! rounds under the same load is still broken: the load does not explain an outlier (seen on 8
//! emulated nodes with one busy loop per core: a node at 1 Gbit/s PASSed 3 of 3 runs while every
//! reading that named it gave way to one `host_busy`). Load on one node only (its own CPUs
//! busy, its peers' not) explains that node's slow readings, never its NIC.
//!
//! | load on the reading's path | the reading | equally loaded peers that were not slow | verdict |
//! |---|---|---|---|
//! | none | any | - | stands (hardware) |
//! | yes | an outlier among one node's GPUs or links (`gpu_outlier`, `link_outlier`) | the node's other GPUs, always | stands, the load named beside it |
//! | yes | a node, pair or rail outlier (`node_slow`, `node_pair_slow`, `rail_slow`, `node_outlier`, `node_pair_outlier`) | at least one | stands, the load named beside it |
//! | yes | a node, pair or rail outlier | none (the load is on its nodes only), or a node on its path starved (`worker_starved`: its own worker could not run) | `host_busy` of its busy nodes |
//! | yes | below a floor only, not an outlier (`busbw_below_threshold`, `suspects_unresolved`), or a starved worker | - | `host_busy` of its busy nodes |
//! | a node busy (this or another), nothing slow through it | - | - | PASS with that node's `host_busy` warning |
//! | this node loaded by the check's own processes only (`only_the_checks_own`) | any | - | stands; a `host_busy` warning says whose load it was |
//!
//! Slow only by the host's clock (fast by the GPUs'): a `host_interference` warning before this
//! table is reached (`evidence::host_interference`). Facts the node reports itself (a link down,
//! wrong data, ECC, a missing GPU) are no speed reading and stand whatever the load.

use crate::facts::host_load::{HostLoad, BUSY_SHARE};
use crate::model::localization::NodeFindings;
use nccl_check_contract::report::culprit::Culprit;
use nccl_check_contract::report::reason::{Reason, ReasonCode};

/// What loaded the check's nodes while it measured.
#[derive(Debug, Clone, Copy)]
pub struct Conditions<'a> {
    /// Every node of the check, as the readings name them.
    pub nodes: &'a [String],
    /// This process's node.
    pub here: &'a str,
    /// This node's host load (`facts::host_load`), when it could be read.
    pub load: Option<&'a HostLoad>,
    /// The other nodes' own findings (`localize::own`): their `host_busy` say their hosts were
    /// busy.
    pub others: &'a [NodeFindings],
}

/// How a slow reading stands against the load on its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Stands out against peers measured alongside it.
    Outlier { within_node: bool },
    /// Below a floor, or a part that could not run: what any slow host also produces.
    Slow,
}

fn kind(code: ReasonCode) -> Option<Kind> {
    use ReasonCode as C;
    match code {
        C::GpuOutlier | C::LinkOutlier => Some(Kind::Outlier { within_node: true }),
        C::NodeOutlier | C::NodePairOutlier | C::NodeSlow | C::NodePairSlow | C::RailSlow => {
            Some(Kind::Outlier { within_node: false })
        }
        C::BusbwBelowThreshold | C::SuspectsUnresolved | C::WorkerStarved => Some(Kind::Slow),
        _ => None,
    }
}

impl Conditions<'_> {
    /// This node's load, when its host was busy.
    fn busy_here(&self) -> Option<&HostLoad> {
        self.load.filter(|l| l.busy())
    }

    /// The `host_busy` reason of `node` when its host was busy: this node's in full (the
    /// consumers, from its own load), another's as it shared it.
    fn busy_reason(&self, node: &str) -> Option<Reason> {
        if node == self.here {
            let load = self.busy_here()?;
            return Some(Reason {
                code: ReasonCode::HostBusy,
                message: format!("{node}: {}", load.describe()),
                subject: Some(Culprit::Node(node.to_string())),
                measured: Some(load.others_here()),
                limit: Some(BUSY_SHARE),
            });
        }
        let found = self.others.iter().find(|f| f.node == node)?;
        found
            .reasons
            .iter()
            .find(|r| r.code == ReasonCode::HostBusy)
            .cloned()
    }

    /// A warning where this node's CPUs were loaded by the check alone (emulated nodes, more
    /// ranks than cores): said, never weighed as load, as every peer carries the same.
    fn own_load_only(&self) -> Option<Reason> {
        let load = self.load.filter(|l| l.only_the_checks_own())?;
        Some(Reason {
            code: ReasonCode::HostBusy,
            message: format!(
                "{}: {} (not weighed as load: every node of the check carries its own alike)",
                self.here,
                load.describe()
            ),
            subject: Some(Culprit::Node(self.here.to_string())),
            measured: Some(load.others_here()),
            limit: Some(crate::facts::host_load::MIN_OTHERS),
        })
    }

    fn busy_nodes(&self) -> Vec<&str> {
        (self.nodes.iter().map(String::as_str))
            .filter(|n| self.busy_reason(n).is_some())
            .collect()
    }

    /// The nodes a reading was measured through: the ones it names, this node for a reading
    /// of its own GPUs, every node for one of the whole check.
    fn path(&self, r: &Reason) -> Vec<String> {
        match r.subject.clone() {
            None => self.nodes.to_vec(),
            Some(Culprit::Node(n) | Culprit::Rail { node: n, .. }) => vec![n],
            Some(Culprit::NodePair(a, b)) => vec![a, b],
            Some(Culprit::Gpu { node, .. } | Culprit::GpuPair { node, .. }) => {
                vec![node.unwrap_or_else(|| self.here.to_string())]
            }
            // A reading of this process's own measurements (`all GPU pairs`), and the rest as
            // when they were text (unplaced suspects too: read here, not on their nodes).
            Some(_) => vec![self.here.to_string()],
        }
    }
}

/// The decision table (module comment): `reasons` judged so far in, the reasons that stand
/// (outliers under the same load as their peers, with the load named beside them; the
/// `host_busy` of the busy nodes whose readings the load explains, first) and the warnings to
/// add (this node's `host_busy` where it slowed nothing) out.
pub fn weigh(reasons: Vec<Reason>, c: &Conditions) -> (Vec<Reason>, Vec<Reason>) {
    let busy = c.busy_nodes();
    if busy.is_empty() {
        return (reasons, c.own_load_only().into_iter().collect());
    }
    // Every node a slow reading names: a busy node among them is no peer that measured fine.
    let slow: Vec<String> = reasons
        .iter()
        .filter(|r| kind(r.code).is_some() && r.subject.is_some())
        .flat_map(|r| c.path(r))
        .collect();
    let calm_peers = busy
        .iter()
        .filter(|n| !slow.iter().any(|s| s == *n))
        .count();
    // A node whose own worker could not run (its fact, `worker_starved`) carried more than the
    // load its peers shared: its outliers are its starvation's, not its network's (8 emulated
    // nodes, one busy loop per core, fab03 stopped 60% of the time: its own report had FAILed
    // its network as an outlier among busy peers while every peer said BUSY).
    let starved: Vec<String> = (reasons.iter())
        .filter(|r| r.code == ReasonCode::WorkerStarved && r.subject.is_some())
        .flat_map(|r| c.path(r))
        .collect();
    let (mut explained, mut kept) = (Vec::new(), Vec::new());
    for mut r in reasons {
        let Some(k) = kind(r.code) else {
            kept.push(r);
            continue;
        };
        let path = c.path(&r);
        let loaded: Vec<&str> = busy
            .iter()
            .copied()
            .filter(|n| path.iter().any(|p| p == n))
            .collect();
        if loaded.is_empty() {
            kept.push(r);
            continue;
        }
        let stands = match k {
            Kind::Outlier { within_node: true } => true,
            Kind::Outlier { within_node: false } => {
                calm_peers > 0 && !path.iter().any(|p| starved.contains(p))
            }
            Kind::Slow => false,
        };
        if stands {
            r.message += &format!(
                " (measured under the same host load as {}: busy hosts on {} of {} node(s), \
                 so the load does not explain an outlier)",
                if calm_peers > 0 && matches!(k, Kind::Outlier { within_node: false }) {
                    format!("{calm_peers} busy peer node(s) that were not slow")
                } else {
                    "the node's other GPUs and links".to_string()
                },
                busy.len(),
                c.nodes.len()
            );
            kept.push(r);
            continue;
        }
        // A reading of the whole check explained by this node's own load names this node; else
        // every busy node on its path.
        let blamed: Vec<&str> = match (&r.subject, c.busy_here()) {
            (None, Some(_)) => vec![c.here],
            _ => loaded,
        };
        for n in blamed {
            if let Some(mut b) = c.busy_reason(n) {
                if !explained.iter().any(|e: &Reason| e.subject == b.subject) {
                    b.message += &format!(
                        "; slow results measured through it not held against the hardware \
                         (first: {})",
                        r.message
                    );
                    explained.push(b);
                }
            }
        }
    }
    let warnings = unexplained_busy_warnings(c, &busy, &explained);
    (explained.into_iter().chain(kept).collect(), warnings)
}

/// Every busy host the verdict does not already name, this node's first: a node busy by others
/// whose readings stayed within their limits (or within the run's noise of them) is still a
/// busy host, named as such in every node's report (16 emulated nodes with one node's CPUs
/// loaded: its readings 2% under the limit, inside the run's 3% noise, and the coordinator's
/// report had said nothing of its host).
fn unexplained_busy_warnings(c: &Conditions, busy: &[&str], explained: &[Reason]) -> Vec<Reason> {
    let mut unexplained: Vec<&str> = busy
        .iter()
        .copied()
        .filter(|n| {
            let named = Some(Culprit::Node(n.to_string()));
            !explained.iter().any(|e| e.subject == named)
        })
        .collect();
    unexplained.sort_by_key(|n| *n != c.here);
    (unexplained.iter())
        .filter_map(|n| c.busy_reason(n))
        .map(|mut w| {
            w.message += " (the check's numbers were not slowed below their floors by it)";
            w
        })
        .collect()
}

#[cfg(test)]
mod tests;
