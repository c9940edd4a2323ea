//! PCIe AER counters of the node's GPUs and NICs from sysfs (`aer_dev_correctable`,
//! `aer_dev_nonfatal`, `aer_dev_fatal`: one `Name count` line per error type and a `TOTAL_ERR_*`
//! line; <https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats>).
//! Which devices, by fact: PCI functions with NVIDIA's vendor id and a display or 3D controller
//! class (GPUs), and the PCI function behind each `/sys/class/infiniband/<dev>/device` (NICs,
//! InfiniBand and RoCE alike).

use super::read;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Most PCI functions looked at (a large server has a few hundred).
const MAX_PCI: usize = 4096;
/// Most RDMA devices looked at.
pub const MAX_RDMA: usize = 256;

/// One device's AER totals since boot (or since its driver was loaded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub correctable: u64,
    pub nonfatal: u64,
    pub fatal: u64,
}

/// A device the AER counters are read for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub pci: String,
    /// "GPU" or "NIC mlx5_0".
    pub role: String,
}

/// The node's GPUs and RDMA NICs, sorted by PCI address; and what could not be read.
pub fn devices(root: &Path) -> (Vec<Device>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let pci = root.join("sys/bus/pci/devices");
    // The vendor first: one read for every device that is not NVIDIA's.
    match nvidia_functions(root) {
        Ok(functions) => out.extend(
            functions
                .into_iter()
                .filter(|f| {
                    let class = read::small(&pci.join(f).join("class")).unwrap_or_default();
                    // 0x0300xx VGA, 0x0302xx 3D controller (the data-centre GPUs).
                    class.trim().starts_with("0x0300") || class.trim().starts_with("0x0302")
                })
                .map(|pci| Device {
                    pci,
                    role: "GPU".into(),
                }),
        ),
        Err(e) => problems.push(format!("{}: {e}", pci.display())),
    }
    let ib = root.join("sys/class/infiniband");
    if let Ok(entries) = std::fs::read_dir(&ib) {
        for e in entries.flatten().take(MAX_RDMA) {
            let name = e.file_name().to_string_lossy().into_owned();
            match std::fs::read_link(e.path().join("device")) {
                Ok(target) => out.extend(target.file_name().map(|addr| Device {
                    pci: addr.to_string_lossy().into_owned(),
                    role: format!("NIC {name}"),
                })),
                Err(err) => problems.push(format!("{}/device: {err}", e.path().display())),
            }
        }
    }
    out.sort_by(|a, b| a.pci.cmp(&b.pci));
    out.dedup_by(|a, b| a.pci == b.pci);
    (out, problems)
}

/// Every PCI function under `root` with NVIDIA's vendor id (GPUs, NVSwitches, their functions),
/// or why the device list could not be read at all.
pub fn nvidia_functions(root: &Path) -> std::io::Result<Vec<String>> {
    Ok(std::fs::read_dir(root.join("sys/bus/pci/devices"))?
        .flatten()
        .take(MAX_PCI)
        .filter(|e| read::small(&e.path().join("vendor")).is_ok_and(|v| v.trim() == "0x10de"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

/// The `Name count` lines of one AER file.
fn counts(text: &str) -> impl Iterator<Item = (&str, u64)> {
    text.lines().filter_map(|l| {
        let (name, n) = l.split_once(char::is_whitespace)?;
        Some((name, n.trim().parse().ok()?))
    })
}

/// The `TOTAL_ERR_*` line of one AER file.
pub fn total(text: &str) -> Option<u64> {
    counts(text).find_map(|(name, n)| name.starts_with("TOTAL_ERR_").then_some(n))
}

/// The error types with a non-zero count in one AER file (for the message), e.g. `MalfTLP 1`.
pub fn nonzero(text: &str) -> BTreeMap<String, u64> {
    counts(text)
        .filter(|&(name, n)| n > 0 && !name.starts_with("TOTAL_ERR_") && name.len() <= 32)
        .map(|(name, n)| (name.to_string(), n))
        .collect()
}

/// The error types with a non-zero count, by name.
pub type Detail = BTreeMap<String, u64>;

/// One device's counters, with the non-zero fatal and non-fatal error types; `Ok(None)` = the
/// device has no AER files (no AER capability, or a kernel without the statistics).
pub fn read_device(root: &Path, pci: &str) -> Result<Option<(Counts, Detail)>, String> {
    let dir = root.join("sys/bus/pci/devices").join(pci);
    if !dir.join("aer_dev_fatal").exists() {
        return Ok(None);
    }
    let file = |name: &str| -> Result<(u64, String), String> {
        let p = dir.join(name);
        let text = read::small(&p)?;
        let t = total(&text).ok_or_else(|| format!("{}: no TOTAL_ERR_ line", p.display()))?;
        Ok((t, text))
    };
    let (correctable, _) = file("aer_dev_correctable")?;
    let (nonfatal, nf_text) = file("aer_dev_nonfatal")?;
    let (fatal, f_text) = file("aer_dev_fatal")?;
    let mut detail = nonzero(&f_text);
    detail.extend(nonzero(&nf_text));
    Ok(Some((
        Counts {
            correctable,
            nonfatal,
            fatal,
        },
        detail,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FATAL: &str = "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\n\
UnxCmplt 0\nRxOF 0\nMalfTLP 1\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n\
AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 1\n";

    #[test]
    fn the_total_line_counts_and_nonzero_types_are_named() {
        assert_eq!(total(FATAL), Some(1));
        assert_eq!(
            nonzero(FATAL).into_iter().collect::<Vec<_>>(),
            [("MalfTLP".to_string(), 1)]
        );
        assert_eq!(total("garbage\n\u{0}\u{1}"), None);
        assert_eq!(total("TOTAL_ERR_COR 18446744073709551616\n"), None);
    }
}
