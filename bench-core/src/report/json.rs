//! The JSON report (`--json FILE`): everything needed to defend a verdict later. Bump
//! `SCHEMA_VERSION` on any incompatible change; adding fields is compatible.

use crate::measure::gpu::GpuInfo;
use crate::measure::rows::{GpuSide, Name, PairRow, Phases, Row};
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::report::reason::{Reason, ReasonCode};
use nccl_check_contract::report::Head;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What NCCL's log says about the paths of this process's ranks (a fact: `facts::transport`).
pub use crate::facts::transport::TransportInfo;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NcclInfo {
    pub version: String,
    pub version_code: i32,
    pub library: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuEntry {
    pub rank: u32,
    pub host: String,
    #[serde(flatten)]
    pub info: GpuInfo,
    /// What NVML said about this GPU (matched by PCI bus id); None without NVML.
    pub health: Option<crate::facts::gpu_health::GpuHealth>,
    /// Its device-local copy bandwidth (`facts::local_probe`).
    pub local_probe: Option<crate::model::local_copy::LocalProbe>,
    /// Why the local probe could not measure, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_probe_error: Option<String>,
}

impl GpuEntry {
    /// A GPU with no facts beyond CUDA's.
    pub fn new(rank: u32, host: String, info: GpuInfo) -> GpuEntry {
        GpuEntry {
            rank,
            host,
            info,
            ..GpuEntry::default()
        }
    }
}

/// The settings a run measured with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub collectives: Vec<Name>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub warmup_iters: u32,
    pub iters: u32,
    pub datatype: Name,
    pub op: Name,
    pub root: u32,
    pub check: bool,
    pub timeout_s: f64,
    pub min_busbw: Option<f64>,
}

/// Read back by callers as the contract's plain report
/// (`nccl_check_contract::report::read::read_report`); fields missing from a report take
/// [`Default`]'s values (one process for `world`), except the head's (the contract's, required).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// Schema, tool, verdict, exit code, summary, reasons: the contract's one definition,
    /// flattened so the report begins with these keys.
    #[serde(flatten)]
    pub head: Head,
    /// Seconds since the Unix epoch when the process started.
    pub started_unix: f64,
    pub host: String,
    pub pid: u32,
    pub process_rank: u32,
    #[serde(default = "one_process")]
    pub world: u32,
    pub nranks: u32,
    pub rendezvous: Option<String>,
    pub nccl: Option<NcclInfo>,
    /// Every NCCL_* variable of the environment the check ran with.
    pub nccl_env: BTreeMap<String, String>,
    pub settings: Option<Settings>,
    /// This process's GPUs, then (from the rendezvous) which host holds which ranks.
    pub gpus: Vec<GpuEntry>,
    pub processes: Vec<crate::meet::rendezvous::Member>,
    pub results: Vec<Row>,
    /// The pair matrix: GPU pairs of each node and node pairs (see `PairRow`).
    pub pairs: Vec<PairRow>,
    /// With `--shared-gpus`: groups of ranks that drove one physical GPU (emulated nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_gpus: Vec<Vec<u32>>,
    /// What this process's first GPU was taken for: its SKU by PCI device ID (`sku`), e.g.
    /// `H100 SXM (PCI 10de:2330)`, or why it is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// How this process's GPUs reach each other, read from NVML (`facts::interconnect`):
    /// which built-in floors apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<crate::facts::interconnect::Interconnect>,
    /// The node-level localization of a multi-node check (`localize`), when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub localization: Option<crate::model::localization::LocalizeSummary>,
    /// The other processes' own findings of their nodes (a GPU another process holds, a starved
    /// worker, a missing GPU, a busy host), shared when a multi-node check found a node or node
    /// pair slow (`localize::own`): the cause the network reading of that node gives way to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_findings: Vec<crate::model::localization::NodeFindings>,
    /// What each step sized by a time budget measured (`model::time_budget`): the size it judged,
    /// the rate it sized from, its samples, their spread, why, and whether a floor holds at
    /// that size (else its peers judged it). Empty for counted steps (`--plan full`, `-n`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizing: Vec<crate::model::time_budget::Sizing>,
    /// The run's own noise: the widest spread (half-range over median) of the localizer's
    /// retest exchanges over every rank. A localizer finding within it of its limit is a
    /// warning, not a FAIL (`judge::analysis::within_noise`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localization_noise: Option<f64>,
    /// The site network profile applied (name and the environment it set), if any.
    pub network_profile: Option<serde_json::Value>,
    /// Which transport each path used, from NCCL's own log (see `transport`).
    pub transports: Option<TransportInfo>,
    /// Per collective: mean busbw over all rows and placements (nccl-tests' "Avg bus bandwidth").
    pub avg_busbw: BTreeMap<String, f64>,
    /// What the node itself says: expected vs listed GPUs, NVML's availability, the NICs NCCL
    /// used (`facts`); each GPU's own facts are in `gpus[]`. Written for people and tools; the
    /// plugin and the prolog act on `reasons`, so a reader skips it.
    #[serde(skip_deserializing)]
    pub facts: Option<crate::facts::node::NodeFacts>,
    /// WARN: noted, never FAIL (`host_interference`).
    pub warnings: Vec<Reason>,
    /// Retested rows timed by the GPU's clock too (see `GpuSide`).
    #[serde(skip_serializing_if = "Vec::is_empty", skip_deserializing)]
    pub gpu_side: Vec<GpuSide>,
    pub phases: Phases,
    pub error: Option<String>,
}

