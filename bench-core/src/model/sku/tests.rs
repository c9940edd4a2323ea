//! The SKU table as a specification: every listed part resolves from its device ID to the
//! right form factor, bandwidth and links, with a source; the name fallback takes only whole
//! names; an unknown ID is unknown.

use super::*;

/// (device ID, driver name, key, form factor, memory GB/s, NVLinks per GPU)
type Row = (
    u16,
    &'static str,
    &'static str,
    FormFactor,
    Option<f64>,
    Option<u32>,
);

const EXPECTED: &[Row] = &[
    (
        0x20b0,
        "NVIDIA A100-SXM4-40GB",
        "A100 SXM4 40GB",
        FormFactor::Sxm,
        Some(1555.0),
        Some(12),
    ),
    (
        0x20b2,
        "NVIDIA A100-SXM4-80GB",
        "A100 SXM4 80GB",
        FormFactor::Sxm,
        Some(2039.0),
        Some(12),
    ),
    (
        0x20b1,
        "NVIDIA A100-PCIE-40GB",
        "A100 PCIe 40GB",
        FormFactor::PcieBridged,
        Some(1555.0),
        Some(12),
    ),
    (
        0x20f1,
        "NVIDIA A100-PCIE-40GB",
        "A100 PCIe 40GB",
        FormFactor::PcieBridged,
        Some(1555.0),
        Some(12),
    ),
    (
        0x20b5,
        "NVIDIA A100 80GB PCIe",
        "A100 PCIe 80GB",
        FormFactor::PcieBridged,
        Some(1935.0),
        Some(12),
    ),
    (
        0x20f3,
        "NVIDIA A800-SXM4-80GB",
        "A800 SXM4",
        FormFactor::Sxm,
        None,
        Some(8),
    ),
    (
        0x20b7,
        "NVIDIA A30",
        "A30",
        FormFactor::PcieBridged,
        Some(933.0),
        Some(4),
    ),
    (
        0x2330,
        "NVIDIA H100 80GB HBM3",
        "H100 SXM",
        FormFactor::Sxm,
        Some(3350.0),
        Some(18),
    ),
    (
        0x2331,
        "NVIDIA H100 PCIe",
        "H100 PCIe",
        FormFactor::PcieBridged,
        Some(2000.0),
        Some(12),
    ),
    (
        0x2321,
        "NVIDIA H100 NVL",
        "H100 NVL",
        FormFactor::PcieBridged,
        Some(3900.0),
        Some(12),
    ),
    (
        0x2324,
        "NVIDIA H800",
        "H800 SXM",
        FormFactor::Sxm,
        Some(3350.0),
        Some(8),
    ),
    (
        0x2322,
        "NVIDIA H800 PCIe",
        "H800 PCIe",
        FormFactor::PcieBridged,
        Some(2000.0),
        Some(8),
    ),
    (
        0x2329,
        "NVIDIA H20",
        "H20",
        FormFactor::Sxm,
        Some(4000.0),
        Some(18),
    ),
    (
        0x2335,
        "NVIDIA H200",
        "H200 SXM",
        FormFactor::Sxm,
        Some(4800.0),
        Some(18),
    ),
    (
        0x233b,
        "NVIDIA H200 NVL",
        "H200 NVL",
        FormFactor::PcieBridged,
        Some(4800.0),
        Some(18),
    ),
    (
        0x2342,
        "NVIDIA GH200 480GB",
        "GH200 96GB",
        FormFactor::Superchip,
        Some(4000.0),
        Some(18),
    ),
    (
        0x2348,
        "NVIDIA GH200 144G HBM3e",
        "GH200 144GB",
        FormFactor::Superchip,
        Some(4900.0),
        Some(18),
    ),
    (
        0x2901,
        "NVIDIA B200",
        "B200",
        FormFactor::Sxm,
        Some(8000.0),
        Some(18),
    ),
    (
        0x2941,
        "NVIDIA GB200",
        "GB200",
        FormFactor::Superchip,
        Some(8000.0),
        Some(18),
    ),
    (
        0x3182,
        "NVIDIA B300 SXM6 AC",
        "B300 SXM",
        FormFactor::Sxm,
        Some(8000.0),
        Some(18),
    ),
    (
        0x31c2,
        "NVIDIA GB300",
        "GB300",
        FormFactor::Superchip,
        Some(8000.0),
        Some(18),
    ),
    (
        0x26b9,
        "NVIDIA L40S",
        "L40S",
        FormFactor::Pcie,
        Some(864.0),
        None,
    ),
    (
        0x26b5,
        "NVIDIA L40",
        "L40",
        FormFactor::Pcie,
        Some(864.0),
        None,
    ),
    (
        0x27b8,
        "NVIDIA L4",
        "L4",
        FormFactor::Pcie,
        Some(300.0),
        None,
    ),
];

