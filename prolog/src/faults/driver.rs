//! What the NVIDIA driver itself says of a GPU, asked before a kernel record drains the node:
//! a record in the driver's format is a lead, never proof. The kernel writes facility-0 records
//! that start with text a user chose (the OOM killer's `pr_cont` summary split by another CPU's
//! printk starts a record with a cpuset cgroup's name; nftables `log prefix` with
//! `nf_log_all_netns = 1`), so a record drains only when the driver's state confirms it:
//! NVML's GPU recovery action (R550+, field `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`) where the
//! driver has one, else the state the code implies ([`implies`]; the table is in
//! `prolog/README.md`). Unconfirmed, a record is a warning naming what to check, and the
//! measurement decides. When kernel records were lost, every GPU's state is read instead
//! ([`persistent_problems`]). Pure: the asking is a [`Driver`] (NVML in
//! [`super::nvml_driver`], a fake in tests).

use super::xid::{Event, Kind, Needs};
use std::collections::BTreeMap;
use std::time::Duration;

/// Asks the driver about GPUs by PCI address.
pub trait Driver: Send + Sync + std::fmt::Debug {
    /// What the driver says of each GPU at `addresses` (`dddd:bb:dd`), within `deadline`.
    /// `Err`: the driver cannot be asked at all (no NVML library, no answer in time).
    fn ask(
        &self,
        addresses: &[String],
        deadline: Duration,
    ) -> Result<BTreeMap<String, Answer>, String>;
}

/// The driver's answer for one address.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// NVML knows the GPU and says it is lost (`NVML_ERROR_GPU_IS_LOST`): it does not answer.
    Lost,
    /// NVML has no GPU there (an NVSwitch, a GPU bound to another driver) or could not say.
    Unknown(String),
    State(GpuState),
}

/// The driver's persistent state of one GPU; None where the driver does not give the fact.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuState {
    /// `nvmlDeviceGpuRecoveryAction_t`: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
    /// 4 drain and reset.
    pub recovery_action: Option<u32>,
    /// Uncorrectable (double-bit) ECC errors since the driver loaded.
    pub dbe_volatile: Option<u64>,
    /// Pages waiting to be retired (pre-Ampere).
    pub pages_pending: Option<bool>,
    /// A row remap waits for a GPU reset / a row remap failed (Ampere and newer).
    pub remap_pending: Option<bool>,
    pub remap_failed: Option<bool>,
    /// NVLinks NVML lists that are not active.
    pub links_inactive: Option<u32>,
}

/// What state a record's code implies, and so what is asked to confirm it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implies {
    /// The GPU is gone: it does not answer NVML (Xid 79).
    Gone,
    /// Memory: ECC double-bit errors, pages to retire, rows to remap or a failed remap.
    Memory,
    /// An NVLink that is not active.
    NvLink,
    /// Only the driver's recovery action (or the GPU not answering) can confirm it.
    Recovery,
}

/// The state a code implies (the table of `prolog/README.md`).
pub fn implies(e: &Event) -> Implies {
    match (e.kind, e.code) {
        (Kind::SXid, _) => Implies::NvLink,
        (Kind::Xid, 79) => Implies::Gone,
        (Kind::Xid, 48 | 63 | 64 | 92 | 94 | 95 | 140 | 156) => Implies::Memory,
        (Kind::Xid, 74 | 136 | 144..=150 | 155) => Implies::NvLink,
        _ => Implies::Recovery,
    }
}

/// The command that shows an admin the state a code implies.
fn check(i: Implies) -> &'static str {
    match i {
        Implies::Gone => "nvidia-smi (does the GPU answer?)",
        Implies::Memory => "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT",
        Implies::NvLink => "nvidia-smi nvlink -s",
        Implies::Recovery => "nvidia-smi -q (GPU Recovery Action)",
    }
}

/// A record judged against the driver's state.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirmation {
    /// The state that confirms it, and what the GPU needs by that state.
    Confirmed(String, Needs),
    /// Why it is not confirmed, with what to check.
    Unconfirmed(String),
}

/// The recovery action's words and what the GPU needs; None for "none".
fn recovery(action: u32) -> Option<(String, Needs)> {
    let (words, needs) = match action {
        0 => return None,
        1 => ("GPU reset", Needs::GpuReset),
        2 => ("node reboot", Needs::Reboot),
        3 => ("drain P2P", Needs::Nothing),
        4 => ("drain and reset", Needs::GpuReset),
        n => return Some((format!("NVML recovery action {n}"), Needs::Nothing)),
    };
    Some((format!("NVML recovery action: {words}"), needs))
}

