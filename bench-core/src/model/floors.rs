//! The one floor (lowest acceptable busbw) of a measurement: the config's threshold rule,
//! raised by `--min-busbw`, left out where it does not apply. The retest while measuring and the
//! verdict afterwards ask the same question here, so they cannot disagree; the localizer of a
//! multi-node check gets its floors here too (`localization`), so a threshold rule that covers
//! the allocation (e.g. `min_nodes = 2`) is what lets a healthy one pass without localization.

use crate::model::thresholds::Threshold;
use crate::model::thresholds::{floor, is_pair, with_min, GpuKey};

/// What the floors of one check depend on.
#[derive(Debug, Clone, Copy)]
pub struct Floors<'a> {
    /// The config's threshold rules (admin's first, then the built-in ones).
    pub rules: &'a [Threshold],
    /// The GPU model and interconnect the rules are looked up by (this process's first GPU).
    pub gpu: GpuKey<'a>,
    /// Nodes of the check.
    pub nodes: u32,
    /// GPUs of the whole check.
    pub gpus: u32,
    /// `--min-busbw`.
    pub min_busbw: Option<f64>,
    /// CollNet (SHARP) or NVLS carried the collectives (known from NCCL's log once the run is
    /// over; false while measuring).
    pub in_network_algorithms: bool,
}

impl Floors<'_> {
    /// The floor of (collective, GPUs measured together, bytes), if any.
    ///
    /// `--min-busbw` is for the check's collectives, not for each GPU pair of the pair matrix
    /// (in a check of 2 GPUs a pair is the check's own sendrecv). CollNet/NVLS busbw is not the
    /// ring-equivalent figure: collectives they carried are judged only by the outlier rule and
    /// thresholds written for that algorithm (none are built in), so they get no floor.
    pub fn floor(&self, collective: &str, gpus: u32, bytes: u64) -> Option<f64> {
        self.expectation(collective, gpus, bytes).map(|e| e.floor)
    }

    /// The floor with where it came from (the rule's file:line and source, or `--min-busbw`).
    pub fn expectation(&self, collective: &str, gpus: u32, bytes: u64) -> Option<Expectation> {
        let pair = is_pair(collective, gpus);
        if self.in_network_algorithms && !pair {
            return None;
        }
        let rule = floor(self.rules, &self.gpu, self.nodes, collective, gpus, bytes);
        let min = self.min_busbw.filter(|_| !pair || gpus == self.gpus);
        let floor = with_min(rule.map(|t| t.min_busbw), min)?;
        let source = match rule {
            Some(t) if t.min_busbw >= floor => {
                let what = if t.admin { "admin rule" } else { "built-in" };
                format!("{what} [{}]: {}", t.origin, t.source)
            }
            _ => "--min-busbw".to_string(),
        };
        Some(Expectation { floor, source })
    }

    /// The localizer's floors for a multi-node check whose node pairs are measured with
    /// `pair_bytes`. Phase A (each node's slowest GPU pair) gets the GPU-pair rule, but only when
    /// some node had a GPU pair to measure (`gpu_pairs_measured`): with one GPU per node every
    /// node's placeholder would sit below any floor (a healthy 2 x 1-GPU check on 2x H200 FAILed
    /// so: "nA: its own GPUs: local busbw 1.0 < 255.0"). Phase B gets the rule of `allocation`,
    /// the collective (name, bytes) that ran over every rank of the check: without one, B has no
    /// floor and the localizer screens. No rule covers one GPU pair across two nodes (the sendrecv
    /// rule with 2 GPUs is an NVLink pair's): node pairs are judged against each other only.
    pub fn localization(
        &self,
        pair_bytes: u64,
        gpu_pairs_measured: bool,
        allocation: Option<(&str, u64)>,
    ) -> PairFloors {
        PairFloors {
            local: self
                .floor("sendrecv", 2, pair_bytes)
                .filter(|_| gpu_pairs_measured),
            allocation: allocation.and_then(|(c, bytes)| self.floor(c, self.gpus, bytes)),
            pair: None,
        }
    }
}

/// A floor and where it came from, as the table and the report show it beside the number.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub floor: f64,
    pub source: String,
}

