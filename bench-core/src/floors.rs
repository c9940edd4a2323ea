//! The one floor (lowest acceptable busbw) of a measurement: the config's threshold rule,
//! raised by `--min-busbw`, left out where it does not apply. The retest while measuring and the
//! verdict afterwards ask the same question here, so they cannot disagree.

use crate::config::worker::Threshold;
use crate::thresholds::{floor, is_pair, with_min};

/// What the floors of one check depend on.
#[derive(Debug, Clone, Copy)]
pub struct Floors<'a> {
    /// The config's threshold rules (admin's first, then the built-in ones).
    pub rules: &'a [Threshold],
    /// The GPU model the rules are looked up by (the driver's name of the first GPU).
    pub gpu_name: &'a str,
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
        let pair = is_pair(collective, gpus);
        if self.in_network_algorithms && !pair {
            return None;
        }
        let rule = floor(
            self.rules,
            self.gpu_name,
            self.nodes,
            collective,
            gpus,
            bytes,
        );
        let min = self.min_busbw.filter(|_| !pair || gpus == self.gpus);
        with_min(rule, min)
    }
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
            gpu: "H200".into(),
            gpus: Some(gpus),
            nodes,
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
            gpu_name: "NVIDIA H200",
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
            gpu_name: "NVIDIA A100",
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
