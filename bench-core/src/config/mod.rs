//! Configuration files: the shared loader (`file`), and the worker's own config (thresholds,
//! outlier rule, plans).

pub mod expected_gpus;
pub mod file;
pub mod network;
pub mod node_count;
pub mod worker;

pub use file::ConfigError;
