//! bench-core: NCCL collectives measured exactly as NVIDIA nccl-tests measures them, every wait
//! bounded in time, with a verdict (PASS, FAIL, ERROR) and a JSON report.
//!
//! Without the `gpu` feature only the pure parts are built (verdicts and exit codes, sizes, data
//! types, collective definitions, report types), so the SPANK plugin can share them without ever
//! linking CUDA or NCCL code into srun or slurmstepd.

pub mod analysis;
pub mod collectives;
pub mod config;
pub mod contract;
pub mod datatype;
pub mod evidence;
pub mod facts;
pub mod floors;
pub mod judge;
pub mod localize;
pub mod pairs;
pub mod progress;
pub mod rendezvous;
pub mod report;
pub mod running_thread;
pub mod size;
pub mod sku;
pub mod slurm_layout;
pub mod team;
pub mod thresholds;
pub mod topology;
pub mod transport;

// Moved to the contract crate (the plugin and the prolog use them without bench-core); the
// old paths stay so bench-core's modules are unchanged.
pub use nccl_check_contract::{hostlist, slurm_config, slurm_rendezvous, supervise, text, verdict};

#[cfg(any(test, feature = "test-support"))]
pub use nccl_check_contract::test_support;

#[cfg(feature = "gpu")]
pub mod cuda;
#[cfg(feature = "gpu")]
pub mod loop_probe;
#[cfg(feature = "gpu")]
pub mod nccl;
#[cfg(feature = "gpu")]
pub mod nccl_env;
#[cfg(feature = "gpu")]
pub mod node_ready;
#[cfg(feature = "gpu")]
pub mod options;
#[cfg(feature = "gpu")]
pub mod orchestrate;
#[cfg(feature = "gpu")]
pub mod plot;
#[cfg(feature = "gpu")]
pub mod runner;
