//! The contract between the `nccl-check` worker and everything that runs it (the SPANK plugin,
//! the prolog, scripts, the fake workers of the test suites), in one place: the command line
//! callers build ([`args`]), and the exit codes with their meaning ([`exit`]). The report they
//! read back is [`crate::report::json::Report`], read with [`crate::report::read`].
//!
//! Built without the `gpu` feature, so the plugin and the prolog share it without CUDA or NCCL.

pub mod args;
pub mod exit;
#[cfg(test)]
mod fakes;

pub use args::{PlanName, PlanNameError, WorkerArgs};
pub use exit::ExitCode;
