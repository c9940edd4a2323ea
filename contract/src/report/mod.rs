//! The worker's JSON report as its callers read it: plain data, only the fields the plugin and
//! the prolog act on. The worker writes the full report (`bench_core::report::json::Report`,
//! the one definition of the schema); this is its reading side, so a caller needs none of the
//! worker's types. Unknown fields are ignored and missing ones take their defaults, so the two
//! stay compatible as the worker adds fields (bench-core tests that its report reads back here).

pub mod cause;
pub mod culprit;
pub mod process;
pub mod read;
pub mod reason;

use crate::exit::ExitCode;
use crate::verdict::Verdict;
use process::GpuProcess;
use reason::Reason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The report format written and read; bump on any incompatible change (adding fields is
/// compatible). The reader refuses a newer one by name.
pub const SCHEMA_VERSION: u32 = 1;

/// The largest report a caller reads: a real one of 8 GPUs with the pair matrix is some
/// 100 KiB.
pub const MAX_REPORT_BYTES: u64 = 8 << 20;

/// A worker's report as the callers read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    pub schema_version: u32,
    pub verdict: Verdict,
    pub exit_code: i32,
    /// One line for a terminal or a drain reason.
    pub summary: String,
    /// Why the verdict is what it is (FAIL and ERROR), first the one that matters most.
    pub reasons: Vec<Reason>,
    /// Noted, never FAIL (`host_interference`).
    pub warnings: Vec<Reason>,
    pub host: String,
    /// The measured GPUs of this process.
    pub gpus: Vec<Gpu>,
    /// One entry per result row.
    pub results: Vec<Measured>,
    /// Per collective: mean busbw over all rows and placements (GB/s).
    pub avg_busbw: BTreeMap<String, f64>,
    pub error: Option<String>,
}

/// What a field missing from a report reads as.
impl Default for Report {
    fn default() -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            verdict: Verdict::Error,
            exit_code: ExitCode::Runtime.code(),
            summary: String::new(),
            reasons: Vec::new(),
            warnings: Vec::new(),
            host: String::new(),
            gpus: Vec::new(),
            results: Vec::new(),
            avg_busbw: BTreeMap::new(),
            error: None,
        }
    }
}

impl Report {
    /// The report from a JSON value whose head [`read::report_value`] checked; a field of the
    /// wrong type is named by its path.
    pub fn deserialize_value(value: serde_json::Value) -> Result<Report, read::ReportError> {
        serde_path_to_error::deserialize(value)
            .map_err(|e| read::ReportError::NotAReport(format!("{}: {}", e.path(), e.inner())))
    }

    /// Per collective, the smallest margin of its results over the floor that judged them
    /// (busbw / floor; 1.0 is at the floor). Collectives no floor judged are absent.
    pub fn margins(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for r in &self.results {
            if let Some(e) = r.expected.as_ref().filter(|e| e.margin.is_finite()) {
                let m = out.entry(r.collective.clone()).or_insert(e.margin);
                *m = f64::min(*m, e.margin);
            }
        }
        out
    }

    /// The reason that says what this report's FAIL is caused by
    /// ([`cause::deciding`]); None without reasons.
    pub fn deciding_reason(&self) -> Option<&Reason> {
        cause::deciding(&self.reasons)
    }

    /// The UUIDs of the GPUs the worker measured, sorted, when every GPU entry has one.
    pub fn uuids(&self) -> Option<Vec<String>> {
        let mut u: Vec<String> = self
            .gpus
            .iter()
            .map(|g| Some(g.uuid.clone()).filter(|u| !u.is_empty()))
            .collect::<Option<_>>()?;
        u.sort();
        (!u.is_empty()).then_some(u)
    }
}

/// One measured GPU (`gpus[]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gpu {
    pub rank: u32,
    pub host: String,
    /// `GPU-xxxxxxxx-...`, the form nvidia-smi prints.
    pub uuid: String,
    /// `0000:18:00.0`.
    pub pci_bus_id: String,
    pub name: String,
    /// What NVML said about it; None without NVML.
    pub health: Option<Health>,
}

/// The part of NVML's facts about a GPU that the callers act on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Health {
    /// Other processes holding a context on it (the worker's own pid left out).
    pub processes: Vec<GpuProcess>,
}

/// One result row (`results[]`): what was measured and what it was held against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Measured {
    pub collective: String,
    /// Bytes.
    pub size: u64,
    pub expected: Option<Expected>,
}

/// What a result was held against: the floor, the margin (busbw / floor) and its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub floor_gbs: f64,
    pub margin: f64,
    pub source: String,
}
