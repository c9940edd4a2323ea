use super::*;

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("e{i}")).collect()
}

/// Sums the entries as the control plane does, over the ranks that put them.
fn summed(len: usize, parts: &[Vec<(u64, f64)>]) -> Vec<f64> {
    let mut v = vec![0.0; len];
    for (i, x) in parts.iter().flatten() {
        v[*i as usize] += x;
    }
    v
}

fn network(code: ReasonCode, subject: &str) -> Reason {
    Reason {
        subject: Some(subject.into()),
        ..Reason::plain(code, format!("{subject}: every node pair it is in is slow"))
    }
}

/// The issue-33 case: 4 nodes, e2's GPU held by another process; the localizer blamed e2
/// (and, on another run, the pair e2<->e3): the coordinator's reason is e2's GPU busy, with
/// its pid, whatever the network reading.
#[test]
fn a_busy_gpu_on_one_node_is_that_nodes_cause_not_its_network() {
    let n = names(4);
    let e2 = encode_findings(
        1,
        &[OwnFinding::GpuBusy {
            gpu: 0,
            pid: 31337,
            gib: 8.5,
            probe: None,
        }],
    );
    let sums = summed(
        4 * WIDTH,
        &[e2, encode_findings(0, &[]), encode_findings(2, &[])],
    );
    let own = decode_findings(&n, &sums);
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].node, "e2");
    for reading in [
        network(ReasonCode::NodeSlow, "e2"),
        network(ReasonCode::NodePairSlow, "e2<->e3"),
        network(ReasonCode::RailSlow, "e2 GPU0 NIC"),
    ] {
        let mut reasons = vec![reading];
        own_findings_win(&mut reasons, &own);
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        let r = &reasons[0];
        assert_eq!(r.code, ReasonCode::GpuBusy);
        assert_eq!(r.subject_text().as_deref(), Some("e2 GPU0"));
        assert_eq!(r.cause().as_str(), "busy");
        assert!(
            r.message
                .starts_with("e2 GPU0: busy: another process (pid 31337, 8.5 GiB)"),
            "{}",
            r.message
        );
    }
    // A node with no own finding keeps its network reading.
    let mut reasons = vec![network(ReasonCode::NodeSlow, "e4")];
    own_findings_win(&mut reasons, &own);
    assert_eq!(reasons[0].code, ReasonCode::NodeSlow);
}

#[test]
fn every_kind_travels_and_a_node_named_twice_is_named_once() {
    let n = names(3);
    let e1 = encode_findings(
        0,
        &[
            OwnFinding::Starved { share: 0.6 },
            OwnFinding::GpuMissing { missing: 1 },
            OwnFinding::HostBusy {
                cpus: 12.0,
                top: Some((777, 3.0)),
            },
            OwnFinding::Starved { share: 0.9 },
        ],
    );
    // One of each kind: 1 + 1 + 3 (the host's CPUs, its largest consumer's pid and CPUs).
    assert_eq!(e1.len(), 5, "one of each kind");
    let own = decode_findings(&n, &summed(3 * WIDTH, &[e1]));
    let codes: Vec<ReasonCode> = own[0].reasons.iter().map(|r| r.code).collect();
    assert_eq!(
        codes,
        [
            ReasonCode::WorkerStarved,
            ReasonCode::GpuMissing,
            ReasonCode::HostBusy
        ]
    );
    let mut reasons = vec![
        network(ReasonCode::NodePairSlow, "e1<->e2"),
        network(ReasonCode::NodePairSlow, "e1<->e3"),
        network(ReasonCode::NodePairSlow, "e2<->e3"),
    ];
    own_findings_win(&mut reasons, &own);
    let texts: Vec<(ReasonCode, Option<String>)> =
        reasons.iter().map(|r| (r.code, r.subject_text())).collect();
    let got: Vec<(ReasonCode, Option<&str>)> =
        texts.iter().map(|(c, s)| (*c, s.as_deref())).collect();
    assert_eq!(
        got,
        [
            (ReasonCode::WorkerStarved, Some("e1")),
            (ReasonCode::GpuMissing, Some("e1")),
            // A busy host does not win by itself: `judge::load` weighs it against the peers.
            (ReasonCode::NodePairSlow, Some("e2<->e3")),
        ]
    );
}

