//! What a GPU *is*: one table of data-center SKUs keyed by PCI device ID (vendor 0x10de), with
//! the form factor, memory bandwidth and NVLink of each, each with its public source. Every
//! expectation that depends on the model reads this table: the built-in thresholds (by `sku`
//! key), the NVLink count (`facts::gpu_health`) and the local probe's floor
//! (`facts::local_probe`).
//!
//! Identity comes from the PCI device ID the node reports (sysfs `device`, or NVML's PCI info);
//! the driver's name is only a fallback, and then only as a *whole* name (case-insensitive):
//! "NVIDIA H100 PCIe" is never taken for "NVIDIA H100 80GB HBM3" because one contains "H100".
//! A GPU that matches neither is `Unknown`: it is held against its siblings only, never against
//! an absolute floor (judge less, never more).
//!
//! Device IDs: the PCI ID Repository, pci.ids version 2026.08.22 (https://pci-ids.ucw.cz/,
//! github.com/pciutils/pciids). Names: what the NVIDIA driver reports for that device ID (the
//! driver README's "Supported NVIDIA GPU Products" appendix, e.g.
//! https://download.nvidia.com/XFree86/Linux-x86_64/580.95.05/README/supportedchips.html).

mod known_gpus;

pub use known_gpus::SKUS;

use serde::{Deserialize, Serialize};
use std::fmt;

/// NVIDIA's PCI vendor ID.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// How a GPU is built into its node, which decides what its NVLinks can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormFactor {
    /// An SXM module on a baseboard whose GPUs meet through NVSwitch (HGX).
    Sxm,
    /// A PCIe card without NVLink: GPUs meet over PCIe.
    Pcie,
    /// A PCIe card with NVLink bridge connectors: linked to its bridge partner(s) only.
    PcieBridged,
    /// A Grace CPU + GPU superchip module (GH200, GB200, GB300): NVLink-C2C to its CPU, NVLink
    /// to other GPUs through NVSwitch where the system has one.
    Superchip,
}

impl FormFactor {
    /// The words the report and `--explain-thresholds` use.
    pub fn describe(self) -> &'static str {
        match self {
            FormFactor::Sxm => "SXM on an NVSwitch baseboard",
            FormFactor::Pcie => "PCIe card, no NVLink",
            FormFactor::PcieBridged => "PCIe card with NVLink bridges",
            FormFactor::Superchip => "Grace superchip",
        }
    }
}

/// The NVLink of a part: generation and links per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvLink {
    pub generation: u8,
    pub links: u32,
}

/// One SKU of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sku {
    /// The key `[[thresholds]]` rules name with `sku = "..."` (unique in the table).
    pub key: &'static str,
    /// PCI device IDs (vendor 0x10de) of this SKU.
    pub device_ids: &'static [u16],
    /// Whole names the driver reports for it (NVML, CUDA), for the name-only fallback.
    pub names: &'static [&'static str],
    pub form: FormFactor,
    /// Datasheet memory bandwidth per GPU, GB/s; None where no public figure is known.
    pub memory_gbs: Option<f64>,
    /// NVLink per GPU; None for parts without NVLink.
    pub nvlink: Option<NvLink>,
    /// Where the figures come from.
    pub source: &'static str,
}

/// How a GPU was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentifiedBy {
    /// By its PCI device ID.
    PciDeviceId,
    /// No device ID could be read; its whole driver name is in the table.
    Name,
}

/// What the table says about one GPU: its SKU, or that it is not in the table (and why).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Identity {
    Known { sku: &'static Sku, by: IdentifiedBy },
    Unknown { device_id: Option<u16> },
}

impl Identity {
    /// Looks a GPU up: by PCI device ID when there is one, else by its whole driver name.
    /// A device ID that is not in the table is Unknown even when the name would match: the
    /// ID is the fact, the name may belong to a sibling part.
    pub fn resolve(device_id: Option<u16>, name: &str) -> Identity {
        let (sku, by) = match device_id {
            Some(id) => (by_device_id(id), IdentifiedBy::PciDeviceId),
            None => (sku_named(name), IdentifiedBy::Name),
        };
        match sku {
            Some(sku) => Identity::Known { sku, by },
            None => Identity::Unknown { device_id },
        }
    }

