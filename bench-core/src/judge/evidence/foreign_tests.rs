//! The foreign processes policy (`evidence::foreign_processes`) through the whole verdict.

use super::*;
use crate::facts::gpu_health::GpuHealth;
use crate::judge::overall::tests::judge_by;
use crate::measure::gpu::GpuInfo;
use crate::measure::rows::{Ends, PairRow};
use crate::meet::rendezvous::Member;
use crate::model::floors::tests::rule;
use crate::report::json::GpuEntry;
use crate::report::json::Report;
use nccl_check_contract::exit::ExitCode;

const MIB256: u64 = 256 << 20;

/// One node of two H200s, GPU3's memory held by `holder` when given; the GPU pair at
/// `pair` GB/s.
fn report(holder: Option<u32>, pair: f64) -> Report {
    let mut r = Report::new("n1".into(), 0.0);
    r.nranks = 2;
    r.processes = vec![Member {
        proc_rank: 0,
        host: "n1".into(),
        pid: 1,
        ngpus: 2,
        first_rank: 0,
    }];
    r.gpus = (0..2u32)
        .map(|i| {
            let mut g = GpuEntry::new(
                i,
                "n1".into(),
                GpuInfo {
                    device: i as usize,
                    name: "NVIDIA H200".into(),
                    ..GpuInfo::default()
                },
            );
            let health: GpuHealth = serde_json::from_value(serde_json::json!({
                "index": i, "bus_id": "", "name": "NVIDIA H200",
                "processes": holder.filter(|_| i == 1).map(|pid| vec![serde_json::json!({
                    "pid": pid, "user": "bob", "used_bytes": 20u64 << 30
                })]).unwrap_or_default()
            }))
            .expect("health");
            g.health = Some(health);
            g
        })
        .collect();
    r.pairs.push(PairRow {
        expected: None,
        ends: Ends::Gpus {
            node: "n1".into(),
            a: 0,
            b: 1,
        },
        ranks: (0, 1),
        bytes: MIB256,
        time_us: 1.0,
        busbw: pair,
        gpu_busbw: None,
        first_busbw: None,
    });
    r
}

fn run(r: Report) -> (Report, ExitCode) {
    judge_by(&[rule("sendrecv", 2, 1, 255.0)], r)
}

/// The issue-33 case: an idle process holding 20 GiB of a GPU, everything fast: PASS, and
/// the report and the verdict line name it as a warning.
#[test]
fn an_idle_foreign_process_is_a_warning_naming_it_and_the_check_passes() {
    let r = report(Some(4242), 300.0);
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Pass);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    let w = &r.warnings[0];
    assert_eq!(w.code, ReasonCode::ForeignProcess);
    assert_eq!(w.subject_text().as_deref(), Some("GPU1"));
    assert_eq!(
        w.message,
        "GPU1: 1 other process (pid 4242, user bob, 20.0 GiB) on it, idle while measured: \
         a job on it shares it"
    );
    assert!(
        r.head
            .summary
            .contains("WARNING foreign_process: GPU1: 1 other process (pid 4242"),
        "{}",
        r.head.summary
    );
    let clean = report(None, 300.0);
    let (clean, code) = run(clean);
    assert_eq!(code, ExitCode::Pass);
    assert!(clean.warnings.is_empty());
    // Another process of this check on the GPU (emulated nodes sharing one) is none.
    let mut ours = report(Some(4242), 100.0);
    ours.processes[0].pid = 4242;
    let (ours, code) = run(ours);
    assert_eq!(code, ExitCode::Fail);
    assert!(ours.warnings.is_empty(), "{:?}", ours.warnings);
    assert!(
        ours.head
            .reasons
            .iter()
            .all(|r| r.code != ReasonCode::GpuBusy),
        "{:?}",
        ours.head.reasons
    );
}

