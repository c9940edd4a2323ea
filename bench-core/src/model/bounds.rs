//! Bounds on the shape of a node that both the command line and the config file check.

/// The most GPUs one node may be configured to have.
pub const MAX_GPUS: u32 = 64;
