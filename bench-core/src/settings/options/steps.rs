//! What to measure: the plan's steps with the command line's iteration counts, or an ad-hoc
//! plan from command-line collectives and sizes (nccl-tests style), and the summary of those
//! steps the rest of the options carry.

use super::raw::RawArgs;
use crate::config::plans::sweep_sizes;
use crate::model::collectives::{self, AllReduce, Collective};
use crate::model::size::parse_size;
use crate::model::step::Step;

/// `-f` and `-n` values no plan can run with.
pub(super) fn check_counts(raw: &RawArgs) -> Result<(), String> {
    let factor = raw.step_factor;
    if factor < 2 {
        return Err(format!("invalid stepfactor {factor}: must be at least 2"));
    }
    if raw.iters == Some(0) {
        return Err("invalid iters 0: at least one timed iteration is needed".into());
    }
    Ok(())
}

/// The steps to run: command-line collectives or sizes make an ad-hoc plan; else `plan`'s steps.
pub(super) fn of(raw: &RawArgs, plan: &[Step]) -> Result<Vec<Step>, String> {
    let adhoc = raw.collectives.is_some() || raw.min_bytes.is_some() || raw.max_bytes.is_some();
    if adhoc {
        adhoc_steps(raw)
    } else {
        Ok(plan_steps(raw, plan))
    }
}

/// One step per command-line collective over the `-b`..`-e` sweep.
fn adhoc_steps(raw: &RawArgs) -> Result<Vec<Step>, String> {
    let collectives =
        collectives::parse_list(raw.collectives.as_deref().unwrap_or(AllReduce.name()))?;
    let sizes = sweep(raw)?;
    Ok(collectives
        .into_iter()
        .map(|collective| Step::Collective {
            collective,
            sizes: sizes.clone(),
            warmup: raw.warmup_iters.unwrap_or(5),
            iters: raw.iters.unwrap_or(20),
            budget: None,
        })
        .collect())
}

/// The sizes from `-b` to `-e`, multiplied by `-f` between rows.
fn sweep(raw: &RawArgs) -> Result<Vec<u64>, String> {
    let min_bytes = parse_size(raw.min_bytes.as_deref().unwrap_or("256M"))?;
    let max_bytes = match raw.max_bytes.as_deref() {
        Some(m) => parse_size(m)?,
        // -b alone measures just that size (neither: the default size alone).
        None => min_bytes,
    };
    if min_bytes > max_bytes {
        return Err(format!(
            "minbytes {min_bytes} is larger than maxbytes {max_bytes}"
        ));
    }
    Ok(sweep_sizes(min_bytes, max_bytes, raw.step_factor))
}

/// The plan's steps, with `-w` and `-n` replacing its counts where given: counts given on
/// the command line are measured as given, so they end the steps' time budgets.
fn plan_steps(raw: &RawArgs, plan: &[Step]) -> Vec<Step> {
    let counted = raw.warmup_iters.is_some() || raw.iters.is_some();
    plan.iter()
        .cloned()
        .map(|mut s| {
            let (Step::Collective {
                warmup,
                iters,
                budget,
                ..
            }
            | Step::Pairs {
                warmup,
                iters,
                budget,
                ..
            }) = &mut s;
            *warmup = raw.warmup_iters.unwrap_or(*warmup);
            *iters = raw.iters.unwrap_or(*iters);
            if counted {
                *budget = None;
            }
            s
        })
        .collect()
}

/// What the options say about the steps as a whole (the table, the plot and the report read it).
pub(super) struct Summary {
    pub collectives: Vec<&'static dyn Collective>,
    /// The first step's sizes (none when it measures pairs).
    pub sizes: Vec<u64>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// The first step's counts.
    pub warmup_iters: u32,
    pub iters: u32,
}

impl Summary {
    pub fn of(steps: &[Step]) -> Summary {
        let collectives = steps
            .iter()
            .filter_map(|s| match s {
                Step::Collective { collective, .. } => Some(*collective),
                Step::Pairs { .. } => None,
            })
            .collect();
        let all_sizes: Vec<u64> = steps
            .iter()
            .flat_map(|s| match s {
                Step::Collective { sizes, .. } => sizes.clone(),
                Step::Pairs { bytes, .. } => vec![*bytes],
            })
            .collect();
        let sizes = match steps.first() {
            Some(Step::Collective { sizes, .. }) => sizes.clone(),
            _ => vec![],
        };
        let (warmup_iters, iters) = match steps.first() {
            Some(Step::Collective { warmup, iters, .. } | Step::Pairs { warmup, iters, .. }) => {
                (*warmup, *iters)
            }
            None => (0, 1),
        };
        Summary {
            collectives,
            sizes,
            min_bytes: all_sizes.iter().copied().min().unwrap_or(0),
            max_bytes: all_sizes.iter().copied().max().unwrap_or(0),
            warmup_iters,
            iters,
        }
    }
}
