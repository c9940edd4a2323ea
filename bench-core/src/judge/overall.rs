//! The verdict of a finished run, as plain functions of its report and the configuration:
//! average busbw per collective, the reasons for FAIL (thresholds and outliers from
//! `analysis`; the node's facts, host interference, a busy host, other processes on the GPUs and
//! transport fallbacks from `evidence`), PASS or FAIL, and the summary line.
//! CUDA's answer to "can these two GPUs reach each other directly" comes in as a function, so
//! all of it runs without a GPU.

use crate::config::network::TransportExpectation;
use crate::facts::transport::TransportSummary;
use crate::judge::analysis;
use crate::judge::evidence::{self, PeerAccess};
use crate::measure::rows::{Expected, Row};
use crate::meet::topology::Topology;
use crate::model::collectives::{Collective, SendRecv};
use crate::model::floors::Floors;
use crate::model::stats::num;
use crate::model::thresholds::GpuModel;
use crate::model::thresholds::Threshold;
use crate::report::assemble::Judgement;
use crate::report::json::Report;
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::report::reason::Reason;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the configuration says about judging.
#[derive(Debug, Clone, Copy)]
pub struct Judging<'a> {
    pub thresholds: &'a [Threshold],
    /// The outlier rule: below this fraction of the peers' median is FAIL.
    pub outlier_fraction: f64,
    /// `--min-busbw`.
    pub min_busbw: Option<f64>,
    /// What the paths must use.
    pub expect: &'a TransportExpectation,
}

/// The GPU model thresholds are looked up by: this process's first GPU.
pub fn gpu_name(report: &Report) -> &str {
    report.gpus.first().map_or("", |g| g.info.name.as_str())
}

/// What a run was measured on, built once before it measured (`orchestrate`) and handed to the
/// GPU threads, the judge and the plot alike: which node each rank is on, and the GPU model
/// and interconnect the floors are looked up by.
#[derive(Debug, Clone)]
pub struct Basis {
    pub topology: Arc<Topology>,
    pub gpu: Arc<GpuModel>,
}

/// The floors of this run (the same the runner's retest used, now knowing whether CollNet or
/// NVLS carried the collectives).
pub fn floors<'a>(report: &'a Report, judging: &Judging<'a>, basis: &'a Basis) -> Floors<'a> {
    Floors {
        rules: judging.thresholds,
        gpu: basis.gpu.gpu(),
        nodes: basis.topology.node_count(),
        gpus: report.nranks,
        min_busbw: judging.min_busbw,
        in_network_algorithms: report
            .transports
            .as_ref()
            .is_some_and(|t| t.collnet_used || t.nvls_used),
    }
}

/// The run's own noise, the same in every process: the widest spread its budgeted steps' samples
/// (`sizing`) and the localizer's retests (`localization_noise`) read; none where neither was
/// sampled (a counted plan without localizer retests judges as before).
fn run_noise(report: &Report) -> Option<f64> {
    let sampled = report.sizing.iter().map(|s| s.spread);
    sampled
        .chain(report.localization_noise)
        .filter(|n| n.is_finite() && *n > 0.0)
        .reduce(f64::max)
}