/// Absolute floors in GB/s busbw, one per kind of group; `None`: relative rule only.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PairFloors {
    pub local: Option<f64>,
    pub allocation: Option<f64>,
    pub pair: Option<f64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An H200 rule for tests (also the verdict's).
    pub(crate) fn rule(
        collective: &'static str,
        gpus: u32,
        nodes: u32,
        min_busbw: f64,
    ) -> Threshold {
        Threshold {
            gpu: None,
            sku: Some("H200 SXM"),
            interconnect: None,
            gpus: Some(gpus),
            nodes: crate::model::node_count::NodeCount::Exact(nodes),
            collective,
            min_bytes: None,
            max_bytes: None,
            min_busbw,
            source: "test".into(),
            origin: "test".into(),
            admin: false,
        }
    }

    fn floors(rules: &[Threshold]) -> Floors<'_> {
        Floors {
            rules,
            gpu: GpuKey::by_name("NVIDIA H200"),
            nodes: 1,
            gpus: 4,
            min_busbw: None,
            in_network_algorithms: false,
        }
    }

    #[test]
    fn the_rule_of_the_gpu_model_applies() {
        let rules = [
            rule("all_reduce", 4, 1, 290.0),
            rule("sendrecv", 2, 1, 255.0),
        ];
        let f = floors(&rules);
        assert_eq!(f.floor("all_reduce", 4, 1 << 28), Some(290.0));
        assert_eq!(f.floor("sendrecv", 2, 1 << 28), Some(255.0));
        assert_eq!(f.floor("all_gather", 4, 1 << 28), None);
        let other = Floors {
            gpu: GpuKey::by_name("NVIDIA A100-SXM4-80GB"),
            ..f
        };
        assert_eq!(other.floor("all_reduce", 4, 1 << 28), None);
    }

    #[test]
    fn min_busbw_raises_collectives_but_not_gpu_pairs() {
        let rules = [
            rule("all_reduce", 4, 1, 290.0),
            rule("sendrecv", 2, 1, 255.0),
        ];
        let f = Floors {
            min_busbw: Some(300.0),
            ..floors(&rules)
        };
        assert_eq!(f.floor("all_reduce", 4, 1 << 28), Some(300.0));
        assert_eq!(f.floor("all_gather", 4, 1 << 28), Some(300.0));
        assert_eq!(f.floor("sendrecv", 2, 1 << 28), Some(255.0));
        // With 2 GPUs the pair is the check itself: --min-busbw applies.
        let two = Floors { gpus: 2, ..f };
        assert_eq!(two.floor("sendrecv", 2, 1 << 28), Some(300.0));
    }

    #[test]
    fn pairs_are_looked_up_as_one_node_and_collectives_by_node_count() {
        let rules = [
            rule("all_reduce", 8, 2, 180.0),
            rule("sendrecv", 2, 1, 255.0),
        ];
        let f = Floors {
            nodes: 2,
            gpus: 8,
            ..floors(&rules)
        };
        assert_eq!(f.floor("all_reduce", 8, 1 << 28), Some(180.0));
        assert_eq!(f.floor("sendrecv", 2, 1 << 28), Some(255.0));
        assert_eq!(
            Floors { nodes: 1, ..f }.floor("all_reduce", 8, 1 << 28),
            None
        );
    }

    #[test]
    fn collnet_or_nvls_leave_collectives_without_a_floor_but_keep_the_pairs() {
        let rules = [
            rule("all_reduce", 4, 1, 290.0),
            rule("sendrecv", 2, 1, 255.0),
        ];
        let f = Floors {
            in_network_algorithms: true,
            min_busbw: Some(100.0),
            ..floors(&rules)
        };
        assert_eq!(f.floor("all_reduce", 4, 1 << 28), None);
        assert_eq!(f.floor("sendrecv", 2, 1 << 28), Some(255.0));
    }
}

/// End to end without a GPU: the floor a `min_nodes = 2` rule gives an all_reduce over
/// 64 nodes x 8 GPUs, fed to the localizer as the runner feeds it, against the fabric simulation.
#[cfg(test)]
mod localization_tests {
    use super::Floors;
    use crate::config::worker::WorkerConfig;
    use crate::localize::sim::{self, Fabric, Fault};
    use crate::localize::{Code, LocalizeConfig, LocalizeVerdict, Localizer};
    use crate::model::thresholds::GpuKey;
    use std::path::Path;

