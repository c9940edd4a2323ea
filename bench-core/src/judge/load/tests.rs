use super::*;
use nccl_check_contract::report::cause::CauseClass;

fn busy_load() -> HostLoad {
    HostLoad {
        window_s: 3.0,
        cpus: 16,
        others_share: 0.97,
        check_share: 0.02,
        own_wait_share: Some(0.9),
        others_on_own_cpus: None,
        top: vec![crate::facts::host_load::Consumer {
            pid: 4242,
            user: "alice".into(),
            command: "burn".into(),
            job: None,
            cpus: 15.5,
        }],
    }
}

fn busy_finding(node: &str) -> NodeFindings {
    NodeFindings {
        node: node.into(),
        reasons: vec![Reason {
            code: ReasonCode::HostBusy,
            message: format!("node {node}: host busy: its CPUs were busy with 15.5 CPUs"),
            subject: Some(Culprit::Node(node.into())),
            measured: Some(15.5),
            limit: None,
        }],
    }
}

fn reading(code: ReasonCode, subject: Option<Culprit>) -> Reason {
    Reason {
        subject,
        ..Reason::plain(code, code.as_str())
    }
}

/// Where the load was, in the table's rows.
#[derive(Debug, Clone, Copy)]
enum Load {
    None,
    /// Every node (one host, or every host busy alike).
    All,
    /// Another node only (e2).
    There,
    /// This node only (e0).
    Here,
}

const NODES: [&str; 4] = ["e0", "e1", "e2", "e3"];

/// The verdict's reasons (code, subject, class) and warnings' codes for `readings` under `load`.
fn weighed(load: Load, readings: Vec<Reason>) -> (Vec<(ReasonCode, String)>, Vec<ReasonCode>) {
    let nodes: Vec<String> = NODES.iter().map(|n| n.to_string()).collect();
    let mine = busy_load();
    let (here_busy, others): (bool, Vec<NodeFindings>) = match load {
        Load::None => (false, vec![]),
        Load::All => (true, ["e1", "e2", "e3"].map(busy_finding).to_vec()),
        Load::There => (false, vec![busy_finding("e2")]),
        Load::Here => (true, vec![]),
    };
    let c = Conditions {
        nodes: &nodes,
        here: "e0",
        load: here_busy.then_some(&mine),
        others: &others,
    };
    let (reasons, warnings) = weigh(readings, &c);
    (
        reasons
            .iter()
            .map(|r| (r.code, r.subject_text().unwrap_or_default()))
            .collect(),
        warnings.iter().map(|w| w.code).collect(),
    )
}

