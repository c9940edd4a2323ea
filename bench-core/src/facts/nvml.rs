//! Reads `gpu_health::HealthFacts` through NVML (crate nvml-wrapper, which opens
//! libnvidia-ml.so.1 at run time with libloading: no link-time dependency). Without NVML, or
//! when it does not answer in time, the facts say so (`NVML not available: <why>`); nothing
//! here is an error, and a fact one GPU cannot give is recorded in its `errors`.
//!
//! NVML can block for seconds on a GPU in a bad state, so the check runs [`read_health`] on its
//! own thread and stops waiting at its budget (`orchestrate/gather_facts.rs`; the thread is left
//! to finish or to die with the process; the worker never runs inside a task process).

use super::gpu_health::{
    Clocks, GpuHealth, HealthFacts, LinkFact, NvLinks, Pcie, Remote, RowRemap, Throttle,
};
use nccl_check_contract::report::process::GpuProcess;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

/// NVML's largest NVLink count per GPU (`NVML_NVLINK_MAX_LINKS`).
const MAX_LINKS: u32 = 18;

/// The facts, read on the calling thread (may block as long as NVML does).
pub fn read_health() -> HealthFacts {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => return HealthFacts::unavailable(e),
    };
    let driver_version = nvml.sys_driver_version().unwrap_or_default();
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => return HealthFacts::unavailable(format!("device count: {e}")),
    };
    let gpus = (0..count)
        .map(|i| match nvml.device_by_index(i) {
            Ok(d) => gpu(&nvml, i, &d),
            Err(e) => GpuHealth {
                index: i,
                errors: vec![format!("device: {e}")],
                ..GpuHealth::default()
            },
        })
        .collect();
    HealthFacts::Available {
        driver_version,
        gpus,
    }
}