/// A report's `world` when it names none, and a new report's before the run's is known.
fn one_process() -> u32 {
    1
}

impl Report {
    pub fn new(host: String, started_unix: f64) -> Report {
        Report {
            head: Head::new("nccl-check", env!("CARGO_PKG_VERSION")),
            started_unix,
            host,
            pid: std::process::id(),
            world: one_process(),
            // The rest empty: a run's report is made by `Report::for_run` (`assemble.rs`).
            ..Report::default()
        }
    }

    pub fn set_outcome(&mut self, code: ExitCode, summary: String) {
        self.head.set_outcome(code, summary);
    }

    /// Puts each GPU's NVML facts beside it, matched by PCI bus id; the node's facts say
    /// whether NVML answered (and how long the check waited: `waited_ms`).
    pub fn attach_nvml(&mut self, nvml: &crate::facts::gpu_health::HealthFacts, waited_ms: f64) {
        use crate::config::expected_gpus::bus_id;
        if let crate::facts::gpu_health::HealthFacts::Available { gpus, .. } = nvml {
            for g in &mut self.gpus {
                let mine = bus_id(&g.info.pci_bus_id);
                g.health = gpus
                    .iter()
                    .find(|h| mine.is_some() && bus_id(&h.bus_id) == mine)
                    .cloned();
            }
        }
        if let Some(f) = self.facts.as_mut() {
            f.set_nvml(nvml, waited_ms);
        }
    }

    /// An ERROR ending (`code`, a reason `reason`, `message` as the error and the summary):
    /// the one place the worker, its watchdog and the simulated worker record one.
    pub fn set_error(&mut self, code: ExitCode, reason: ReasonCode, message: &str) -> ExitCode {
        self.error = Some(message.to_string());
        self.head
            .reasons
            .push(Reason::plain(reason, message.to_string()));
        self.set_outcome(code, message.to_string());
        code
    }

    /// Writes the report to `path`, whole (written, then renamed: a reader never sees half of
    /// one), or to stdout for `-` (`--json -`: options.rs turns the table off, so the report is
    /// stdout's only content).
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)? + "\n";
        if path == std::path::Path::new("-") {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            return out.flush();
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    }

    /// The end of a run: the report written where `--json` says (a write that fails is said,
    /// never fatal), then the contract's verdict line (one line, others' text escaped), which
    /// callers that have no report file (the plugin's batch check, through srun) read back.
    pub fn publish(&self, json: Option<&std::path::Path>) {
        use std::io::Write;
        if let Some(path) = json {
            if let Err(e) = self.write(path) {
                let path = path.display();
                nccl_check_host::errln!("nccl-check: cannot write the report to {path}: {e}");
            }
        }
        let _ = std::io::stdout().flush();
        let line = nccl_check_contract::line::write(self.head.verdict, &self.head.summary);
        nccl_check_host::errln!("{line}");
        let _ = std::io::stderr().flush();
    }
}
/// The `NCCL_*` variables for the report: never the rendezvous secret (reports are kept and
/// shared), and never a panic on a non-UTF-8 variable (the standard library's `vars` panics;
/// those are left out).
pub fn nccl_env_of<'a>(
    vars: impl Iterator<Item = (&'a std::ffi::OsStr, &'a std::ffi::OsStr)>,
) -> BTreeMap<String, String> {
    vars.filter_map(|(k, v)| Some((k.to_str()?.to_string(), v.to_str()?.to_string())))
        .filter(|(k, _)| k.starts_with("NCCL_") && !k.contains("SECRET"))
        .collect()
}

#[cfg(test)]
mod nccl_env_tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    /// Regression: a non-UTF-8 variable panicked the worker; the secret must never reach a report.
    #[test]
    fn the_report_keeps_nccl_variables_but_not_the_secret_or_non_utf8_ones() {
        let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
            ("NCCL_DEBUG".into(), "INFO".into()),
            ("NCCL_CHECK_SECRET".into(), "0123456789abcdef".into()),
            (
                "NCCL_IB_HCA".into(),
                std::ffi::OsString::from_vec(vec![0xff]),
            ),
            ("TMPDIR".into(), std::ffi::OsString::from_vec(vec![0xfe])),
            ("PATH".into(), "/bin".into()),
        ];
        let env = nccl_env_of(vars.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())));
        assert_eq!(
            env.into_iter().collect::<Vec<_>>(),
            vec![("NCCL_DEBUG".to_string(), "INFO".to_string())]
        );
    }
}
