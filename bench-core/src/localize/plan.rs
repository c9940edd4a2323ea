//! `--explain-plan`: the steps and rounds a check of N nodes x G GPUs runs, and a modeled time per
//! phase. No GPU needed: the rounds come from the same schedule the localizer runs, the time from
//! a cost model whose constants are measured (cited files, which the packages install under
//! /usr/share/nccl-check/results/) or public numbers (URLs), each marked as an estimate where no
//! source exists. The plan's sizes and iterations, and whether a healthy
//! allocation ends after phase B, come from the site's worker config (`super::site::Workload`).
//! Calibration on real NCCL: every report of a multi-node check carries its process's
//! `localization.round_times` (measure and gather per round), so a `tests/gpu/fabric.sh` run gives
//! a sendrecv round's and a gather's time per node count (`connect_new_peer_s` comes from them).
//! A round's records travel by one NCCL all_reduce (`runner/localized.rs`), modeled as NCCL's
//! tree: about 2 log2(ranks) latencies plus the vector's bytes at NIC speed, after which every
//! process runs the localizer's decision itself; only the barrier before each timed loop still
//! passes through the control plane's star.

use super::schedule::ring_rounds;
use super::site::Workload;
use super::{round_cap, LocalizeError};
use serde::Serialize;

mod constants;

use constants::{c, Constant, CONSTANTS};

