//! Stage 5, measure: the settings, the team and the floors in, the rows of results out (busbw per
//! collective, size and placement; the GPU pair matrix; the local probe; the localizer's rounds),
//! measured exactly as nccl-tests measures them (`model::collectives`: byte counts and
//! bus-bandwidth factors; `nccl::Issue::collective`: the NCCL call of each; `runner::timed`: the
//! timed loops). Decides nothing about PASS or FAIL: it only retests
//! a result below its floor once. What it hands back, as the report records it: `rows`, `gpu`.

#[cfg(feature = "gpu")]
pub mod cuda;
pub mod gpu;
#[cfg(feature = "gpu")]
pub mod loop_probe;
#[cfg(feature = "gpu")]
pub mod nccl;
#[cfg(feature = "gpu")]
pub mod nccl_env;
pub mod rows;
#[cfg(feature = "gpu")]
pub mod runner;
pub mod running_thread;
