use super::*;
use crate::facts::gpu_health::{GpuHealth, NvLinks};
use crate::facts::host_load::HostLoad;
use crate::facts::net::{Kind, NetFacts, Port};
use crate::facts::node::NodeFacts;
use crate::judge::overall::tests::judge_by;
use crate::measure::gpu::GpuInfo;
use crate::measure::rows::{Ends, PairRow, Placement};
use crate::meet::rendezvous::Member;
use crate::model::floors::tests::rule;
use crate::model::local_copy::LocalProbe;
use crate::report::json::Report;
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::verdict::Verdict;

const MIB256: u64 = 256 << 20;

fn health(index: u32, active: u32) -> GpuHealth {
    GpuHealth {
        pci_device_id: None,
        links: vec![],
        processes: vec![],
        index,
        bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
        name: "NVIDIA H200".into(),
        nvlink: Some(NvLinks {
            present: 18,
            active,
        }),
        pcie: None,
        ecc_uncorrected_volatile: Some(0),
        row_remap: None,
        throttle: None,
        clocks: None,
        errors: vec![],
    }
}

fn row(collective: &'static str, busbw: f64) -> Row {
    let p = Placement {
        time_us: 1.0,
        algbw: busbw,
        busbw,
        wrong: Some(0),
        first_busbw: None,
    };
    Row {
        expected: None,
        collective: collective.into(),
        size: MIB256,
        count: MIB256 / 4,
        dtype: "float".into(),
        redop: "sum".into(),
        root: -1,
        out_of_place: p,
        in_place: p,
    }
}

/// One node of `n` H200s with healthy facts and probes; GPU pairs at `pair` GB/s.
fn report(n: u32, pair: f64) -> Report {
    let mut r = Report::new("n1".into(), 0.0);
    r.nranks = n;
    r.processes = vec![Member {
        proc_rank: 0,
        host: "n1".into(),
        pid: 1,
        ngpus: n,
        first_rank: 0,
    }];
    r.gpus = (0..n)
        .map(|i| {
            let mut g = GpuEntry::new(
                i,
                "n1".into(),
                GpuInfo {
                    device: i as usize,
                    name: "NVIDIA H200".into(),
                    pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + i),
                    ..GpuInfo::default()
                },
            );
            g.health = Some(health(i, 18));
            g.local_probe = Some(LocalProbe::new(i as usize, 1 << 28, 100, 12.5));
            g
        })
        .collect();
    for a in 0..n {
        for b in a + 1..n {
            r.pairs.push(PairRow {
                expected: None,
                ends: Ends::Gpus {
                    node: "n1".into(),
                    a,
                    b,
                },
                ranks: (a, b),
                bytes: MIB256,
                time_us: 1.0,
                busbw: pair,
                gpu_busbw: None,
                first_busbw: None,
            });
        }
    }
    r
}

fn run(r: Report) -> (Report, ExitCode) {
    judge_by(
        &[
            rule("all_reduce", 4, 1, 290.0),
            rule("sendrecv", 2, 1, 255.0),
        ],
        r,
    )
}

fn codes(r: &Report) -> Vec<(String, Option<String>)> {
    r.head
        .reasons
        .iter()
        .map(|x| (x.code.to_string(), x.subject_text()))
        .collect()
}

#[test]
fn a_healthy_node_with_facts_passes() {
    let mut r = report(4, 300.0);
    r.results = vec![row("all_reduce", 300.0)];
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
    assert!(r.warnings.is_empty());
}