/// Judges a finished run from its report: PASS or FAIL, the reasons and warnings, the summary,
/// `avg_busbw` and what each result was held against (`Report::record_verdict` puts them in).
/// `log` is NCCL's parsed log, when it was recorded. One pass, each family of reasons in turn,
/// then which cause wins where two name one part.
pub fn judge(
    report: &Report,
    judging: &Judging,
    basis: &Basis,
    log: Option<&TransportSummary>,
    can_access_peer: PeerAccess,
) -> Judgement {
    let topology = &basis.topology;
    let floors = floors(report, judging, basis);
    let fraction = judging.outlier_fraction;
    // The node's own facts first: they name the part, and are cited in what they explain.
    let facts = evidence::node_findings(&report.gpus, report.facts.as_ref(), fraction);
    let mut reasons: Vec<Reason> = facts.iter().map(|(s, f)| evidence::reason(*s, f)).collect();
    let (mut measured, mut warnings) = measured(report, &floors, fraction, topology.node_count());
    evidence::cite(&mut measured, &facts);
    // The node-level localizer (multi-node checks) judged its own rounds; its reasons join.
    // A reading within the run's own noise of its limit only warns (`analysis::within_noise`).
    measured.extend(report.localization.iter().flat_map(|l| l.reasons.clone()));
    let (measured, marginal) = analysis::within_noise(measured, run_noise(report));
    reasons.extend(measured);
    warnings.extend(marginal);
    // Other nodes' own findings: their causes, and failing every process (`localize::own`).
    crate::localize::own::other_nodes_findings(&mut reasons, &report.node_findings);
    // A busy host explains what it slowed, never an outlier among equally loaded peers
    // (`judge::load`, the decision table).
    let node = evidence::own_node(&report.gpus, &report.processes, &report.host);
    let conditions = crate::judge::load::Conditions {
        nodes: topology.node_names(),
        here: &node,
        load: report.facts.as_ref().and_then(|f| f.host.as_ref()),
        others: &report.node_findings,
    };
    let (mut reasons, host_warnings) = crate::judge::load::weigh(reasons, &conditions);
    warnings.extend(host_warnings);
    if let Some(log) = log {
        let (gpus, expect) = (&report.gpus, judging.expect);
        let fallbacks = evidence::transport_reasons(gpus, topology, expect, log, can_access_peer);
        reasons.extend(fallbacks);
    }
    // Other processes on the GPUs: the cause of the slow results on them (first), else a
    // warning that a job will meet them.
    let (busy, foreign) =
        evidence::foreign_processes(&report.gpus, &report.processes, &node, &reasons);
    reasons.splice(0..0, busy);
    // This node's own finding is its cause, not the localizer's reading of its network.
    crate::localize::own::own_node_wins(&mut reasons, &node, topology.node_names());
    let warnings: Vec<Reason> = foreign.into_iter().chain(warnings).collect();
    let code = exit_code(&reasons);
    let (rows, pairs) = expectations(report, &floors, judging.outlier_fraction);
    let mut summary = summary(report, &rows, topology.node_count(), &reasons);
    for g in &report.shared_gpus {
        let ranks: Vec<String> = g.iter().map(u32::to_string).collect();
        summary += &format!(
            "; ranks {} shared one GPU (--shared-gpus: emulated nodes, probes in turns)",
            ranks.join(",")
        );
    }
    if code == ExitCode::Busy {
        summary = format!("node busy, the hardware was not judged: {summary}");
    }
    if let Some(w) = warnings.first() {
        summary = format!("{summary}; WARNING {}: {}", w.code, w.message);
    }
    Judgement {
        code,
        summary,
        reasons,
        warnings,
        avg_busbw: avg_busbw(&report.results),
        rows,
        pairs,
    }
}

/// PASS without reasons; a check whose every reason is a busy node (another process on a GPU,
/// a starved worker, a busy host) ends busy, an ERROR, never a FAIL: the hardware was not
/// judged, and only a FAIL says it failed; any other reason is a FAIL.
pub fn exit_code(reasons: &[Reason]) -> ExitCode {
    use nccl_check_contract::report::cause::CauseClass;
    if reasons.is_empty() {
        ExitCode::Pass
    } else if reasons.iter().all(|r| r.cause() == CauseClass::Busy) {
        ExitCode::Busy
    } else {
        ExitCode::Fail
    }
}