/// A slow pair on a GPU another process holds: FAIL, and the cause that leads is that
/// GPU busy (class busy), before the slow link it explains.
#[test]
fn a_slow_gpu_another_process_holds_fails_as_busy_not_as_a_slow_link() {
    let r = report(Some(4242), 100.0);
    let (r, code) = run(r);
    assert_eq!(code, ExitCode::Fail);
    let first = &r.head.reasons[0];
    assert_eq!(
        (first.code, first.subject_text().as_deref()),
        (ReasonCode::GpuBusy, Some("GPU1"))
    );
    assert!(first
        .message
        .starts_with("GPU1: busy: 1 other process (pid 4242"));
    let deciding = nccl_check_contract::report::cause::deciding(&r.head.reasons).expect("one");
    assert_eq!(deciding.cause().as_str(), "busy");
    assert!(r.warnings.is_empty());
    let clean = report(None, 100.0);
    let (clean, code) = run(clean);
    assert_eq!(code, ExitCode::Fail);
    assert_eq!(
        nccl_check_contract::report::cause::deciding(&clean.head.reasons)
            .map(|d| d.cause().as_str()),
        Some("hardware")
    );
}

/// The issue-33 case on emulated nodes: node e2 (`NCCL_HOSTID`, on host "gpu-host"), its
/// GPU held by another process, the localizer blaming e2's network: e2's own verdict names
/// its GPU busy and not its NICs.
#[test]
fn on_a_busy_node_its_gpu_busy_replaces_the_localizers_network_reading() {
    let mut r = report(Some(4242), 300.0);
    r.host = "gpu-host".into();
    r.processes[0].host = "e2".into();
    let slow = Reason {
        code: ReasonCode::NodeSlow,
        message: "e2: every node pair it is in is slow on all 1 NICs, with cleared partners".into(),
        subject: Some("e2".into()),
        measured: None,
        limit: None,
    };
    let summary = serde_json::json!({
        "plan": "adaptive", "nodes": 4, "rails": 1, "rounds": 4, "localization_rounds": 2,
        "allocation_busbw": null, "allocation_floor": null, "pair_groups": 4,
        "reasons": [slow],
    });
    r.localization = Some(serde_json::from_value(summary).expect("a summary"));
    let (r, code) = run(r);
    // A busy GPU alone: busy (exit 8), never a hardware FAIL.
    assert_eq!(code, ExitCode::Busy);
    let texts: Vec<(ReasonCode, Option<String>)> = r
        .head
        .reasons
        .iter()
        .map(|x| (x.code, x.subject_text()))
        .collect();
    let got: Vec<(ReasonCode, Option<&str>)> =
        texts.iter().map(|(c, s)| (*c, s.as_deref())).collect();
    assert_eq!(
        got,
        [(ReasonCode::GpuBusy, Some("GPU1"))],
        "{:?}",
        r.head.reasons
    );
    assert!(
        r.head.summary.contains("busy: 1 other process (pid 4242"),
        "{}",
        r.head.summary
    );
}

/// A slow reading elsewhere (another node's pair) is not this GPU's holder's doing.
#[test]
fn a_slow_reading_that_does_not_touch_the_gpu_leaves_the_process_a_warning() {
    let r = report(Some(7), 300.0);
    let other = Reason {
        code: ReasonCode::NodePairSlow,
        message: "n2<->n3 slow".into(),
        subject: Some("n2<->n3".into()),
        measured: None,
        limit: None,
    };
    let (busy, idle) = foreign_processes(&r.gpus, &r.processes, "n1", &[other]);
    assert!(busy.is_empty());
    assert_eq!(idle.len(), 1);
    let mine = Reason {
        subject: Some("n1<->n3".into()),
        ..Reason::plain(ReasonCode::NodePairSlow, "n1<->n3 slow")
    };
    assert_eq!(
        foreign_processes(&r.gpus, &r.processes, "n1", &[mine])
            .0
            .len(),
        1
    );
}
