//! Xid (GPU) and SXid (NVSwitch) events in kernel log lines, and what each says about the node:
//! FAIL (the hardware: drain), WARN (an application's fault or a corrected error: say it, do not
//! drain) and whether the GPU needs a reset or the node a reboot.
//!
//! The table follows NVIDIA's public Xid catalog for Ampere and newer, column "Resolution Bucket
//! (Immediate Action)" (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>),
//! checked code by code on 2026-11-24 against the catalog as published then (its spreadsheet as
//! NVIDIA ships it in NVIDIA/NVSentinel `distros/kubernetes/nvsentinel/charts/gpu-health-monitor/
//! xiderrorsmapping.csv`, commit 6f8b0fcf, codes 1-162; the catalog page's own rows 1-13 read
//! directly). Each entry keeps the catalog's bucket ([`Bucket`]) and the class follows from it
//! alone ([`Bucket::class`]): RESTART_APP, IGNORE and CONTACT_SUPPORT → WARN; RESET_GPU → FAIL,
//! reset; RESTART_BM → FAIL, reboot; CHECK_MECHANICALS → FAIL; the workflows by what they end in
//! (WORKFLOW_XID_48 and the NVLink workflows reset the GPU; WORKFLOW_XID_45 follows the Xid that
//! caused it, judged on its own line). Xid 46 is also CRITICAL "drain: reset_gpu" in NVIDIA Health
//! Validation (<https://docs.nvidia.com/health-validation/reference/checks/xid.md>).
//! Codes not in the table are WARN (named, with the catalog to look them up): an unknown code
//! must not drain a fleet. Xid 154 carries the driver's own recovery action and is judged by it.
//!
//! SXid: the catalog does not list them ("documented separately in the Fabric Manager User
//! Guide", <https://docs.nvidia.com/deploy/xid-errors/introduction.html>); NVIDIA's driver writes
//! "Fatal" or "Non-fatal" into each SXid line, and a fatal one needs the NVSwitch and its GPUs
//! reset (Fabric Manager), so FAIL, reset. Not checked per code.

use serde::Serialize;

/// How bad an event is for the next job (`FAIL`, `WARN` in log lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "UPPERCASE")]
pub enum Class {
    Fail,
    Warn,
}

/// What the hardware needs before it is trusted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Needs {
    Nothing,
    /// `nvidia-smi -r` (or the GPU's reset through Fabric Manager on NVSwitch systems).
    GpuReset,
    /// The node must be rebooted (the GPU is gone from the bus).
    Reboot,
}

impl Needs {
    pub fn words(self) -> &'static str {
        match self {
            Needs::Nothing => "",
            Needs::GpuReset => "GPU reset needed",
            Needs::Reboot => "reboot needed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Kind {
    Xid,
    SXid,
}

/// One event from one log line.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub kind: Kind,
    pub code: u32,
    /// The device as the driver wrote it (`0000:3b:00` for a GPU, `0000:05:00.0` for an NVSwitch).
    pub pci: String,
    /// The rest of the line after the code.
    pub text: String,
}

/// The catalog's "Resolution Bucket (Immediate Action)" of a code, as the catalog spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    RestartApp,
    Ignore,
    ContactSupport,
    ResetGpu,
    RestartBm,
    CheckMechanicals,
    /// WORKFLOW_XID_45: preemptive cleanup after another fault, which has its own line.
    WorkflowXid45,
    /// WORKFLOW_XID_48: a double-bit ECC error; the workflow ends in a GPU reset (row remap).
    WorkflowXid48,
    /// WORKFLOW_NVLINK_ERR (Xid 74) and WORKFLOW_NVLINK5_ERR (144-150): a GPU reset.
    WorkflowNvlink,
}

impl Bucket {
    /// The class and what the hardware needs, from the bucket alone.
    fn class(self) -> (Class, Needs) {
        match self {
            Bucket::RestartApp
            | Bucket::Ignore
            | Bucket::ContactSupport
            | Bucket::WorkflowXid45 => (Class::Warn, Needs::Nothing),
            Bucket::ResetGpu | Bucket::WorkflowXid48 | Bucket::WorkflowNvlink => {
                (Class::Fail, Needs::GpuReset)
            }
            Bucket::RestartBm => (Class::Fail, Needs::Reboot),
            // Power or cooling of the board (Xid 54): the hardware, no reset fixes it.
            Bucket::CheckMechanicals => (Class::Fail, Needs::Nothing),
        }
    }
}

use Bucket::*;

