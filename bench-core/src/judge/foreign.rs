//! Other processes on the GPUs this process measured (NVML's list, `gpus[].health.processes`,
//! the worker's own pid left out), in every mode: a job on such a GPU will meet them, so they
//! are always named (pid, user, memory). Where slow results on the GPU (or the whole check)
//! made the verdict FAIL, the process is their cause (`gpu_busy`, class busy: end it, do not
//! replace the GPU); where the GPU measured fine, the process was idle and is a warning
//! (`foreign_process`), never a FAIL. Whether a busy node drains is the prolog's rule
//! (`stray_processes`), not the worker's.

use crate::report::json::Report;
use nccl_check_contract::report::cause::is_speed_reading;
use nccl_check_contract::report::culprit::Culprit;
use nccl_check_contract::report::process::{busy_prefix, GpuProcess};
use nccl_check_contract::report::reason::{Reason, ReasonCode};

/// Whether `r` is a slow reading about GPU `k` of this process on `host`, its node, or the
/// whole check (no subject).
fn slows(r: &Reason, k: u32, host: &str) -> bool {
    if r.code == ReasonCode::GpuBusy {
        // The localizer's reading of this node gave way to its own finding, shared with every
        // process (`localize::own`): GPU k of this node busy, which this process names itself.
        return matches!(r.culprit(), Some(Culprit::Gpu { node: Some(n), gpu }) if gpu == k && n == host);
    }
    if !is_speed_reading(r.code) {
        return false;
    }
    let here = |n: &Option<String>| n.as_deref().is_none_or(|n| n == host);
    match r.culprit() {
        None => true,
        Some(Culprit::Gpu { node, gpu }) => gpu == k && here(&node),
        Some(Culprit::GpuPair { node, a, b, .. }) => (a == k || b == k) && here(&node),
        Some(Culprit::Node(n)) => n == host,
        Some(Culprit::NodePair(a, b)) => a == host || b == host,
        Some(Culprit::Rail { node, gpu }) => node == host && gpu == k,
        Some(Culprit::Process(_) | Culprit::Other(_)) => false,
    }
}

/// This process's node as the check names it (the member that holds its first GPU's rank:
/// `NCCL_HOSTID` or Slurm's node name, what the localizer's reasons name), else the host name.
pub fn own_node(report: &Report) -> String {
    let first = report.gpus.iter().map(|g| g.rank).min();
    first
        .and_then(|r| {
            report
                .processes
                .iter()
                .find(|m| m.first_rank <= r && r < m.first_rank + m.ngpus)
        })
        .map_or_else(|| report.host.clone(), |m| m.host.clone())
}