#[test]
fn a_dead_nvlink_fails_first_and_explains_the_slow_link() {
    let mut r = report(4, 300.0);
    r.gpus[1].health = Some(health(1, 14));
    // GPU1's pairs are slow.
    for p in r
        .pairs
        .iter_mut()
        .filter(|p| p.gpus().is_some_and(|(_, a, b)| a == 1 || b == 1))
    {
        p.busbw = 150.0;
    }
    r.results = vec![row("all_reduce", 300.0)];
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    let c = codes(&r);
    assert_eq!(c[0], ("nvlink_down".into(), Some("GPU1".into())), "{c:?}");
    assert!(
        r.head.summary.contains("14 of 18 NVLinks active"),
        "{}",
        r.head.summary
    );
    // The bandwidth reason about GPU1 cites the fact; none about other GPUs is cited.
    let slow: Vec<&Reason> = r
        .head
        .reasons
        .iter()
        .filter(|x| x.code.is_bandwidth())
        .collect();
    assert!(!slow.is_empty(), "{:?}", r.head.reasons);
    for s in slow {
        assert!(
            s.message
                .contains("(explained by: GPU 1 (00000000:19:00.0): 14 of 18 NVLinks"),
            "{}",
            s.message
        );
    }
}

#[test]
fn a_gpu_with_shared_memory_is_named_by_its_probe_on_two_gpus() {
    let mut r = report(2, 300.0);
    // GPU1's copy rate halved (another process streams through its memory).
    r.gpus[1].local_probe = Some(LocalProbe::new(1, 1 << 28, 100, 25.0));
    r.results = vec![row("sendrecv", 300.0)];
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    assert_eq!(
        codes(&r),
        vec![("local_probe_slow".into(), Some("GPU1".into()))]
    );
    assert!(
        r.head
            .summary
            .starts_with("GPU1: device-local copy 1074 GB/s < 1440 GB/s"),
        "{}",
        r.head.summary
    );
}

#[test]
fn one_gpu_is_a_probe_not_a_collective_and_never_busbw_zero() {
    let r = report(1, 0.0);
    let (mut r, code) = run(r);
    assert_eq!(code, ExitCode::Pass);
    assert_eq!(
        r.head.summary,
        "1 x NVIDIA H200 on 1 node(s): 1 GPU: no collective; local probe device copy GPU0 2147 GB/s (floor 1440)"
    );
    assert!(!r.head.summary.contains("busbw"));
    r.gpus[0].local_probe = Some(LocalProbe::new(0, 1 << 28, 100, 40.0));
    let (mut r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    assert_eq!(codes(&r)[0].0, "local_probe_slow");
    // A probe that could not run says why (no fault: nothing was measured).
    r.gpus[0].local_probe = None;
    r.gpus[0].local_probe_error = Some("allocating 2 x 268435456 bytes: out of memory".into());
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Pass);
    assert!(
        r.head
            .summary
            .ends_with("local probe: not measured (allocating 2 x 268435456 bytes: out of memory)"),
        "{}",
        r.head.summary
    );
}

#[test]
fn a_missing_gpu_from_the_inventory_is_the_first_reason() {
    let mut r = report(1, 0.0);
    r.facts = Some(NodeFacts {
        expected: None,
        driver_gpus: vec![],
        driver_error: None,
        cuda_visible: Some(1),
        nvml: String::new(),
        nvml_ms: 0.0,
        net: None,
        net_note: String::new(),
        off_cpu: None,
        host: None,
        findings: vec![Finding::new(
            ReasonCode::GpuMissing,
            "GPUs",
            "expected 2 GPUs, CUDA opens 1 with CUDA_VISIBLE_DEVICES=0",
        )
        .with_values(1.0, 2.0)],
    });
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    assert_eq!(r.head.verdict, Verdict::Fail);
    assert_eq!(codes(&r), vec![("gpu_missing".into(), Some("GPUs".into()))]);
    assert!(r.head.summary.starts_with("expected 2 GPUs, CUDA opens 1"));
}

