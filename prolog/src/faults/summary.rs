//! What the fault pass finds and says: its settings, each finding, each source read, the
//! summary `gate.json` shows (with the drain reason and the log line made from it), and
//! `faults.json`'s memory of the last check.

use super::limits::{AerLimits, IbLimits};
use super::xid::{Class, Needs};
use super::{aer, driver, ib};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Most findings kept (the first ones decide; the count of the rest is kept).
const MAX_FINDINGS: usize = 64;

/// What the pass needs from the config.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `/` in production; a fixture tree in tests (`dev/kmsg`, `proc/...`, `sys/...` under it).
    pub root: PathBuf,
    /// The driver's GPU list (`/proc/driver/nvidia/gpus`, config `gpu_info_dir`): with the PCI
    /// functions of NVIDIA's vendor id under `root`, the devices an Xid or SXid may name.
    pub gpu_info_dir: PathBuf,
    pub aer: AerLimits,
    pub ib: IbLimits,
    /// Asked what a kernel record implies before it drains ([`nvml_driver::Nvml`]; a fake in tests).
    pub driver: Arc<dyn driver::Driver>,
}

/// One fault found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub class: Class,
    /// "xid", "sxid", "aer" or "ib".
    pub source: &'static str,
    /// The PCI address or the port (`mlx5_0/1`).
    pub subject: String,
    /// What, with the numbers: `Xid 79 GPU has fallen off the bus`.
    pub what: String,
    pub needs: Needs,
    /// For a kernel record: the driver's state that confirmed it, or why it is not confirmed
    /// and what to check; for a state read after lost records: why it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// Kernel log records this pass could not judge (`gate.json` → `faults.kmsg_lost`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lost {
    /// Overwritten since the last check, before this read got them (the ring turned over).
    Records(u64),
    /// The log could not be read at all.
    Unreadable(String),
}

/// What one source cost and whether it could be read.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    pub name: &'static str,
    pub path: String,
    pub readable: bool,
    /// Records, devices or ports read.
    pub items: usize,
    pub ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The pass's result (`gate.json` → `faults`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub findings: Vec<Finding>,
    /// Findings beyond the first [`MAX_FINDINGS`].
    pub more: usize,
    pub sources: Vec<Source>,
    /// The whole pass: reading, judging and keeping the position.
    pub total_ms: f64,
    /// Of which keeping the position (`faults.json`, written only when it changed, with fsync).
    pub save_ms: f64,
    /// Kernel records lost since the last check, or why the log could not be read; None when
    /// every record since the last check was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kmsg_lost: Option<Lost>,
}

/// `faults.json`: what the last check saw.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Memory {
    pub boot_id: String,
    pub kmsg_seq: Option<u64>,
    pub aer: BTreeMap<String, aer::Counts>,
    pub ib: BTreeMap<String, ib::Port>,
}

pub(super) fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

impl Summary {
    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.class == Class::Fail)
    }

    pub(super) fn add(&mut self, f: Finding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(f);
        } else {
            self.more += 1;
        }
    }

    /// Adds a FAIL of a counter (`source` "aer" or "ib"): nothing to reset, no evidence beside it.
    pub(super) fn add_fail(&mut self, source: &'static str, subject: &str, what: String) {
        self.add(Finding {
            class: Class::Fail,
            source,
            subject: subject.to_string(),
            what,
            needs: Needs::Nothing,
            evidence: None,
        });
    }

    /// The drain reason of a fault FAIL: `nccl-check:Xid 79|Xid 79 GPU has fallen off the bus
    /// on 0000:3b:00: reboot needed (+1 more) (job 42)`, shaped by [`crate::reason::compose`].
    pub fn drain_reason(&self, job: Option<&str>) -> Option<String> {
        let fails: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.class == Class::Fail)
            .collect();
        let first = fails.first()?;
        let head = first.what.split(' ').take(2).collect::<Vec<_>>().join(" ");
        let mut sentence = format!("{} on {}", first.what, first.subject);
        if let Some(e) = &first.evidence {
            sentence.push_str(&format!(" ({e})"));
        }
        if first.needs != Needs::Nothing {
            sentence.push_str(&format!(": {}", first.needs.words()));
        }
        let more = fails.len() - 1 + self.more;
        if more > 0 {
            sentence.push_str(&format!(" (+{more} more)"));
        }
        Some(crate::reason::compose(&head, &sentence, job))
    }

    /// One line for logs: `faults: 2 sources read in 1.3 ms, FAIL: ...` .
    pub fn line(&self) -> String {
        let (read, unread): (Vec<&Source>, Vec<&Source>) =
            self.sources.iter().partition(|s| s.readable);
        let names = |s: &[&Source]| s.iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
        let found: Vec<String> = self
            .findings
            .iter()
            .take(4)
            .map(|f| {
                let class: &str = f.class.into();
                let evidence = f
                    .evidence
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                format!("{class} {} on {}{evidence}", f.what, f.subject)
            })
            .collect();
        format!(
            "faults: read {} in {:.1} ms{}; {}",
            if read.is_empty() {
                "nothing".to_string()
            } else {
                names(&read)
            },
            self.total_ms,
            if unread.is_empty() {
                String::new()
            } else {
                format!(" (not readable: {})", names(&unread))
            },
            if found.is_empty() {
                "nothing found".to_string()
            } else {
                found.join("; ")
            }
        )
    }
}
