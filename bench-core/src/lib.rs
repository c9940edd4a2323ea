//! bench-core: NCCL collectives measured exactly as NVIDIA nccl-tests measures them, every wait
//! bounded in time, with a verdict (PASS, FAIL, ERROR) and a JSON report.
//!
//! Without the `gpu` feature only the pure parts are built (verdicts and exit codes, sizes, data
//! types, collective definitions, report types), so the SPANK plugin can share them without ever
//! linking CUDA or NCCL code into srun or slurmstepd.

// The stages of one check, in the order it runs them (ARCHITECTURE.md), each with its
// one input and output; beside them the flow that calls them (`orchestrate`), the
// record they fill (`report`) and the worker's side of the contract (`contract`).
// 0. the ground floor: domain types and pure lookups every stage may name
pub mod model;
// 1. the TOML file over the built-in defaults -> WorkerConfig
pub mod config;
// 2. argv, environment and the WorkerConfig that --config names -> Options
pub mod settings;
// 3. Options -> Team (rendezvous, control plane, Topology)
pub mod meet;
// 4. Options, Team, floors -> rows of results
pub mod measure;
// 5. the node -> NodeFacts, Sku, TransportSummary
pub mod facts;
// 6. node-level rounds -> findings (whom to blame)
pub mod localize;
// 7. report (the localizer's findings in it) and config -> Verdict and reasons
pub mod judge;
// 8. report -> table, progress line, plot
pub mod render;

pub mod contract;
pub mod report;

#[cfg(feature = "gpu")]
pub mod orchestrate;
