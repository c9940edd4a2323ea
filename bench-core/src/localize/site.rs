//! What the site's worker config decides for `--explain-plan`: the plan's collectives that run
//! over every rank before its pair step (phase B), the pair step itself, and the threshold rule
//! that gives B's last measurement its floor. The runner asks the same question of the same
//! rules (`runner::localized`: `Floors::localization` with the last collective measured before
//! the pairs), so the plan explained is the plan a check of that allocation runs.

use crate::config::worker::WorkerConfig;
use crate::model::floors::Floors;
use crate::model::step::Step;
use crate::model::thresholds::GpuKey;
use serde::Serialize;

/// One collective size that runs over every rank of the allocation before the pairs.
#[derive(Debug, Clone, Serialize)]
pub struct AllocationRun {
    pub collective: &'static str,
    pub bytes: u64,
    /// Iterations timed and untimed: warm-up + timed x 2 placements (out-of-place, in-place).
    pub iterations: u32,
    /// The step's time budget (`model::time_budget`): its time is at most about this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<f64>,
}

/// The floor of B's last measurement and the rule it came from.
#[derive(Debug, Clone, Serialize)]
pub struct HealthyFloor {
    pub min_busbw_gbs: f64,
    /// `admin rule [FILE:LINE]: source` or `built-in [defaults.toml:LINE]: source`.
    pub rule: String,
}

/// What the model needs from the config: a plan and whether B can end a healthy check.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    /// The admin file read, or "built-in defaults".
    pub config: String,
    pub plan: String,
    /// The GPU model the rules were looked up for (`--gpu-model`), if any.
    pub gpu_model: Option<String>,
    /// Phase B: every collective size of the plan before its pair step, in order.
    pub allocation: Vec<AllocationRun>,
    pub pair_bytes: u64,
    pub pair_iterations: u32,
    /// Each round of pairs' time budget (the localizer's rounds too), if the plan gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair_budget_s: Option<f64>,
    /// `--network-gbs`: the busbw between nodes to model (a 10 GbE or socket fabric) in place of
    /// the model's NIC and allocation-wide constants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_gbs: Option<f64>,
    /// The floor of B's last measurement (the one the localizer judges), if a rule gives one.
    pub floor: Option<HealthyFloor>,
}

