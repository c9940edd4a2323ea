//! The suites' fake workers against the contract: they accept every command line that
//! [`WorkerArgs`] makes, refuse an unknown plan as the worker does, and write reports that the
//! callers' reader takes, with the real worker's summary shapes.

use crate::args::{PlanName, WorkerArgs};
use crate::report::read::{read_report, ReportError};
use crate::report::Report;
use crate::verdict::Verdict;
use nccl_check_host::supervise::{self, Ending, Finished, Output, Spec};
use nccl_check_host::test_support::scratch_dir;
use std::path::Path;
use std::time::Duration;

const SPANK_FAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fake-worker/nccl-check-fake"
);
const PROLOG_FAKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/prolog/fake-worker");

fn run(
    fake: &str,
    args: &WorkerArgs,
    dir: &Path,
    mode: &str,
) -> (Finished, Result<Report, ReportError>) {
    let mut spec = Spec::new(fake, args.to_args(), Duration::from_secs(20))
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_CHECK_FAKE", mode)
        .env("NCCL_CHECK_FAKE_MARKER", dir.join("marker"))
        .env("SLURMD_NODENAME", "n7")
        .env("SLURM_NNODES", "2");
    spec.stderr = Output::Tail { max_bytes: 4096 };
    let done = supervise::run(spec).expect("the fake starts");
    let report = read_report(&dir.join("n7").join("report.json"), 1 << 20);
    (done, report)
}

/// Every combination of optional fields, with what the prolog fake insists on (--json, --quiet).
fn every_args(dir: &Path) -> Vec<WorkerArgs> {
    std::fs::write(dir.join("worker.toml"), "").expect("write");
    (0u32..32)
        .map(|bits| {
            let on = |b: u32| bits & (1 << b) != 0;
            let mut a = WorkerArgs::new(
                if on(0) {
                    PlanName::full()
                } else {
                    PlanName::quick()
                },
                9,
            );
            a.json = Some(dir.join("n7").join("report.json"));
            a.quiet = true;
            a.config = on(1).then(|| dir.join("worker.toml"));
            a.gpus = on(2).then(|| vec![1, 3]);
            if on(3) {
                a.rank = Some(1);
                a.world = Some(2);
                a.rendezvous = Some("n1:29501".into());
            }
            a.expect_collnet = on(4);
            a
        })
        .collect()
}

/// The real worker's PASS summary: `<gpus> x <gpu> on <nodes> node(s), <collective> <size>
/// busbw <x> GB/s` (bench-core main.rs `judge`).
fn is_pass_summary(s: &str) -> bool {
    let Some((gpus, rest)) = s.split_once(" x ") else {
        return false;
    };
    let Some((_, rest)) = rest.split_once(" on ") else {
        return false;
    };
    let Some((nodes, best)) = rest.split_once(" node(s), ") else {
        return false;
    };
    gpus.parse::<u32>().is_ok()
        && nodes.parse::<u32>().is_ok()
        && best.contains(" busbw ")
        && best.ends_with(" GB/s")
}

#[test]
fn both_fakes_accept_every_command_line_of_the_contract() {
    let d = scratch_dir("fakes-accept");
    std::fs::create_dir_all(d.join("n7")).expect("mkdir");
    for fake in [SPANK_FAKE, PROLOG_FAKE] {
        for a in every_args(&d) {
            let (done, report) = run(fake, &a, &d, "pass");
            let stderr = String::from_utf8_lossy(&done.stderr);
            assert_eq!(
                done.ending,
                Ending::Exited(0),
                "{fake} {}: {stderr}",
                a.display()
            );
            assert_eq!(report.expect("a report").head.verdict, Verdict::Pass);
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn an_unknown_plan_is_a_usage_error_listing_the_plans() {
    let d = scratch_dir("fakes-plan");
    std::fs::create_dir_all(d.join("n7")).expect("mkdir");
    let mut a = every_args(&d).remove(0);
    a.plan = PlanName::new("nope").expect("valid");
    for fake in [SPANK_FAKE, PROLOG_FAKE] {
        let (done, report) = run(fake, &a, &d, "pass");
        assert_eq!(done.ending, Ending::Exited(2), "{fake}");
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert!(
            stderr.contains("nccl-check: ERROR usage: unknown plan 'nope' (plans: full, quick)"),
            "{fake}: {stderr}"
        );
        assert!(matches!(report, Err(ReportError::Missing(_))), "{fake}");
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn the_spank_fakes_reports_have_the_real_summary_shapes() {
    let d = scratch_dir("fakes-shape");
    std::fs::create_dir_all(d.join("n7")).expect("mkdir");
    let a = every_args(&d).remove(8); // rank 1 of 2
    let (done, pass) = run(SPANK_FAKE, &a, &d, "pass");
    assert_eq!(done.ending, Ending::Exited(0));
    let pass = pass.expect("a report");
    assert!(is_pass_summary(&pass.head.summary), "{}", pass.head.summary);
    assert!(pass.head.reasons.is_empty());
    let (done, fail) = run(SPANK_FAKE, &a, &d, "fail");
    assert_eq!(done.ending, Ending::Exited(1));
    let fail = fail.expect("a report");
    assert_eq!((fail.head.verdict, fail.head.exit_code), (Verdict::Fail, 1));
    assert_eq!(fail.head.summary, fail.head.reasons[0].message);
    assert_eq!(
        fail.head.reasons[0].code,
        crate::report::reason::ReasonCode::BusbwBelowThreshold
    );
    assert!(
        fail.head.summary.contains("responsible: n7 GPU"),
        "{}",
        fail.head.summary
    );
    let (done, error) = run(SPANK_FAKE, &a, &d, "error");
    assert_eq!(done.ending, Ending::Exited(5));
    let error = error.expect("a report");
    assert_eq!(
        (error.head.verdict, error.head.summary.as_str()),
        (Verdict::Error, error.head.reasons[0].message.as_str())
    );
    assert!(!is_pass_summary(
        "4 GPUs on 1 host(s), all_reduce 256 MiB busbw 329.2 GB/s"
    ));
    std::fs::remove_dir_all(&d).ok();
}