/// The reasons (`gpu_busy`, to lead the FAIL's reasons) and warnings (`foreign_process`) for
/// the other processes on this process's GPUs, given the FAIL reasons judged so far.
pub fn foreign_processes(report: &Report, reasons: &[Reason]) -> (Vec<Reason>, Vec<Reason>) {
    let mut gpus: Vec<_> = report.gpus.iter().collect();
    gpus.sort_by_key(|g| g.rank);
    let (mut busy, mut idle) = (Vec::new(), Vec::new());
    let node = own_node(report);
    for (k, g) in gpus.iter().enumerate() {
        let listed: &[GpuProcess] = g.health.as_ref().map_or(&[], |h| h.processes.as_slice());
        // The check's own processes are no other process (emulated nodes share one GPU).
        let others: Vec<GpuProcess> = listed
            .iter()
            .filter(|p| !report.processes.iter().any(|m| m.pid == p.pid))
            .cloned()
            .collect();
        if others.is_empty() {
            continue;
        }
        let subject = crate::report::gpu_label(k as u32);
        let named = busy_prefix(&subject, &others);
        let named = named.trim_end().trim_end_matches(';');
        let already = reasons
            .iter()
            .any(|r| r.code == ReasonCode::GpuBusy && r.subject.as_deref() == Some(&subject));
        if already {
            continue;
        }
        if reasons.iter().any(|r| slows(r, k as u32, &node)) {
            busy.push(Reason {
                code: ReasonCode::GpuBusy,
                message: format!(
                    "{named}: the slow results on it are that process's load, not its \
                     hardware's"
                ),
                subject: Some(subject),
                measured: None,
                limit: None,
            });
        } else {
            let held = named.replacen(": busy: ", ": ", 1);
            idle.push(Reason {
                code: ReasonCode::ForeignProcess,
                message: format!("{held} on it, idle while measured: a job on it shares it"),
                subject: Some(subject),
                measured: None,
                limit: None,
            });
        }
    }
    (busy, idle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::gpu_health::GpuHealth;
    use crate::judge::floors::tests::rule;
    use crate::judge::overall::{judge_alone, Judging};
    use crate::meet::rendezvous::Member;
    use crate::report::gpu::GpuInfo;
    use crate::report::json::GpuEntry;
    use crate::report::{PairKind, PairRow};
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
            kind: PairKind::Gpu,
            node: "n1".into(),
            a: "GPU0".into(),
            b: "GPU1".into(),
            ranks: (0, 1),
            bytes: MIB256,
            time_us: 1.0,
            busbw: pair,
            gpu_busbw: None,
            first_busbw: None,
        });
        r
    }

    fn run(r: &mut Report) -> ExitCode {
        let rules = vec![rule("sendrecv", 2, 1, 255.0)];
        let expect = crate::facts::transport::TransportExpectation::default();
        let judging = Judging {
            thresholds: &rules,
            outlier_fraction: 0.85,
            min_busbw: None,
            expect: &expect,
        };
        judge_alone(r, &judging, None, &|_, _| true)
    }

    /// The issue-33 case: an idle process holding 20 GiB of a GPU, everything fast: PASS, and
    /// the report and the verdict line name it as a warning.
    #[test]
    fn an_idle_foreign_process_is_a_warning_naming_it_and_the_check_passes() {
        let mut r = report(Some(4242), 300.0);
        assert_eq!(run(&mut r), ExitCode::Pass);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let w = &r.warnings[0];
        assert_eq!(w.code, ReasonCode::ForeignProcess);
        assert_eq!(w.subject.as_deref(), Some("GPU1"));
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
        let mut clean = report(None, 300.0);
        assert_eq!(run(&mut clean), ExitCode::Pass);
        assert!(clean.warnings.is_empty());
        // Another process of this check on the GPU (emulated nodes sharing one) is none.
        let mut ours = report(Some(4242), 100.0);
        ours.processes[0].pid = 4242;
        assert_eq!(run(&mut ours), ExitCode::Fail);
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
        let mut r = report(Some(4242), 100.0);
        assert_eq!(run(&mut r), ExitCode::Fail);
        let first = &r.head.reasons[0];
        assert_eq!(
            (first.code, first.subject.as_deref()),
            (ReasonCode::GpuBusy, Some("GPU1"))
        );
        assert!(first
            .message
            .starts_with("GPU1: busy: 1 other process (pid 4242"));
        let deciding = nccl_check_contract::report::cause::deciding(&r.head.reasons).expect("one");
        assert_eq!(deciding.cause().as_str(), "busy");
        assert!(r.warnings.is_empty());
        let mut clean = report(None, 100.0);
        assert_eq!(run(&mut clean), ExitCode::Fail);
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
            message: "e2: every node pair it is in is slow on all 1 NICs, with cleared partners"
                .into(),
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
        assert_eq!(run(&mut r), ExitCode::Fail);
        let got: Vec<(ReasonCode, Option<&str>)> = r
            .head
            .reasons
            .iter()
            .map(|x| (x.code, x.subject.as_deref()))
            .collect();
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
        let (busy, idle) = foreign_processes(&r, &[other]);
        assert!(busy.is_empty());
        assert_eq!(idle.len(), 1);
        let mine = Reason {
            subject: Some("n1<->n3".into()),
            ..Reason::plain(ReasonCode::NodePairSlow, "n1<->n3 slow")
        };
        assert_eq!(foreign_processes(&r, &[mine]).0.len(), 1);
    }
}