/// The memory facts that say the GPU needs a reset, in words.
fn memory_problems(s: &GpuState) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = s.dbe_volatile.filter(|&n| n > 0) {
        out.push(format!(
            "NVML: {n} uncorrectable ECC errors since the driver loaded"
        ));
    }
    for (fact, words) in [
        (s.remap_failed, "NVML: a row remapping failed"),
        (
            s.remap_pending,
            "NVML: a row remapping waits for a GPU reset",
        ),
        (s.pages_pending, "NVML: pages wait to be retired"),
    ] {
        if fact == Some(true) {
            out.push(words.to_string());
        }
    }
    out
}

/// Does the driver's answer confirm the event? `asked`: the driver's answers by address, or why
/// it could not be asked. An SXid names an NVSwitch, which NVML does not answer for: it is
/// confirmed by any of this node's GPUs with an inactive NVLink or a recovery action.
pub fn confirm(e: &Event, asked: &Result<BTreeMap<String, Answer>, String>) -> Confirmation {
    let i = implies(e);
    let unconfirmed = |why: String| {
        Confirmation::Unconfirmed(format!(
            "not confirmed by the driver's state ({why}); check {}",
            check(i)
        ))
    };
    let answers = match asked {
        Ok(a) => a,
        Err(why) => return unconfirmed(why.clone()),
    };
    if e.kind == Kind::SXid {
        return answers
            .iter()
            .find_map(|(pci, a)| match a {
                Answer::State(s) => gpu_confirms(i, s).map(|(w, n)| (format!("{w} on {pci}"), n)),
                _ => None,
            })
            .map_or_else(
                || {
                    unconfirmed(
                        "no GPU of this node has an inactive NVLink or a recovery action".into(),
                    )
                },
                |(w, n)| Confirmation::Confirmed(w, n),
            );
    }
    let device = super::xid::pci_device(&e.pci).unwrap_or_default();
    match answers.get(&device) {
        Some(Answer::Lost) => Confirmation::Confirmed(
            "NVML: the GPU is lost (it does not answer)".into(),
            Needs::Reboot,
        ),
        Some(Answer::Unknown(why)) => unconfirmed(format!("NVML: {why}")),
        None => unconfirmed("NVML was not asked about this address".into()),
        Some(Answer::State(s)) => match gpu_confirms(i, s) {
            Some((w, n)) => Confirmation::Confirmed(w, n),
            None if i == Implies::Gone => unconfirmed("NVML: the GPU answers".into()),
            None => unconfirmed(format!("NVML: {}", healthy(s))),
        },
    }
}

/// The state of an answering GPU that confirms what `i` implies: its recovery action first.
fn gpu_confirms(i: Implies, s: &GpuState) -> Option<(String, Needs)> {
    if let Some(r) = s.recovery_action.and_then(recovery) {
        return Some(r);
    }
    match i {
        Implies::Memory => {
            let p = memory_problems(s);
            (!p.is_empty()).then(|| (p.join(", "), Needs::GpuReset))
        }
        Implies::NvLink => s
            .links_inactive
            .filter(|&n| n > 0)
            .map(|n| (format!("NVML: {n} NVLinks not active"), Needs::GpuReset)),
        Implies::Gone | Implies::Recovery => None,
    }
}

/// What a healthy-looking GPU showed, in words (so "healthy" says what was looked at).
fn healthy(s: &GpuState) -> String {
    let mut seen = Vec::new();
    if s.recovery_action.is_some() {
        seen.push("recovery action none");
    }
    if s.dbe_volatile.is_some() {
        seen.push("no uncorrectable ECC error");
    }
    if s.remap_pending.is_some() || s.pages_pending.is_some() {
        seen.push("no remap or retirement pending");
    }
    if s.links_inactive.is_some() {
        seen.push("every NVLink active");
    }
    if seen.is_empty() {
        "the GPU answers but gives none of the facts asked".into()
    } else {
        seen.join(", ")
    }
}

