//! A measuring step sized by a time budget, not a count: from the rate a first short exchange
//! delivered (a value every rank agrees on: the probe's slowest time, or a collective's summed
//! busbw), the message size and the number of samples that make a healthy step take about
//! `seconds` on any network, and the rule that stops sampling once the estimate is stable. Pure
//! functions: the runner (`measure::runner::timed`, `pair_matrix`, `localized`) feeds them the
//! agreed numbers, so every rank chooses the same size and count (NCCL's collectives and
//! sendrecv must match across ranks), and `--explain-plan` models a round with the same rule.

use serde::{Deserialize, Serialize};

/// The probe's message: large enough that a fast fabric's launch latency does not hide its
/// rate completely (4 MiB all_reduce on 4x H200: ~40 us), small enough to cost a few ms over
/// 1 GB/s sockets.
pub const PROBE_BYTES: u64 = 4 << 20;
/// The smallest size a budget picks: below it a socket fabric is latency-bound and its
/// readings noise. Measured on one H200 with 8 emulated nodes over loopback (2026-12-02): the
/// localizer's rounds at 1 MiB named a random node slow in 5 of 5 healthy checks (0.10-0.18
/// GB/s against 0.20-0.22); at 4 nodes, rounds at 4 MiB passed 5 of 5.
pub const MIN_BYTES: u64 = 4 << 20;
/// Fewest samples behind any budgeted estimate (and its spread).
pub const MIN_SAMPLES: u32 = 3;
/// Samples within this half-range of their median (relative) are stable: sampling stops.
pub const STABLE_SPREAD: f64 = 0.03;

/// What a budgeted step may spend and choose from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepBudget {
    /// Seconds a healthy step should take (all its operations).
    pub seconds: f64,
    /// The largest size it may choose (the plan's `bytes`; floors stated at it hold there).
    pub max_bytes: u64,
    /// The smallest size it may choose (`MIN_BYTES`, or a step's own; the plan's if smaller).
    pub min_bytes: u64,
    /// The most samples it takes (the plan's `iters`).
    pub max_samples: u32,
    /// Operations a step runs beyond its samples (warm-up, untimed, check), per placement.
    pub extra_ops: u32,
    /// Placements (2 for a collective: out-of-place and in-place; 1 for a pair exchange).
    pub placements: u32,
}

/// The size and sample count a budget chose, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub bytes: u64,
    pub samples: u32,
    pub why: SizeWhy,
}

/// Why a step measured the size it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeWhy {
    /// The plan's largest size fits the budget (a fast fabric: the plan's size, as before).
    PlanSize,
    /// A smaller size, the largest power of two whose operations fit the budget.
    Budget,
    /// Even the smallest size overruns the budget: `MIN_BYTES`, fewest samples.
    Smallest,
    /// No rate to size from (nothing measured before): the plan's size and count.
    NoRate,
}

impl SizeWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            SizeWhy::PlanSize => "plan_size",
            SizeWhy::Budget => "budget",
            SizeWhy::Smallest => "smallest",
            SizeWhy::NoRate => "no_rate",
        }
    }
}

/// Why sampling stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopWhy {
    /// At least `MIN_SAMPLES`, within `STABLE_SPREAD` of their median.
    Stable,
    /// The most samples the step takes.
    MostSamples,
    /// The samples spent the budget's share before either.
    Budget,
}

impl StopWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            StopWhy::Stable => "stable",
            StopWhy::MostSamples => "most_samples",
            StopWhy::Budget => "budget",
        }
    }
}

