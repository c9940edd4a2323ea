//! One fault found about a part (a GPU, a NIC port, a node's CPU time), in the shape the report's
//! reason takes: the facts readers find them, the measuring loop finds one too (a node starved of
//! CPU time), and judge and localize turn them into reasons.

use nccl_check_contract::report::reason::ReasonCode;
use serde::Serialize;

/// One fault found in the facts, in the shape the report's reason takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Its reason code (`GpuMissing`, written `gpu_missing`): typed here, so no reader maps a
    /// string back.
    pub code: ReasonCode,
    /// The part: `GPU 0000:9b:00.0`, `mlx5_0:1`, `eth0`.
    pub subject: String,
    /// One line for an admin: what is wrong and how it was known.
    pub message: String,
    /// The measured value, when the fault is a number (GPUs listed, Gb/s, PCIe width).
    pub measured: Option<f64>,
    /// The value it was held against.
    pub limit: Option<f64>,
}

impl Finding {
    pub fn new(code: ReasonCode, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            code,
            subject: subject.into(),
            message: message.into(),
            measured: None,
            limit: None,
        }
    }

    /// The same finding with its number and the limit it missed.
    pub fn with_values(mut self, measured: f64, limit: f64) -> Self {
        self.measured = Some(measured);
        self.limit = Some(limit);
        self
    }
}