/// The measurements' reasons (rows below their floor or their peers, slow pairs and their
/// culprits, node pairs below their NICs' rate) and the warnings for what only the host slowed
/// (fast by the GPUs' clock: warned about, not held to a floor; pairs judged at what they
/// delivered).
fn measured(
    report: &Report,
    floors: &Floors,
    fraction: f64,
    nodes: u32,
) -> (Vec<Reason>, Vec<Reason>) {
    let all = report.nranks;
    let (mut warnings, spared) =
        evidence::host_interference(&report.results, &report.gpu_side, &|c, b| {
            floors.floor(c, all, b)
        });
    let (pairs, pair_warnings) = evidence::pair_host_interference(
        &report.pairs,
        fraction,
        &|c, n, b| floors.floor(c, n, b),
        nodes > 1,
    );
    warnings.extend(pair_warnings);
    let floor = |c: &str, n: u32, b: u64| {
        let host_slowed = n == all && spared.iter().any(|(sc, sb)| sc == c && *sb == b);
        floors.floor(c, n, b).filter(|_| !host_slowed)
    };
    let mut reasons =
        crate::judge::analysis::fail_reasons(&report.results, &pairs, all, nodes, fraction, &floor);
    reasons.extend(evidence::node_pair_floor(
        &report.pairs,
        report.facts.as_ref(),
    ));
    (reasons, warnings)
}

/// What each result and each pair was held against (`Row::expected`, `PairRow::expected`):
/// the floor that applied, else for a pair the outlier rule's share of its peers' median.
fn expectations(
    report: &Report,
    floors: &Floors,
    fraction: f64,
) -> (Vec<Option<Expected>>, Vec<Option<Expected>>) {
    let rows = report
        .results
        .iter()
        .map(|r| {
            let e = floors.expectation(&r.collective, report.nranks, r.size)?;
            let busbw = r.out_of_place.busbw.min(r.in_place.busbw);
            Some(Expected::new(busbw, e.floor, e.source))
        })
        .collect();
    let pairs = report
        .pairs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let floor = (p.gpus()).and_then(|_| floors.expectation(SendRecv.name(), 2, p.bytes));
            if let Some(e) = floor {
                return Some(Expected::new(p.busbw, e.floor, e.source));
            }
            let peers: Vec<f64> = report
                .pairs
                .iter()
                .enumerate()
                .filter(|(j, o)| *j != i && o.gpus().map(|g| g.0) == p.gpus().map(|g| g.0))
                .map(|(_, o)| o.busbw)
                .collect();
            if peers.is_empty() {
                return None;
            }
            let median = crate::model::stats::median(&peers);
            Some(Expected::new(
                p.busbw,
                fraction * median,
                format!(
                    "outlier rule: {fraction} x {} GB/s, the median of its {} peer pair(s)",
                    crate::model::stats::num(median),
                    peers.len()
                ),
            ))
        })
        .collect();
    (rows, pairs)
}

/// Per collective: the mean busbw over its rows and both placements (nccl-tests' "Avg bus
/// bandwidth").
pub fn avg_busbw(rows: &[Row]) -> BTreeMap<String, f64> {
    let mut by_coll: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for r in rows {
        let e = by_coll.entry(r.collective.to_string()).or_default();
        e.0 += r.out_of_place.busbw + r.in_place.busbw;
        e.1 += 2.0;
    }
    by_coll.into_iter().map(|(k, (s, n))| (k, s / n)).collect()
}