    const MIB_256: u64 = 256 << 20;
    const H100: &str = "NVIDIA H100 80GB HBM3";

    /// The fabric simulation's nominal allocation busbw is 370 GB/s (H100-like, 400 Gb/s NICs).
    const RANGE_RULE: &str = "[[thresholds]]\nsku = \"H100 SXM\"\ncollective = \"all_reduce\"\n\
        min_nodes = 2\nmin_bytes = \"256M\"\nmax_bytes = \"16G\"\nmin_busbw = 300.0\n\
        source = \"test: 0.8x of the simulation's 370\"\n";

    fn config(admin: Option<&str>) -> WorkerConfig {
        WorkerConfig::from_texts(admin.map(|t| (Path::new("/etc/nccl-check/nccl-check.toml"), t)))
            .unwrap()
    }

    /// What the runner hands the localizer (runner/localized.rs) for `nodes` x `gpus`, with the
    /// plan's all_reduce 256M measured over every rank just before.
    fn localizer_config(c: &WorkerConfig, nodes: u32, gpus: u32) -> LocalizeConfig {
        let floors = Floors {
            rules: &c.thresholds,
            gpu: GpuKey {
                interconnect: crate::model::link_class::Class::Nvswitch,
                ..GpuKey::by_name(H100)
            },
            nodes,
            gpus: nodes * gpus,
            min_busbw: None,
            in_network_algorithms: false,
        };
        LocalizeConfig {
            fraction: c.outliers.fraction,
            floors: floors.localization(MIB_256, true, Some(("all_reduce", MIB_256))),
            ..LocalizeConfig::default()
        }
    }

    fn localize(cfg: &LocalizeConfig, faults: &[Fault]) -> LocalizeVerdict {
        let mut fabric = Fabric::healthy(64, 8, 16);
        for &f in faults {
            fabric.inject(f);
        }
        sim::simulate(Localizer::new(64, 8, cfg.clone()).unwrap(), &mut fabric).unwrap()
    }

    #[test]
    fn a_min_nodes_rule_passes_a_healthy_allocation_with_no_localization_round() {
        let cfg = localizer_config(&config(Some(RANGE_RULE)), 64, 8);
        assert_eq!(cfg.floors.allocation, Some(300.0));
        let healthy = localize(&cfg, &[]);
        assert!(healthy.pass(), "{healthy:?}");
        assert_eq!(healthy.localization_rounds, 0, "{healthy:?}");
        assert_eq!(healthy.rounds, 2, "phases A and B only: {healthy:?}");

        // A node whose NICs all run at half speed: B falls below the floor, the screening names it.
        let slow = Fault::NodeNet {
            node: 17,
            factor: 0.5,
        };
        let faulty = localize(&cfg, &[slow]);
        assert!(!faulty.pass(), "{faulty:?}");
        assert!(faulty.localization_rounds > 0, "{faulty:?}");
        assert!(
            faulty
                .findings
                .iter()
                .any(|f| f.code == Code::NodeSlow && f.nodes == [17]),
            "{faulty:?}"
        );
    }

    #[test]
    fn without_a_rule_for_the_allocation_a_healthy_one_is_screened() {
        let cfg = localizer_config(&config(None), 64, 8);
        assert_eq!(cfg.floors.allocation, None);
        let healthy = localize(&cfg, &[]);
        assert!(healthy.pass(), "{healthy:?}");
        assert!(healthy.localization_rounds >= 2, "{healthy:?}");
        // The same rule leaves a single node to the built-in 8x H100 rule.
        let c = config(Some(RANGE_RULE));
        let one = Floors {
            rules: &c.thresholds,
            gpu: GpuKey {
                interconnect: crate::model::link_class::Class::Nvswitch,
                ..GpuKey::by_name(H100)
            },
            nodes: 1,
            gpus: 8,
            min_busbw: None,
            in_network_algorithms: false,
        };
        assert_eq!(one.floor("all_reduce", 8, MIB_256), Some(400.0));
        let two = Floors {
            nodes: 2,
            gpus: 16,
            ..one
        };
        assert_eq!(two.floor("all_reduce", 16, MIB_256), Some(300.0));
    }
}