#[test]
fn slow_by_the_host_but_fast_by_the_gpus_is_a_warning_not_fail() {
    let mut r = report(4, 300.0);
    r.results = vec![row("all_reduce", 200.0)];
    r.gpu_side = vec![GpuSide {
        collective: "all_reduce",
        size: MIB256,
        out_of_place_busbw: 320.0,
        in_place_busbw: 318.0,
    }];
    let (mut r, code) = run(r);
    assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
    assert_eq!(r.warnings.len(), 1);
    assert_eq!(r.warnings[0].code, ReasonCode::HostInterference);
    assert!(
        r.head.summary.contains("WARNING host_interference"),
        "{}",
        r.head.summary
    );
    // Slow by the GPUs' clock too: the hardware is slow, FAIL stands.
    r.gpu_side[0].in_place_busbw = 210.0;
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    assert!(r.warnings.is_empty());
    assert_eq!(r.head.reasons[0].code, ReasonCode::BusbwBelowThreshold);
}

fn net(expected: Option<f64>, findings: Vec<Finding>) -> NetFacts {
    NetFacts {
        ports: vec![Port {
            nic: "mlx5_0:1".into(),
            kind: Kind::InfiniBand,
            up: findings.is_empty(),
            state: "4: ACTIVE".into(),
            phys_state: None,
            rate_gbps: Some(400.0),
            width: Some(4),
            rate_text: None,
        }],
        unreadable: vec![],
        expected_pair_gbs: expected,
        note: "0.75 x 400 Gb/s of 1 RDMA port(s) up = 37.5 GB/s".into(),
        findings,
    }
}

#[test]
fn node_pairs_are_held_against_the_nics_and_a_down_port_is_named_and_cited() {
    let mut r = report(1, 0.0);
    r.pairs = vec![PairRow {
        expected: None,
        ends: Ends::Nodes("n1".into(), "n2".into()),
        ranks: (0, 1),
        bytes: MIB256,
        time_us: 1.0,
        busbw: 20.0,
        gpu_busbw: None,
        first_busbw: None,
    }];
    let mut facts = NodeFacts {
        expected: None,
        driver_gpus: vec![],
        driver_error: None,
        cuda_visible: None,
        nvml: String::new(),
        nvml_ms: 0.0,
        net: Some(net(Some(37.5), vec![])),
        net_note: String::new(),
        findings: vec![],
        off_cpu: None,
        host: None,
    };
    r.facts = Some(facts.clone());
    let slow = node_pair_floor(&r.pairs, r.facts.as_ref());
    assert_eq!(slow.len(), 1);
    assert_eq!(slow[0].subject_text().as_deref(), Some("n1<->n2"));
    assert!(
        slow[0].message.contains("20.0 GB/s < 37.5 GB/s"),
        "{}",
        slow[0].message
    );
    r.pairs[0].busbw = 40.0;
    assert!(node_pair_floor(&r.pairs, r.facts.as_ref()).is_empty());
    // A port down: FAIL naming it, cited by the node pair's slow reason.
    let down = Finding::new(
        ReasonCode::NetPortDown,
        "mlx5_0:1",
        "NIC mlx5_0:1 that NCCL uses is down",
    );
    facts.net = Some(net(Some(37.5), vec![down]));
    r.facts = Some(facts);
    let f = node_findings(&r.gpus, r.facts.as_ref(), 0.85);
    assert_eq!(f.len(), 1);
    assert_eq!(reason(f[0].0, &f[0].1).code, ReasonCode::NetPortDown);
    let mut rs = vec![Reason {
        code: ReasonCode::NodePairOutlier,
        message: "n1<->n2 slow".into(),
        subject: Some("n1<->n2".into()),
        measured: None,
        limit: None,
    }];
    cite(&mut rs, &f);
    assert_eq!(
        rs[0].message,
        "n1<->n2 slow (explained by: NIC mlx5_0:1 that NCCL uses is down)"
    );
}

