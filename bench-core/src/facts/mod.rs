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
pub mod sku;
pub mod transport;
use nccl_check_contract::report::reason::ReasonCode;
use serde::Serialize;

/// A value as a message prints it beside the limit it is compared with: at least two
/// significant digits, so that `0.19 < 0.2` never reads `0.2 < 0.2`.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        let digits = (1 - a.log10().floor() as i32).clamp(1, 6) as usize;
        format!("{v:.digits$}")
    }
}

/// A measured value and the limit it missed, each with enough digits that they differ when
/// the values do (`0.198 < 0.2` prints `0.198 < 0.200`, never `0.20 < 0.20`).
pub fn num_vs(value: f64, limit: f64) -> (String, String) {
    let (mut a, mut b) = (num(value), num(limit));
    if a == b && value != limit {
        for decimals in 1..=6usize {
            a = format!("{value:.decimals$}");
            b = format!("{limit:.decimals$}");
            if a != b {
                break;
            }
        }
    }
    (a, b)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compared_value_keeps_two_significant_digits_so_the_comparison_reads_true() {
        // The issue-24 case: 0.19 < 0.2 printed as "0.2 < 0.2".
        assert_eq!(format!("{} < {}", num(0.19), num(0.2)), "0.19 < 0.20");
        assert_eq!(num(0.0123), "0.012");
        assert_eq!(num(7.5), "7.5");
        assert_eq!(num(25.24), "25.2");
        assert_eq!(num(728.4), "728");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(1005.0), "1005");
        // The fabric run's line: "busbw 0.20 GB/s < 0.20 GB/s".
        assert_eq!(num_vs(0.1987, 0.2012), ("0.199".into(), "0.201".into()));
        assert_eq!(num_vs(0.24, 0.25), ("0.24".into(), "0.25".into()));
        assert_eq!(num_vs(300.2, 300.4), ("300.2".into(), "300.4".into()));
    }
}