#[derive(Debug, Clone, Serialize)]
pub struct PhaseModel {
    pub name: &'static str,
    pub rounds: usize,
    pub seconds: f64,
    pub what: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanModel {
    pub nodes: usize,
    pub gpus_per_node: usize,
    pub plan: &'static str,
    /// Node-level localization rounds in the worst case (the schedule's cap).
    pub rounds: usize,
    /// `2*log2(N)+4`, the bound the cap keeps.
    pub rounds_bound: f64,
    /// Rounds for one slow node, rail or link (screening; + 1 confirmation for adjacent pairs).
    pub rounds_one_fault: usize,
    /// Everything after NCCL init, worst case (every localization round spent).
    pub modeled_seconds: f64,
    /// Everything after NCCL init on a healthy allocation under the config: phases A and B when
    /// a rule gives B a floor (e.g. `min_nodes = 2`), else A, B and the screening rounds.
    pub modeled_seconds_healthy: f64,
    /// Localization rounds a healthy allocation still runs (0 with a floor for B, else screening).
    pub healthy_rounds: usize,
    /// What the config decides: its plan's steps and B's floor with the rule that gives it.
    pub workload: Workload,
    pub nccl_init_seconds: f64,
    pub nccl_init_is_estimate: bool,
    /// Process start to NCCL init: the driver's start and the GPUs' contexts.
    pub start_up_seconds: f64,
    /// The report written to the process gone (the driver releasing the GPUs).
    pub exit_seconds: f64,
    /// What a job waits for the verdict, process start to exit: start-up + NCCL init + the
    /// check after NCCL init + exit; healthy, and worst case.
    pub total_wait_seconds_healthy: f64,
    pub total_wait_seconds: f64,
    /// What a job waits when the prolog's cache answers (no worker runs).
    pub cached_wait_seconds: f64,
    pub phases: Vec<PhaseModel>,
    pub full_matrix_rounds: usize,
    pub full_matrix_seconds: f64,
    pub constants: &'static [Constant],
}

/// NCCL's tree all_reduce of a round's vector (`groups` f64 slots) over `ranks`: the
/// small-collective floor, 2 log2(ranks) steps between nodes, the vector up and down at NIC speed.
fn vector_allreduce_s(ranks: usize, groups: usize) -> f64 {
    let steps = 2.0 * (ranks.max(2) as f64).log2().ceil();
    let bytes = 8.0 * groups as f64;
    c("small_allreduce_s") + steps * c("hop_latency_s") + 2.0 * bytes / (c("nic_busbw_gbs") * 1e9)
}

/// Control seconds of one round of pairs at `nodes` x `g`: the barrier before its timed loop
/// (through the star: linear in the processes, one a node here), the all_reduce of its results
/// (one slot per pair, `nodes/2 x g` at most), and every process's own decision.
fn control_round_s(nodes: usize, g: usize) -> f64 {
    nodes as f64 * c("control_sum_per_process_s")
        + vector_allreduce_s(nodes * g, (nodes / 2).max(1) * g)
        + nodes as f64 * c("decide_per_node_s")
}

/// Seconds for one localization round of rail-wise pairs among `nodes` nodes: its data at the
/// plan's size, or with a time budget at most the budget (a slower network measures a smaller
/// size in about the budget: `model::time_budget`).
fn pair_round_s(nodes: usize, g: usize, w: &Workload) -> f64 {
    let data = f64::from(w.pair_iterations) * w.pair_bytes as f64 / (nic_gbs(w) * 1e9);
    c("connect_new_peer_s") + budgeted(data, w.pair_budget_s) + control_round_s(nodes, g)
}

/// A node pair's rate: `--network-gbs` where given, else the model's NIC.
fn nic_gbs(w: &Workload) -> f64 {
    w.network_gbs.unwrap_or(c("nic_busbw_gbs"))
}

/// A step's data time `data_s` under its time budget, if any: at most the budget (on a
/// network slower than the model's, the step's size shrinks to keep its time about the budget).
fn budgeted(data_s: f64, budget_s: Option<f64>) -> f64 {
    budget_s.map_or(data_s, |b| data_s.min(b))
}

/// Sums per measured collective size: the barrier before the timed loop, the times and
/// wrong-element counts, the vote on the floor.
const SUMS_PER_COLLECTIVE: f64 = 3.0;

pub fn plan_model(
    nodes: usize,
    gpus_per_node: usize,
    w: &Workload,
) -> Result<PlanModel, LocalizeError> {
    let (n, g) = (nodes, gpus_per_node);
    LocalizeError::check_shape(n, g)?;
    let a = phase_a(n, g);
    let (mut healthy, mut worst) = (a.seconds, a.seconds);
    let mut phases = vec![a];
    let screen = ring_rounds(n).len();
    // Two nodes: screening and the cross-rail round. Three: every pair is met in screening, so no
    // confirmation partner is left. From four on the cap binds.
    let (worst_rounds, one_fault) = match n {
        0 | 1 => (0, 0),
        2 => (2, 2),
        3 => (3, 3),
        _ => (round_cap(n), screen + 1),
    };
    let mut full_matrix_seconds = 0.0;
    let mut healthy_rounds = 0;
    if n >= 2 {
        let b = phase_b(n, g, w);
        let round_s = pair_round_s(n, g, w);
        if w.floor.is_none() || w.allocation.is_empty() {
            healthy_rounds = screen.min(worst_rounds);
        }
        healthy += b.seconds + healthy_rounds as f64 * round_s;
        worst += b.seconds + worst_rounds as f64 * round_s;
        full_matrix_seconds = crate::model::pairs::round_count(n) as f64 * round_s;
        phases.push(b);
        if let Some(a2a) = alltoall_phase(n, g, w) {
            healthy += a2a.seconds;
            worst += a2a.seconds;
            phases.push(a2a);
        }
        phases.push(PhaseModel {
            name: "localization_worst_case",
            rounds: worst_rounds,
            seconds: worst_rounds as f64 * round_s,
            what: format!(
                "only when B is slow or has no floor: {screen} screening rounds of the ring's {} node pairs x {g} rails ({} groups at most per round), then rounds pairing suspects with cleared nodes, at most {worst_rounds} rounds ({round_s:.2} s each{})",
                if n == 2 { 1 } else { n },
                (n / 2) * g,
                w.pair_budget_s.map_or(String::new(), |b| format!(
                    "; each round's data sized by a time budget of {b:.2} s from the all_reduce's busbw, so on a slower network a round still takes about this"
                ))
            ),
        });
    }
    let nccl_init_seconds = c("nccl_init_base_s") + (n * g) as f64 * c("nccl_init_per_rank_s");
    let around = c("start_up_s") + nccl_init_seconds + c("exit_s");
    Ok(PlanModel {
        nodes: n,
        gpus_per_node: g,
        plan: "adaptive",
        rounds: worst_rounds,
        rounds_bound: if n >= 2 {
            2.0 * (n as f64).log2() + 4.0
        } else {
            0.0
        },
        rounds_one_fault: one_fault,
        modeled_seconds: worst,
        modeled_seconds_healthy: healthy,
        healthy_rounds,
        workload: w.clone(),
        nccl_init_seconds,
        nccl_init_is_estimate: true,
        start_up_seconds: c("start_up_s"),
        exit_seconds: c("exit_s"),
        total_wait_seconds_healthy: around + healthy,
        total_wait_seconds: around + worst,
        cached_wait_seconds: c("cached_s"),
        phases,
        full_matrix_rounds: crate::model::pairs::round_count(n),
        full_matrix_seconds,
        constants: &CONSTANTS,
    })
}

/// Phase A: every node's own collective and GPU pair matrix at once; with more than one node
/// each round of pairs also meets the others (the barrier through the star, then the all_reduce
/// that gives every process every pair's time), and the collective's sums pass the star.
fn phase_a(n: usize, g: usize) -> PhaseModel {
    let local_rounds = crate::model::pairs::round_count(g);
    let a_control = if n >= 2 {
        let round = n as f64 * c("control_sum_per_process_s")
            + vector_allreduce_s(n * g, n * (g / 2).max(1));
        local_rounds as f64 * round
            + SUMS_PER_COLLECTIVE * n as f64 * c("control_sum_per_process_s")
    } else {
        0.0
    };
    PhaseModel {
        name: "a_local",
        rounds: 1,
        seconds: c("local_collective_s") + local_rounds as f64 * c("local_pair_round_s") + a_control,
        what: format!(
            "every node at once: all_reduce 256M over its {g} GPUs, then its GPU pair matrix ({local_rounds} rounds)"
        ),
    }
}

/// Phase B: the plan's collectives over every rank, their sums through the star, and the one
/// sum that hands every process the coordinator's localization settings.
fn phase_b(n: usize, g: usize, w: &Workload) -> PhaseModel {
    let data_s: f64 = w
        .allocation
        .iter()
        .map(|r| {
            let data = f64::from(r.iterations)
                * (2.0 * r.bytes as f64
                    / (w.network_gbs.unwrap_or(c("allocation_busbw_gbs")) * 1e9)
                    + 2.0 * n as f64 * c("hop_latency_s"));
            budgeted(data, r.budget_s)
        })
        .sum();
    let b_control = (SUMS_PER_COLLECTIVE * w.allocation.len() as f64 + 1.0)
        * n as f64
        * c("control_sum_per_process_s");
    let seconds = if w.allocation.is_empty() {
        0.0
    } else {
        c("connect_all_s") + data_s + b_control
    };
    PhaseModel {
        name: "b_allocation",
        rounds: 1,
        seconds,
        what: b_what(n, g, w),
    }
}

/// The alltoall beside B's all_reduce (`paths`, 4..=32 nodes): both placements of one untimed
/// and three timed operations and the check, at a quarter of the pair size, each GPU's
/// off-node share at NIC speed, its sums through the star; NCCL connects every rank with every
/// other on first use, charged as the allocation-wide collective's connections (an estimate:
/// not measured for an alltoall). Its tournament (only after a slow alltoall) is not in the
/// healthy time.
fn alltoall_phase(n: usize, g: usize, w: &Workload) -> Option<PhaseModel> {
    use crate::model::collectives::{AllReduce, AlltoAll, Collective};
    let beside = w
        .allocation
        .last()
        .is_some_and(|r| r.collective == AllReduce.name());
    if !(beside && super::paths::checks_paths(n)) {
        return None;
    }
    let size = super::paths::alltoall_size(w.pair_bytes) as f64;
    let off_node = (n - 1) as f64 / n as f64;
    let data_s = budgeted(9.0 * size * off_node / (nic_gbs(w) * 1e9), w.pair_budget_s);
    let control = (2.0 * SUMS_PER_COLLECTIVE + 1.0) * n as f64 * c("control_sum_per_process_s");
    let tournament = crate::model::pairs::round_count(n).div_ceil(g);
    Some(PhaseModel {
        name: AlltoAll.name(),
        rounds: 0,
        seconds: c("connect_all_s") + data_s + control,
        what: format!(
            "alltoall {} over all {} GPUs beside the all_reduce: only when it reads below \
             [outliers] alltoall_fraction of what the all_reduce or the rounds' node pairs \
             predict, or a host is busy with others' processes, every node pair once \
             ({tournament} round(s), one node pair a GPU, at 8 MiB or more; not in this time)",
            crate::model::size::human(size as u64),
            n * g
        ),
    })
}

/// What phase B runs and whether it can end a healthy check.
fn b_what(n: usize, g: usize, w: &Workload) -> String {
    match (w.allocation.last(), &w.floor) {
        (None, _) => format!(
            "plan '{}' runs no collective over all ranks before its pairs: nothing can end a healthy check here, screening runs",
            w.plan
        ),
        (Some(last), Some(f)) => format!(
            "{} over all {} GPUs{}: the floor {:.1} GB/s ({}); at or above it the check ends here (PASS, no localization)",
            runs(w),
            n * g,
            judged(w, last),
            f.min_busbw_gbs,
            f.rule
        ),
        (Some(last), None) => format!(
            "{} over all {} GPUs{}: no [[thresholds]] rule in {} gives it a floor for {n} nodes{}, so B cannot be judged and screening runs on a healthy allocation too (a rule with `min_nodes = 2` covers every allocation size)",
            runs(w),
            n * g,
            judged(w, last),
            w.config,
            w.gpu_model
                .as_deref()
                .map_or(" (rules naming a GPU need --gpu-model)".to_string(), |m| format!(" of '{m}'"))
        ),
    }
}

/// Phase B's collectives in a few words: `all_reduce 256 MiB` or `36 collective sizes (...)`.
fn runs(w: &Workload) -> String {
    match w.allocation.as_slice() {
        [one] => format!(
            "{} {}{}",
            one.collective,
            crate::model::size::human(one.bytes),
            one.budget_s.map_or(String::new(), |b| format!(
                " (at most: a time budget of {b:.2} s sizes it by a first 4M probe; a floor stated at {} holds only where that size is measured, else B's peers judge)",
                crate::model::size::human(one.bytes)
            ))
        ),
        many => format!(
            "{} collective sizes ({} .. {} {})",
            many.len(),
            many.first().map_or("", |r| r.collective),
            many.last().map_or("", |r| r.collective),
            many.last()
                .map_or(String::new(), |r| crate::model::size::human(r.bytes))
        ),
    }
}

/// Which of B's measurements is judged, where B has more than one (`; the last, sendrecv 1 GiB, is judged`).
fn judged(w: &Workload, last: &super::site::AllocationRun) -> String {
    if w.allocation.len() < 2 {
        return String::new();
    }
    format!(
        "; the last, {} {}, is judged",
        last.collective,
        crate::model::size::human(last.bytes)
    )
}

/// The plan for `nodes` x `gpus_per_node` under `w`, as text or as one JSON object.
pub fn explain_plan(
    nodes: usize,
    gpus_per_node: usize,
    json: bool,
    w: &Workload,
) -> Result<String, LocalizeError> {
    let m = plan_model(nodes, gpus_per_node, w)?;
    if json {
        // Plain data with string keys: serde_json cannot fail on it.
        return serde_json::to_string_pretty(&m)
            .map_err(|_| LocalizeError::LocalizeConfig("the plan model did not serialize"));
    }
    let mut s = format!(
        "Plan for {} nodes x {} GPUs ({} ranks), adaptive localization\n\n",
        m.nodes,
        m.gpus_per_node,
        m.nodes * m.gpus_per_node
    );
    // The lines that open it: the wait a job sees, process start to verdict, and with the
    // prolog's cache.
    s += &format!(
        "A job waits {:.2} s for the verdict when healthy ({:.2} s worst case): start-up {:.2} s + \
         NCCL init {:.2} s + the check {:.2} s ({:.2} s worst) + exit {:.2} s.\n\
         With the prolog's cache (the same GPUs passed within cache_seconds): {:.3} s.\n\n",
        m.total_wait_seconds_healthy,
        m.total_wait_seconds,
        m.start_up_seconds,
        m.nccl_init_seconds,
        m.modeled_seconds_healthy,
        m.modeled_seconds,
        m.exit_seconds,
        m.cached_wait_seconds
    );
    s += &format!(
        "  start-up                 {:>7.2} s  (the CUDA driver and every GPU's context)\n",
        m.start_up_seconds
    );
    s += &format!(
        "  NCCL init                {:>7.2} s  (estimate: {} ranks)\n",
        m.nccl_init_seconds,
        m.nodes * m.gpus_per_node
    );
    for p in &m.phases {
        s += &format!(
            "  {:<24} {:>7.2} s  {:>3} round(s): {}\n",
            p.name, p.seconds, p.rounds, p.what
        );
    }
    s += &format!(
        "  exit                     {:>7.2} s  (the report written, the GPUs released)\n",
        m.exit_seconds
    );
    let healthy_path = if m.nodes < 2 {
        "one node: phase A is the whole check".to_string()
    } else if m.healthy_rounds == 0 {
        "ends after B, at or above its floor".to_string()
    } else {
        format!(
            "B has no floor, so {} screening rounds run",
            m.healthy_rounds
        )
    };
    s += &format!(
        "\nConfig: {}, plan '{}'{}.\nAfter NCCL init: {:.2} s healthy ({healthy_path}), {:.2} s worst case ({} localization rounds; bound 2*log2(N)+4 = {:.1}; one fault: {} rounds).\n",
        m.workload.config,
        m.workload.plan,
        m.workload
            .gpu_model
            .as_deref()
            .map_or(String::new(), |g| format!(", GPU '{g}'")),
        m.modeled_seconds_healthy,
        m.modeled_seconds,
        m.rounds,
        m.rounds_bound,
        m.rounds_one_fault
    );
    if m.nodes >= 2 {
        s += &format!(
            "Full pair matrix on request: {} rounds, {:.1} s.\n",
            m.full_matrix_rounds, m.full_matrix_seconds
        );
    }
    s += "\nModel constants:\n";
    for k in m.constants {
        s += &format!(
            "  {} = {} {}{}: {}\n",
            k.name,
            k.value,
            k.unit,
            if k.estimate { " (estimate)" } else { "" },
            k.source
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick plan of the built-in defaults with a floor for B assumed: the model as it was
    /// before it read a config (unit tests of the model itself).
    fn assumed_floor() -> Workload {
        use crate::localize::site::{AllocationRun, HealthyFloor};
        use crate::model::collectives::{AllReduce, Collective};
        const MIB_256: u64 = 1 << 28;
        Workload {
            config: "none (a floor for B assumed)".into(),
            plan: "quick".into(),
            gpu_model: None,
            allocation: vec![AllocationRun {
                collective: AllReduce.name(),
                bytes: MIB_256,
                iterations: 12,
                budget_s: None,
            }],
            pair_bytes: MIB_256,
            pair_iterations: 12,
            pair_budget_s: None,
            network_gbs: None,
            floor: Some(HealthyFloor {
                min_busbw_gbs: 0.0,
                rule: "assumed".into(),
            }),
        }
    }

    fn w() -> Workload {
        assumed_floor()
    }

    fn defaults(nodes: usize) -> Workload {
        let cfg = crate::config::worker::WorkerConfig::from_texts(None).expect("defaults");
        Workload::from_config(&cfg, "quick", Some("NVIDIA H100 80GB HBM3"), nodes, 8)
            .expect("quick")
    }

    #[test]
    fn a_thousand_nodes_of_eight_fit_the_issue_budget() {
        let v: serde_json::Value =
            serde_json::from_str(&explain_plan(1024, 8, true, &w()).expect("explained"))
                .expect("one JSON object");
        let rounds = v["rounds"].as_u64().unwrap();
        let secs = v["modeled_seconds"].as_f64().unwrap();
        assert!(rounds <= 24, "{rounds}");
        assert_eq!(rounds, 24, "the cap at 1024 nodes is 2*10+4");
        assert!(secs <= 10.0, "{secs}");
        assert!(secs > v["modeled_seconds_healthy"].as_f64().unwrap());
        assert_eq!(v["phases"].as_array().unwrap().len(), 3);
        assert_eq!(v["full_matrix_rounds"].as_u64(), Some(1023));
    }

    /// 4,096 x 8 within 10 s after NCCL init once a round's records travel by NCCL's
    /// all_reduce (15.0 s when every round's gather passed through the coordinator's star).
    #[test]
    fn four_thousand_nodes_of_eight_model_under_ten_seconds_with_the_rounds_off_the_star() {
        let m = plan_model(4096, 8, &w()).unwrap();
        assert_eq!(m.rounds, 28);
        assert!(m.modeled_seconds <= 10.0, "{}", m.modeled_seconds);
        assert!(
            (m.modeled_seconds - 6.68).abs() < 0.02,
            "{}",
            m.modeled_seconds
        );
        // A round's records (16,384 slots, 128 KiB) over 32,768 ranks: a fraction of a
        // millisecond, where the star's gather cost 28 us a process (115 ms at 4,096).
        let records = vector_allreduce_s(4096 * 8, 4096 / 2 * 8);
        assert!((1e-4..1e-3).contains(&records), "{records}");
        // What a round costs now: its data (12 x 256 MiB at 48 GB/s), the barrier through the
        // star, the new peer's connection, the decision; the records are the least of it.
        let round = m.phases[2].seconds / 28.0;
        let data = 12.0 * 256.0 * 1048576.0 / 48e9;
        let barrier = 4096.0 * 12e-6;
        let decide = 4096.0 * 2e-6;
        let want = data + barrier + 0.04 + decide + records;
        assert!((round - want).abs() < 1e-9, "{round} vs {want}");
    }

    /// The wait a job sees is said, and it is the model's parts added up.
    #[test]
    fn the_total_wait_is_start_up_nccl_init_the_check_and_exit() {
        for (n, g) in [(1, 4), (2, 8), (512, 8), (4096, 8)] {
            let m = plan_model(n, g, &defaults(n)).unwrap();
            let around = m.start_up_seconds + m.nccl_init_seconds + m.exit_seconds;
            assert!(
                (m.total_wait_seconds_healthy - around - m.modeled_seconds_healthy).abs() < 1e-9
            );
            assert!((m.total_wait_seconds - around - m.modeled_seconds).abs() < 1e-9);
            assert!(
                m.total_wait_seconds >= m.total_wait_seconds_healthy,
                "{n}x{g}"
            );
            assert!(
                m.cached_wait_seconds < 0.05,
                "the cache answers in milliseconds"
            );
        }
        let m = plan_model(512, 8, &defaults(512)).unwrap();
        let text = explain_plan(512, 8, false, &defaults(512)).expect("explained");
        let want = format!(
            "A job waits {:.2} s for the verdict when healthy ({:.2} s worst case): start-up 0.96 s + NCCL init {:.2} s",
            m.total_wait_seconds_healthy, m.total_wait_seconds, m.nccl_init_seconds
        );
        assert!(text.contains(&want), "{text}");
        assert!(
            text.contains(
                "With the prolog's cache (the same GPUs passed within cache_seconds): 0.004 s."
            ),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&explain_plan(512, 8, true, &defaults(512)).unwrap()).unwrap();
        let json_total = v["total_wait_seconds_healthy"]
            .as_f64()
            .expect("in the JSON");
        assert!((json_total - m.total_wait_seconds_healthy).abs() < 1e-9);
    }

    /// The model of one node of 4 GPUs against the measured quick plan it was built from:
    /// process start to exit, median 2268 ms on 4x H200 (an early time-to-verdict run of the quick plan).
    #[test]
    fn one_node_of_four_models_the_measured_quick_plan_within_five_percent() {
        let m = plan_model(1, 4, &defaults(1)).unwrap();
        let ratio = m.total_wait_seconds_healthy / 2.268;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{} s modeled",
            m.total_wait_seconds_healthy
        );
    }

    #[test]
    fn a_budgeted_round_takes_at_most_its_budget_beyond_its_connection_and_control() {
        let counted = assumed_floor();
        let budgeted = Workload {
            pair_budget_s: Some(0.01),
            ..assumed_floor()
        };
        let (n, g) = (64, 8);
        let control = c("connect_new_peer_s") + control_round_s(n, g);
        // The plan's 12 exchanges of 256M at 48 GB/s take 67 ms; the budget says 10.
        assert!((pair_round_s(n, g, &counted) - control - 12.0 * 268435456.0 / 48e9).abs() < 1e-9);
        assert!((pair_round_s(n, g, &budgeted) - control - 0.01).abs() < 1e-9);
        // A budget wider than the data changes nothing (a fast fabric keeps its plan).
        let wide = Workload {
            pair_budget_s: Some(10.0),
            ..assumed_floor()
        };
        assert_eq!(pair_round_s(n, g, &wide), pair_round_s(n, g, &counted));
    }

    #[test]
    fn on_a_slow_network_a_budgeted_plan_still_takes_about_its_budgets() {
        // 8 emulated nodes over 1 GB/s sockets: the counted plan's rounds take seconds each, the
        // budgeted ones their budget.
        let slow = |budget: Option<f64>| Workload {
            network_gbs: Some(1.0),
            pair_budget_s: budget,
            ..assumed_floor()
        };
        let control = c("connect_new_peer_s") + control_round_s(8, 1);
        assert!(pair_round_s(8, 1, &slow(None)) - control > 3.0);
        assert!((pair_round_s(8, 1, &slow(Some(0.15))) - control - 0.15).abs() < 1e-9);
    }

    #[test]
    fn every_constant_says_where_it_comes_from() {
        for k in &CONSTANTS {
            assert!(k.value.is_finite() && k.value > 0.0, "{}", k.name);
            assert!(k.source.len() > 20, "{}", k.name);
            assert!(
                k.estimate || k.source.contains('/'),
                "{}: cite a file or issue",
                k.name
            );
        }
    }

    #[test]
    fn the_model_matches_the_schedule() {
        // Rounds grow with log2 N; one node has no inter-node phase.
        let one = plan_model(1, 8, &w()).unwrap();
        assert_eq!((one.rounds, one.phases.len()), (0, 1));
        let r: Vec<usize> = [2, 3, 8, 64, 4096]
            .iter()
            .map(|&n| plan_model(n, 8, &w()).unwrap().rounds)
            .collect();
        assert_eq!(r, [2, 3, 10, 16, 28]);
        assert_eq!(plan_model(3, 8, &w()).unwrap().rounds_one_fault, 3);
        assert_eq!(plan_model(8, 8, &w()).unwrap().rounds_one_fault, 3);
        assert!(plan_model(0, 8, &w()).is_err());
        assert!(explain_plan(0, 8, true, &w()).is_err());
        let text = explain_plan(64, 8, false, &w()).expect("explained");
        assert!(
            text.contains("b_allocation") && text.contains("(estimate)"),
            "{text}"
        );
        // A healthy allocation ends after B only with a floor; say which key gives one.
        let b = plan_model(64, 8, &defaults(64)).unwrap().phases[1]
            .what
            .clone();
        assert!(
            b.contains("`min_nodes = 2`") && b.contains("64 nodes"),
            "{b}"
        );
    }

    #[test]
    fn without_a_floor_for_b_the_healthy_path_screens_and_says_so() {
        let (with, without) = (
            plan_model(64, 8, &w()).unwrap(),
            plan_model(64, 8, &defaults(64)).unwrap(),
        );
        assert_eq!((with.healthy_rounds, without.healthy_rounds), (0, 2));
        let round = without.phases[2].seconds / without.rounds as f64;
        assert!(
            (without.modeled_seconds_healthy - with.modeled_seconds_healthy - 2.0 * round).abs()
                < 1e-9
        );
        // The same worst case: the floor decides only whether a healthy check ends after B.
        assert!((without.modeled_seconds - with.modeled_seconds).abs() < 1e-9);
        let text = explain_plan(64, 8, false, &defaults(64)).expect("explained");
        assert!(
            text.contains("Config: built-in defaults, plan 'quick', GPU 'NVIDIA H100 80GB HBM3'")
                && text.contains("healthy (B has no floor, so 2 screening rounds run)"),
            "{text}"
        );
    }
}