/// (code, its immediate-action bucket, meaning in a few words), each under the catalog's mnemonic.
const XIDS: &[(u32, Bucket, &str)] = &[
    // ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT
    (8, RestartApp, "GPU stopped processing (application)"),
    // ROBUST_CHANNEL_GR_ERROR_MISSING_HW
    (11, RestartApp, "invalid push buffer stream (application)"),
    // ROBUST_CHANNEL_GR_EXCEPTION
    (13, RestartApp, "graphics engine exception (application)"),
    // ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT
    (31, RestartApp, "GPU memory page fault (application)"),
    // ROBUST_CHANNEL_PBDMA_ERROR
    (32, RestartApp, "invalid push buffer stream (application)"),
    // ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR
    (43, Ignore, "GPU stopped processing (application)"),
    // ROBUST_CHANNEL_PREEMPTIVE_REMOVAL
    (
        45,
        WorkflowXid45,
        "preemptive cleanup after an earlier fault",
    ),
    // ROBUST_CHANNEL_GPU_TIMEOUT_ERROR
    (46, ResetGpu, "GPU stopped processing (GPU timeout)"),
    // ROBUST_CHANNEL_GPU_ECC_DBE
    (48, WorkflowXid48, "double-bit ECC error"),
    // SILENT_RUNNING_PWR_REDUCED_CLOCKING
    (
        54,
        CheckMechanicals,
        "clocks reduced for power (board power or cooling)",
    ),
    // PMU_BREAKPOINT
    (
        61,
        ContactSupport,
        "internal micro-controller breakpoint/warning",
    ),
    // PMU_HALT_ERROR
    (62, ResetGpu, "internal micro-controller halt"),
    // INFOROM_DRAM_RETIREMENT_EVENT
    (63, Ignore, "row remapping or page retirement recorded"),
    // INFOROM_DRAM_RETIREMENT_FAILURE
    (64, ResetGpu, "row remapping or page retirement failed"),
    // ROBUST_CHANNEL_NVDEC0_ERROR
    (68, RestartApp, "video decoder exception (application)"),
    // ROBUST_CHANNEL_GR_CLASS_ERROR
    (69, RestartApp, "graphics engine class error (application)"),
    // NVLINK_ERROR
    (74, WorkflowNvlink, "NVLink error"),
    // ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
    (79, RestartBm, "GPU has fallen off the bus"),
    // EXCESSIVE_SBE_INTERRUPTS
    (92, Ignore, "high single-bit ECC error rate"),
    // ROBUST_CHANNEL_CONTAINED_ERROR
    (
        94,
        RestartApp,
        "contained ECC error (the application was stopped)",
    ),
    // ROBUST_CHANNEL_UNCONTAINED_ERROR
    (95, ResetGpu, "uncontained ECC error"),
    // ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR
    (109, ResetGpu, "context switch timeout"),
    // SEC_FAULT_ERROR
    (110, ResetGpu, "security fault"),
    // GSP_RPC_TIMEOUT
    (119, ResetGpu, "GSP RPC timeout"),
    // GSP_ERROR
    (120, ResetGpu, "GSP error"),
    // C2C_ERROR
    (121, Ignore, "C2C link corrected error"),
    // ALI_TRAINING_FAIL
    (136, ResetGpu, "NVLink training failed"),
    // UNRECOVERABLE_ECC_ERROR_ESCAPE
    (140, ResetGpu, "unrecovered ECC error"),
    // GPU_INIT_ERROR
    (143, ResetGpu, "GPU initialization failure"),
    // NVLINK_SAW_ERROR
    (144, WorkflowNvlink, "NVLink SAW error"),
    // NVLINK_RLW_ERROR
    (145, WorkflowNvlink, "NVLink RLW error"),
    // NVLINK_TLW_ERROR
    (146, WorkflowNvlink, "NVLink TLW error"),
    // NVLINK_TREX_ERROR
    (147, WorkflowNvlink, "NVLink TREX error"),
    // NVLINK_NVLPW_CTRL_ERROR
    (148, WorkflowNvlink, "NVLink NVLPW error"),
    // NVLINK_NETIR_ERROR
    (149, WorkflowNvlink, "NVLink NETIR error"),
    // NVLINK_MSE_ERROR
    (150, WorkflowNvlink, "NVLink MSE error"),
    // NVLINK_SW_DEFINED_ERROR
    (155, ResetGpu, "NVLink software-defined error"),
    // RESOURCE_RETIREMENT_EVENT
    (156, ResetGpu, "resource retirement event"),
    // GPU_FATAL_TIMEOUT
    (158, ResetGpu, "GPU fatal timeout"),
    // CHANNEL_RETIREMENT_EVENT
    (160, RestartBm, "channel retirement event"),
    // The catalog's spreadsheet names no mnemonic for 162, only its bucket (RESET_GPU, FATAL).
    (
        162,
        ResetGpu,
        "fatal error the catalog resolves with a GPU reset",
    ),
];

