//! Configuration files: the shared loader (`file`), and the worker's own config (thresholds,
//! outlier rule, plans).

pub mod file;
pub mod network;
pub mod worker;

pub use file::ConfigError;