fn gpu(nvml: &Nvml, index: u32, d: &Device) -> GpuHealth {
    let mut errors = Vec::new();
    let name = keep(&mut errors, "name", d.name()).unwrap_or_default();
    let pci = keep(&mut errors, "pci", d.pci_info());
    let bus_id = pci.as_ref().map(|p| p.bus_id.clone()).unwrap_or_default();
    // NVML packs the IDs as device << 16 | vendor.
    let pci_device_id = pci
        .filter(|p| p.pci_device_id & 0xffff == u32::from(crate::model::sku::NVIDIA_VENDOR))
        .map(|p| (p.pci_device_id >> 16) as u16);
    let processes = keep(&mut errors, "processes", d.running_compute_processes());
    let processes = (processes.unwrap_or_default().into_iter())
        .filter(|p| p.pid != std::process::id())
        .map(|p| GpuProcess {
            pid: p.pid,
            user: owner(p.pid),
            used_bytes: match p.used_gpu_memory {
                nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
            },
        })
        .collect();
    let pcie = (|| {
        Ok(Pcie {
            gen: d.current_pcie_link_gen()?,
            max_gen: d.max_pcie_link_gen()?,
            width: d.current_pcie_link_width()?,
            max_width: d.max_pcie_link_width()?,
        })
    })();
    let pcie = keep(&mut errors, "pcie", pcie);
    let ecc = keep(
        &mut errors,
        "ecc",
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
    );
    let throttle = keep(&mut errors, "throttle", d.current_throttle_reasons()).map(|r| Throttle {
        hw_slowdown: r.contains(ThrottleReasons::HW_SLOWDOWN),
        hw_thermal: r.contains(ThrottleReasons::HW_THERMAL_SLOWDOWN),
        hw_power_brake: r.contains(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
        sw_thermal: r.contains(ThrottleReasons::SW_THERMAL_SLOWDOWN),
        sw_power_cap: r.contains(ThrottleReasons::SW_POWER_CAP),
        raw: r.bits(),
    });
    let clocks = (|| {
        Ok(Clocks {
            sm_mhz: d.clock_info(Clock::SM)?,
            sm_max_mhz: d.max_clock_info(Clock::SM)?,
            mem_mhz: d.clock_info(Clock::Memory)?,
            mem_max_mhz: d.max_clock_info(Clock::Memory)?,
        })
    })();
    let clocks = keep(&mut errors, "clocks", clocks);
    let row_remap = (remapped_rows(nvml, d))
        .map_err(|e| errors.push(format!("row remapping: {e}")))
        .ok();
    let (nvlink, links) = nvlinks(nvml, d);
    GpuHealth {
        index,
        bus_id,
        name,
        pci_device_id,
        links,
        processes,
        nvlink,
        pcie,
        ecc_uncorrected_volatile: ecc,
        row_remap,
        throttle,
        clocks,
        errors,
    }
}

/// `r`'s value, or None with the reason kept in `errors`.
fn keep<T>(errors: &mut Vec<String>, what: &str, r: Result<T, NvmlError>) -> Option<T> {
    r.map_err(|e| errors.push(format!("{what}: {e}"))).ok()
}

/// Links that answer, how many of them are active, and where each leads; None and no links
/// when the GPU has no NVLink.
fn nvlinks(nvml: &Nvml, d: &Device) -> (Option<NvLinks>, Vec<LinkFact>) {
    let links: Vec<LinkFact> = (0..MAX_LINKS)
        .filter_map(|link| {
            let wrapper = d.link_wrapper_for(link);
            let active = wrapper.is_active().ok()?;
            let remote = remote(nvml, d, link, &wrapper);
            Some(LinkFact {
                link,
                active,
                remote,
            })
        })
        .collect();
    let l = NvLinks {
        present: links.len() as u32,
        active: links.iter().filter(|l| l.active).count() as u32,
    };
    ((l.present > 0).then_some(l), links)
}

/// PCI device IDs of NVSwitch chips (pci.ids 2026.08.22: GA100 [A100 NVSwitch] 1af1,
/// GH100 [H100 NVSwitch] 22a3), for drivers that cannot say a link's remote type.
const NVSWITCH_IDS: [u16; 2] = [0x1af1, 0x22a3];

/// Where a link leads: NVML's remote device type (called through the symbol directly: the
/// wrapper of nvml-wrapper 0.13 writes the answer into a temporary and always returns
/// Unknown), else the remote end's PCI device ID.
fn remote(nvml: &Nvml, d: &Device, link: u32, wrapper: &nvml_wrapper::NvLink) -> Remote {
    let remote_pci = wrapper.remote_pci_info().ok();
    let kind = nvml
        .lib()
        .nvmlDeviceGetNvLinkRemoteDeviceType
        .as_ref()
        .ok()
        .and_then(|f| {
            let mut t: std::os::raw::c_uint = 255;
            // SAFETY: the handle belongs to a live `Device` of this `Nvml`; `t` is a valid
            // out-pointer of the enum's C type, as nvmlDeviceGetNvLinkRemoteDeviceType requires.
            let rc = unsafe { f(d.handle(), link, &mut t) };
            (rc == 0).then_some(t)
        });
    match kind {
        // NVML_NVLINK_DEVICE_TYPE_GPU, _IBMNPU, _SWITCH (nvml.h).
        Some(0) => Remote::Gpu {
            bus_id: remote_pci.map(|p| p.bus_id).unwrap_or_default(),
        },
        Some(1) => Remote::Cpu,
        Some(2) => Remote::Switch,
        _ => match remote_pci {
            Some(p) if NVSWITCH_IDS.contains(&((p.pci_device_id >> 16) as u16)) => Remote::Switch,
            _ => Remote::Unknown,
        },
    }
}

/// The user name of a process's owner (its real uid from /proc), the uid where the name is
/// unknown, empty where /proc does not say (another PID namespace).
fn owner(pid: u32) -> String {
    let path = format!("/proc/{pid}/status");
    // Unreadable: no Uid line, no owner.
    let status = nccl_check_host::read::small(std::path::Path::new(&path), 64 * 1024);
    match super::host_load::status_user(&status.unwrap_or_default()) {
        Some((_, Some(name))) => name,
        Some((uid, None)) => format!("uid {uid}"),
        None => String::new(),
    }
}

/// `nvmlDeviceGetRemappedRows`, which nvml-wrapper 0.13 does not wrap.
fn remapped_rows(nvml: &Nvml, d: &Device) -> Result<RowRemap, String> {
    let f = nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|e| format!("not in this libnvidia-ml: {e}"))?;
    let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: the handle belongs to a live `Device` of this `Nvml`, and the four out-pointers
    // are valid, distinct c_uint locals, as nvmlDeviceGetRemappedRows requires.
    let rc = unsafe { f(d.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
    if rc != 0 {
        return Err(format!("NVML return code {rc}"));
    }
    Ok(RowRemap {
        corrected_rows: corr,
        uncorrected_rows: unc,
        pending: pending != 0,
        failed: failed != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_nvml_the_facts_say_why_and_nothing_fails() {
        // This machine has no NVIDIA driver; on a GPU machine NVML answers instead.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(read_health()));
        let facts = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("NVML answers or says why not within 20 s");
        // Shown with --nocapture: the answers of a real GPU machine, to record as fixtures.
        nccl_check_host::errln!(
            "{}",
            serde_json::to_string_pretty(&facts).unwrap_or_default()
        );
        let findings = super::super::gpu_health::classify(&facts, Default::default());
        nccl_check_host::errln!("findings: {findings:?}");
        match facts {
            HealthFacts::Unavailable { why } => {
                assert!(why.starts_with("NVML not available: "), "{why}")
            }
            HealthFacts::Available { gpus, .. } => {
                assert!(gpus.iter().all(|g| !g.bus_id.is_empty()), "{gpus:?}")
            }
        }
    }
}
