//! The per-GPU local probe, judged: each GPU's device-local copy bandwidth (`runner::probe`
//! measures it, every GPU at once, for tens of milliseconds) against its model's floor and
//! against its siblings (`local_probe_slow`). Pure: no CUDA here.
//!
//! The floor. A device-to-device copy of B bytes reads B and writes B bytes of HBM, so the copy
//! rate (B / time, what is reported) is at most half the memory bandwidth. Healthy GPUs stream
//! at 0.85-0.93 of their datasheet bandwidth (CUDA samples' bandwidthTest, which counts 2 B per
//! copy, reports ~1.4 TB/s device-to-device on an A100 40GB of 1.555 TB/s; BabelStream's copy
//! reaches ~0.9 of peak on A100 and H100), i.e. a copy rate of ~0.43-0.46 x the datasheet
//! figure. The floor is `FLOOR_FRACTION` = 0.30 x the datasheet bandwidth: two thirds of a
//! healthy copy rate. That is well below a healthy GPU's worst run (no false FAIL), and above
//! what a GPU gives when another process streams through its memory (the two share the
//! bandwidth: ~half each) or when its memory clock has dropped.
//!
//! The siblings. A GPU below `fraction` (the config's outlier fraction) x the median of the
//! other GPUs of this process is slow too; on a 2-GPU node that is the other GPU, so the slower
//! one is named, which a pair measurement cannot do.

use crate::model::finding::Finding;
use crate::model::local_copy::LocalProbe;
use crate::model::stats::{median, num};
use nccl_check_contract::report::reason::ReasonCode;

/// Copy rate floor as a fraction of the datasheet memory bandwidth (see the module comment).
pub const FLOOR_FRACTION: f64 = 0.30;

/// The datasheet memory bandwidth of a GPU and its source, from the SKU table (by PCI device
/// ID, else the whole driver name); None for a part the table does not know or gives no figure.
pub fn hbm_gbs(device_id: Option<u16>, gpu_name: &str) -> Option<(f64, &'static str)> {
    let sku = crate::model::sku::Identity::resolve(device_id, gpu_name).sku()?;
    sku.memory_gbs.map(|gbs| (gbs, sku.source))
}

/// The copy-rate floor of a GPU (GB/s) and how it was formed.
pub fn copy_floor(device_id: Option<u16>, gpu_name: &str) -> Option<(f64, String)> {
    hbm_gbs(device_id, gpu_name).map(|(gbs, src)| {
        (
            FLOOR_FRACTION * gbs,
            format!("{FLOOR_FRACTION} x {gbs:.0} GB/s ({src}); a copy reads and writes each byte"),
        )
    })
}

/// One GPU's probe as the verdict sees it: the subject (`GPU0`), its model and its result.
#[derive(Debug, Clone)]
pub struct Probed<'a> {
    pub subject: String,
    pub gpu_name: &'a str,
    /// PCI device ID, when read (the SKU table's key).
    pub device_id: Option<u16>,
    pub probe: &'a LocalProbe,
    /// Other processes on the GPU when it was measured: named first, they are what an admin
    /// must know (a leftover process of the previous job is the common cause).
    pub others: &'a [nccl_check_contract::report::process::GpuProcess],
}

impl Probed<'_> {
    /// `GPU0: busy: 1 other process (pid 4242, user bob, 8.0 GiB); ` or nothing.
    fn busy(&self) -> String {
        nccl_check_contract::report::process::busy_prefix(&self.subject, self.others)
    }

    /// A slow probe on a GPU other processes hold is their load (`gpu_busy`, class busy),
    /// not a slow GPU (`local_probe_slow`).
    fn code(&self) -> ReasonCode {
        if self.others.is_empty() {
            ReasonCode::LocalProbeSlow
        } else {
            ReasonCode::GpuBusy
        }
    }
}

/// The findings of the probes of this process's GPUs: below the model's floor, or below
/// `fraction` x the median of the other GPUs.
pub fn slow_probes(probed: &[Probed], fraction: f64) -> Vec<Finding> {
    let slow = |(i, p): (usize, &Probed)| {
        let rate = p.probe.copy_gbs;
        let floor = copy_floor(p.device_id, p.gpu_name).filter(|(min, _)| rate < *min);
        let (limit, against) = match floor {
            Some((min, how)) => (min, format!("{} GB/s ({how})", num(min))),
            None => {
                let others: Vec<f64> = probed
                    .iter()
                    .enumerate()
                    .filter(|(j, o)| {
                        *j != i && o.gpu_name == p.gpu_name && o.device_id == p.device_id
                    })
                    .map(|(_, o)| o.probe.copy_gbs)
                    .collect();
                if others.is_empty() {
                    return None;
                }
                let median = median(&others);
                let (median_text, n) = (num(median), others.len());
                let against =
                    format!("{fraction} x {median_text} GB/s, the median of its {n} sibling(s)");
                (fraction * median, against)
            }
        };
        let (busy, shown) = (p.busy(), num(rate));
        let message = format!("{busy}device-local copy {shown} GB/s < {against}");
        (rate < limit).then(|| Finding::new(p.code(), &p.subject, message).with_values(rate, limit))
    };
    probed.iter().enumerate().filter_map(slow).collect()
}