/// Xid 63's line says "reset gpu to activate": the remap waits for a reset (the catalog's bucket
/// is IGNORE, so still a WARN; the NVML fact `row_remap_pending` judges the pending remap).
fn needs_from_line(e: &Event, needs: Needs) -> Needs {
    if needs == Needs::Nothing
        && e.text
            .to_ascii_lowercase()
            .contains("reset gpu to activate")
    {
        Needs::GpuReset
    } else {
        needs
    }
}

/// The NVIDIA driver's own record, whole, from the start of the message:
/// `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.` and
/// `nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...`. Anything else is None:
/// text that merely contains `Xid (PCI:` is how a process name (at most 15 bytes, first in a
/// segfault, trap or stack-depth line), a file name or a user's message reaches the kernel log.
/// Who wrote the record (the kernel) and whose device it names are the caller's to check.
pub fn parse(line: &str) -> Option<Event> {
    let (kind, rest) = match line.strip_prefix("NVRM: Xid (PCI:") {
        Some(rest) => (Kind::Xid, rest),
        None => {
            let r = line.strip_prefix("nvidia-nvswitch")?;
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            if !(1..=4).contains(&n) {
                return None;
            }
            (Kind::SXid, r[n..].strip_prefix(": SXid (PCI:")?)
        }
    };
    let (pci, after) = rest.split_once("): ")?;
    let pci = pci_address(pci)?;
    let n = after.bytes().take_while(u8::is_ascii_digit).count();
    if !(1..=6).contains(&n) {
        return None;
    }
    let code = after[..n].parse().ok()?;
    let text = after[n..].strip_prefix(',')?.trim().to_string();
    Some(Event {
        kind,
        code,
        pci,
        text,
    })
}

/// A PCI address as the driver prints it, `DDDD:BB:DD` or `DDDD:BB:DD.F` (hex; a domain of 4 to
/// 8 digits, as VMD domains have 5), lower case; None for anything else.
pub fn pci_address(s: &str) -> Option<String> {
    let hex = |p: &str, n: std::ops::RangeInclusive<usize>| {
        n.contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit())
    };
    let mut parts = s.split(':');
    let (domain, bus, dev) = (parts.next()?, parts.next()?, parts.next()?);
    let (dev, func) = match dev.split_once('.') {
        Some((d, f)) => (d, Some(f)),
        None => (dev, None),
    };
    let ok = parts.next().is_none()
        && hex(domain, 4..=8)
        && hex(bus, 2..=2)
        && hex(dev, 2..=2)
        && func.is_none_or(|f| f.len() == 1 && (b'0'..=b'7').contains(&f.as_bytes()[0]));
    ok.then(|| s.to_ascii_lowercase())
}

/// The device part of an address (`dddd:bb:dd`, no function): how an Xid line names a GPU.
pub fn pci_device(addr: &str) -> Option<String> {
    let a = pci_address(addr)?;
    Some(a.split('.').next().unwrap_or(&a).to_string())
}

/// The class, what the hardware needs, and the meaning in a few words.
pub fn assess(e: &Event) -> (Class, Needs, String) {
    match e.kind {
        Kind::SXid => {
            let lower = e.text.to_ascii_lowercase();
            if lower.starts_with("fatal") || lower.contains(" fatal,") {
                (Class::Fail, Needs::GpuReset, "fatal NVSwitch error".into())
            } else {
                (
                    Class::Warn,
                    Needs::Nothing,
                    "non-fatal NVSwitch error".into(),
                )
            }
        }
        Kind::Xid if e.code == 154 => recovery_action(&e.text),
        Kind::Xid => match XIDS.iter().find(|x| x.0 == e.code) {
            Some(&(_, bucket, meaning)) => {
                let (class, needs) = bucket.class();
                (class, needs_from_line(e, needs), meaning.to_string())
            }
            None => (
                Class::Warn,
                Needs::Nothing,
                "not in nccl-check's table (see NVIDIA's Xid catalog)".into(),
            ),
        },
    }
}

