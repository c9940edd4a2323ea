//! The report assembled from what the stages hand back: the run's record ([`Measured`], from
//! `orchestrate::run`), then the judge's verdict ([`Judgement`], from `judge::overall::judge`),
//! each put in once. With `Report::new` and `Report::set_error`, the only writers of a report,
//! so no stage fills it behind another's back.

use super::json::{GpuEntry, NcclInfo, Report, TransportInfo};
use crate::measure::rows::{Expected, GpuSide, PairRow, Phases, Row};
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::report::reason::Reason;
use std::collections::BTreeMap;

/// What one run of this process measured and read, as far as it got: on an error, what came
/// before it (the report then shows the phases, the library and the facts that were known).
#[derive(Debug, Default)]
pub struct Measured {
    pub phases: Phases,
    pub nccl: Option<NcclInfo>,
    /// The node's inventory, with what the off-CPU and host-load watches saw and, once NCCL's
    /// log was read, the NICs it used.
    pub facts: Option<crate::facts::node::NodeFacts>,
    /// The first GPU's identity as the report shows it, and how the GPUs reach each other.
    pub sku: Option<String>,
    pub interconnect: Option<crate::facts::interconnect::Interconnect>,
    /// From the rendezvous: every rank, and which process holds which.
    pub nranks: u32,
    pub processes: Vec<crate::meet::rendezvous::Member>,
    /// The GPU threads' outcomes.
    pub gpus: Vec<GpuEntry>,
    pub results: Vec<Row>,
    pub pairs: Vec<PairRow>,
    pub localization: Option<crate::model::localization::LocalizeSummary>,
    pub node_findings: Vec<crate::model::localization::NodeFindings>,
    pub shared_gpus: Vec<Vec<u32>>,
    pub gpu_side: Vec<GpuSide>,
    pub sizing: Vec<crate::model::time_budget::Sizing>,
    pub localization_noise: Option<f64>,
    /// NVML's facts and how long the check waited for them (a finished run only).
    pub nvml: Option<(crate::facts::gpu_health::HealthFacts, f64)>,
    /// What NCCL's log says of the paths (a finished run only).
    pub transports: Option<TransportInfo>,
}

/// The verdict of a measured run (`judge::overall::judge`): PASS or FAIL, why, and what each
/// result was held against.
#[derive(Debug, Clone)]
pub struct Judgement {
    pub code: ExitCode,
    pub summary: String,
    pub reasons: Vec<Reason>,
    pub warnings: Vec<Reason>,
    pub avg_busbw: BTreeMap<String, f64>,
    /// Per row of `results` and per pair of `pairs`, in their order.
    pub rows: Vec<Option<Expected>>,
    pub pairs: Vec<Option<Expected>>,
}

impl Report {
    /// Puts a run's record in the report (once, before it is judged).
    pub fn record_run(&mut self, m: Measured) {
        self.phases = m.phases;
        self.nccl = m.nccl;
        self.facts = m.facts;
        self.sku = m.sku;
        self.interconnect = m.interconnect;
        self.nranks = m.nranks;
        self.processes = m.processes;
        self.gpus = m.gpus;
        self.results = m.results;
        self.pairs = m.pairs;
        self.localization = m.localization;
        self.node_findings = m.node_findings;
        self.shared_gpus = m.shared_gpus;
        self.gpu_side = m.gpu_side;
        self.sizing = m.sizing;
        self.localization_noise = m.localization_noise;
        self.transports = m.transports;
        if let Some((nvml, waited_ms)) = m.nvml {
            self.attach_nvml(&nvml, waited_ms);
        }
    }

    /// Puts the verdict in the report; returns its exit code.
    pub fn record_verdict(&mut self, j: Judgement) -> ExitCode {
        for (r, e) in self.results.iter_mut().zip(j.rows) {
            r.expected = e;
        }
        for (p, e) in self.pairs.iter_mut().zip(j.pairs) {
            p.expected = e;
        }
        self.avg_busbw = j.avg_busbw;
        self.head.reasons = j.reasons;
        self.warnings = j.warnings;
        self.set_outcome(j.code, j.summary);
        j.code
    }
}