/// The busy node's own verdict names its GPU busy, not its network.
#[test]
fn a_process_with_its_own_finding_drops_the_network_reading_of_its_node() {
    let busy = Reason {
        subject: Some("GPU0".into()),
        ..Reason::plain(ReasonCode::GpuBusy, "GPU0: busy: 1 other process (pid 9)")
    };
    let mut reasons = vec![
        network(ReasonCode::NodeSlow, "e2"),
        busy.clone(),
        network(ReasonCode::NodePairSlow, "e3<->e4"),
        network(ReasonCode::NodePairSlow, "e1<->e2"),
    ];
    own_node_wins(&mut reasons, "e2", &names(4));
    let subjects: Vec<String> = reasons.iter().filter_map(|r| r.subject_text()).collect();
    assert_eq!(subjects, ["GPU0", "e3<->e4"]);
    let mut without = vec![network(ReasonCode::NodeSlow, "e2")];
    own_node_wins(&mut without, "e2", &names(4));
    assert_eq!(
        without.len(),
        1,
        "no own finding: the network reading stays"
    );
}

#[test]
fn values_that_are_not_positive_finite_numbers_are_no_finding() {
    let mut sums = vec![0.0; WIDTH];
    sums[3] = f64::NAN;
    sums[5] = -1.0;
    assert!(decode_findings(&names(1), &sums).is_empty());
    assert!(decode_findings(&names(2), &[]).is_empty());
}

/// The host's finding carries its largest consumer; a node of two processes gets both
/// processes' findings, each in its own block of slots.
#[test]
fn a_node_of_two_processes_gets_the_findings_of_both() {
    let names: Vec<String> = ["e1", "e2", "e2"].map(String::from).to_vec();
    let p1 = encode_findings(
        1,
        &[OwnFinding::HostBusy {
            cpus: 30.5,
            top: Some((4242, 1.0)),
        }],
    );
    let p2 = encode_findings(
        2,
        &[OwnFinding::GpuBusy {
            gpu: 1,
            pid: 99,
            gib: 2.0,
            probe: None,
        }],
    );
    let own = decode_findings(&names, &summed(3 * WIDTH, &[p1, p2]));
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(own[0].node, "e2");
    let texts: Vec<(ReasonCode, Option<String>)> = own[0]
        .reasons
        .iter()
        .map(|r| (r.code, r.subject_text()))
        .collect();
    let got: Vec<(ReasonCode, Option<&str>)> =
        texts.iter().map(|(c, s)| (*c, s.as_deref())).collect();
    assert_eq!(
        got,
        [
            (ReasonCode::HostBusy, Some("e2")),
            (ReasonCode::GpuBusy, Some("e2 GPU1")),
        ]
    );
    assert!(
        own[0].reasons[0].message.contains("30.5 CPUs")
            && own[0].reasons[0].message.contains("pid 4242"),
        "{}",
        own[0].reasons[0].message
    );
}

/// In e4's verdict, e2's GPU busy (shared by the sum) is e2's finding, not e4's: e4's own
/// network reading stays. And in e2's verdict, the finding it judged itself (`GPU0`, with user
/// and memory) is named once.
#[test]
fn another_nodes_finding_does_not_clear_this_nodes_reading_and_its_own_is_named_once() {
    let shared = Reason {
        subject: Some("e2 GPU0".into()),
        ..Reason::plain(
            ReasonCode::GpuBusy,
            "e2 GPU0: busy: another process (pid 9)",
        )
    };
    let mut e4 = vec![shared.clone(), network(ReasonCode::NodeSlow, "e4")];
    own_node_wins(&mut e4, "e4", &names(4));
    assert_eq!(e4.len(), 2, "{e4:?}");
    assert_eq!(e4[1].code, ReasonCode::NodeSlow);
    let local = Reason {
        subject: Some("GPU0".into()),
        ..Reason::plain(
            ReasonCode::GpuBusy,
            "GPU0: busy: 1 other process (pid 9, user bob)",
        )
    };
    let mut e2 = vec![local.clone(), shared, network(ReasonCode::NodeSlow, "e4")];
    own_node_wins(&mut e2, "e2", &names(4));
    assert_eq!(e2, vec![local, network(ReasonCode::NodeSlow, "e4")]);
}

/// Each of 4 processes runs `exchange` with its own findings; the sum is the sum of the vectors
/// all of them put in, as NCCL's all_reduce gives it to each.
/// `include_own`: as `exchange` is called (the GPU worker leaves its own out).
fn exchanged(mine: &[Vec<OwnFinding>], include_own: bool) -> Vec<Vec<NodeFindings>> {
    let names = names(mine.len());
    let mut total = vec![0.0; names.len() * WIDTH];
    for (p, m) in mine.iter().enumerate() {
        exchange(p, &names, m, true, |v| -> Result<Vec<f64>, ()> {
            for (t, x) in total.iter_mut().zip(v) {
                *t += x;
            }
            Ok(v.to_vec())
        })
        .expect("sum");
    }
    (0..mine.len())
        .map(|p| {
            exchange(p, &names, &mine[p], include_own, |_| {
                Ok::<_, ()>(total.clone())
            })
            .expect("sum")
        })
        .collect()
}