impl Workload {
    /// `plan` of `config` for an allocation of `nodes` x `gpus_per_node` GPUs of `gpu_model`.
    /// Rules naming a GPU (`sku`, `gpu`, `interconnect`) apply only when `gpu_model` names it.
    pub fn from_config(
        config: &WorkerConfig,
        plan: &str,
        gpu_model: Option<&str>,
        nodes: usize,
        gpus_per_node: usize,
    ) -> Result<Workload, String> {
        let p = config
            .plan(plan)
            .map_err(|e| format!("--explain-plan: {e}"))?;
        let mut allocation = Vec::new();
        let mut pairs = None;
        for step in &p.steps {
            match step {
                Step::Collective {
                    collective,
                    sizes,
                    warmup,
                    iters,
                    budget,
                } => allocation.extend(sizes.iter().map(|&bytes| AllocationRun {
                    collective: collective.name(),
                    bytes,
                    iterations: warmup.saturating_add(iters.saturating_mul(2)),
                    budget_s: *budget,
                })),
                Step::Pairs {
                    bytes,
                    warmup,
                    iters,
                    budget,
                } => {
                    let iterations = warmup.saturating_add(iters.saturating_mul(2));
                    pairs = Some((*bytes, iterations, *budget));
                    break;
                }
            }
        }
        let Some((pair_bytes, pair_iterations, pair_budget_s)) = pairs else {
            return Err(format!(
                "--explain-plan: plan '{plan}' has no pair step (`pairs = true`): no pair matrix and no localization to explain"
            ));
        };
        // No model: the empty name, which no SKU has (no sku, `Class::Unknown`).
        let gpu = GpuKey::by_name(gpu_model.unwrap_or(""));
        let floors = Floors {
            rules: &config.thresholds,
            gpu,
            nodes: u32::try_from(nodes).unwrap_or(u32::MAX),
            gpus: u32::try_from(nodes.saturating_mul(gpus_per_node)).unwrap_or(u32::MAX),
            min_busbw: None,
            in_network_algorithms: false,
        };
        // The runner hands the localizer the last collective measured before the pairs.
        let floor = allocation
            .last()
            .and_then(|last| floors.expectation(last.collective, floors.gpus, last.bytes))
            .map(|e| HealthyFloor {
                min_busbw_gbs: e.floor,
                rule: e.source,
            });
        Ok(Workload {
            config: config
                .path
                .as_ref()
                .map_or("built-in defaults".into(), |p| p.display().to_string()),
            plan: plan.to_string(),
            gpu_model: gpu_model.map(str::to_string),
            allocation,
            pair_bytes,
            pair_iterations,
            pair_budget_s,
            network_gbs: None,
            floor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const SITE: &str = r#"
[[thresholds]]
sku = "H100 SXM"
collective = "all_reduce"
min_nodes = 2
min_bytes = "256M"
max_bytes = "16G"
min_busbw = 300.0
source = "our fleet"
"#;

    fn site() -> WorkerConfig {
        WorkerConfig::from_texts(Some((Path::new("/etc/nccl-check/nccl-check.toml"), SITE)))
            .expect("valid")
    }

    #[test]
    fn the_built_in_defaults_give_a_multi_node_allocation_no_floor() {
        let cfg = WorkerConfig::from_texts(None).expect("defaults");
        let w = Workload::from_config(&cfg, "quick", Some("NVIDIA H100 80GB HBM3"), 64, 8)
            .expect("quick");
        assert!(w.floor.is_none(), "{w:?}");
        assert_eq!(w.config, "built-in defaults");
        assert_eq!((w.allocation.len(), w.pair_bytes), (1, 1 << 28));
        assert_eq!(w.allocation[0].iterations, 12);
    }

    #[test]
    fn a_min_nodes_rule_gives_the_floor_only_for_the_gpu_it_names() {
        let cfg = site();
        let w = Workload::from_config(&cfg, "quick", Some("NVIDIA H100 80GB HBM3"), 64, 8)
            .expect("quick");
        let f = w.floor.expect("a floor");
        assert_eq!(f.min_busbw_gbs, 300.0);
        assert!(
            f.rule
                .starts_with("admin rule [/etc/nccl-check/nccl-check.toml:2]"),
            "{}",
            f.rule
        );
        // No model given: a rule naming a SKU cannot be known to apply.
        let none = Workload::from_config(&cfg, "quick", None, 64, 8).expect("quick");
        assert!(none.floor.is_none());
        // Another model: not this rule's.
        let other =
            Workload::from_config(&cfg, "quick", Some("NVIDIA H200"), 64, 8).expect("quick");
        assert!(other.floor.is_none());
    }

    #[test]
    fn the_full_plan_runs_every_size_before_its_pairs_and_judges_the_last() {
        let cfg = WorkerConfig::from_texts(None).expect("defaults");
        let w = Workload::from_config(&cfg, "full", None, 4, 8).expect("full");
        assert_eq!(w.allocation.len(), 36, "six collectives x 32M..1G");
        assert_eq!(w.allocation.last().map(|a| a.collective), Some("sendrecv"));
        assert_eq!(w.allocation[0].iterations, 45);
    }

    #[test]
    fn an_unknown_plan_or_one_without_pairs_is_named() {
        let cfg = WorkerConfig::from_texts(Some((
            Path::new("site.toml"),
            "[plans.ar]\ndescription = \"x\"\nsteps = [{ collective = \"all_reduce\", bytes = \"1G\" }]\n",
        )))
        .expect("valid");
        let e = Workload::from_config(&cfg, "fastest", None, 2, 8).unwrap_err();
        assert!(
            e.contains("unknown plan 'fastest'") && e.contains("quick"),
            "{e}"
        );
        let e = Workload::from_config(&cfg, "ar", None, 2, 8).unwrap_err();
        assert!(e.contains("plan 'ar' has no pair step"), "{e}");
    }
}
