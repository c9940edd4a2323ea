//! Stage 5, facts: the node in (the driver's GPUs, NVML, PCI device IDs, sysfs NICs, NCCL's own
//! INFO log), typed facts out ([`node::NodeFacts`], [`sku::Sku`], [`transport::TransportSummary`]).
//! Readers: they classify what they read into stable codes and leave the verdict to `judge`
//! (except `local_probe`, which still judges the probe against its floor).
//!
//! Facts: what the node itself says about its hardware, read in milliseconds before or beside
//! the bandwidth measurement, so a verdict can name the part (a GPU the driver no longer lists,
//! a NIC port that is down or trained at a lower rate, a GPU with a dead NVLink, a degraded PCIe
//! link, uncorrectable ECC errors or an active hardware slowdown) instead of only a slow number.
//!
//! Each module reads one source under a configurable root (so tests use fixture trees) and
//! returns plain data plus `Finding`s; none of them decides a verdict. A finding has a stable
//! `code` the report turns into its reason; every finding here is a FAIL, of the class its code
//! says (`contract::report::cause`: a hardware fault or a missing GPU drains the node; a slow
//! probe on a GPU another process holds is `gpu_busy`, class busy), and a source that cannot be
//! read is never one (it is reported as unavailable).
//! - `inventory`: GPUs the driver lists vs the GPUs the node should have (`gpu_missing`).
//! - `net`: the NICs NCCL used, their state and link rate from sysfs (`net_port_down`,
//!   `net_rate_degraded`), and the node-pair bandwidth to expect of them.
//! - `gpu_health`: NVML facts per GPU and their classification (`nvlink_down`, `pcie_degraded`,
//!   `ecc_uncorrectable`, `row_remap_pending`, `hw_slowdown`); `nvml` reads them (feature `nvml`).
//! - `local_probe`: each GPU's device-local copy bandwidth against its model and its siblings
//!   (`local_probe_slow`); `runner::probe` measures it.
//! - `node`: the facts of one check gathered together (expectation from the job, the config or
//!   Slurm's files; CUDA's count; NVML's state; the NICs NCCL used), for the report and `judge`.

pub mod gpu_health;
pub mod host_load;
pub mod interconnect;
pub mod inventory;
pub mod local_probe;
pub mod net;
pub mod node;
#[cfg(feature = "gpu")]
pub mod node_ready;
#[cfg(feature = "nvml")]
pub mod nvml;

pub mod transport;
use nccl_check_contract::report::reason::ReasonCode;
use serde::Serialize;

/// One fault found in the facts, in the shape the report's reason takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Its reason code, one of the fact codes (`ReasonCode::FACT_CODES`-style: `GpuMissing`,
    /// written `gpu_missing`): typed here, so no reader maps a string back.
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
