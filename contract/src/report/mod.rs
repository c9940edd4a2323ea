//! The worker's JSON report as the contract defines it. Its head ([`Head`]: the schema, who wrote
//! it, the verdict, the exit code, the summary, the reasons with their typed culprits) is defined
//! once, here: the worker's full report (`bench_core::report::json::Report`) embeds it (flattened,
//! so the JSON begins with these keys, as it always did), and the callers read it back as
//! [`Report`]: the head and the few fields of the body the plugin and the prolog act on (the
//! worker's own types of those stay the worker's; bench-core tests that its report reads back
//! here). Unknown fields are ignored, so a newer worker of the same schema may add fields; a field
//! is required unless an older worker's report may lack it (each default says since when).

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

/// The head of every report: written first by the worker, read first by every caller. Every
/// worker since the first wrote each of these fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub schema_version: u32,
    /// The program that wrote the report (`nccl-check`) and its version.
    pub tool: String,
    pub tool_version: String,
    pub verdict: Verdict,
    /// The worker's exit code ([`ExitCode`]), which carries the verdict.
    pub exit_code: i32,
    /// One line for a terminal or a drain reason.
    pub summary: String,
    /// Why the verdict is what it is (FAIL and ERROR), first the one that matters most.
    pub reasons: Vec<Reason>,
}

/// An ERROR head of no tool: a start for a report built by hand (tests, fake workers).
impl Default for Head {
    fn default() -> Head {
        Head::new("", "")
    }
}

impl Head {
    /// The head of a report `tool` `version` is starting: ERROR until an outcome is set.
    pub fn new(tool: &str, version: &str) -> Head {
        Head {
            schema_version: SCHEMA_VERSION,
            tool: tool.into(),
            tool_version: version.into(),
            verdict: Verdict::Error,
            exit_code: ExitCode::Runtime.code(),
            summary: String::new(),
            reasons: Vec::new(),
        }
    }

    /// The outcome: the exit code, the verdict it carries, the summary.
    pub fn set_outcome(&mut self, code: ExitCode, summary: String) {
        self.exit_code = code.code();
        self.verdict = code.verdict();
        self.summary = summary;
    }

    /// The reason that says what this report's FAIL is caused by
    /// ([`cause::deciding`]); None without reasons.
    pub fn deciding_reason(&self) -> Option<&Reason> {
        cause::deciding(&self.reasons)
    }
}

/// A worker's report as the callers read it: the head and the body fields they act on, each
/// read from the report on its own ([`Report::deserialize_value`]; serde's `flatten` would add
/// some 70 KB of buffering code to the plugin).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub head: Head,
    pub body: Body,
}

/// The fields of a report's body the callers act on (the worker's own types of them are
/// bench-core's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Body {
    /// Noted, never FAIL (`host_interference`). Written since 2026-11-23: an older worker's
    /// report has none.
    #[serde(default)]
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

impl Report {
    /// Per collective, the smallest margin of its results over the floor that judged them
    /// (busbw / floor; 1.0 is at the floor). Collectives no floor judged are absent.
    pub fn margins(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for r in &self.body.results {
            if let Some(e) = r.expected.as_ref().filter(|e| e.margin.is_finite()) {
                let m = out.entry(r.collective.clone()).or_insert(e.margin);
                *m = f64::min(*m, e.margin);
            }
        }
        out
    }

    /// The UUIDs of the GPUs the worker measured, sorted, when every GPU entry has one.
    pub fn uuids(&self) -> Option<Vec<String>> {
        let mut u: Vec<String> = self
            .body
            .gpus
            .iter()
            .map(|g| Some(g.uuid.clone()).filter(|u| !u.is_empty()))
            .collect::<Option<_>>()?;
        u.sort();
        (!u.is_empty()).then_some(u)
    }
}

/// One measured GPU (`gpus[]`). Its facts came as a free map at first and grew since (the bus id
/// and NVML's `health` with 2026-11-23/24): a field an older worker left out reads empty.
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

/// The part of NVML's facts about a GPU that the callers act on. `processes` is written since
/// 2026-11-23: an older worker's health has none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Health {
    /// Other processes holding a context on it (the worker's own pid left out).
    pub processes: Vec<GpuProcess>,
}

/// One result row (`results[]`): what was measured and what it was held against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub collective: String,
    /// Bytes.
    pub size: u64,
    /// Written only where a floor judged the row (since 2026-11-23).
    #[serde(default)]
    pub expected: Option<Expected>,
}

/// What a result was held against: the floor, the margin (busbw / floor) and its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub floor_gbs: f64,
    pub margin: f64,
    pub source: String,
}

impl Expected {
    /// A result of `busbw` held against `floor_gbs`: its margin is busbw / floor (infinite
    /// where there is no floor).
    pub fn new(busbw: f64, floor_gbs: f64, source: String) -> Expected {
        Expected {
            floor_gbs,
            margin: if floor_gbs > 0.0 {
                busbw / floor_gbs
            } else {
                f64::INFINITY
            },
            source,
        }
    }
}
