//! nccl-check-contract: what the `nccl-check` worker and everything that runs it (the SPANK
//! plugin, the prolog, scripts, the test suites' fake workers) agree on, and nothing else. No
//! CUDA, no NCCL, nothing heavy: the plugin is loaded into srun and slurmstepd, and the prolog
//! runs as root, so neither depends on the worker's crate (bench-core), which depends on this
//! one. What the programs share that is no agreement between them (children with deadlines, host
//! lists, Slurm's configuration, bounded reads) is the `nccl-check-host` crate's.
//!
//! - the worker's command line ([`args`]), its exit codes ([`exit`]) and the three verdicts
//!   ([`verdict`]);
//! - the verdict line on stderr, written and read in one place ([`line`]), and the problem lines
//!   of the admin checks (`--check-config`, `nccl-check-plugstack --check`: [`check_line`]);
//! - where a step's ranks meet, computed alike by the worker and the plugin
//!   ([`slurm_rendezvous`]);
//! - the one rule from (how the worker ended, its report) to the verdict ([`outcome`]);
//! - the report's head as plain data ([`report`]), its bounded reader ([`report::read`]) and
//!   its reasons ([`report::reason`]).

pub mod args;
pub mod check_line;
pub mod exit;
pub mod line;
pub mod outcome;
pub mod report;
pub mod slurm_rendezvous;
pub mod verdict;

#[cfg(test)]
mod fakes;