/// The size and samples for `budget` on a path that moved `rate` bytes a second (by the
/// probe: its bytes over the slowest rank's seconds, latency included, so the rate is
/// pessimistic and the step comes in under its budget). The size is a power of two (as
/// nccl-tests' sweeps), at most the plan's and at least the budget's `min_bytes` (or the plan's, if
/// smaller); the samples as many as the budget pays for at that size, between `MIN_SAMPLES`
/// and the plan's count.
pub fn choose(budget: &StepBudget, rate: f64) -> Choice {
    let most = budget.max_samples.max(1);
    if !(rate.is_finite() && rate > 0.0 && budget.seconds > 0.0) {
        return Choice {
            bytes: budget.max_bytes,
            samples: most,
            why: SizeWhy::NoRate,
        };
    }
    let ops = |samples: u32| f64::from(budget.placements.max(1) * (samples + budget.extra_ops));
    // The size whose operations, at the most samples, fill the budget.
    let fits = rate * budget.seconds / ops(most);
    let smallest = budget.min_bytes.min(budget.max_bytes);
    let (bytes, why) = if fits >= budget.max_bytes as f64 {
        (budget.max_bytes, SizeWhy::PlanSize)
    } else if fits < smallest as f64 {
        (smallest, SizeWhy::Smallest)
    } else {
        // The largest power of two at most `fits`.
        let power = (fits as u64).checked_ilog2().map_or(0, |b| 1 << b);
        (power.max(smallest), SizeWhy::Budget)
    };
    let op_s = bytes as f64 / rate;
    let per_placement = budget.seconds / f64::from(budget.placements.max(1));
    let paid = (per_placement / op_s).floor() - f64::from(budget.extra_ops);
    let samples = (paid.max(0.0) as u32).clamp(MIN_SAMPLES.min(most), most);
    Choice {
        bytes,
        samples,
        why,
    }
}

/// The samples' half-range over their median: a result within it of its limit cannot be told
/// from the limit by these samples. 0 with fewer than two samples.
pub fn spread(samples: &[f64]) -> f64 {
    if samples.len() < 2 {
        return 0.0;
    }
    let (lo, hi) = samples
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &s| {
            (lo.min(s), hi.max(s))
        });
    let mid = crate::model::stats::median(samples);
    if mid > 0.0 {
        (hi - lo) / (2.0 * mid)
    } else {
        0.0
    }
}

/// Whether to stop after `samples` (seconds each, the same numbers on every rank), taking at
/// most `most` and at least `least`, having spent `spent_s` of `allowance_s`.
pub fn stop(
    samples: &[f64],
    (least, most): (u32, u32),
    spent_s: f64,
    allowance_s: f64,
) -> Option<StopWhy> {
    let n = samples.len() as u32;
    if n >= most {
        return Some(StopWhy::MostSamples);
    }
    if n < least.max(MIN_SAMPLES.min(most)) {
        return None;
    }
    if spread(samples) <= STABLE_SPREAD {
        return Some(StopWhy::Stable);
    }
    (spent_s >= allowance_s).then_some(StopWhy::Budget)
}

