//! Reads `gpu_health::HealthFacts` through NVML (crate nvml-wrapper, which opens
//! libnvidia-ml.so.1 at run time with libloading: no link-time dependency). Without NVML, or
//! when it does not answer in time, the facts say so (`NVML not available: <why>`); nothing
//! here is an error, and a fact one GPU cannot give is recorded in its `errors`.
//!
//! NVML can block for seconds on a GPU in a bad state, so `read_within` runs the reading on its
//! own thread and stops waiting at the deadline (the thread is left to finish or to die with the
//! process; the worker never runs inside a task process).

use super::gpu_health::{Clocks, GpuHealth, HealthFacts, NvLinks, Pcie, RowRemap, Throttle};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::sync::mpsc;
use std::time::Duration;

/// NVML's largest NVLink count per GPU (`NVML_NVLINK_MAX_LINKS`).
const MAX_LINKS: u32 = 18;

/// The facts of every GPU NVML sees, or why there are none, within `deadline`.
pub fn read_within(deadline: Duration) -> HealthFacts {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("nvml-facts".into())
        .spawn(move || {
            // The receiver may be gone after the deadline: nothing to do then.
            let _ = tx.send(read());
        });
    if let Err(e) = spawned {
        return HealthFacts::unavailable(format!("cannot start a thread: {e}"));
    }
    rx.recv_timeout(deadline).unwrap_or_else(|_| {
        HealthFacts::unavailable(format!(
            "no answer within {:.1} s (a GPU may be hung)",
            deadline.as_secs_f64()
        ))
    })
}

/// The facts, read on the calling thread (may block as long as NVML does).
pub fn read() -> HealthFacts {
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
                bus_id: String::new(),
                name: String::new(),
                nvlink: None,
                pcie: None,
                ecc_uncorrected_volatile: None,
                row_remap: None,
                throttle: None,
                clocks: None,
                errors: vec![format!("device: {e}")],
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
    let bus_id = keep(&mut errors, "pci", d.pci_info().map(|p| p.bus_id)).unwrap_or_default();
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
    let row_remap = match remapped_rows(nvml, d) {
        Ok(r) => Some(r),
        Err(e) => {
            errors.push(format!("row remapping: {e}"));
            None
        }
    };
    GpuHealth {
        index,
        bus_id,
        name,
        nvlink: nvlinks(d),
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

/// Links that answer, and how many of them are active; None when the GPU has no NVLink.
fn nvlinks(d: &Device) -> Option<NvLinks> {
    let mut l = NvLinks {
        present: 0,
        active: 0,
    };
    for link in 0..MAX_LINKS {
        if let Ok(active) = d.link_wrapper_for(link).is_active() {
            l.present += 1;
            l.active += u32::from(active);
        }
    }
    (l.present > 0).then_some(l)
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
        let facts = read_within(Duration::from_secs(20));
        // Shown with --nocapture: the answers of a real GPU machine, to record as fixtures.
        eprintln!(
            "{}",
            serde_json::to_string_pretty(&facts).unwrap_or_default()
        );
        let findings = super::super::gpu_health::classify(&facts, Default::default());
        eprintln!("findings: {findings:?}");
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