/// Every row of the module's table: host load on all nodes / on another node / on this node /
/// none, times an outlier among nodes, a slow pair of nodes, an outlier among one node's links,
/// a floor broken by the whole check, and nothing slow.
#[test]
fn the_decision_table_of_load_and_outliers() {
    use ReasonCode::*;
    let node = |n: &str| Some(Culprit::Node(n.into()));
    let pair = Some(Culprit::NodePair("e1".into(), "e2".into()));
    let link = Some(Culprit::GpuPair {
        node: None,
        a: 0,
        b: 1,
        directed: false,
    });
    let hw = |c: ReasonCode, s: &str| (c, s.to_string());
    let busy = |s: &str| (HostBusy, s.to_string());
    type Row = (
        Load,
        Vec<Reason>,
        Vec<(ReasonCode, String)>,
        Vec<ReasonCode>,
    );
    let rows: Vec<Row> = vec![
        // No load: every reading stands.
        (
            Load::None,
            vec![reading(NodeSlow, node("e2"))],
            vec![hw(NodeSlow, "e2")],
            vec![],
        ),
        (
            Load::None,
            vec![reading(NodePairSlow, pair.clone())],
            vec![hw(NodePairSlow, "e1<->e2")],
            vec![],
        ),
        (
            Load::None,
            vec![reading(LinkOutlier, link.clone())],
            vec![hw(LinkOutlier, "GPU0<->GPU1")],
            vec![],
        ),
        (
            Load::None,
            vec![reading(BusbwBelowThreshold, None)],
            vec![hw(BusbwBelowThreshold, "")],
            vec![],
        ),
        (Load::None, vec![], vec![], vec![]),
        // Every node loaded alike: outliers stand (the peers measured fine under the same
        // load); a floor the whole check broke is the load's.
        (
            Load::All,
            vec![reading(NodeSlow, node("e2"))],
            vec![hw(NodeSlow, "e2")],
            vec![HostBusy; 4],
        ),
        (
            Load::All,
            vec![reading(NodePairSlow, pair.clone())],
            vec![hw(NodePairSlow, "e1<->e2")],
            vec![HostBusy; 4],
        ),
        (
            Load::All,
            vec![reading(LinkOutlier, link.clone())],
            vec![hw(LinkOutlier, "GPU0<->GPU1")],
            vec![HostBusy; 4],
        ),
        // e0's own load explains the whole check's floor; the other busy hosts are said.
        (
            Load::All,
            vec![reading(BusbwBelowThreshold, None)],
            vec![busy("e0")],
            vec![HostBusy; 3],
        ),
        (Load::All, vec![], vec![], vec![HostBusy; 4]),
        // e2's own worker starved under the shared load: its outlier is its starvation's.
        (
            Load::All,
            vec![
                reading(WorkerStarved, node("e2")),
                reading(NodeSlow, node("e2")),
            ],
            vec![busy("e2")],
            vec![HostBusy; 3],
        ),
        // ... but a real fault elsewhere under the same load still stands: e3's slow node is
        // no starved node's.
        (
            Load::All,
            vec![
                reading(WorkerStarved, node("e2")),
                reading(NodeSlow, node("e3")),
            ],
            vec![busy("e2"), hw(NodeSlow, "e3")],
            vec![HostBusy; 3],
        ),
        // Load on e2 alone: e2's readings are its host's, never its NIC; this node's links are
        // not on e2's path.
        (
            Load::There,
            vec![reading(NodeSlow, node("e2"))],
            vec![busy("e2")],
            vec![],
        ),
        (
            Load::There,
            vec![reading(NodePairSlow, pair.clone())],
            vec![busy("e2")],
            vec![],
        ),
        (
            Load::There,
            vec![reading(LinkOutlier, link.clone())],
            vec![hw(LinkOutlier, "GPU0<->GPU1")],
            vec![HostBusy],
        ),
        (
            Load::There,
            vec![reading(BusbwBelowThreshold, None)],
            vec![busy("e2")],
            vec![],
        ),
        // Nothing slow through e2 (or only within the run's noise): e2's host is still named
        // busy, in a warning of every node's report.
        (Load::There, vec![], vec![], vec![HostBusy]),
        // Load on this node alone: a slow e2 is e2's; an outlier among this node's own links
        // stands (its other links had the same load); the whole check's floor is this host's.
        (
            Load::Here,
            vec![reading(NodeSlow, node("e2"))],
            vec![hw(NodeSlow, "e2")],
            vec![HostBusy],
        ),
        (
            Load::Here,
            vec![reading(NodeSlow, node("e0"))],
            vec![busy("e0")],
            vec![],
        ),
        (
            Load::Here,
            vec![reading(LinkOutlier, link.clone())],
            vec![hw(LinkOutlier, "GPU0<->GPU1")],
            vec![HostBusy],
        ),
        (
            Load::Here,
            vec![reading(BusbwBelowThreshold, None)],
            vec![busy("e0")],
            vec![],
        ),
        (Load::Here, vec![], vec![], vec![HostBusy]),
    ];
    for (load, readings, want, warned) in rows {
        let case = format!(
            "{load:?} {:?}",
            readings.iter().map(|r| r.code).collect::<Vec<_>>()
        );
        let (got, got_warned) = weighed(load, readings);
        assert_eq!(got, want, "{case}");
        assert_eq!(got_warned, warned, "{case}");
    }
}