/// One line for the terminal and the summary: `local probe GPU0 1520, GPU1 1518 GB/s (floor 1440)`.
pub fn results_line(probed: &[Probed]) -> String {
    if probed.is_empty() {
        return "local probe: not measured".to_string();
    }
    let each: Vec<String> = probed
        .iter()
        .map(|p| format!("{} {:.0}", p.subject, p.probe.copy_gbs))
        .collect();
    let floor = probed
        .first()
        .and_then(|p| copy_floor(p.device_id, p.gpu_name))
        .map(|(f, _)| format!(" (floor {f:.0})"))
        .unwrap_or_else(|| " (no model floor: siblings only)".to_string());
    format!("local probe device copy {} GB/s{floor}", each.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(device: usize, copy_gbs: f64) -> LocalProbe {
        // 256 MiB x 40 copies at the given rate.
        let bytes = 256u64 << 20;
        let ms = bytes as f64 * 40.0 / (copy_gbs * 1e9) * 1e3;
        LocalProbe::new(device, bytes, 40, ms)
    }

    fn probed<'a>(name: &'a str, probes: &'a [LocalProbe]) -> Vec<Probed<'a>> {
        probes
            .iter()
            .map(|p| Probed {
                subject: format!("GPU{}", p.device),
                gpu_name: name,
                device_id: None,
                probe: p,
                others: &[],
            })
            .collect()
    }

    #[test]
    fn the_model_floors_come_from_the_sku_table_by_device_id_then_whole_name() {
        let by_name = |n: &str| hbm_gbs(None, n).map(|x| x.0);
        assert_eq!(by_name("NVIDIA H100 80GB HBM3"), Some(3350.0));
        assert_eq!(by_name("NVIDIA H100 PCIe"), Some(2000.0));
        assert_eq!(by_name("NVIDIA H100 NVL"), Some(3900.0));
        assert_eq!(by_name("NVIDIA H200"), Some(4800.0));
        assert_eq!(by_name("NVIDIA A100-SXM4-80GB"), Some(2039.0));
        assert_eq!(by_name("NVIDIA A100-SXM4-40GB"), Some(1555.0));
        assert_eq!(by_name("Tesla T4"), None);
        // A name that only contains a known part's name is not that part.
        assert_eq!(by_name("NVIDIA H100 80GB HBM3 (custom)"), None);
        // The device ID decides: an H100 PCIe (2331) under an SXM name has the PCIe figure.
        assert_eq!(
            hbm_gbs(Some(0x2331), "NVIDIA H100 80GB HBM3").map(|x| x.0),
            Some(2000.0)
        );
        let (f, how) = copy_floor(None, "NVIDIA H200").unwrap();
        assert!((f - 1440.0).abs() < 1e-9, "{f}");
        assert!(how.contains("4.8 TB/s"), "{how}");
    }

    #[test]
    fn a_healthy_copy_rate_passes_and_a_shared_memory_fails_on_one_gpu() {
        // Healthy H200: ~0.45 x 4800 = 2160 GB/s of copy rate.
        let one = [probe(0, 2150.0)];
        assert!(slow_probes(&probed("NVIDIA H200", &one), 0.85).is_empty());
        // Another process streaming through its memory: about half.
        let one = [probe(0, 1100.0)];
        let f = slow_probes(&probed("NVIDIA H200", &one), 0.85);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].code.as_str(), f[0].subject.as_str()),
            ("local_probe_slow", "GPU0")
        );
        assert!(f[0]
            .message
            .starts_with("GPU0: device-local copy 1100 GB/s < 1440 GB/s"));
        // Another process on it is named first.
        let others = [nccl_check_contract::report::process::GpuProcess {
            pid: 4242,
            user: "bob".into(),
            used_bytes: Some(8 << 30),
        }];
        let mut busy = probed("NVIDIA H200", &one);
        busy[0].others = &others;
        let f = slow_probes(&busy, 0.85);
        assert!(
            f[0].message.starts_with(
                "GPU0: busy: 1 other process (pid 4242, user bob, 8.0 GiB); device-local copy 1100 GB/s < 1440 GB/s"
            ),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].limit, Some(1440.0));
        assert_eq!(
            f[0].code,
            ReasonCode::GpuBusy,
            "the other process is the cause"
        );
        assert_eq!(
            slow_probes(&probed("NVIDIA H200", &one), 0.85)[0].code,
            ReasonCode::LocalProbeSlow
        );
    }

    #[test]
    fn on_two_gpus_the_slower_one_is_named_by_its_sibling() {
        // Both above the model floor, one at 0.7 of the other: only it is named.
        let two = [probe(0, 2150.0), probe(1, 1500.0)];
        let f = slow_probes(&probed("NVIDIA H200", &two), 0.85);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].subject, "GPU1");
        assert!(
            f[0].message.contains("median of its 1 sibling"),
            "{}",
            f[0].message
        );
        // An unknown model: siblings only.
        let f = slow_probes(&probed("Tesla T4", &two), 0.85);
        assert_eq!(f.len(), 1);
        assert!(slow_probes(&probed("Tesla T4", &two[..1]), 0.85).is_empty());
        assert_eq!(
            results_line(&probed("NVIDIA H200", &two)),
            "local probe device copy GPU0 2150, GPU1 1500 GB/s (floor 1440)"
        );
    }

    #[test]
    fn a_zero_time_gives_zero_not_infinity() {
        assert_eq!(LocalProbe::new(0, 1 << 20, 10, 0.0).copy_gbs, 0.0);
        let p = LocalProbe::new(0, 1_000_000_000, 2, 1000.0);
        assert!((p.copy_gbs - 2.0).abs() < 1e-9);
    }
}