#[test]
fn subjects_name_their_gpus() {
    assert_eq!(
        scopes_of(Some(&"n1 GPU0<->GPU12".into())),
        Some(vec![Scope::Gpu(0), Scope::Gpu(12)])
    );
    assert_eq!(scopes_of(Some(&"GPU3".into())), Some(vec![Scope::Gpu(3)]));
    assert_eq!(
        scopes_of(Some(&"node1<->node2".into())),
        Some(vec![Scope::Net])
    );
    assert_eq!(scopes_of(None), None);
}

/// The facts of one node with the host's load and the off-CPU finding as given.
fn facts_with(host: Option<HostLoad>, starved: bool) -> NodeFacts {
    NodeFacts {
        expected: None,
        driver_gpus: vec![],
        driver_error: None,
        cuda_visible: None,
        nvml: String::new(),
        nvml_ms: 0.0,
        net: None,
        net_note: String::new(),
        findings: if starved {
            vec![Finding::new(
                ReasonCode::WorkerStarved,
                "n1",
                "n1: the check's worker could not run for 60% of 3.0 s",
            )]
        } else {
            vec![]
        },
        off_cpu: None,
        host,
    }
}

fn load(others: f64) -> HostLoad {
    HostLoad {
        window_s: 3.0,
        cpus: 64,
        others_share: others,
        check_share: 0.0,
        own_wait_share: Some(0.0),
        others_on_own_cpus: None,
        top: vec![crate::facts::host_load::Consumer {
            pid: 4242,
            user: "alice".into(),
            command: "stress".into(),
            job: None,
            cpus: 63.0,
        }],
    }
}

/// Host clock, GPU clock, a starved worker and the host's load in every combination: the
/// documented verdict and cause (module comment of `evidence`).
#[test]
fn the_cause_table_of_host_clock_gpu_clock_starved_worker_and_host_load() {
    // (pairs by the host's clock, by the GPUs' clock, worker starved, host busy)
    //   -> (exit, the first reason's code, the warnings' codes)
    use ReasonCode::*;
    let (slow, fast) = (168.0, 290.0);
    type Case = (
        f64,
        f64,
        bool,
        bool,
        ExitCode,
        Option<ReasonCode>,
        Vec<ReasonCode>,
    );
    let table: [Case; 16] = [
        (fast, fast, false, false, ExitCode::Pass, None, vec![]),
        (
            fast,
            fast,
            false,
            true,
            ExitCode::Pass,
            None,
            vec![HostBusy],
        ),
        (
            fast,
            fast,
            true,
            false,
            ExitCode::Busy,
            Some(WorkerStarved),
            vec![],
        ),
        (
            fast,
            fast,
            true,
            true,
            ExitCode::Busy,
            Some(HostBusy),
            vec![],
        ),
        (
            slow,
            fast,
            false,
            false,
            ExitCode::Pass,
            None,
            vec![HostInterference],
        ),
        (
            slow,
            fast,
            false,
            true,
            ExitCode::Pass,
            None,
            vec![HostInterference, HostBusy],
        ),
        (
            slow,
            fast,
            true,
            false,
            ExitCode::Busy,
            Some(WorkerStarved),
            vec![HostInterference],
        ),
        (
            slow,
            fast,
            true,
            true,
            ExitCode::Busy,
            Some(HostBusy),
            vec![HostInterference],
        ),
        (fast, slow, false, false, ExitCode::Pass, None, vec![]),
        (
            fast,
            slow,
            false,
            true,
            ExitCode::Pass,
            None,
            vec![HostBusy],
        ),
        (
            fast,
            slow,
            true,
            false,
            ExitCode::Busy,
            Some(WorkerStarved),
            vec![],
        ),
        (
            fast,
            slow,
            true,
            true,
            ExitCode::Busy,
            Some(HostBusy),
            vec![],
        ),
        (
            slow,
            slow,
            false,
            false,
            ExitCode::Fail,
            Some(BusbwBelowThreshold),
            vec![],
        ),
        (
            slow,
            slow,
            false,
            true,
            ExitCode::Busy,
            Some(HostBusy),
            vec![],
        ),
        // A starved worker beside pairs slow by both clocks: the pairs are a reading of
        // their own (FAIL), the starved worker leads as their likely cause.
        (
            slow,
            slow,
            true,
            false,
            ExitCode::Fail,
            Some(WorkerStarved),
            vec![],
        ),
        (
            slow,
            slow,
            true,
            true,
            ExitCode::Busy,
            Some(HostBusy),
            vec![],
        ),
    ];
    for (host_clock, gpu_clock, starved, busy, exit, first, warned) in table {
        let mut r = report(4, host_clock);
        for p in &mut r.pairs {
            p.gpu_busbw = Some(gpu_clock);
        }
        r.facts = Some(facts_with(busy.then(|| load(0.97)), starved));
        let case = format!("host {host_clock} gpu {gpu_clock} starved {starved} busy {busy}");
        let (r, code) = run(r);
        assert_eq!(code, exit, "{case}: {:?}", r.head.reasons);
        assert_eq!(
            r.head.reasons.first().map(|x| x.code),
            first,
            "{case}: {:?}",
            r.head.reasons
        );
        let got: Vec<ReasonCode> = r.warnings.iter().map(|w| w.code).collect();
        assert_eq!(got, warned, "{case}: {:?}", r.warnings);
        // Busy alone is an ERROR that says so, never a FAIL of the hardware.
        assert_eq!(r.head.verdict, exit.verdict(), "{case}");
        assert_eq!(
            r.head
                .summary
                .starts_with("node busy, the hardware was not judged"),
            exit == ExitCode::Busy,
            "{case}: {}",
            r.head.summary
        );
        // A busy host is never blamed on a GPU, link, NIC or path.
        if busy {
            assert!(
                r.head.reasons.iter().all(|x| x.code == HostBusy),
                "{case}: {:?}",
                r.head.reasons
            );
        }
        if first == Some(HostBusy) {
            let m = &r.head.reasons[0].message;
            assert!(
                m.contains("pid 4242 (alice, stress) 63.0 CPU"),
                "{case}: {m}"
            );
            assert_eq!(r.head.reasons[0].subject_text().as_deref(), Some("n1"));
        }
    }
}

