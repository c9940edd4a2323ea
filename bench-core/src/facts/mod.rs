//! Stage 6, facts: the node in (the driver's GPUs, NVML, PCI device IDs, sysfs NICs, NCCL's own
//! INFO log), typed facts out ([`node::NodeFacts`], [`transport::TransportSummary`]; the SKU
//! table they key on is `model::sku`).
//! Readers: they classify what they read into stable codes and leave the verdict to `judge`
//! (except `local_probe`, which still judges the probe against its floor).
//!
//! Facts: what the node itself says about its hardware, read in milliseconds before or beside
//! the bandwidth measurement, so a verdict can name the part (a GPU the driver no longer lists,
//! a NIC port that is down or trained at a lower rate, a GPU with a dead NVLink, a degraded PCIe
//! link, uncorrectable ECC errors or an active hardware slowdown) instead of only a slow number.
//!
//! Each module reads one source under a configurable root (so tests use fixture trees) and
//! returns plain data plus `Finding`s (`model::finding`); none of them decides a verdict. A finding has a stable
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
//! - `nccl_log`: NCCL's INFO log the check captured, read once the run is over (`transport`
//!   parses it).
//! - `known`: what this process knows of its node while it measures (the facts above, its GPUs'
//!   probes, its CPU time and the host's load so far), for the nodes' own findings
//!   (`localize::own`).
//! - `node`: the facts of one check gathered together (expectation from the job, the config or
//!   Slurm's files; CUDA's count; NVML's state; the NICs NCCL used), for the report and `judge`.

pub mod gpu_health;
pub mod host_load;
pub mod interconnect;
pub mod inventory;
#[cfg(feature = "gpu")]
pub mod known;
pub mod local_probe;
#[cfg(feature = "gpu")]
pub mod nccl_log;
pub mod net;
pub mod node;
#[cfg(feature = "gpu")]
pub mod node_ready;
#[cfg(feature = "nvml")]
pub mod nvml;

pub mod transport;
