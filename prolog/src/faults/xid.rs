//! Xid (GPU) and SXid (NVSwitch) events in kernel log lines, and what each says about the node:
//! FAIL (the hardware: drain), WARN (an application's fault or a corrected error: say it, do not
//! drain) and whether the GPU needs a reset or the node a reboot.
//!
//! The table follows NVIDIA's public Xid catalog, "Resolution Bucket (Immediate Action)" column
//! (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>, Ampere and newer):
//! RESTART_APP / IGNORE → WARN; RESET_GPU → FAIL, reset; RESTART_BM (reboot) → FAIL, reboot.
//! Codes not in the table are WARN (named, with the catalog to look them up): an unknown code
//! must not drain a fleet. SXid: NVIDIA's driver writes "Fatal" or "Non-fatal" into each SXid
//! line (<https://docs.nvidia.com/deploy/xid-errors/index.html>, NVSwitch errors); a fatal one
//! needs the NVSwitch and its GPUs reset (Fabric Manager), so FAIL, reset.

use serde::Serialize;

/// How bad an event is for the next job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
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

/// (code, class, needs, meaning) per the catalog's immediate-action bucket.
const XIDS: &[(u32, Class, Needs, &str)] = &[
    (
        8,
        Class::Warn,
        Needs::Nothing,
        "GPU stopped processing (application)",
    ),
    (
        13,
        Class::Warn,
        Needs::Nothing,
        "graphics engine exception (application)",
    ),
    (
        31,
        Class::Warn,
        Needs::Nothing,
        "GPU memory page fault (application)",
    ),
    (
        32,
        Class::Warn,
        Needs::Nothing,
        "invalid push buffer stream (application)",
    ),
    (
        43,
        Class::Warn,
        Needs::Nothing,
        "GPU stopped processing (application)",
    ),
    (
        45,
        Class::Warn,
        Needs::Nothing,
        "preemptive cleanup after an application fault",
    ),
    (48, Class::Fail, Needs::GpuReset, "double-bit ECC error"),
    (
        61,
        Class::Fail,
        Needs::GpuReset,
        "internal micro-controller breakpoint",
    ),
    (
        62,
        Class::Fail,
        Needs::GpuReset,
        "internal micro-controller halt",
    ),
    (
        63,
        Class::Warn,
        Needs::GpuReset,
        "row remapping or page retirement recorded",
    ),
    (
        64,
        Class::Fail,
        Needs::GpuReset,
        "row remapping or page retirement failed",
    ),
    (
        68,
        Class::Warn,
        Needs::Nothing,
        "video decoder exception (application)",
    ),
    (
        69,
        Class::Warn,
        Needs::Nothing,
        "graphics engine class error (application)",
    ),
    (74, Class::Fail, Needs::GpuReset, "NVLink error"),
    (79, Class::Fail, Needs::Reboot, "GPU has fallen off the bus"),
    (
        92,
        Class::Warn,
        Needs::Nothing,
        "high single-bit ECC error rate",
    ),
    (
        94,
        Class::Warn,
        Needs::GpuReset,
        "contained ECC error (the application was stopped)",
    ),
    (95, Class::Fail, Needs::GpuReset, "uncontained ECC error"),
    (
        109,
        Class::Warn,
        Needs::Nothing,
        "context switch timeout (application)",
    ),
    (119, Class::Fail, Needs::GpuReset, "GSP RPC timeout"),
    (120, Class::Fail, Needs::GpuReset, "GSP error"),
    (121, Class::Warn, Needs::Nothing, "C2C link corrected error"),
    (140, Class::Fail, Needs::GpuReset, "unrecovered ECC error"),
    (
        143,
        Class::Fail,
        Needs::GpuReset,
        "GPU initialization failure",
    ),
    (144, Class::Fail, Needs::GpuReset, "NVLink SAW error"),
    (145, Class::Fail, Needs::GpuReset, "NVLink RLW error"),
    (146, Class::Fail, Needs::GpuReset, "NVLink TLW error"),
    (147, Class::Fail, Needs::GpuReset, "NVLink TREX error"),
    (148, Class::Fail, Needs::GpuReset, "NVLink NVLPW error"),
    (149, Class::Fail, Needs::GpuReset, "NVLink NETIR error"),
    (150, Class::Fail, Needs::GpuReset, "NVLink MSE error"),
];

/// `...Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.` and
/// `nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...`.
pub fn parse(line: &str) -> Option<Event> {
    let (kind, at) = match line.find("SXid (PCI:") {
        Some(i) => (Kind::SXid, i + "SXid (PCI:".len()),
        None => (Kind::Xid, line.find("Xid (PCI:")? + "Xid (PCI:".len()),
    };
    let rest = &line[at..];
    let close = rest.find(')')?;
    let pci = &rest[..close];
    let ok_pci = !pci.is_empty()
        && pci.len() <= 16
        && pci
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    if !ok_pci {
        return None;
    }
    let after = rest[close + 1..].strip_prefix(':')?.trim_start();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let code = digits.parse().ok()?;
    let text = after[digits.len()..]
        .trim_start_matches([',', ' '])
        .trim()
        .to_string();
    Some(Event {
        kind,
        code,
        pci: pci.to_string(),
        text,
    })
}

/// The class, what the hardware needs, and the meaning in a few words.
pub fn judge(e: &Event) -> (Class, Needs, String) {
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
            Some(&(_, class, needs, meaning)) => (class, needs, meaning.to_string()),
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
        let (c, n, _) = judge(&e);
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
                (Class::Warn, Needs::GpuReset),
            ),
            (
                "NVRM: Xid (PCI:0000:10:1c): 999, something new",
                (Class::Warn, Needs::Nothing),
            ),
        ] {
            assert_eq!(judged(line), want, "{line}");
        }
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
        assert_eq!(judge(&e).0, Class::Fail);
        assert_eq!(
            judged("nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 36 egress non-posted PRIV error (First)"),
            (Class::Warn, Needs::Nothing)
        );
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
        ] {
            assert_eq!(parse(l), None, "{l}");
        }
    }
}