/// One line for a terminal or a drain reason: what was measured when all is well (the best row
/// with what it was held against, `expected` in the rows' order), else the first reason and
/// how many more there are.
pub fn summary(
    report: &Report,
    expected: &[Option<Expected>],
    nodes: u32,
    reasons: &[Reason],
) -> String {
    match reasons {
        [] => {}
        [only] => return only.message.clone(),
        [first, rest @ ..] => return format!("{} (and {} more)", first.message, rest.len()),
    }
    if report.nranks <= 1 && report.results.is_empty() {
        // One GPU: no collective (busbw would be 0 by definition); the probe is the check.
        return format!(
            "1 x {} on {nodes} node(s): 1 GPU: no collective; {}",
            gpu_name(report),
            probe_line(report)
        );
    }
    let best = report
        .results
        .iter()
        .zip(expected.iter().chain(std::iter::repeat(&None)))
        .max_by(|(a, _), (b, _)| a.out_of_place.busbw.total_cmp(&b.out_of_place.busbw))
        .map(|(r, expected)| {
            let held = expected
                .as_ref()
                .map_or(" (no floor: held against peers)".to_string(), |e| {
                    format!(" (floor {} GB/s, {:.2}x)", num(e.floor_gbs), e.margin)
                });
            format!(
                ", {} {} busbw {:.1} GB/s{held}",
                r.collective,
                crate::model::size::human(r.size),
                r.out_of_place.busbw
            )
        })
        .unwrap_or_default();
    let gpu_pairs: Vec<f64> = report
        .pairs
        .iter()
        .filter(|p| p.gpus().is_some())
        .map(|p| p.busbw)
        .collect();
    let pair_min = gpu_pairs.iter().copied().fold(f64::INFINITY, f64::min);
    let pairs_text = if pair_min.is_finite() {
        format!(", {} GPU pairs >= {pair_min:.1} GB/s", gpu_pairs.len())
    } else {
        String::new()
    };
    format!(
        "{} x {} on {nodes} node(s){best}{pairs_text}",
        report.nranks,
        gpu_name(report)
    )
}

