//! GPU health facts as NVML answers them (filled by `facts::nvml`, or by tests from recorded
//! answers), and their classification into stable fault codes. Pure: no NVML here.
//!
//! Fault codes (`classify`):
//! - `nvlink_down`: fewer NVLinks active than the model has (`expected_nvlinks`: a table of SXM
//!   parts with its source), or, for a model not in the table, fewer than the GPU's siblings of
//!   the same model on this node (PCIe parts with bridges have fewer links by design, e.g. Azure
//!   NCv5 H100 PCIe has 12 of 18 active, azurehpc-health-checks #162, so their count is never
//!   assumed). A GPU alone of its model on the node is not judged: it has no NVLink peer, and
//!   a 1-GPU VM slice of an HGX board (seen on the lent H100: `nvidia-smi nvlink -s` lists no
//!   link) need not show its links.
//! - `pcie_degraded`: PCIe link width below the maximum; generation below the maximum only when
//!   the facts were read under load (GPUs lower the link generation when idle to save power, so
//!   an idle Gen1 link is normal).
//! - `ecc_uncorrectable`: uncorrectable ECC errors since the driver loaded (volatile counter).
//! - `row_remap_pending`: a row remapping waits for a GPU reset, or one failed.
//! - `hw_slowdown`: hardware slowdown, hardware thermal slowdown or power-brake slowdown active.
//!   Software thermal and power capping are recorded, not faults (they follow the workload and
//!   the admin's limits; azurehpc-health-checks PR #3 logs throttling without draining).
//!
//! Clocks are recorded for the report only: they follow the load.

use crate::model::finding::Finding;
use nccl_check_contract::report::reason::ReasonCode;
use serde::{Deserialize, Serialize};

/// The NVLink count a GPU should have active, and its source: from the SKU table, by the
/// GPU's PCI device ID (or its whole driver name when no ID could be read). Only parts whose
/// links all lead somewhere by construction (SXM modules and superchips) have a count: a PCIe
/// card's bridges are optional (Azure NCv5 H100 PCIe has 12 of 18 active, azurehpc-health-checks
/// #162), so its count is never assumed.
pub fn expected_nvlinks(device_id: Option<u16>, gpu_name: &str) -> Option<(u32, &'static str)> {
    use crate::model::sku::{FormFactor, Identity};
    let sku = Identity::resolve(device_id, gpu_name).sku()?;
    match sku.form {
        FormFactor::Sxm | FormFactor::Superchip => sku.nvlink.map(|l| (l.links, sku.source)),
        FormFactor::Pcie | FormFactor::PcieBridged => None,
    }
}

