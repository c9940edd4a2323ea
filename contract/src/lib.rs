//! nccl-check-contract: what the `nccl-check` worker and everything that runs it (the SPANK
//! plugin, the prolog, scripts, the test suites' fake workers) agree on, and the small parts they
//! share. No CUDA, no NCCL, nothing heavy: the plugin is loaded into srun and slurmstepd, and the
//! prolog runs as root, so neither depends on the worker's crate (bench-core), which depends on
//! this one.
//!
//! - the worker's command line ([`args`]), its exit codes ([`exit`]) and the three verdicts
//!   ([`verdict`]);
//! - the verdict line on stderr, written and read in one place ([`line`]);
//! - the one rule from (how the worker ended, its report) to the verdict ([`outcome`]);
//! - the report as plain data ([`report`]), its bounded reader ([`report::read`]) and its
//!   reasons ([`report::reason`]);
//! - a child run with deadlines ([`supervise`]), Slurm host lists ([`hostlist`]), where a step's
//!   ranks meet ([`slurm_rendezvous`]), bounded reads of small files ([`read`]), text from
//!   others made safe to print ([`text`]); with feature `slurm-config`, Slurm's own
//!   configuration as the node uses it (`slurm_config`), and with feature `toml`, the one reader
//!   of TOML config files, whose errors name file, line and field (`config_file`).

pub mod args;
#[cfg(feature = "toml")]
pub mod config_file;
pub mod exit;
pub mod hostlist;
pub mod line;
pub mod outcome;
pub mod read;
pub mod report;
#[cfg(feature = "slurm-config")]
pub mod slurm_config;
pub mod slurm_rendezvous;
pub mod supervise;
pub mod text;
pub mod verdict;

#[cfg(test)]
mod fakes;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use args::{PlanName, PlanNameError, WorkerArgs};
pub use exit::ExitCode;
pub use verdict::Verdict;