mod every_process {
    use super::*;
    use crate::facts::gpu_health::GpuHealth;
    use crate::judge::overall::tests::judge_by;
    use crate::measure::gpu::GpuInfo;
    use crate::meet::rendezvous::Member;
    use crate::model::localization::LocalizeSummary;
    use crate::report::json::{GpuEntry, Report};
    use nccl_check_contract::exit::ExitCode;

    /// Process `p` of 4 emulated nodes e1..e4 (one GPU each); process `busy`'s GPU held by pid
    /// 31337.
    fn report(p: u32, busy: u32) -> Report {
        let host = format!("e{}", p + 1);
        let mut r = Report::new(host.clone(), 0.0);
        r.nranks = 4;
        r.processes = (0..4)
            .map(|q| Member {
                proc_rank: q,
                host: format!("e{}", q + 1),
                pid: 100 + q,
                ngpus: 1,
                first_rank: q,
            })
            .collect();
        let held = match p == busy {
            true => serde_json::json!([{"pid": 31337, "user": "root", "used_bytes": 17u64 << 29}]),
            false => serde_json::json!([]),
        };
        let health: GpuHealth = serde_json::from_value(serde_json::json!({
            "index": 0, "bus_id": "", "name": "NVIDIA H100 80GB HBM3", "processes": held
        }))
        .expect("health");
        let mut g = GpuEntry::new(
            p,
            host,
            GpuInfo {
                name: "NVIDIA H100 80GB HBM3".into(),
                ..GpuInfo::default()
            },
        );
        g.health = Some(health);
        r.gpus = vec![g];
        r
    }

    fn judged(r: Report) -> (Report, ExitCode) {
        judge_by(
            &[crate::model::floors::tests::rule("all_reduce", 4, 4, 1.0)],
            r,
        )
    }

    /// What the localizer found, the same in every process: e2 and e4 slow on their NICs.
    fn localized(reasons: Vec<Reason>) -> LocalizeSummary {
        LocalizeSummary {
            plan: "adaptive".into(),
            nodes: 4,
            rails: 1,
            rounds: 5,
            localization_rounds: 3,
            allocation_busbw: None,
            allocation_floor: None,
            pair_groups: 8,
            reasons,
            reasons_omitted: 0,
            round_times: Vec::new(),
            paths: None,
        }
    }

    fn slow(node: &str) -> Reason {
        Reason {
            subject: Some(node.into()),
            ..Reason::plain(
                ReasonCode::NodeSlow,
                format!(
                    "{node}: every node pair it is in is slow on all 1 NICs, with cleared partners"
                ),
            )
        }
    }

    /// The issue-33 case end to end: every process's verdict (the reasons, the JSON's cause,
    /// the verdict line srun prints) names e2's GPU busy first, none e2's network; e4, slow with
    /// no finding of its own, keeps its network reading in every verdict.
    #[test]
    fn a_busy_gpu_on_one_node_is_that_nodes_cause_in_every_processs_verdict() {
        let busy = OwnFinding::GpuBusy {
            gpu: 0,
            pid: 31337,
            gib: 8.5,
            probe: None,
        };
        let own = exchanged(&[vec![], vec![busy], vec![], vec![]], false);
        // The busy node's own process judges its GPU itself (NVML's list in its report).
        assert!(own[1].is_empty(), "{:?}", own[1]);
        for p in 0..4u32 {
            let mut summary = localized(vec![slow("e2"), slow("e4")]);
            own_findings_win(&mut summary.reasons, &own[p as usize]);
            let mut r = report(p, 1);
            r.localization = Some(summary);
            let (r, code) = judged(r);
            assert_eq!(code, ExitCode::Fail);
            let texts: Vec<(ReasonCode, String)> = r
                .head
                .reasons
                .iter()
                .map(|x| (x.code, x.subject_text().unwrap_or_else(|| "-".into())))
                .collect();
            let subjects: Vec<(ReasonCode, &str)> =
                texts.iter().map(|(c, s)| (*c, s.as_str())).collect();
            let e2 = if p == 1 { "GPU0" } else { "e2 GPU0" };
            assert_eq!(
                subjects,
                [(ReasonCode::GpuBusy, e2), (ReasonCode::NodeSlow, "e4")],
                "process {p}"
            );
            assert!(r.warnings.is_empty(), "process {p}: {:?}", r.warnings);
            let json = serde_json::to_value(&r).expect("json");
            assert_eq!(json["reasons"][0]["cause"], "busy", "process {p}");
            assert_eq!(json["reasons"][1]["cause"], "hardware", "process {p}");
            let line = nccl_check_contract::line::write(r.head.verdict, &r.head.summary);
            let said = format!("{e2}: busy: ");
            assert!(
                line.starts_with("nccl-check: FAIL") && line.contains(&said),
                "process {p}: {line}"
            );
            assert!(line.contains("pid 31337"), "process {p}: {line}");
        }
    }

