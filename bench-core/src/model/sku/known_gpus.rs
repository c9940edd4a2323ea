//! The SKU table (see `sku`'s module doc for how it is used). One entry per performance class:
//! parts that share device IDs' figures share an entry, parts that differ in NVLink or memory
//! (H800 vs H100, H100 PCIe vs H100 NVL vs H100 SXM) never do. Device IDs from pci.ids
//! 2026.08.22; names as the NVIDIA driver reports them. Add a part by its device ID, never by a
//! name pattern.

use super::{FormFactor, NvLink, Sku};

const NVLINK3_12: Option<NvLink> = Some(NvLink {
    generation: 3,
    links: 12,
});
const NVLINK4_18: Option<NvLink> = Some(NvLink {
    generation: 4,
    links: 18,
});
const NVLINK4_12: Option<NvLink> = Some(NvLink {
    generation: 4,
    links: 12,
});
const NVLINK5_18: Option<NvLink> = Some(NvLink {
    generation: 5,
    links: 18,
});

pub const SKUS: &[Sku] = &[
    // --- A100 (Ampere GA100) ------------------------------------------------------------------
    Sku {
        key: "A100 SXM4 40GB",
        device_ids: &[0x20b0],
        names: &["NVIDIA A100-SXM4-40GB"],
        form: FormFactor::Sxm,
        memory_gbs: Some(1555.0),
        nvlink: NVLINK3_12,
        source: "NVIDIA A100 datasheet: A100 40GB SXM, HBM2 1,555 GB/s, NVLink3 600 GB/s (12 links)",
    },
    Sku {
        key: "A100 SXM4 80GB",
        device_ids: &[0x20b2],
        names: &["NVIDIA A100-SXM4-80GB"],
        form: FormFactor::Sxm,
        memory_gbs: Some(2039.0),
        nvlink: NVLINK3_12,
        source: "NVIDIA A100 datasheet: A100 80GB SXM, HBM2e 2,039 GB/s, NVLink3 600 GB/s (12 links)",
    },
    Sku {
        key: "A100 PCIe 40GB",
        device_ids: &[0x20b1, 0x20f1],
        names: &["NVIDIA A100-PCIE-40GB"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(1555.0),
        nvlink: NVLINK3_12,
        source: "NVIDIA A100 datasheet: A100 40GB PCIe, HBM2 1,555 GB/s, NVLink bridge for 2 GPUs 600 GB/s",
    },
    Sku {
        key: "A100 PCIe 80GB",
        device_ids: &[0x20b5],
        names: &["NVIDIA A100 80GB PCIe"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(1935.0),
        nvlink: NVLINK3_12,
        source: "NVIDIA A100 datasheet: A100 80GB PCIe, HBM2e 1,935 GB/s, NVLink bridge for 2 GPUs 600 GB/s",
    },
    Sku {
        key: "A800 SXM4",
        device_ids: &[0x20bd, 0x20f3],
        names: &["NVIDIA A800-SXM4-80GB", "NVIDIA A800-SXM4-40GB"],
        form: FormFactor::Sxm,
        memory_gbs: None,
        nvlink: Some(NvLink {
            generation: 3,
            links: 8,
        }),
        source: "NVIDIA A800 (export variant of A100 SXM4): NVLink 400 GB/s (8 links); memory bandwidth differs by capacity: not assumed",
    },
    Sku {
        key: "A30",
        device_ids: &[0x20b7],
        names: &["NVIDIA A30"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(933.0),
        nvlink: Some(NvLink {
            generation: 3,
            links: 4,
        }),
        source: "NVIDIA A30 datasheet: HBM2 933 GB/s, NVLink bridge 200 GB/s (4 links)",
    },
    // --- H100 / H800 / H20 (Hopper GH100) -----------------------------------------------------
    Sku {
        key: "H100 SXM",
        device_ids: &[0x2330],
        names: &["NVIDIA H100 80GB HBM3"],
        form: FormFactor::Sxm,
        memory_gbs: Some(3350.0),
        nvlink: NVLINK4_18,
        source: "NVIDIA H100 datasheet: H100 SXM, HBM3 3.35 TB/s, NVLink4 900 GB/s (18 links)",
    },
    Sku {
        key: "H100 SXM5 64/94/96GB",
        device_ids: &[0x2337, 0x2338, 0x2339],
        names: &[],
        form: FormFactor::Sxm,
        memory_gbs: None,
        nvlink: NVLINK4_18,
        source: "pci.ids GH100 [H100 SXM5 64GB/96GB/94GB]: SXM5, NVLink4 18 links; memory bandwidth of these capacities not published: not assumed",
    },
    Sku {
        key: "H100 PCIe",
        device_ids: &[0x2331],
        names: &["NVIDIA H100 PCIe"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(2000.0),
        nvlink: NVLINK4_12,
        source: "NVIDIA H100 datasheet: H100 PCIe, HBM2e 2 TB/s, NVLink bridge 600 GB/s (12 links)",
    },
    Sku {
        key: "H100 NVL",
        device_ids: &[0x2321],
        names: &["NVIDIA H100 NVL"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(3900.0),
        nvlink: NVLINK4_12,
        source: "NVIDIA H100 datasheet: H100 NVL, HBM3 3.9 TB/s, NVLink bridge 600 GB/s (12 links)",
    },
    Sku {
        key: "H800 SXM",
        device_ids: &[0x2324],
        names: &["NVIDIA H800"],
        form: FormFactor::Sxm,
        memory_gbs: Some(3350.0),
        nvlink: Some(NvLink {
            generation: 4,
            links: 8,
        }),
        source: "NVIDIA H800 (export variant of H100 SXM): HBM3 3.35 TB/s, NVLink 400 GB/s (8 links)",
    },
    Sku {
        key: "H800 PCIe",
        device_ids: &[0x2322],
        names: &["NVIDIA H800 PCIe"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(2000.0),
        nvlink: Some(NvLink {
            generation: 4,
            links: 8,
        }),
        source: "NVIDIA H800 PCIe (export variant of H100 PCIe): HBM2e 2 TB/s, NVLink bridge 400 GB/s (8 links)",
    },
    Sku {
        key: "H20",
        device_ids: &[0x2329],
        names: &["NVIDIA H20"],
        form: FormFactor::Sxm,
        memory_gbs: Some(4000.0),
        nvlink: NVLINK4_18,
        source: "NVIDIA H20 (HGX H20): HBM3 4.0 TB/s, NVLink 900 GB/s (18 links)",
    },
    // --- H200 / GH200 ------------------------------------------------------------------------
    Sku {
        key: "H200 SXM",
        device_ids: &[0x2335],
        names: &["NVIDIA H200"],
        form: FormFactor::Sxm,
        memory_gbs: Some(4800.0),
        nvlink: NVLINK4_18,
        source: "NVIDIA H200 datasheet: H200 SXM, HBM3e 4.8 TB/s, NVLink4 900 GB/s (18 links)",
    },
    Sku {
        key: "H200 NVL",
        device_ids: &[0x233b],
        names: &["NVIDIA H200 NVL"],
        form: FormFactor::PcieBridged,
        memory_gbs: Some(4800.0),
        nvlink: NVLINK4_18,
        source: "NVIDIA H200 datasheet: H200 NVL, HBM3e 4.8 TB/s, 2- or 4-way NVLink bridge 900 GB/s",
    },
    Sku {
        key: "GH200 96GB",
        device_ids: &[0x2342],
        names: &["NVIDIA GH200 480GB", "NVIDIA GH200 120GB"],
        form: FormFactor::Superchip,
        memory_gbs: Some(4000.0),
        nvlink: NVLINK4_18,
        source: "NVIDIA GH200 datasheet: 96GB HBM3 4 TB/s, NVLink4 900 GB/s GPU-GPU, NVLink-C2C 900 GB/s to Grace",
    },
    Sku {
        key: "GH200 144GB",
        device_ids: &[0x2348],
        names: &["NVIDIA GH200 144G HBM3e"],
        form: FormFactor::Superchip,
        memory_gbs: Some(4900.0),
        nvlink: NVLINK4_18,
        source: "NVIDIA GH200 datasheet: 144GB HBM3e 4.9 TB/s, NVLink4 900 GB/s GPU-GPU, NVLink-C2C 900 GB/s to Grace",
    },
    // --- Blackwell ----------------------------------------------------------------------------
    Sku {
        key: "B200",
        device_ids: &[0x2901, 0x2909],
        names: &["NVIDIA B200"],
        form: FormFactor::Sxm,
        memory_gbs: Some(8000.0),
        nvlink: NVLINK5_18,
        source: "NVIDIA HGX B200 datasheet: 64 TB/s HBM3e for 8 GPUs (8 TB/s each), NVLink5 1.8 TB/s (18 links)",
    },
    Sku {
        key: "GB200",
        device_ids: &[0x2941],
        names: &["NVIDIA GB200"],
        form: FormFactor::Superchip,
        memory_gbs: Some(8000.0),
        nvlink: NVLINK5_18,
        source: "NVIDIA GB200 NVL72 datasheet: 576 TB/s HBM3e for 72 GPUs (8 TB/s each), NVLink5 1.8 TB/s (18 links)",
    },
    Sku {
        key: "B300 SXM",
        device_ids: &[0x3182],
        names: &["NVIDIA B300 SXM6 AC"],
        form: FormFactor::Sxm,
        memory_gbs: Some(8000.0),
        nvlink: NVLINK5_18,
        source: "NVIDIA HGX B300 datasheet: HBM3e 8 TB/s per GPU, NVLink5 1.8 TB/s (18 links)",
    },
    Sku {
        key: "GB300",
        device_ids: &[0x31c2, 0x31c3],
        names: &["NVIDIA GB300"],
        form: FormFactor::Superchip,
        memory_gbs: Some(8000.0),
        nvlink: NVLINK5_18,
        source: "NVIDIA GB300 NVL72 datasheet: HBM3e 8 TB/s per GPU, NVLink5 1.8 TB/s (18 links)",
    },
    // --- PCIe inference parts (no NVLink) -----------------------------------------------------
    Sku {
        key: "L40S",
        device_ids: &[0x26b9],
        names: &["NVIDIA L40S"],
        form: FormFactor::Pcie,
        memory_gbs: Some(864.0),
        nvlink: None,
        source: "NVIDIA L40S datasheet: GDDR6 864 GB/s, PCIe Gen4 x16, no NVLink",
    },
    Sku {
        key: "L40",
        device_ids: &[0x26b5],
        names: &["NVIDIA L40"],
        form: FormFactor::Pcie,
        memory_gbs: Some(864.0),
        nvlink: None,
        source: "NVIDIA L40 datasheet: GDDR6 864 GB/s, PCIe Gen4 x16, no NVLink",
    },
    Sku {
        key: "L4",
        device_ids: &[0x27b8],
        names: &["NVIDIA L4"],
        form: FormFactor::Pcie,
        memory_gbs: Some(300.0),
        nvlink: None,
        source: "NVIDIA L4 datasheet: GDDR6 300 GB/s, PCIe Gen4 x16, no NVLink",
    },
    Sku {
        key: "RTX PRO 6000 Server",
        device_ids: &[0x2bb5],
        names: &["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
        form: FormFactor::Pcie,
        memory_gbs: Some(1597.0),
        nvlink: None,
        source: "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: GDDR7 1,597 GB/s, PCIe Gen5 x16, no NVLink",
    },
];
