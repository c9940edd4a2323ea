//! What the report says about one GPU (filled by `cuda::gpu_info`; plain data, no CUDA here).

use serde::{Deserialize, Serialize};

/// The facts of one GPU. Fields in alphabetical order: the report has always written them so
/// (they went through a `serde_json::Value` map), and a struct is written in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuInfo {
    /// Index among the devices this process sees.
    pub device: usize,
    pub memory_bytes: u64,
    pub name: String,
    /// `0000:18:00.0`, the form nvidia-smi prints.
    pub pci_bus_id: String,
    /// `GPU-xxxxxxxx-...`, the form nvidia-smi prints.
    pub uuid: String,
    /// PCI device ID (vendor 0x10de) read from sysfs: what the SKU table knows the GPU by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_device_id: Option<u16>,
}