    /// Without the localizer (the full pair matrix, as `--pair-matrix auto` runs up to 3 nodes,
    /// or `full`): the node pairs measured on 4 emulated nodes over sockets with one node's GPU
    /// busy (judge/analysis.rs, 2026-11-21) blame that node (`node_outlier`); with its finding
    /// shared, every process names its GPU busy instead.
    #[test]
    fn without_the_localizer_the_node_outlier_gives_way_to_the_nodes_own_finding() {
        let busy = OwnFinding::GpuBusy {
            gpu: 0,
            pid: 31337,
            gib: 8.5,
            probe: None,
        };
        let own = exchanged(&[vec![], vec![], vec![busy], vec![]], false);
        let pair = |a: &str, b: &str, busbw: f64| crate::measure::rows::PairRow {
            expected: None,
            ends: crate::measure::rows::Ends::Nodes(a.into(), b.into()),
            ranks: (0, 1),
            bytes: 256 << 20,
            time_us: 0.0,
            busbw,
            gpu_busbw: None,
            first_busbw: None,
        };
        for p in 0..4u32 {
            let mut r = report(p, 2);
            r.pairs = vec![
                pair("e1", "e2", 2.15),
                pair("e3", "e4", 1.34),
                pair("e1", "e4", 2.40),
                pair("e2", "e3", 1.47),
                pair("e1", "e3", 1.43),
                pair("e2", "e4", 2.15),
            ];
            r.node_findings = own[p as usize].clone();
            let (r, code) = judged(r);
            assert_eq!(code, ExitCode::Busy, "busy alone is no hardware FAIL");
            let texts: Vec<(ReasonCode, String)> = r
                .head
                .reasons
                .iter()
                .map(|x| (x.code, x.subject_text().unwrap_or_else(|| "-".into())))
                .collect();
            let subjects: Vec<(ReasonCode, &str)> =
                texts.iter().map(|(c, s)| (*c, s.as_str())).collect();
            let e3 = if p == 2 { "GPU0" } else { "e3 GPU0" };
            assert_eq!(subjects, [(ReasonCode::GpuBusy, e3)], "process {p}");
            assert!(r.head.summary.contains("pid 31337"), "{}", r.head.summary);
        }
    }

    /// A collective over every rank below its floor, slowed by e2's busy GPU: in e1's verdict
    /// (the coordinator's, the line srun prints) e2's GPU busy leads the slow collective.
    #[test]
    fn another_nodes_busy_gpu_leads_the_slow_collective_it_explains() {
        let busy = OwnFinding::GpuBusy {
            gpu: 0,
            pid: 31337,
            gib: 8.5,
            probe: None,
        };
        let own = exchanged(&[vec![], vec![busy], vec![], vec![]], false);
        let mut r = report(0, 1);
        r.gpus[0].info.name = "NVIDIA H200".into();
        let p = crate::measure::rows::Placement {
            time_us: 1.0,
            algbw: 0.3,
            busbw: 0.5,
            wrong: Some(0),
            first_busbw: None,
        };
        r.results = vec![crate::measure::rows::Row {
            expected: None,
            collective: "all_reduce".into(),
            size: 256 << 20,
            count: 64 << 20,
            dtype: "float".into(),
            redop: "sum".into(),
            root: -1,
            out_of_place: p,
            in_place: p,
        }];
        let mut summary = localized(vec![slow("e2")]);
        own_findings_win(&mut summary.reasons, &own[0]);
        r.localization = Some(summary);
        r.node_findings = own[0].clone();
        let (r, code) = judged(r);
        assert_eq!(code, ExitCode::Fail);
        let codes: Vec<ReasonCode> = r.head.reasons.iter().map(|x| x.code).collect();
        assert_eq!(
            codes,
            [ReasonCode::GpuBusy, ReasonCode::BusbwBelowThreshold],
            "{:?}",
            r.head.reasons
        );
        assert!(
            r.head.summary.starts_with("e2 GPU0: busy: "),
            "{}",
            r.head.summary
        );
    }

