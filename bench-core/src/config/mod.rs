//! Stage 1, config: the worker's TOML file over the built-in defaults in, one
//! [`worker::WorkerConfig`] out (with the site's network profiles and expected GPUs). Decides which
//! threshold rules, plans, profiles and GPU counts apply to this job (`selector`: by partition and
//! node); every bad key is an error with file, line and key.
//!
//! Configuration files: the shared loader (`nccl_check_host::config_file`), which jobs an entry
//! applies to (`selector`), the worker's own config (thresholds, outlier rule, plans: `worker`,
//! the plans' steps read by `plans`), and `--check-config`'s report on it (`check`).

pub mod check;
pub mod expected_gpus;
pub mod network;
pub mod plans;
pub mod selector;
pub mod worker;