/// Where one NVLink leads, as NVML says (`nvmlDeviceGetNvLinkRemoteDeviceType`, or the remote
/// end's PCI device ID where that call is not supported).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "to", rename_all = "snake_case")]
pub enum Remote {
    /// An NVSwitch (HGX baseboards, NVL72 switch trays).
    Switch,
    /// Another GPU, directly (a bridge or a direct-connect board).
    Gpu { bus_id: String },
    /// A CPU (NVLink-C2C, IBM NPU).
    Cpu,
    /// NVML could not say.
    Unknown,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkFact {
    pub link: u32,
    pub active: bool,
    pub remote: Remote,
}

use nccl_check_contract::report::process::GpuProcess;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvLinks {
    /// Links that answered (active or not).
    pub present: u32,
    pub active: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pcie {
    pub gen: u32,
    pub max_gen: u32,
    pub width: u32,
    pub max_width: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowRemap {
    pub corrected_rows: u32,
    pub uncorrected_rows: u32,
    pub pending: bool,
    pub failed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throttle {
    pub hw_slowdown: bool,
    pub hw_thermal: bool,
    pub hw_power_brake: bool,
    pub sw_thermal: bool,
    pub sw_power_cap: bool,
    /// NVML's bit mask, for reasons not broken out above.
    pub raw: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Clocks {
    pub sm_mhz: u32,
    pub sm_max_mhz: u32,
    pub mem_mhz: u32,
    pub mem_max_mhz: u32,
}

/// What NVML said about one GPU; a fact it could not give is None with the reason in `errors`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub index: u32,
    /// `0000:9B:00.0` as NVML gives it.
    pub bus_id: String,
    pub name: String,
    /// PCI device ID (vendor 0x10de), from NVML's PCI info; what the SKU table is keyed by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_device_id: Option<u16>,
    pub nvlink: Option<NvLinks>,
    /// Each NVLink and where it leads (empty where NVML has no NVLink to say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkFact>,
    /// Compute processes on this GPU when the facts were read, this check's own left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<GpuProcess>,
    pub pcie: Option<Pcie>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub row_remap: Option<RowRemap>,
    pub throttle: Option<Throttle>,
    pub clocks: Option<Clocks>,
    /// `pcie: Not supported`, per fact that could not be read.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// The health facts of a node: NVML's answers, or why there are none (never an error).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "nvml", rename_all = "snake_case")]
pub enum HealthFacts {
    Available {
        driver_version: String,
        gpus: Vec<GpuHealth>,
    },
    /// `NVML not available: <why>`.
    Unavailable { why: String },
}

impl HealthFacts {
    pub fn unavailable(why: impl std::fmt::Display) -> HealthFacts {
        HealthFacts::Unavailable {
            why: format!("NVML not available: {why}"),
        }
    }
}

/// How the facts were read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Context {
    /// Read while the GPUs ran a collective (PCIe generation is then meaningful).
    pub under_load: bool,
}

/// The fault findings of every GPU.
pub fn classify(facts: &HealthFacts, ctx: Context) -> Vec<Finding> {
    let HealthFacts::Available { gpus, .. } = facts else {
        return Vec::new();
    };
    let of_gpu = |g: &GpuHealth| {
        let subject = format!("GPU {} ({})", g.index, g.bus_id);
        [
            nvlink_down(g, gpus, &subject),
            pcie_degraded(g, ctx, &subject),
            ecc_uncorrectable(g, &subject),
            row_remap_pending(g, &subject),
            hw_slowdown(g, &subject),
        ]
    };
    gpus.iter().flat_map(of_gpu).flatten().collect()
}

/// `nvlink_down`: fewer active links than the SKU table says, or than the GPU's siblings of the
/// same model have; a GPU alone of its model is not judged.
fn nvlink_down(g: &GpuHealth, gpus: &[GpuHealth], subject: &str) -> Option<Finding> {
    let same_model = || gpus.iter().filter(|o| o.name == g.name);
    let l = g.nvlink.as_ref().filter(|_| same_model().count() >= 2)?;
    let (want, why) = match expected_nvlinks(g.pci_device_id, &g.name) {
        Some((n, src)) => (Some(n), src.to_string()),
        None => (
            same_model()
                .filter_map(|o| o.nvlink.as_ref().map(|l| l.active))
                .max(),
            "the most active links among its siblings of the same model".to_string(),
        ),
    };
    let (want, active) = (want.filter(|&w| l.active < w)?, l.active);
    let message = format!("{subject}: {active} of {want} NVLinks active (expected from {why})");
    let finding = Finding::new(ReasonCode::NvlinkDown, subject, message);
    Some(finding.with_values(f64::from(active), f64::from(want)))
}

/// `pcie_degraded`: a narrower link than the maximum, or (only under load) a lower generation.
fn pcie_degraded(g: &GpuHealth, ctx: Context, subject: &str) -> Option<Finding> {
    let p = g.pcie.as_ref()?;
    let (what, have, max) = if p.width < p.max_width {
        let what = format!("PCIe link x{} of x{}", p.width, p.max_width);
        (what, p.width, p.max_width)
    } else if ctx.under_load && p.gen < p.max_gen {
        let what = format!("PCIe Gen{} of Gen{} while busy", p.gen, p.max_gen);
        (what, p.gen, p.max_gen)
    } else {
        return None;
    };
    let message = format!("{subject}: {what}");
    let finding = Finding::new(ReasonCode::PcieDegraded, subject, message);
    Some(finding.with_values(f64::from(have), f64::from(max)))
}

/// `ecc_uncorrectable`: any uncorrectable ECC error since the driver loaded.
fn ecc_uncorrectable(g: &GpuHealth, subject: &str) -> Option<Finding> {
    let n = g.ecc_uncorrected_volatile.filter(|&n| n > 0)?;
    let message = format!("{subject}: {n} uncorrectable ECC error(s) since the driver loaded");
    let finding = Finding::new(ReasonCode::EccUncorrectable, subject, message);
    Some(finding.with_values(n as f64, 0.0))
}

/// `row_remap_pending`: a row remapping that waits for a reset, or one that failed.
fn row_remap_pending(g: &GpuHealth, subject: &str) -> Option<Finding> {
    let r = g.row_remap.as_ref().filter(|r| r.pending || r.failed)?;
    let what = if r.failed {
        "a row remapping failed (the GPU needs service)"
    } else {
        "a row remapping is pending (the GPU needs a reset)"
    };
    let (uncorrected, corrected) = (r.uncorrected_rows, r.corrected_rows);
    let message = format!(
        "{subject}: {what}; {uncorrected} uncorrected, {corrected} corrected rows remapped"
    );
    Some(Finding::new(ReasonCode::RowRemapPending, subject, message))
}

/// `hw_slowdown`: the hardware, thermal or power-brake slowdowns that are active (software
/// capping is not a fault).
fn hw_slowdown(g: &GpuHealth, subject: &str) -> Option<Finding> {
    let t = g.throttle.as_ref()?;
    let active: Vec<&str> = [
        (t.hw_slowdown, "hardware slowdown"),
        (t.hw_thermal, "hardware thermal slowdown"),
        (t.hw_power_brake, "power-brake slowdown"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if active.is_empty() {
        return None;
    }
    let clocks = g
        .clocks
        .as_ref()
        .map(|c| format!(" (SM {} of {} MHz)", c.sm_mhz, c.sm_max_mhz))
        .unwrap_or_default();
    let message = format!("{subject}: {} active{clocks}", active.join(", "));
    Some(Finding::new(ReasonCode::HwSlowdown, subject, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A healthy H200 as NVML answered it (values of the shape nvidia-smi -q shows).
    fn healthy(index: u32, name: &str) -> GpuHealth {
        GpuHealth {
            index,
            bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
            name: name.to_string(),
            pci_device_id: None,
            links: vec![],
            processes: vec![],
            nvlink: Some(NvLinks {
                present: 18,
                active: 18,
            }),
            pcie: Some(Pcie {
                gen: 1, // idle: the link steps down, not a fault
                max_gen: 5,
                width: 16,
                max_width: 16,
            }),
            ecc_uncorrected_volatile: Some(0),
            row_remap: Some(RowRemap {
                corrected_rows: 0,
                uncorrected_rows: 0,
                pending: false,
                failed: false,
            }),
            throttle: Some(Throttle {
                hw_slowdown: false,
                hw_thermal: false,
                hw_power_brake: false,
                sw_thermal: false,
                sw_power_cap: true,
                raw: 0x4,
            }),
            clocks: Some(Clocks {
                sm_mhz: 345,
                sm_max_mhz: 1980,
                mem_mhz: 3201,
                mem_max_mhz: 3201,
            }),
            errors: vec![],
        }
    }

    fn node(gpus: Vec<GpuHealth>) -> HealthFacts {
        HealthFacts::Available {
            driver_version: "580.159.04".into(),
            gpus,
        }
    }

    fn codes(f: &[Finding]) -> Vec<(&str, &str)> {
        f.iter()
            .map(|x| (x.code.as_str(), x.subject.as_str()))
            .collect()
    }

    #[test]
    fn a_healthy_idle_node_has_no_findings() {
        let facts = node((0..8).map(|i| healthy(i, "NVIDIA H200")).collect());
        assert!(classify(&facts, Context::default()).is_empty());
    }

    #[test]
    fn each_fault_code_from_recorded_answers() {
        let mut g = (0..5)
            .map(|i| healthy(i, "NVIDIA H200"))
            .collect::<Vec<_>>();
        g[0].nvlink.as_mut().unwrap().active = 16;
        g[1].pcie.as_mut().unwrap().width = 8;
        g[2].ecc_uncorrected_volatile = Some(3);
        g[3].row_remap.as_mut().unwrap().pending = true;
        g[4].throttle.as_mut().unwrap().hw_power_brake = true;
        let f = classify(&node(g), Context::default());
        assert_eq!(
            codes(&f),
            vec![
                ("nvlink_down", "GPU 0 (00000000:18:00.0)"),
                ("pcie_degraded", "GPU 1 (00000000:19:00.0)"),
                ("ecc_uncorrectable", "GPU 2 (00000000:1A:00.0)"),
                ("row_remap_pending", "GPU 3 (00000000:1B:00.0)"),
                ("hw_slowdown", "GPU 4 (00000000:1C:00.0)"),
            ]
        );
        assert_eq!((f[0].measured, f[0].limit), (Some(16.0), Some(18.0)));
        assert!(
            f[0].message.contains("16 of 18 NVLinks"),
            "{}",
            f[0].message
        );
        assert!(f[4]
            .message
            .contains("power-brake slowdown active (SM 345 of 1980 MHz)"));
    }

    #[test]
    fn pcie_generation_counts_only_under_load_and_failed_remaps_are_named() {
        let mut g = healthy(0, "NVIDIA H200");
        g.row_remap.as_mut().unwrap().failed = true;
        let facts = node(vec![g]);
        let idle = classify(&facts, Context::default());
        assert_eq!(
            codes(&idle),
            vec![("row_remap_pending", "GPU 0 (00000000:18:00.0)")]
        );
        assert!(idle[0].message.contains("failed"));
        let busy = classify(&facts, Context { under_load: true });
        assert_eq!(busy[0].code.as_str(), "pcie_degraded");
        assert!(busy[0].message.contains("Gen1 of Gen5 while busy"));
    }

    #[test]
    fn unknown_models_are_held_against_their_siblings_and_pcie_cards_never_against_a_table() {
        // Azure NCv5: H100 PCIe with 12 of 18 links active by design, on every GPU.
        let mut g: Vec<GpuHealth> = (0..2).map(|i| healthy(i, "NVIDIA H100 PCIe")).collect();
        for x in &mut g {
            x.nvlink = Some(NvLinks {
                present: 18,
                active: 12,
            });
        }
        assert!(classify(&node(g.clone()), Context::default()).is_empty());
        g[1].nvlink.as_mut().unwrap().active = 6;
        let f = classify(&node(g), Context::default());
        assert_eq!(codes(&f), vec![("nvlink_down", "GPU 1 (00000000:19:00.0)")]);
        assert!(f[0].message.contains("siblings"), "{}", f[0].message);
        // A lone H100 SXM (a 1-GPU VM slice) with its links shown inactive: not judged.
        let mut lone = healthy(0, "NVIDIA H100 80GB HBM3");
        lone.nvlink.as_mut().unwrap().active = 0;
        assert!(classify(&node(vec![lone.clone()]), Context::default()).is_empty());
        let two = node(vec![lone, healthy(1, "NVIDIA H100 80GB HBM3")]);
        let f = classify(&two, Context::default());
        assert_eq!(codes(&f), vec![("nvlink_down", "GPU 0 (00000000:18:00.0)")]);
        assert_eq!(
            expected_nvlinks(None, "NVIDIA H100 80GB HBM3").map(|x| x.0),
            Some(18)
        );
        assert_eq!(
            expected_nvlinks(None, "NVIDIA A100-SXM4-80GB").map(|x| x.0),
            Some(12)
        );
        assert_eq!(expected_nvlinks(None, "NVIDIA H200 NVL"), None);
        assert_eq!(expected_nvlinks(None, "Tesla T4"), None);
        // The device ID decides over the name: an H800 SXM has 8 links, whatever it is called.
        assert_eq!(
            expected_nvlinks(Some(0x2324), "NVIDIA H100 80GB HBM3").map(|x| x.0),
            Some(8)
        );
        // An unknown device ID is not judged by a table, even under a known name.
        assert_eq!(expected_nvlinks(Some(0x2bb9), "NVIDIA H200"), None);
    }

    #[test]
    fn software_throttling_is_recorded_not_a_fault_and_facts_round_trip_as_json() {
        let mut g = healthy(0, "NVIDIA H200");
        g.throttle.as_mut().unwrap().sw_thermal = true;
        let facts = node(vec![g]);
        assert!(classify(&facts, Context::default()).is_empty());
        let json = serde_json::to_string(&facts).unwrap();
        assert!(json.contains("\"nvml\":\"available\""), "{json}");
        let back: HealthFacts = serde_json::from_str(&json).unwrap();
        assert_eq!(back, facts);
        let none = HealthFacts::unavailable("libnvidia-ml.so.1: cannot open shared object file");
        assert!(classify(&none, Context::default()).is_empty());
        let json = serde_json::to_string(&none).unwrap();
        assert!(
            json.contains("NVML not available: libnvidia-ml.so.1"),
            "{json}"
        );
    }
}