#[test]
fn a_busy_host_never_hides_what_the_node_reports_itself_or_wrong_data() {
    let mut r = report(4, 168.0);
    for p in &mut r.pairs {
        p.gpu_busbw = Some(168.0);
    }
    r.gpus[2].health = Some(health(2, 12));
    r.facts = Some(facts_with(Some(load(0.97)), false));
    let (mut r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    let codes: Vec<ReasonCode> = r.head.reasons.iter().map(|x| x.code).collect();
    assert_eq!(
        codes,
        vec![ReasonCode::HostBusy, ReasonCode::NvlinkDown],
        "{:?}",
        r.head.reasons
    );
    // A host below the busy share is not the cause: the slow pairs stand.
    r.gpus[2].health = Some(health(2, 18));
    r.facts = Some(facts_with(Some(load(0.5)), false));
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    assert_eq!(r.head.reasons[0].code, ReasonCode::BusbwBelowThreshold);
    assert!(r.warnings.is_empty());
}

#[test]
fn the_pair_warning_names_the_pairs_the_host_slowed_and_both_numbers() {
    let mut r = report(4, 290.0);
    r.pairs[1].busbw = 171.1;
    r.pairs[1].gpu_busbw = Some(287.8);
    let (mut r, code) = run(r);
    assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
    assert_eq!(r.warnings.len(), 1);
    let m = &r.warnings[0].message;
    assert!(
        m.contains("1 pair(s) slow by the host's clock only (GPU0<->GPU2)")
            && m.contains("171.1 GB/s by the host's clock, 287.8 by the GPUs'"),
        "{m}"
    );
    // Without a GPU number the host's is all there is: FAIL as before.
    r.pairs[1].gpu_busbw = None;
    let (_, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
}