/// Xid 154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)": the
/// driver's own verdict on what the GPU needs (the catalog's "Xid 154 linkage").
fn recovery_action(text: &str) -> (Class, Needs, String) {
    let to = text.rsplit_once(" to ").map_or(text, |(_, t)| t);
    let lower = to.to_ascii_lowercase();
    let what = format!("recovery action: {}", super::read::cut(to.trim()));
    if lower.contains("reboot") {
        (Class::Fail, Needs::Reboot, what)
    } else if lower.contains("reset") {
        (Class::Fail, Needs::GpuReset, what)
    } else if lower.contains("drain") {
        (Class::Fail, Needs::Nothing, what)
    } else {
        (Class::Warn, Needs::Nothing, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(line: &str) -> (Class, Needs) {
        let e = parse(line).expect(line);
        let (c, n, _) = assess(&e);
        (c, n)
    }

    #[test]
    fn the_table_has_each_code_once() {
        for (i, a) in XIDS.iter().enumerate() {
            assert!(
                XIDS[i + 1..].iter().all(|b| b.0 != a.0),
                "Xid {} twice",
                a.0
            );
        }
    }

    #[test]
    fn hardware_xids_fail_application_xids_warn() {
        for (line, want) in [
            (
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=1896, GPU has fallen off the bus.",
                (Class::Fail, Needs::Reboot),
            ),
            (
                "NVRM: Xid (PCI:0000:18:00): 48, pid=3, An uncorrectable double bit error",
                (Class::Fail, Needs::GpuReset),
            ),
            (
                "NVRM: Xid (PCI:0000:18:00): 95, pid=3, Uncontained: FBHUB",
                (Class::Fail, Needs::GpuReset),
            ),
            (
                "NVRM: Xid (PCI:0000:18:00): 74, pid=3, NVLink: fatal error detected on link 4",
                (Class::Fail, Needs::GpuReset),
            ),
            (
                "NVRM: Xid (PCI:0000:18:00): 119, pid=3, Timeout waiting for RPC from GSP!",
                (Class::Fail, Needs::GpuReset),
            ),
            (
                "NVRM: Xid (PCI:0000:b7:00): 13, Graphics SM Warp Exception on (GPC 0)",
                (Class::Warn, Needs::Nothing),
            ),
            (
                "NVRM: Xid (PCI:0000:b7:00): 31, pid=77, name=python, Ch 00000008, MMU Fault",
                (Class::Warn, Needs::Nothing),
            ),
            (
                "NVRM: Xid (PCI:0000:b7:00): 43, pid=2532, name=python, Ch 00000008",
                (Class::Warn, Needs::Nothing),
            ),
            (
                "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
                (Class::Warn, Needs::GpuReset),
            ),
            (
                "NVRM: Xid (PCI:0000:10:1c): 94, pid=1896, Contained: SM (0x1). RST: No",
                (Class::Warn, Needs::Nothing),
            ),
            (
                "NVRM: Xid (PCI:0000:10:1c): 999, something new",
                (Class::Warn, Needs::Nothing),
            ),
        ] {
            assert_eq!(judged(line), want, "{line}");
        }
    }

    fn xid(code: u32, text: &str) -> (Class, Needs) {
        judged(&format!(
            "NVRM: Xid (PCI:0000:18:00): {code}, pid=1, {text}"
        ))
    }

    // Each test below is a code whose class disagreed with the catalog's immediate-action
    // bucket before the table was checked against it (2026-11-24).

    #[test]
    fn xid_109_context_switch_timeout_is_reset_gpu_in_the_catalog() {
        assert_eq!(
            xid(109, "Ctx Switch Timeout Error"),
            (Class::Fail, Needs::GpuReset)
        );
    }

    #[test]
    fn xid_46_gpu_timeout_is_reset_gpu_in_the_catalog() {
        assert_eq!(
            xid(46, "GPU stopped processing"),
            (Class::Fail, Needs::GpuReset)
        );
    }

    #[test]
    fn reset_gpu_codes_missing_from_the_table_fail_with_a_reset() {
        for code in [110, 136, 155, 156, 158] {
            assert_eq!(xid(code, "x"), (Class::Fail, Needs::GpuReset), "Xid {code}");
        }
    }

    #[test]
    fn xid_160_channel_retirement_is_restart_bm_in_the_catalog() {
        assert_eq!(
            xid(160, "Channel retirement event"),
            (Class::Fail, Needs::Reboot)
        );
    }

    #[test]
    fn xid_162_is_reset_gpu_in_the_catalog() {
        let e = parse("NVRM: Xid (PCI:0000:18:00): 162, pid=1, x").expect("parse");
        let (class, needs, meaning) = assess(&e);
        assert_eq!((class, needs), (Class::Fail, Needs::GpuReset));
        assert!(!meaning.contains("not in nccl-check's table"), "{meaning}");
    }

    #[test]
    fn xid_54_power_reduced_clocking_is_check_mechanicals_in_the_catalog() {
        assert_eq!(
            xid(54, "Power reduced clocking"),
            (Class::Fail, Needs::Nothing)
        );
    }

    #[test]
    fn xid_61_is_contact_support_in_the_catalog_so_a_warn() {
        assert_eq!(
            xid(61, "Internal micro-controller breakpoint"),
            (Class::Warn, Needs::Nothing)
        );
    }

    #[test]
    fn xid_94_contained_error_is_restart_app_and_needs_no_reset() {
        assert_eq!(
            xid(94, "Contained: SM (0x1). RST: No, D-RST: No"),
            (Class::Warn, Needs::Nothing)
        );
    }

    #[test]
    fn xid_63_stays_a_warn_whose_line_asks_for_a_reset() {
        assert_eq!(
            xid(
                63,
                "Row Remapper: New row marked for remapping, reset gpu to activate."
            ),
            (Class::Warn, Needs::GpuReset)
        );
    }

    #[test]
    fn xid_154_follows_the_driver_s_recovery_action() {
        let l = |to: &str| {
            format!("NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to {to}")
        };
        assert_eq!(
            judged(&l("0x1 (GPU Reset Required)")),
            (Class::Fail, Needs::GpuReset)
        );
        assert_eq!(
            judged(&l("0x2 (Node Reboot Required)")),
            (Class::Fail, Needs::Reboot)
        );
        assert_eq!(judged(&l("0x0 (None)")), (Class::Warn, Needs::Nothing));
    }

    #[test]
    fn sxid_fatal_fails_non_fatal_warns() {
        let e = parse(
            "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 47 LTSSM Fault Up",
        )
        .expect("parse");
        assert_eq!(
            (e.kind, e.code, e.pci.as_str()),
            (Kind::SXid, 20034, "0000:c6:00.0")
        );
        assert_eq!(assess(&e).0, Class::Fail);
        assert_eq!(
            judged("nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 36 egress non-posted PRIV error (First)"),
            (Class::Warn, Needs::Nothing)
        );
    }

    #[test]
    fn pci_addresses_as_the_driver_prints_them() {
        for (a, dev) in [
            ("0000:3b:00", Some("0000:3b:00")),
            ("0000:3B:00.1", Some("0000:3b:00")),
            ("10000:01:00.0", Some("10000:01:00")),
            ("0:3b:00", None),
            ("0000:3b:00.8", None),
            ("0000:3b:00:00", None),
            ("0000:3b", None),
            ("0000:3b:0g", None),
        ] {
            assert_eq!(pci_device(a).as_deref(), dev, "{a}");
        }
    }

    #[test]
    fn lines_that_are_not_events_are_none() {
        for l in [
            "Xid",
            "NVRM: Xid (PCI:0000:3b:00",
            "NVRM: Xid (PCI:0000:3b:00): abc",
            "NVRM: Xid (PCI:rm -rf /): 79",
            "NVRM: Xid (PCI:\u{fffd}): 79",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
            // A process named `NVRM: Xid (PCI:` (15 bytes) first in a segfault line.
            "NVRM: Xid (PCI:[4242]: segfault at 0 ip 0000000000401000 sp 00007ffd error 6",
            "NVRM: Xid (PCI: (4242) used greatest stack depth: 11200 bytes left",
            // Not at the start: a process or file name inside the kernel's own line.
            "Xid (PCI:0):79[1234]: segfault at 0 ip 0000000000401000 sp 00007ffd error 6",
            "Out of memory: Killed process 123 (Xid (PCI:0000:18:00): 79, x)",
            " NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.",
            "xNVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:18:00): 79 GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:18:00.9): 79, x",
            "NVRM: Xid (PCI:0:18:00): 79, x",
            "nvidia-nvswitch: SXid (PCI:0000:05:00.0): 20034, Fatal, x",
            "nvidia-nvswitchX: SXid (PCI:0000:05:00.0): 20034, Fatal, x",
            "user: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, x",
        ] {
            assert_eq!(parse(l), None, "{l}");
        }
    }
}