/// What the report says of one budgeted measurement: which size it judged, how many samples,
/// their spread, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sizing {
    /// The step: a collective's name, `gpu_pairs`, `node_pairs` or `localization_rounds`.
    pub step: String,
    pub budget_s: f64,
    /// The rate sized from (GB/s), and what gave it.
    pub rate_gbs: f64,
    pub rate_from: String,
    pub bytes: u64,
    pub why: SizeWhy,
    pub samples: u32,
    /// `spread` of the samples: a collective's agreed samples; a pair step's operations by the
    /// GPUs' clock, its widest pair; 0 for the localizer's rounds (their retests' spread is the
    /// report's `localization_noise`).
    #[serde(default)]
    pub spread: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopWhy>,
    /// Whether a floor holds at this size; else the peers judge it (the outlier rule).
    pub floor_held: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn quick() -> StepBudget {
        StepBudget {
            seconds: 0.5,
            max_bytes: 256 * MIB,
            min_bytes: MIN_BYTES,
            max_samples: 5,
            extra_ops: 2,
            placements: 2,
        }
    }

    #[test]
    fn a_fast_fabric_keeps_the_plans_size_and_count() {
        // NVLink: the probe read ~100 GB/s (latency included); 256M fits 0.5 s many times over.
        let c = choose(&quick(), 100e9);
        assert_eq!(
            (c.bytes, c.samples, c.why),
            (256 * MIB, 5, SizeWhy::PlanSize)
        );
    }

    #[test]
    fn a_slow_network_gets_a_smaller_size_that_fits_the_budget() {
        // ~0.5 GB/s over sockets: 0.5 s / 14 operations = 36 ms a operation = 17.9 MB: 16 MiB.
        let c = choose(&quick(), 0.5e9);
        assert_eq!((c.bytes, c.samples, c.why), (16 * MIB, 5, SizeWhy::Budget));
        let ops = 2.0 * f64::from(c.samples + 2);
        assert!(ops * c.bytes as f64 / 0.5e9 <= 0.5, "within the budget");
        // Twice the rate, twice the size: the step's time stays about the same.
        assert_eq!(choose(&quick(), 1e9).bytes, 32 * MIB);
    }

    #[test]
    fn a_crawling_path_measures_the_smallest_size_with_the_fewest_samples() {
        let c = choose(&quick(), 1e6);
        assert_eq!((c.bytes, c.samples, c.why), (4 * MIB, 3, SizeWhy::Smallest));
        // A plan smaller than the smallest size keeps its own.
        let tiny = StepBudget {
            max_bytes: 4096,
            ..quick()
        };
        assert_eq!(choose(&tiny, 1.0).bytes, 4096);
        // A step's own floor (the localizer's rounds: 16 MiB) holds, its samples paid at it.
        let rounds = StepBudget {
            min_bytes: 16 * MIB,
            ..quick()
        };
        let c = choose(&rounds, 1e6);
        assert_eq!(
            (c.bytes, c.samples, c.why),
            (16 * MIB, 3, SizeWhy::Smallest)
        );
    }

    #[test]
    fn no_rate_keeps_the_plan() {
        for r in [0.0, f64::NAN, f64::INFINITY, -1.0] {
            let c = choose(&quick(), r);
            assert_eq!((c.bytes, c.samples, c.why), (256 * MIB, 5, SizeWhy::NoRate));
        }
    }

    #[test]
    fn sampling_stops_when_stable_at_the_most_samples_or_when_the_budget_is_spent() {
        let most = (3, 8);
        assert_eq!(stop(&[1.0, 1.0], most, 0.0, 1.0), None, "fewer than 3");
        assert_eq!(
            stop(&[1.0, 1.01, 0.99], most, 0.0, 1.0),
            Some(StopWhy::Stable)
        );
        // Noisy: keeps sampling while the budget lasts, then stops.
        let noisy = [1.0, 1.3, 0.8];
        assert_eq!(stop(&noisy, most, 0.5, 1.0), None);
        assert_eq!(stop(&noisy, most, 1.0, 1.0), Some(StopWhy::Budget));
        assert_eq!(
            stop(&[1.0, 1.3, 0.8, 1.0, 1.2, 0.9, 1.0, 1.1], most, 0.0, 9.0),
            Some(StopWhy::MostSamples)
        );
        // A retest asks for all its samples: stable ones do not stop it early.
        assert_eq!(stop(&[1.0; 4], (8, 8), 0.0, 9.0), None);
    }

    #[test]
    fn the_report_spells_the_reasons_as_serde_does() {
        for w in [
            SizeWhy::PlanSize,
            SizeWhy::Budget,
            SizeWhy::Smallest,
            SizeWhy::NoRate,
        ] {
            assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
        }
        for w in [StopWhy::Stable, StopWhy::MostSamples, StopWhy::Budget] {
            assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
        }
    }

    #[test]
    fn the_spread_is_the_half_range_over_the_median() {
        assert_eq!(spread(&[1.0]), 0.0);
        assert!((spread(&[0.9, 1.0, 1.1]) - 0.1).abs() < 1e-12);
    }
}