    pub fn sku(&self) -> Option<&'static Sku> {
        match self {
            Identity::Known { sku, .. } => Some(sku),
            Identity::Unknown { .. } => None,
        }
    }
}

impl fmt::Display for Identity {
    /// `H100 PCIe (PCI 10de:2331)`, `H200 SXM (by its driver name; no PCI device ID read)` or
    /// `unknown part 10de:2bb9: held against its siblings only`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Known { sku, by } => {
                let id = sku.device_ids.first().copied().unwrap_or(0);
                match by {
                    IdentifiedBy::PciDeviceId => write!(f, "{} ({})", sku.key, form_id(id)),
                    IdentifiedBy::Name => write!(
                        f,
                        "{} (by its driver name; no PCI device ID could be read)",
                        sku.key
                    ),
                }
            }
            Identity::Unknown { device_id: Some(id) } => write!(
                f,
                "unknown part {}: not in the SKU table, held against its siblings only",
                form_id(*id)
            ),
            Identity::Unknown { device_id: None } => write!(
                f,
                "unknown part (no PCI device ID, name not in the SKU table): held against its siblings only"
            ),
        }
    }
}

/// `PCI 10de:2330`.
fn form_id(id: u16) -> String {
    format!("PCI {NVIDIA_VENDOR:04x}:{id:04x}")
}

/// The SKU of an NVIDIA PCI device ID.
pub fn by_device_id(id: u16) -> Option<&'static Sku> {
    SKUS.iter().find(|s| s.device_ids.contains(&id))
}

/// The SKU whose driver name is exactly `name` (case and surrounding blanks ignored).
pub fn sku_named(name: &str) -> Option<&'static Sku> {
    let n = name.trim();
    SKUS.iter()
        .find(|s| s.names.iter().any(|m| m.eq_ignore_ascii_case(n)))
}

/// Whether `rule` is only a part of a known driver name (not a whole one, with or without
/// its `NVIDIA ` prefix): the whole name it is part of, for the error that says so.
pub fn partial_name(rule: &str) -> Option<&'static str> {
    let r = rule.trim().to_ascii_lowercase();
    if SKUS
        .iter()
        .flat_map(|s| s.names)
        .any(|n| names_gpu(rule, n))
    {
        return None;
    }
    SKUS.iter()
        .flat_map(|s| s.names.iter().copied())
        .find(|n| n.to_ascii_lowercase().contains(&r))
}

/// Whether a rule's `gpu` names the GPU called `name`: the whole name, case-insensitive, the
/// `NVIDIA ` prefix optional on either side.
pub fn names_gpu(rule: &str, name: &str) -> bool {
    let strip = |s: &str| {
        let s = s.trim();
        match s.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("nvidia ") => s[7..].trim().to_string(),
            _ => s.to_string(),
        }
    };
    !name.trim().is_empty() && strip(rule).eq_ignore_ascii_case(&strip(name))
}

/// The SKU of a table key (`sku = "H100 SXM"` in a rule), case-insensitive.
pub fn by_key(key: &str) -> Option<&'static Sku> {
    SKUS.iter().find(|s| s.key.eq_ignore_ascii_case(key.trim()))
}

/// The text of `nccl-check --list-skus`: one block per SKU.
pub fn list() -> String {
    let mut out = String::from(
        "GPUs nccl-check knows by PCI device ID (vendor 10de); any other GPU is held against its \
         siblings only.\nA [[thresholds]] rule names one with sku = \"KEY\".\n\n",
    );
    for s in SKUS {
        let ids: Vec<String> = s
            .device_ids
            .iter()
            .map(|i| format!("10de:{i:04x}"))
            .collect();
        let mem = s
            .memory_gbs
            .map_or("memory bandwidth not assumed".into(), |m| {
                format!("{m:.0} GB/s memory")
            });
        let link = s.nvlink.map_or("no NVLink".into(), |l| {
            format!("NVLink{} x{}", l.generation, l.links)
        });
        out += &format!(
            "{:<22} {}  {}; {mem}; {link}\n    names: {}\n    source: {}\n",
            s.key,
            ids.join(", "),
            s.form.describe(),
            if s.names.is_empty() {
                "(none known: by device ID only)".into()
            } else {
                s.names.join(", ")
            },
            s.source
        );
    }
    out
}

#[cfg(test)]
mod tests;
