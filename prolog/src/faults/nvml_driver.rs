//! The real [`Driver`]: NVML through the `nvml-wrapper` crate, which opens libnvidia-ml at run
//! time (libloading): a node without the library gets an `Err` ("not confirmable"), never a
//! link failure or a panic. NVML can block for seconds on a GPU in a bad state, so the asking
//! runs on its own thread and the prolog stops waiting at the deadline (the thread is left to
//! finish or to end with the process). Asked only when a record needs confirming or kernel
//! records were lost: a quiet node never loads NVML.

use super::driver::{Answer, Driver, GpuState};
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING,
};
use nvml_wrapper::{Device, Nvml as Lib};
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

/// NVML's largest NVLink count per GPU (`NVML_NVLINK_MAX_LINKS`).
const MAX_LINKS: u32 = 18;

#[derive(Debug, Default)]
pub struct Nvml;

impl Driver for Nvml {
    fn ask(
        &self,
        addresses: &[String],
        deadline: Duration,
    ) -> Result<BTreeMap<String, Answer>, String> {
        let (tx, rx) = mpsc::channel();
        let addresses = addresses.to_vec();
        std::thread::Builder::new()
            .name("nvml-state".into())
            .spawn(move || {
                // The receiver may be gone after the deadline: nothing to do then.
                let _ = tx.send(read(&addresses));
            })
            .map_err(|e| format!("cannot start a thread for NVML: {e}"))?;
        rx.recv_timeout(deadline).unwrap_or_else(|_| {
            Err(format!(
                "NVML gave no answer within {:.1} s (a GPU may be hung)",
                deadline.as_secs_f64()
            ))
        })
    }
}

/// Each address's answer, on the calling thread.
fn read(addresses: &[String]) -> Result<BTreeMap<String, Answer>, String> {
    let nvml = Lib::init().map_err(|e| format!("NVML not available: {e}"))?;
    Ok(addresses
        .iter()
        .map(|a| {
            // NVML takes `domain:bus:device.function`; an Xid names the device.
            let answer = match nvml.device_by_pci_bus_id(format!("{a}.0")) {
                Err(NvmlError::GpuLost) => Answer::Lost,
                Err(e) => Answer::Unknown(e.to_string()),
                Ok(d) => state(&d),
            };
            (a.clone(), answer)
        })
        .collect())
}

/// One GPU's state; a GPU that answers any question with "lost" is lost.
fn state(d: &Device) -> Answer {
    let mut lost = false;
    let fields = keep(
        &mut lost,
        d.field_values_for(&[
            FieldId(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
            FieldId(NVML_FI_DEV_REMAPPED_PENDING),
            FieldId(NVML_FI_DEV_REMAPPED_FAILURE),
        ]),
    )
    .unwrap_or_default();
    // A field this driver does not have (the recovery action before R550) is None.
    let field = |i: usize| -> Option<u64> {
        use nvml_wrapper::enums::device::SampleValue;
        match fields.get(i)?.as_ref().ok()?.value.as_ref().ok()? {
            SampleValue::U32(v) => Some(u64::from(*v)),
            SampleValue::U64(v) => Some(*v),
            SampleValue::I64(v) => u64::try_from(*v).ok(),
            SampleValue::F64(_) => None,
        }
    };
    let s = GpuState {
        recovery_action: field(0).and_then(|v| u32::try_from(v).ok()),
        remap_pending: field(1).map(|v| v != 0),
        remap_failed: field(2).map(|v| v != 0),
        dbe_volatile: keep(
            &mut lost,
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        ),
        pages_pending: keep(&mut lost, d.are_pages_pending_retired()),
        links_inactive: links_inactive(d),
    };
    if lost {
        Answer::Lost
    } else {
        Answer::State(s)
    }
}

/// `r`'s value; None when the GPU does not give it, and `lost` set when NVML says it is lost.
fn keep<T>(lost: &mut bool, r: Result<T, NvmlError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(_) => None,
    }
}

/// NVLinks that answer and are not active; None when the GPU has no NVLink.
fn links_inactive(d: &Device) -> Option<u32> {
    let (mut present, mut inactive) = (0, 0);
    for link in 0..MAX_LINKS {
        if let Ok(active) = d.link_wrapper_for(link).is_active() {
            present += 1;
            inactive += u32::from(!active);
        }
    }
    (present > 0).then_some(inactive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_library_nvml_is_an_answer_not_a_crash() {
        // On a host without libnvidia-ml (this CI's), asking is an Err naming NVML; on a GPU
        // host it is an answer per address. Either way within the deadline.
        let t = std::time::Instant::now();
        match Nvml.ask(&["0000:ff:1f".into()], Duration::from_secs(20)) {
            Err(e) => assert!(e.contains("NVML"), "{e}"),
            Ok(a) => assert_eq!(a.len(), 1, "{a:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(21));
    }
}
