//! One step of a measuring plan: a collective over its sizes, or the pair matrix. The command
//! line (`--collective`, `--pairs`) and the config's `[plans]` both build steps; the measuring
//! loop runs them.

use crate::model::collectives::Collective;

/// One step of a plan.
#[derive(Debug, Clone)]
pub enum Step {
    /// A collective measured as nccl-tests does, at each size.
    Collective {
        collective: &'static dyn Collective,
        sizes: Vec<u64>,
        warmup: u32,
        iters: u32,
        /// Seconds the step should take (`model::time_budget`): its one size (`sizes`' only
        /// entry) is the largest it may choose and `iters` the most samples. None: the sizes
        /// and counts as given (nccl-tests' numbers, `--plan full`, `-b/-e/-n/-w`).
        budget: Option<f64>,
    },
    /// The GPU pair matrix (and across nodes, the node-pair matrix) with sendrecv.
    Pairs {
        bytes: u64,
        warmup: u32,
        iters: u32,
        /// Seconds each round of pairs should take (the localizer's rounds too), `bytes` the
        /// largest size and `iters` the most exchanges.
        budget: Option<f64>,
    },
}
