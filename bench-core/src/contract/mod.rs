//! The contract between the `nccl-check` worker and everything that runs it, defined in the
//! `nccl-check-contract` crate (which the SPANK plugin and the prolog depend on instead of
//! bench-core) and re-exported here: the command line callers build ([`args`]), and the exit
//! codes with their meaning ([`exit`]). The report they read back is written as
//! [`crate::report::json::Report`] and read as the contract's plain report.

pub use nccl_check_contract::{args, exit};
#[cfg(all(test, feature = "gpu"))]
mod round_trip;

pub use args::{PlanName, PlanNameError, WorkerArgs};
pub use exit::ExitCode;