/// Every problem of one GPU's persistent state, in words with what it needs: what a run reads
/// for every GPU when kernel records were lost. NVLinks are left out here (a PCIe card's
/// missing bridge leaves links inactive for good; the measurement judges the links).
pub fn persistent_problems(a: &Answer) -> Vec<(String, Needs)> {
    match a {
        Answer::Lost => vec![(
            "NVML: the GPU is lost (it does not answer)".into(),
            Needs::Reboot,
        )],
        Answer::Unknown(_) => Vec::new(),
        Answer::State(s) => {
            let mut out: Vec<(String, Needs)> =
                s.recovery_action.and_then(recovery).into_iter().collect();
            out.extend(memory_problems(s).into_iter().map(|p| (p, Needs::GpuReset)));
            out
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A driver that answers what the test says, or cannot be asked; it keeps what it was
    /// asked about.
    #[derive(Debug)]
    pub struct Fake {
        /// Err: the driver cannot be asked; Ok: the answers by address.
        pub answers: Result<BTreeMap<String, Answer>, String>,
        /// The answer for an address not in `answers`.
        pub otherwise: Answer,
        pub asked: std::sync::Mutex<Vec<String>>,
    }

    impl Fake {
        fn new(answers: Result<BTreeMap<String, Answer>, String>, otherwise: Answer) -> Self {
            Fake {
                answers,
                otherwise,
                asked: Default::default(),
            }
        }

        /// No NVML on the node.
        pub fn none() -> Self {
            Self::new(
                Err("NVML not available: libnvidia-ml.so not found".into()),
                Answer::Unknown(String::new()),
            )
        }

        /// Every address gets `a`.
        pub fn every(a: Answer) -> Self {
            Self::new(Ok(BTreeMap::new()), a)
        }

        /// `pci` gets `a`; NVML knows no other address.
        pub fn with(pci: &str, a: Answer) -> Self {
            Self::new(
                Ok([(pci.to_string(), a)].into()),
                Answer::Unknown("Not found".into()),
            )
        }

        pub fn asked(&self) -> Vec<String> {
            self.asked.lock().map(|a| a.clone()).unwrap_or_default()
        }
    }

    impl Driver for Fake {
        fn ask(
            &self,
            addresses: &[String],
            _: Duration,
        ) -> Result<BTreeMap<String, Answer>, String> {
            if let Ok(mut a) = self.asked.lock() {
                a.extend(addresses.iter().cloned());
            }
            let answers = self.answers.as_ref().map_err(Clone::clone)?;
            Ok(addresses
                .iter()
                .map(|a| {
                    let answer = answers.get(a).unwrap_or(&self.otherwise).clone();
                    (a.clone(), answer)
                })
                .collect())
        }
    }

    fn event(code: u32) -> Event {
        super::super::xid::parse(&format!("NVRM: Xid (PCI:0000:18:00): {code}, pid=1, x"))
            .expect("parse")
    }

    fn asked(a: Answer) -> Result<BTreeMap<String, Answer>, String> {
        Ok([("0000:18:00".to_string(), a)].into())
    }

    #[test]
    fn a_lost_gpu_confirms_xid_79_and_an_answering_one_does_not() {
        assert!(matches!(
            confirm(&event(79), &asked(Answer::Lost)),
            Confirmation::Confirmed(_, Needs::Reboot)
        ));
        let c = confirm(&event(79), &asked(Answer::State(GpuState::default())));
        assert_eq!(
            c,
            Confirmation::Unconfirmed(
                "not confirmed by the driver's state (NVML: the GPU answers); check nvidia-smi (does the GPU answer?)".into()
            )
        );
    }

    #[test]
    fn the_recovery_action_confirms_any_code_and_none_leaves_the_implied_state_to_decide() {
        let reset = GpuState {
            recovery_action: Some(1),
            ..GpuState::default()
        };
        assert_eq!(
            confirm(&event(119), &asked(Answer::State(reset))),
            Confirmation::Confirmed("NVML recovery action: GPU reset".into(), Needs::GpuReset)
        );
        let dbe = GpuState {
            recovery_action: Some(0),
            dbe_volatile: Some(2),
            ..GpuState::default()
        };
        assert!(matches!(
            confirm(&event(48), &asked(Answer::State(dbe.clone()))),
            Confirmation::Confirmed(w, Needs::GpuReset) if w.contains("2 uncorrectable ECC")
        ));
        // A DBE count does not confirm an NVLink error.
        assert!(matches!(
            confirm(&event(74), &asked(Answer::State(dbe))),
            Confirmation::Unconfirmed(w) if w.contains("nvidia-smi nvlink -s")
        ));
    }

    #[test]
    fn no_driver_is_never_a_confirmation() {
        for code in [79, 48, 74, 119, 162] {
            assert!(matches!(
                confirm(&event(code), &Err("NVML not available".into())),
                Confirmation::Unconfirmed(w) if w.contains("NVML not available")
            ));
        }
    }

    #[test]
    fn lost_records_find_every_bad_state_but_an_inactive_link() {
        let s = GpuState {
            recovery_action: Some(2),
            remap_failed: Some(true),
            links_inactive: Some(4),
            ..GpuState::default()
        };
        let p = persistent_problems(&Answer::State(s));
        assert_eq!(
            p,
            [
                (
                    "NVML recovery action: node reboot".to_string(),
                    Needs::Reboot
                ),
                ("NVML: a row remapping failed".to_string(), Needs::GpuReset)
            ]
        );
        assert!(persistent_problems(&Answer::State(GpuState::default())).is_empty());
        assert!(persistent_problems(&Answer::Unknown("x".into())).is_empty());
    }
}
