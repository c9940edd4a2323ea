//! Configuration files: the shared loader (`file`, the contract crate's), which jobs an entry
//! applies to (`selector`), the worker's own config (thresholds, outlier rule, plans), and
//! `--check-config`'s report on it (`check`).

pub mod check;
pub mod expected_gpus;
/// The one TOML reader of every config (the prolog's too): the contract crate's.
pub use nccl_check_contract::config_file as file;
pub mod network;
pub mod node_count;
pub mod selector;
pub mod worker;

pub use file::ConfigError;