/// The local probe's results in one line (`facts::local_probe::results_line`).
pub fn probe_line(report: &Report) -> String {
    let gpus = evidence::in_rank_order(&report.gpus);
    let probed: Vec<crate::facts::local_probe::Probed> = gpus
        .iter()
        .enumerate()
        .filter_map(|(k, g)| {
            Some(crate::facts::local_probe::Probed {
                subject: format!("GPU{k}"),
                gpu_name: &g.info.name,
                device_id: g.info.pci_device_id,
                probe: g.local_probe.as_ref()?,
                others: &[],
            })
        })
        .collect();
    match gpus.iter().find_map(|g| g.local_probe_error.as_deref()) {
        Some(why) if probed.is_empty() => format!("local probe: not measured ({why})"),
        _ => crate::facts::local_probe::results_line(&probed),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::measure::gpu::GpuInfo;
    use crate::measure::rows::{Ends, PairRow, Placement};
    use crate::meet::rendezvous::Member;
    use crate::model::floors::tests::rule;
    use crate::model::thresholds::Threshold;
    use crate::report::json::{GpuEntry, TransportInfo};
    use nccl_check_contract::report::reason::ReasonCode;
    use nccl_check_contract::verdict::Verdict;

    /// [`judge`] with the basis the worker would have built for a report made by hand: the
    /// topology of its processes, the model of its first GPU (tests).
    pub(crate) fn judge_alone(
        mut report: Report,
        judging: &Judging,
        log: Option<&TransportSummary>,
        can_access_peer: PeerAccess,
    ) -> (Report, ExitCode) {
        let topology = Arc::new(Topology::new(&report.processes));
        let id = report.gpus.first().and_then(|g| {
            g.info
                .pci_device_id
                .or_else(|| g.health.as_ref().and_then(|h| h.pci_device_id))
        });
        let name = gpu_name(&report).to_string();
        let gpu = Arc::new(GpuModel {
            sku: crate::model::sku::Identity::resolve(id, &name).sku(),
            name,
            interconnect: report
                .interconnect
                .as_ref()
                .map_or(crate::model::link_class::Class::Unknown, |i| i.class),
        });
        let basis = Basis { topology, gpu };
        let code = report.record_verdict(judge(&report, judging, &basis, log, can_access_peer));
        (report, code)
    }

    /// [`judge_alone`] under `rules`, the default outlier fraction (0.85), no `--min-busbw`, no
    /// path expectation, no NCCL log and every GPU able to reach every other (tests).
    pub(crate) fn judge_by(rules: &[Threshold], report: Report) -> (Report, ExitCode) {
        let expect = TransportExpectation::default();
        let judging = Judging {
            thresholds: rules,
            outlier_fraction: 0.85,
            min_busbw: None,
            expect: &expect,
        };
        judge_alone(report, &judging, None, &|_, _| true)
    }

    const MIB256: u64 = 256 << 20;

    fn rules() -> Vec<Threshold> {
        vec![
            rule("all_reduce", 4, 1, 290.0),
            rule("sendrecv", 2, 1, 255.0),
        ]
    }

    fn row(collective: &'static str, busbw: f64) -> Row {
        let p = Placement {
            time_us: 1.0,
            algbw: busbw / 1.5,
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

    /// One node of 4 H200s, every GPU pair at `pair_busbw`.
    fn report(rows: Vec<Row>, pair_busbw: f64) -> Report {
        let mut r = Report::new("n1".into(), 0.0);
        r.nranks = 4;
        r.processes = vec![Member {
            proc_rank: 0,
            host: "n1".into(),
            pid: 1,
            ngpus: 4,
            first_rank: 0,
        }];
        r.gpus = (0..4)
            .map(|i| {
                GpuEntry::new(
                    i,
                    "n1".into(),
                    GpuInfo {
                        device: i as usize,
                        name: "NVIDIA H200".into(),
                        ..GpuInfo::default()
                    },
                )
            })
            .collect();
        r.results = rows;
        for (a, b) in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)] {
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
                busbw: pair_busbw,
                gpu_busbw: None,
                first_busbw: None,
            });
        }
        r
    }

    fn run(
        report: Report,
        min_busbw: Option<f64>,
        log: Option<&str>,
        p2p: bool,
    ) -> (Report, ExitCode) {
        let rules = rules();
        let expect = TransportExpectation {
            intra_node_p2p: true,
            ..TransportExpectation::default()
        };
        let judging = Judging {
            thresholds: &rules,
            outlier_fraction: 0.85,
            min_busbw,
            expect: &expect,
        };
        let log = log.map(crate::facts::transport::parse_log);
        judge_alone(report, &judging, log.as_ref(), &|_, _| p2p)
    }

    #[test]
    fn the_localizers_reasons_make_the_verdict_fail() {
        let mut r = report(vec![row("all_reduce", 338.0)], 300.0);
        let reason = nccl_check_contract::report::reason::Reason {
            code: nccl_check_contract::report::reason::ReasonCode::RailSlow,
            message: "n7 rail 3 (GPU3's NIC): every pair through it is slow".into(),
            subject: Some("n7 GPU3 NIC".into()),
            measured: Some(20.0),
            limit: Some(40.0),
        };
        r.localization = Some(crate::model::localization::LocalizeSummary {
            plan: "adaptive".into(),
            nodes: 8,
            rails: 4,
            rounds: 4,
            localization_rounds: 2,
            allocation_busbw: Some(100.0),
            allocation_floor: None,
            pair_groups: 32,
            reasons_omitted: 0,
            round_times: Vec::new(),
            paths: None,
            reasons: vec![reason.clone()],
        });
        let marginal = r.clone();
        let (r, code) = run(r, None, None, true);
        assert_eq!(code, ExitCode::Fail);
        assert_eq!(r.head.reasons, vec![reason.clone()]);
        // The same reading, its retests' samples spread +-60%: the localizer's 20 < 40 stays a
        // FAIL (noise counts up to 15%), a 37 < 40 within 15% of its limit is a warning.
        let mut noisy = marginal.clone();
        noisy.localization_noise = Some(0.6);
        let (n, code) = run(noisy.clone(), None, None, true);
        assert_eq!((code, n.head.reasons.len()), (ExitCode::Fail, 1));
        let loc = noisy.localization.as_mut().unwrap();
        loc.reasons[0].measured = Some(37.0);
        let (n, code) = run(noisy, None, None, true);
        assert_eq!(code, ExitCode::Pass, "{:?}", n.head.reasons);
        assert_eq!(n.warnings[0].code, reason.code);
        assert!(n.head.summary.contains("own noise"), "{}", n.head.summary);
    }

    #[test]
    fn a_healthy_node_passes_with_what_was_measured_in_the_summary() {
        let r = report(
            vec![row("all_reduce", 338.0), row("all_gather", 250.0)],
            300.0,
        );
        let (r, code) = run(r, None, None, true);
        assert_eq!(code, ExitCode::Pass);
        assert_eq!(r.head.verdict, Verdict::Pass);
        assert!(r.head.reasons.is_empty(), "{:?}", r.head.reasons);
        assert_eq!(
            r.head.summary,
            "4 x NVIDIA H200 on 1 node(s), all_reduce 256 MiB busbw 338.0 GB/s (floor 290 GB/s, 1.17x), 6 GPU pairs >= 300.0 GB/s"
        );
        // Every result carries what held it: the all_reduce its rule, all_gather none (no rule
        // at this size), each pair the pair rule.
        let e = r.results[0]
            .expected
            .as_ref()
            .expect("all_reduce has a floor");
        assert_eq!(e.floor_gbs, 290.0);
        assert!((e.margin - 338.0 / 290.0).abs() < 1e-9, "{e:?}");
        assert!(e.source.starts_with("built-in [test]"), "{e:?}");
        assert_eq!(r.results[1].expected, None);
        assert!(r
            .pairs
            .iter()
            .all(|p| p.expected.as_ref().is_some_and(|e| e.floor_gbs == 255.0)));
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"expected\":{\"floor_gbs\":290.0"), "{json}");
        assert_eq!(r.avg_busbw.get("all_reduce"), Some(&338.0));
        assert_eq!(r.avg_busbw.get("all_gather"), Some(&250.0));
    }

    #[test]
    fn a_pair_without_a_floor_is_held_against_its_peers_median() {
        let mut r = report(vec![row("all_reduce", 338.0)], 100.0);
        r.pairs[5].busbw = 90.0;
        let no_pair_rule = vec![rule("all_reduce", 4, 1, 290.0)];
        let expect = TransportExpectation::default();
        let judging = Judging {
            thresholds: &no_pair_rule,
            outlier_fraction: 0.85,
            min_busbw: None,
            expect: &expect,
        };
        let (r, _) = judge_alone(r, &judging, None, &|_, _| true);
        let e = r.pairs[5].expected.as_ref().expect("held against peers");
        assert!((e.floor_gbs - 85.0).abs() < 1e-9, "{e:?}");
        assert!(
            e.source.starts_with("outlier rule: 0.85 x 100 GB/s"),
            "{e:?}"
        );
        assert_eq!(
            crate::measure::rows::expected_short(e),
            ">= 85.0 GB/s (1.06x; outlier rule)"
        );
    }

    #[test]
    fn a_slow_collective_fails_and_is_named_in_the_summary() {
        let r = report(vec![row("all_reduce", 120.0)], 300.0);
        let (r, code) = run(r, None, None, true);
        assert_eq!(code, ExitCode::Fail);
        assert_eq!((r.head.verdict, r.head.exit_code), (Verdict::Fail, 1));
        assert_eq!(r.head.reasons.len(), 1, "{:?}", r.head.reasons);
        assert_eq!(r.head.reasons[0].code, ReasonCode::BusbwBelowThreshold);
        assert_eq!(
            r.head.summary,
            "all_reduce 256 MiB busbw 120.0 < 290.0 GB/s (41% of the floor)"
        );
    }

    #[test]
    fn a_row_just_below_its_floor_within_its_samples_spread_warns() {
        // 282 < 290 (3% below) from samples spread +-5%: a warning; +-1%: a FAIL; and 120 < 290
        // stays a FAIL at any spread.
        let sized = |busbw: f64, spread: f64| {
            let mut r = report(vec![row("all_reduce", busbw)], 300.0);
            r.sizing = vec![crate::model::time_budget::Sizing {
                step: "all_reduce".into(),
                budget_s: 0.5,
                rate_gbs: 100.0,
                rate_from: "probe".into(),
                bytes: MIB256,
                why: crate::model::time_budget::SizeWhy::PlanSize,
                samples: 10,
                spread,
                stopped: Some(crate::model::time_budget::StopWhy::MostSamples),
                floor_held: true,
            }];
            run(r, None, None, true)
        };
        let (r, code) = sized(282.0, 0.05);
        assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
        assert_eq!(r.warnings[0].code, ReasonCode::BusbwBelowThreshold);
        assert_eq!(sized(282.0, 0.01).1, ExitCode::Fail);
        assert_eq!(sized(120.0, 0.5).1, ExitCode::Fail);
    }

    #[test]
    fn several_reasons_show_the_first_and_how_many_more() {
        let mut r = report(vec![row("all_reduce", 120.0)], 300.0);
        r.pairs[5].busbw = 40.0; // GPU2<->GPU3: below its floor and its peers
        let (r, code) = run(r, None, None, true);
        assert_eq!(code, ExitCode::Fail);
        assert_eq!(r.head.reasons.len(), 2, "{:?}", r.head.reasons);
        assert_eq!(
            r.head.summary,
            "all_reduce 256 MiB busbw 120.0 < 290.0 GB/s (41% of the floor); responsible: GPU2<->GPU3 (and 1 more)"
        );
    }

    #[test]
    fn collectives_carried_by_collnet_or_nvls_are_judged_by_the_outlier_rule_only() {
        for (collnet, nvls) in [(true, false), (false, true)] {
            let mut r = report(vec![row("all_reduce", 120.0)], 300.0);
            r.transports = Some(TransportInfo {
                collnet_used: collnet,
                nvls_used: nvls,
                ..TransportInfo::not_recorded(String::new())
            });
            let (mut r, code) = run(r, Some(500.0), None, true);
            assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
            // The GPU pairs keep their floor.
            r.pairs.iter_mut().for_each(|p| p.busbw = 100.0);
            let (_, code) = run(r, None, None, true);
            assert_eq!(code, ExitCode::Fail);
        }
    }

    #[test]
    fn min_busbw_applies_to_collectives_but_not_to_gpu_pairs() {
        let r = report(vec![row("all_reduce", 450.0)], 300.0);
        let (r, code) = run(r, Some(400.0), None, true);
        assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
        let r = report(vec![row("all_reduce", 350.0)], 300.0);
        let (r, code) = run(r, Some(400.0), None, true);
        assert_eq!(code, ExitCode::Fail);
        assert_eq!(r.head.reasons[0].limit, Some(400.0));
    }

    const SHM_LOG: &str =
        "n1:10:11 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n\
                           n1:10:11 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM/read\n";

    #[test]
    fn shm_between_gpus_that_can_reach_each_other_is_a_transport_fallback() {
        let r = report(vec![row("all_reduce", 338.0)], 300.0);
        let (r, code) = run(r, None, Some(SHM_LOG), true);
        assert_eq!(code, ExitCode::Fail);
        assert_eq!(r.head.reasons.len(), 1, "{:?}", r.head.reasons);
        assert_eq!(r.head.reasons[0].code, ReasonCode::TransportFallback);
        assert_eq!(
            r.head.reasons[0].subject_text().as_deref(),
            Some("GPU0->GPU1")
        );
        // Without peer access CUDA expects no P2P there: SHM is what it should be.
        let r = report(vec![row("all_reduce", 338.0)], 300.0);
        let (_, code) = run(r, None, Some(SHM_LOG), false);
        assert_eq!(code, ExitCode::Pass);
    }

    #[test]
    fn paths_of_another_process_are_not_judged_as_intra_node() {
        // Ranks 0 and 1 on one node but in two processes: this process knows only its GPU.
        let mut r = report(vec![row("all_reduce", 338.0)], 300.0);
        r.processes[0].ngpus = 1;
        r.processes.push(Member {
            proc_rank: 1,
            host: "n1".into(),
            pid: 2,
            ngpus: 3,
            first_rank: 1,
        });
        r.gpus.truncate(1);
        let (r, code) = run(r, None, Some(SHM_LOG), true);
        assert_eq!(code, ExitCode::Pass, "{:?}", r.head.reasons);
    }
}
