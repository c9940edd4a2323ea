//! The plans of the worker's config (`[plans.<name>]`): each a list of steps, the pair matrix or
//! one collective over a doubling size range, read low (serde) then checked and resolved, every
//! error naming `plans.<name>.<key>`.

use crate::model::collectives;
use crate::model::size::parse_size;
use crate::model::step::Step;
use nccl_check_host::config_file::{self, ConfigError};
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlan {
    /// Accepted as the admin's note on the plan; nothing reads it.
    #[serde(rename = "description")]
    _description: Option<String>,
    steps: Vec<RawStep>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    collective: Option<String>,
    #[serde(default)]
    pairs: bool,
    bytes: Option<String>,
    min_bytes: Option<String>,
    max_bytes: Option<String>,
    warmup: Option<u32>,
    iters: Option<u32>,
    /// Seconds the step should take (`model::time_budget`); absent: its sizes and counts as given.
    budget_s: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub steps: Vec<Step>,
}

/// One `[plans.<name>]` with its steps; errors name `plans.<name>.<key>`.
pub(super) fn resolve_plan(
    path: &Path,
    text: &str,
    name: &str,
    p: RawPlan,
) -> Result<Plan, ConfigError> {
    if p.steps.is_empty() {
        return Err(config_file::invalid(
            path,
            text,
            &format!("plans.{name}.steps"),
            "a plan needs at least one step",
        ));
    }
    let steps = (p.steps.into_iter().enumerate()).map(|(i, s)| plan_step(path, text, name, i, s));
    Ok(Plan {
        steps: steps.collect::<Result<_, _>>()?,
    })
}

/// One step of a plan: either the pair matrix or one collective over a doubling size range.
fn plan_step(
    path: &Path,
    text: &str,
    name: &str,
    i: usize,
    s: RawStep,
) -> Result<Step, ConfigError> {
    let step = format!("plans.{name}.steps[{i}]");
    // What is wrong with `key` of the step (`.bytes`; "": the step itself).
    let bad = |key: &str, msg: &str| config_file::invalid(path, text, &format!("{step}{key}"), msg);
    let size = |k: &str, v: &Option<String>| {
        (v.as_deref().map(|b| parse_size(b).map_err(|e| bad(k, &e)))).transpose()
    };
    let bytes = size(".bytes", &s.bytes)?;
    let min = size(".min_bytes", &s.min_bytes)?;
    let max = size(".max_bytes", &s.max_bytes)?;
    let iters = s.iters.unwrap_or(5);
    if iters == 0 {
        return Err(bad(".iters", "at least one timed iteration is needed"));
    }
    let (warmup, budget) = (s.warmup.unwrap_or(2), s.budget_s);
    if let Some(b) = budget.filter(|b| !(b.is_finite() && *b > 0.0)) {
        let msg = format!("{b} is not a positive number of seconds");
        return Err(bad(".budget_s", &msg));
    }
    if budget.is_some() && s.bytes.is_none() {
        let msg = "a budgeted step measures one size: give `bytes` (the largest it may choose)";
        return Err(bad(".budget_s", msg));
    }
    Ok(match (s.pairs, &s.collective) {
        (true, Some(_)) => {
            let msg = "a step is either `pairs = true` or a `collective`, not both";
            return Err(bad(".pairs", msg));
        }
        (false, None) => {
            let msg = "a step needs `collective = \"...\"` or `pairs = true`";
            return Err(bad("", msg));
        }
        (true, None) => Step::Pairs {
            bytes: (bytes.or(max)).ok_or_else(|| bad(".bytes", "a pair step needs `bytes`"))?,
            warmup,
            iters,
            budget,
        },
        (false, Some(c)) => {
            let collective =
                collectives::collective_named(c).map_err(|e| bad(".collective", &e))?;
            let (lo, hi) = step_range(bytes, min, max).map_err(|(k, m)| bad(k, &m))?;
            Step::Collective {
                collective,
                sizes: sweep_sizes(lo, hi, 2),
                warmup,
                iters,
                budget,
            }
        }
    })
}

/// A collective step's size range from `bytes` (one size) or `min_bytes` and `max_bytes`; on
/// error, the key under `steps[i]` to name (`.min_bytes`, or empty for the step) and the message.
fn step_range(
    bytes: Option<u64>,
    min: Option<u64>,
    max: Option<u64>,
) -> Result<(u64, u64), (&'static str, String)> {
    match (bytes, min, max) {
        (Some(b), None, None) => Ok((b, b)),
        (None, Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
        (None, Some(lo), Some(hi)) => Err((
            ".min_bytes",
            format!("min_bytes {lo} is larger than max_bytes {hi}"),
        )),
        _ => Err((
            "",
            "give `bytes`, or both `min_bytes` and `max_bytes`".into(),
        )),
    }
}

/// `lo, f lo, f^2 lo, ... <= hi` (nccl-tests' -f: a plan's steps double, the command line's
/// sweep multiplies by its `-f`).
pub fn sweep_sizes(lo: u64, hi: u64, factor: u64) -> Vec<u64> {
    let next = |&s: &u64| (s != 0).then(|| s.saturating_mul(factor));
    std::iter::successors(Some(lo), next)
        .take_while(|&s| s <= hi)
        .collect()
}