#[test]
fn every_listed_sku_resolves_from_its_device_id_with_a_source() {
    for &(id, _, key, form, mem, links) in EXPECTED {
        let sku = by_device_id(id).unwrap_or_else(|| panic!("{id:04x} not in the table"));
        assert_eq!(sku.key, key, "{id:04x}");
        assert_eq!(sku.form, form, "{key}");
        assert_eq!(sku.memory_gbs, mem, "{key}");
        assert_eq!(sku.nvlink.map(|l| l.links), links, "{key}");
        assert!(sku.source.len() > 20, "{key} has no source");
    }
}

#[test]
fn every_listed_sku_resolves_from_its_whole_name_when_no_id_is_read() {
    for &(_, name, key, ..) in EXPECTED {
        let id = Identity::resolve(None, name);
        assert_eq!(id.sku().map(|s| s.key), Some(key), "{name}");
        assert!(id.to_string().contains("driver name"), "{id}");
        // Case and blanks around it do not matter; a part of it is not a name.
        assert_eq!(
            sku_named(&format!("  {}  ", name.to_ascii_lowercase())).map(|s| s.key),
            Some(key)
        );
    }
    for part in ["H100", "NVIDIA H100", "A100", "H200 N", "GB20", "B200 NVL"] {
        assert_eq!(sku_named(part), None, "'{part}' must not name a SKU");
    }
}

#[test]
fn a_device_id_decides_over_a_name_and_an_unknown_id_is_unknown() {
    // An H100 PCIe whose name a container rewrote still is an H100 PCIe.
    let id = Identity::resolve(Some(0x2331), "NVIDIA H100 80GB HBM3");
    assert_eq!(id.sku().map(|s| s.key), Some("H100 PCIe"));
    assert_eq!(id.to_string(), "H100 PCIe (PCI 10de:2331)");
    // A part the table does not know (an RTX 6000D here) is unknown even under an SXM name.
    let unknown = Identity::resolve(Some(0x2bb9), "NVIDIA H200");
    assert_eq!(unknown.sku(), None);
    assert!(
        unknown.to_string().contains("10de:2bb9") && unknown.to_string().contains("siblings"),
        "{unknown}"
    );
    assert_eq!(Identity::resolve(None, "Tesla T4").sku(), None);
}

#[test]
fn keys_ids_and_names_are_unique_in_the_table() {
    let mut keys = std::collections::BTreeSet::new();
    let mut ids = std::collections::BTreeSet::new();
    let mut names = std::collections::BTreeSet::new();
    for s in SKUS {
        assert!(keys.insert(s.key.to_ascii_lowercase()), "key {}", s.key);
        for id in s.device_ids {
            assert!(ids.insert(*id), "device id {id:04x} twice");
        }
        for n in s.names {
            assert!(names.insert(n.to_ascii_lowercase()), "name {n} twice");
        }
        assert_eq!(
            by_key(&s.key.to_ascii_uppercase()).map(|x| x.key),
            Some(s.key)
        );
    }
}