/// A reading that stands under load names the load beside it, and stays the hardware's.
#[test]
fn an_outlier_under_the_same_load_as_its_peers_names_the_load_and_stays_hardware() {
    let nodes: Vec<String> = NODES.iter().map(|n| n.to_string()).collect();
    let mine = busy_load();
    let others = ["e1", "e2", "e3"].map(busy_finding).to_vec();
    let c = Conditions {
        nodes: &nodes,
        here: "e0",
        load: Some(&mine),
        others: &others,
    };
    let slow = reading(ReasonCode::NodeSlow, Some(Culprit::Node("e2".into())));
    let (reasons, warnings) = weigh(vec![slow], &c);
    assert_eq!(reasons.len(), 1);
    assert_eq!(reasons[0].cause(), CauseClass::Hardware);
    assert!(
        reasons[0]
            .message
            .contains("3 busy peer node(s) that were not slow")
            && reasons[0].message.contains("busy hosts on 4 of 4 node(s)"),
        "{}",
        reasons[0].message
    );
    assert!(
        warnings[0]
            .message
            .contains("pid 4242 (alice, burn) 15.5 CPU"),
        "{}",
        warnings[0].message
    );
}

/// Two slow nodes of four under the same load: each is still an outlier against the two that
/// measured fine. With every busy node slow there is no calm peer: the load explains them.
#[test]
fn outliers_need_a_peer_that_measured_fine_under_the_same_load() {
    use ReasonCode::*;
    let node = |n: &str| reading(NodeSlow, Some(Culprit::Node(n.into())));
    let (got, _) = weighed(Load::All, vec![node("e1"), node("e2")]);
    assert_eq!(
        got,
        [(NodeSlow, "e1".to_string()), (NodeSlow, "e2".to_string())]
    );
    let (got, _) = weighed(Load::All, NODES.iter().map(|n| node(n)).collect());
    let blamed: Vec<&str> = got.iter().map(|(_, s)| s.as_str()).collect();
    assert!(got.iter().all(|(c, _)| *c == HostBusy), "{got:?}");
    assert_eq!(blamed, NODES);
}

/// Facts the node reports itself stand whatever the load, and wrong data too.
#[test]
fn a_fact_or_wrong_data_is_no_speed_reading_and_stands_under_any_load() {
    use ReasonCode::*;
    for code in [NvlinkDown, WrongData, EccUncorrectable, GpuMissing] {
        let (got, _) = weighed(Load::Here, vec![reading(code, None)]);
        assert_eq!(got, [(code, String::new())]);
    }
}

/// The check's own load (more ranks than cores) is said, never weighed: a slow node stands.
#[test]
fn a_node_loaded_by_the_check_alone_is_no_busy_peer_and_excuses_nothing() {
    let own_only = HostLoad {
        others_share: 0.02,
        check_share: 0.97,
        own_wait_share: Some(1.4),
        others_on_own_cpus: Some(0.0),
        top: Vec::new(),
        ..busy_load()
    };
    let nodes: Vec<String> = ["e0", "e1", "e2"].map(String::from).to_vec();
    let slow = Reason {
        code: ReasonCode::NodeSlow,
        message: "e1: every node pair it is in is slow".into(),
        subject: Some(Culprit::Node("e1".into())),
        measured: Some(0.1),
        limit: Some(0.3),
    };
    let c = Conditions {
        nodes: &nodes,
        here: "e0",
        load: Some(&own_only),
        others: &[],
    };
    let (kept, warnings) = weigh(vec![slow.clone()], &c);
    assert_eq!(kept, vec![slow]);
    let [w] = warnings.as_slice() else {
        panic!("{warnings:?}")
    };
    assert_eq!(w.code, ReasonCode::HostBusy);
    assert!(
        w.message.contains("the load is the check's own"),
        "{}",
        w.message
    );
}

/// Load on one other node only and nothing slow through it beyond the run's noise (16 emulated
/// nodes, one node's worker confined with busy loops): the coordinator names that node's host
/// busy in a warning, and only that node's.
#[test]
fn a_busy_node_that_slowed_nothing_is_still_named_busy_in_every_report() {
    let nodes: Vec<String> = NODES.iter().map(|n| n.to_string()).collect();
    let others = vec![busy_finding("e2")];
    let c = Conditions {
        nodes: &nodes,
        here: "e0",
        load: None,
        others: &others,
    };
    let (reasons, warnings) = weigh(vec![], &c);
    assert!(reasons.is_empty());
    let named: Vec<_> = warnings
        .iter()
        .map(|w| (w.code, w.subject_text()))
        .collect();
    assert_eq!(named, vec![(ReasonCode::HostBusy, Some("e2".to_string()))]);
    assert!(warnings[0]
        .message
        .contains("not slowed below their floors"));
}
