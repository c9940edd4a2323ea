//! The report assembled from what the stages hand back: made from the options and the
//! environment ([`Report::for_run`]), then the run's record ([`Measured`], from
//! `orchestrate::run`), the judge's verdict ([`Judgement`], from `judge::overall::judge`) and
//! the run's whole time, each put in once. With `Report::set_error`, the only writers of a
//! report, so no stage fills it behind another's back.

use super::json::{nccl_env_of, GpuEntry, NcclInfo, Report, Settings, TransportInfo};
use crate::config::network::NetworkProfile;
use crate::measure::rows::{Expected, GpuSide, PairRow, Phases, Row};
use crate::settings::environment::Environment;
use crate::settings::options::Options;
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
    /// The report of a run before anything was measured: this process (`host`, started at
    /// `started_unix`), what it was asked (`opts`: its rank, the rendezvous, the settings), the
    /// `NCCL_*` variables of the environment NCCL runs with (`nccl_env`; never the secret) and
    /// the site's network profile applied to it.
    pub fn for_run(
        opts: &Options,
        nccl_env: &Environment,
        profile: Option<&NetworkProfile>,
        host: String,
        started_unix: f64,
    ) -> Report {
        let profile = profile.map(
            |p| serde_json::json!({ "name": p.name, "env": p.env, "expect_net": p.expect_net }),
        );
        Report {
            nccl_env: nccl_env_of(nccl_env.vars()),
            network_profile: profile,
            process_rank: opts.rank,
            world: opts.world,
            rendezvous: opts.rendezvous.clone(),
            settings: Some(Settings::of(opts)),
            ..Report::new(host, started_unix)
        }
    }

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

    /// Puts the run's whole time in, from the process's start to the report's writing.
    pub fn record_total(&mut self, total: std::time::Duration) {
        self.phases.total_ms = total.as_secs_f64() * 1e3;
    }
}

impl Settings {
    /// The settings a run measures with (`opts`), for the report.
    pub fn of(o: &Options) -> Settings {
        Settings {
            collectives: o.collectives.iter().map(|c| c.name().into()).collect(),
            min_bytes: o.min_bytes,
            max_bytes: o.max_bytes,
            step_factor: o.step_factor,
            warmup_iters: o.warmup_iters,
            iters: o.iters,
            datatype: o.datatype.name().into(),
            op: o.op.name().into(),
            root: o.root,
            check: o.check,
            timeout_s: o.timeout.as_secs_f64(),
            min_busbw: o.min_busbw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What main.rs and nccl-check-sim set by hand before, field by field.
    #[test]
    fn a_run_s_report_is_made_from_its_options_and_the_environment_nccl_sees() {
        let env = Environment::default();
        let opts = crate::settings::options::parse(["nccl-check", "--iters", "7"], &env);
        let opts = opts.expect("options");
        let nccl = Environment::of_pairs([("NCCL_DEBUG", "INFO"), ("NCCL_CHECK_SECRET", "s3")]);
        let r = Report::for_run(&opts, &nccl, None, "n1".into(), 12.5);
        assert_eq!((r.host.as_str(), r.started_unix), ("n1", 12.5));
        assert_eq!((r.process_rank, r.world), (opts.rank, opts.world));
        assert_eq!(r.rendezvous, opts.rendezvous);
        assert_eq!(r.settings.map(|s| s.iters), Some(7));
        let vars: Vec<_> = r.nccl_env.into_iter().collect();
        assert_eq!(vars, vec![("NCCL_DEBUG".to_string(), "INFO".to_string())]);
        assert!(r.network_profile.is_none());
    }
}
