//! nccl-check-contract: what the `nccl-check` worker and everything that runs it (the SPANK
//! plugin, the prolog, scripts, the test suites' fake workers) agree on, and the small parts they
//! share. No CUDA, no NCCL, nothing heavy: the plugin is loaded into srun and slurmstepd, and the
//! prolog runs as root, so neither depends on the worker's crate (bench-core), which depends on
//! this one.
//!
//! - the worker's command line ([`args`]), its exit codes ([`exit`]) and the three verdicts
//!   ([`verdict`]);
//! - the report's reasons ([`report::reason`]);
//! - a child run with deadlines ([`supervise`]), Slurm host lists ([`hostlist`]), where a step's
//!   ranks meet ([`slurm_rendezvous`]), bounded reads of small files ([`read`]).

pub mod args;
pub mod exit;
pub mod hostlist;
pub mod read;
pub mod report;
pub mod slurm_rendezvous;
pub mod supervise;
pub mod verdict;

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use args::{PlanName, PlanNameError, WorkerArgs};
pub use exit::ExitCode;
pub use verdict::Verdict;
