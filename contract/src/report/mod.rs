//! The worker's JSON report as its callers see it.

pub mod reason;