    /// Emulated nodes over sockets never feel one node's busy GPU in their collectives (2x
    /// H200, 4 emulated nodes, e2's GPU saturated by a copy loop: e2 FAILed `gpu_busy` by its
    /// local probe, e1, e3 and e4 PASSed). With the findings shared at the end of every
    /// multi-node check, the others name e2's GPU busy too, with its pid; a holder whose GPU
    /// probed fine, or that was not probed, fails no other process.
    #[test]
    fn a_gpu_slow_by_its_holder_fails_every_process_not_only_its_own() {
        let busy = |probe| OwnFinding::GpuBusy {
            gpu: 0,
            pid: 31337,
            gib: 8.5,
            probe,
        };
        let slowed = exchanged(
            &[vec![], vec![busy(Some((610.0, 1440.0)))], vec![], vec![]],
            false,
        );
        for p in [0u32, 2, 3] {
            let mut r = report(p, 1);
            r.node_findings = slowed[p as usize].clone();
            let (r, code) = judged(r);
            assert_eq!(
                code,
                ExitCode::Busy,
                "process {p}: busy alone is no hardware FAIL"
            );
            let texts: Vec<(ReasonCode, String)> = r
                .head
                .reasons
                .iter()
                .map(|x| (x.code, x.subject_text().unwrap_or_else(|| "-".into())))
                .collect();
            let subjects: Vec<(ReasonCode, &str)> =
                texts.iter().map(|(c, s)| (*c, s.as_str())).collect();
            assert_eq!(subjects, [(ReasonCode::GpuBusy, "e2 GPU0")], "process {p}");
            assert_eq!(r.head.reasons[0].cause().as_str(), "busy");
            assert!(r.head.summary.contains("pid 31337"), "{}", r.head.summary);
            assert!(
                r.head.summary.contains("610 GB/s < 1440 GB/s"),
                "{}",
                r.head.summary
            );
        }
        for probe in [Some((2900.0, 1440.0)), None] {
            let idle = exchanged(&[vec![], vec![busy(probe)], vec![], vec![]], false);
            let mut r = report(0, 1);
            r.node_findings = idle[0].clone();
            let (r, code) = judged(r);
            assert_eq!(code, ExitCode::Pass, "{probe:?}: {:?}", r.head.reasons);
        }
    }

    /// A node short of GPUs fails every process's verdict, not only its own (its inventory).
    #[test]
    fn a_node_short_of_gpus_fails_every_process() {
        let own = exchanged(
            &[
                vec![],
                vec![],
                vec![OwnFinding::GpuMissing { missing: 2 }],
                vec![],
            ],
            false,
        );
        let mut r = report(0, 9);
        r.node_findings = own[0].clone();
        let (r, code) = judged(r);
        assert_eq!(code, ExitCode::Fail);
        assert_eq!(r.head.reasons[0].code, ReasonCode::GpuMissing);
        assert_eq!(r.head.reasons[0].subject_text().as_deref(), Some("e3"));
    }
}

fn starved_pair(a: &str, b: &str) -> Reason {
    Reason {
        code: ReasonCode::NodePairSlow,
        message: format!("node pair {a}<->{b}: slow"),
        subject: Some(Culprit::NodePair(a.to_string(), b.to_string())),
        measured: Some(0.1),
        limit: Some(0.2),
    }
}

#[test]
fn a_slow_pair_with_one_starved_end_is_that_node_and_other_pairs_stay() {
    let mut reasons = vec![
        starved_pair("fab02", "fab03"),
        starved_pair("fab03", "fab04"),
        starved_pair("fab05", "fab06"),
    ];
    blame_starved(&mut reasons, &[("fab03".to_string(), 0.58)]);
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].code, ReasonCode::NodeSlow);
    assert_eq!(reasons[0].subject_text().as_deref(), Some("fab03"));
    assert!(reasons[0].message.contains("58%") && !reasons[0].message.contains("fab02"));
    assert_eq!(reasons[1], starved_pair("fab05", "fab06"));
    // Both ends starved, or neither: the localizer's pair stands.
    let mut both = vec![starved_pair("fab02", "fab03")];
    let starved = [("fab02".to_string(), 0.6), ("fab03".to_string(), 0.7)];
    blame_starved(&mut both, &starved);
    assert_eq!(both, vec![starved_pair("fab02", "fab03")]);
}
