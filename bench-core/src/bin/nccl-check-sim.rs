//! `nccl-check-sim`: the worker of the GPU-less scale test (tests/scale/run.sh). It parses the
//! real worker's command line and environment, joins the other processes through the real
//! authenticated rendezvous, and follows the real localizer (run by the coordinator's process)
//! through the real control plane's gathers, as the GPU worker does; only the measurements come from `localize::sim` (no CUDA, no NCCL).
//!
//! Why this cannot fake a production PASS: it is a separate binary that exists only in a
//! `--features sim` build (bench-core/Cargo.toml `required-features`); release builds, packages
//! and the SPANK plugin's default worker path never contain it, and `nccl-check` itself has no
//! simulated path. Its reports say `"tool": "nccl-check"` only because the plugin reads them as
//! the worker's; its `localization.plan` is `"sim"`.
//!
//! Environment (test only): NCCL_CHECK_SIM_GPUS (GPUs per process, default 8),
//! NCCL_CHECK_SIM_FAULTS (`nodenet:NODE:F`, `nic:NODE:RAIL:F`, `link:NODE:NODE:F`, comma-separated,
//! NODE a node name), NCCL_CHECK_SIM_ABSENT (a node name whose process kills itself before it
//! joins, as a task that dies before its rendezvous), NCCL_CHECK_SIM_RENDEZVOUS_HOST (the address
//! that stands for the coordinator's node name, which the test cluster cannot resolve),
//! NCCL_CHECK_SIM_FLOOR=none (no multi-node floor: phase B unjudged, screening always runs),
//! NCCL_CHECK_SIM_HOLD_MS (every process "measures" this long after the rendezvous, as a long
//! collective would, watching its team as the GPU worker's wait does: a link set down meanwhile
//! is found by the plane's watch, tests/gpu/fabric.sh's link-down row without a GPU),
//! NCCL_CHECK_SIM_BUSY (`NODE:PID`: that node's process finds its GPU0 held by another process,
//! the own finding every process's verdict then names for that node, `localize::own`).

use bench_core::localize::conduct::{
    decide_here, follow, group_of, keeper, slots, Conductor, ConductorStep, FollowError, Place,
};
use bench_core::localize::layout::Layout;
use bench_core::localize::own::OwnFinding;
use bench_core::localize::sim::{Fabric, Fault};
use bench_core::localize::{LocalizeConfig, Localizer};
use bench_core::measure::rows::Phases;
use bench_core::measure::runner::RunError;
use bench_core::meet::rendezvous::plane::Liveness;
use bench_core::meet::rendezvous::{self, Member};
use bench_core::meet::team::Team;
use bench_core::meet::topology::Topology;
use bench_core::model::floors::PairFloors;
use bench_core::model::localization::{LocalizeSummary, Phase};
use bench_core::report::assemble::{Judgement, Measured};
use bench_core::report::json::Report;
use bench_core::settings::environment::Environment;
use bench_core::settings::options::{self, ParseExit};
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::line;
use nccl_check_contract::verdict::Verdict;
use std::time::{Instant, SystemTime};

fn main() {
    let t0 = Instant::now();
    // The one read of the environment; the options carry it (`Options::env`).
    let opts = match options::parse(std::env::args(), &Environment::of_process()) {
        Ok(o) => o,
        Err(ParseExit::Info(text)) => {
            nccl_check_host::out!("{text}");
            std::process::exit(0);
        }
        Err(ParseExit::Usage(msg) | ParseExit::Config(msg)) => {
            nccl_check_host::errln!("{}", line::write(Verdict::Error, &format!("usage: {msg}")));
            std::process::exit(ExitCode::Usage.code());
        }
    };
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let host = opts
        .node_name
        .clone()
        .unwrap_or_else(bench_core::measure::nccl_env::hostname);
    let mut report = Report::for_run(&opts, &opts.env, None, host.clone(), started);
    let (measured, ran) = run(&opts, &host, t0 + opts.timeout);
    report.record_run(measured);
    let code = match ran {
        Ok(()) => report.record_verdict(verdict(&report)),
        Err(e) => report.set_error(e.exit_code(), e.reason_code(), e.message()),
    };
    report.record_total(t0.elapsed());
    report.publish(opts.json.as_deref());
    std::process::exit(code.code());
}

/// The localizer's reasons are the verdict: FAIL on any, else PASS with what was simulated.
fn verdict(report: &Report) -> Judgement {
    let l = report.localization.as_ref();
    let reasons = l.map(|l| l.reasons.clone()).unwrap_or_default();
    let summary = match reasons.as_slice() {
        [only] => only.message.clone(),
        [first, rest @ ..] => format!("{} (and {} more)", first.message, rest.len()),
        [] => format!(
            "{} x simulated GPU on {} node(s), {} rounds ({} localization), no slow node, rail or node pair",
            report.nranks,
            l.map_or(0, |l| l.nodes),
            l.map_or(0, |l| l.rounds),
            l.map_or(0, |l| l.localization_rounds),
        ),
    };
    Judgement {
        code: match reasons.is_empty() {
            true => ExitCode::Pass,
            false => ExitCode::Fail,
        },
        summary,
        reasons,
        warnings: Vec::new(),
        avg_busbw: Default::default(),
        rows: Vec::new(),
        pairs: Vec::new(),
    }
}

fn env_usize(env: &Environment, key: &str, default: usize) -> Result<usize, RunError> {
    env.get(key).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| RunError::Runtime(format!("{key}={v}: not a number")))
    })
}

/// Joins, follows the localizer: what it found, as far as it got.
fn run(opts: &options::Options, host: &str, deadline: Instant) -> (Measured, Result<(), RunError>) {
    let (joined, rendezvous_ms, gpus) = match join(opts, host, deadline) {
        Ok(joined) => joined,
        Err(e) => return (Measured::default(), Err(e)),
    };
    let (nranks, processes) = (joined.nranks(), joined.members.clone());
    let (localized, ran) = match localize(opts, host, deadline, (joined, rendezvous_ms), gpus) {
        Ok(localized) => (Some(localized), Ok(())),
        Err(e) => (None, Err(e)),
    };
    let (localization, timed_loop_ms) = localized.map_or((None, 0.0), |(l, ms)| (Some(l), ms));
    let phases = Phases {
        rendezvous_ms,
        timed_loop_ms,
        ..Phases::default()
    };
    let record = Measured {
        phases,
        nranks,
        processes,
        localization,
        ..Measured::default()
    };
    (record, ran)
}

/// Follows the localizer over the joined processes' control plane: its summary, and how long
/// its rounds took in milliseconds.
fn localize(
    opts: &options::Options,
    host: &str,
    deadline: Instant,
    (joined, rendezvous_ms): (rendezvous::Joined, f64),
    gpus: usize,
) -> Result<(LocalizeSummary, f64), RunError> {
    let env = &opts.env;
    let topology = Topology::new(&joined.members);
    let layout = Layout::new(&topology);
    let team = std::sync::Arc::new(Team::new(1, joined.plane, deadline));
    team.watch(Liveness::for_budget(opts.timeout))
        .map_err(|e| RunError::Runtime(format!("cannot start the control plane's watch: {e}")))?;
    let lost = |e: RunError| match team.lost() {
        Some(l) => RunError::from_team(opts.rank, bench_core::meet::team::TeamError::Plane(l)),
        None => e,
    };
    let hold_ms = env_usize(env, "NCCL_CHECK_SIM_HOLD_MS", 0)?;
    hold(hold_ms, &team, deadline).map_err(lost)?;
    let first = joined.members[opts.rank as usize].first_rank as usize;
    let mine: Vec<usize> = (first..first + gpus).collect();
    let process_of = topology.processes_by_rank();

    // Every process builds the same fabric (same seed, same faults); each measures only the
    // places of its own ranks, and every process runs its own copy of the localizer on the
    // rounds' summed vectors (the phases it knows without pairs, each node's own GPUs and the
    // allocation collective, it takes from its copy of the fabric, as the GPU runner takes
    // them from phase A's all_reduce and B's sum).
    let (n, g) = (layout.names.len(), layout.rails.max(1));
    let (mut fabric, cfg) = fabric_and_config(opts, &layout.names, g)?;
    let floor = cfg.floors.allocation;
    let mut conductor = None;
    let keeps = keeper(opts.rank, team.coordinates());
    let coordinator_fabric = fabric.clone();
    let new_conductor = || -> Result<Conductor, String> {
        let localizer =
            Localizer::new(n, g, cfg.clone()).map_err(|e| format!("localization: {e}"))?;
        let mut known_fabric = coordinator_fabric.clone();
        Ok(Conductor::new(
            localizer,
            layout.clone(),
            process_of.clone(),
            keeps,
            "sim",
            floor,
            Box::new(move |round| known_fabric.measure(round)),
        ))
    };
    let t = Instant::now();
    // As the GPU runner does, with the control plane's exact sum in place of NCCL's all_reduce.
    let gather = |len: usize, led: &[(u64, f64)]| -> Result<ConductorStep, RunError> {
        let vector = slots(len, led).map_err(RunError::Runtime)?;
        let sums = match vector.is_empty() {
            true => Vec::new(),
            false => team
                .sum(&vector)
                .map_err(|e| RunError::from_team(opts.rank, e))?,
        };
        decide_here(&mut conductor, new_conductor, &sums, opts.rank, &mine)
            .map_err(RunError::Runtime)
    };
    let measure = |_: u32, _: Phase, _: u32, places: &[Place]| -> Result<Vec<f64>, RunError> {
        Ok(places
            .iter()
            .map(|p| group_of(&layout, p).map_or(0.0, |g| fabric.measure_group(&g)))
            .collect())
    };
    let mut summary = follow(&mine, topology.nranks() as usize, gather, measure)
        .map_err(|e| match e {
            FollowError::Caller(e) => e,
            FollowError::BadStep(why) => {
                RunError::Runtime(format!("localization: this process's step: {why}"))
            }
        })
        .map_err(lost)?;
    share_findings(opts, host, &topology, &team, &mut summary.reasons).map_err(lost)?;
    let rounds_ms = t.elapsed().as_secs_f64() * 1e3;
    if opts.rank == 0 && !opts.quiet {
        say((n, g), &summary, rendezvous_ms, rounds_ms);
    }
    Ok((summary, rounds_ms))
}

/// Joins the check's processes (the real rendezvous, with NCCL_CHECK_SIM_GPUS simulated GPUs
/// each); with how long it took, in milliseconds, and the number of GPUs.
fn join(
    opts: &options::Options,
    host: &str,
    deadline: Instant,
) -> Result<(rendezvous::Joined, f64, usize), RunError> {
    let gpus = env_usize(&opts.env, "NCCL_CHECK_SIM_GPUS", 8)?;
    if !(1..=64).contains(&gpus) {
        return Err(RunError::Runtime(
            "NCCL_CHECK_SIM_GPUS must be 1..=64".into(),
        ));
    }
    if opts
        .env
        .get("NCCL_CHECK_SIM_ABSENT")
        .is_some_and(|a| a == host)
    {
        // A task that dies before its rendezvous (OOM killer, node failure): no report, no word
        // to the others; they must find out by themselves.
        // SAFETY: raise(3) with a valid signal number.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let t = Instant::now();
    let me = Member {
        proc_rank: opts.rank,
        host: host.to_string(),
        pid: std::process::id(),
        ngpus: gpus as u32,
        first_rank: 0,
    };
    let auth = opts
        .credential
        .authenticator(opts.munge_socket.clone())
        .map_err(RunError::Rendezvous)?;
    // The test cluster's node names (n1..n64, every slurmd on 127.0.0.1 under one host name) do
    // not resolve; NCCL_CHECK_SIM_RENDEZVOUS_HOST stands in for the name service there. The port
    // stays the one the plugin chose.
    let mut setup = bench_core::orchestrate::rendezvous_setup(opts, auth.as_ref(), deadline);
    if let Some(h) = opts
        .env
        .get("NCCL_CHECK_SIM_RENDEZVOUS_HOST")
        .filter(|h| !h.is_empty())
    {
        setup.host = h;
    }
    let joined = setup
        .join(me, || Ok([0u8; 128]))
        .map_err(RunError::Rendezvous)?;
    Ok((joined, t.elapsed().as_secs_f64() * 1e3, gpus))
}

/// The simulated fabric of `names` x `g` GPUs with the faults asked for, and the localizer's
/// config (the worker config's outlier fraction, the simulated site's allocation floor).
fn fabric_and_config(
    opts: &options::Options,
    names: &[String],
    g: usize,
) -> Result<(Fabric, LocalizeConfig), RunError> {
    let mut fabric = Fabric::healthy(names.len(), g, 1);
    for fault in faults(&opts.env, names)? {
        fabric.inject(fault);
    }
    let cfg = LocalizeConfig {
        fraction: opts.config.outliers.fraction,
        floors: PairFloors {
            allocation: allocation_floor(&opts.env, &fabric)?,
            ..PairFloors::default()
        },
        ..LocalizeConfig::default()
    };
    // The alltoall beside the all_reduce, as the worker measures it (every process builds
    // the same fabric from the same seed, so all agree).
    let fraction = opts.config.outliers.alltoall_fraction;
    let cfg = bench_core::localize::sim::with_alltoall(cfg, &mut fabric, fraction);
    Ok((fabric, cfg))
}

/// As a site's multi-node all_reduce rule would: 0.85 x the healthy fabric's value; none with
/// NCCL_CHECK_SIM_FLOOR=none, as where no rule covers the fabric (tests/gpu/fabric.sh's sockets
/// between emulated nodes): every check then localizes.
fn allocation_floor(env: &Environment, fabric: &Fabric) -> Result<Option<f64>, RunError> {
    match env.get("NCCL_CHECK_SIM_FLOOR").as_deref() {
        Some("none") => Ok(None),
        Some(other) => Err(RunError::Runtime(format!(
            "NCCL_CHECK_SIM_FLOOR={other}: only 'none' is known"
        ))),
        None => Ok(Some(0.85 * fabric.allocation_nominal)),
    }
}

/// Rank 0's one line of what was simulated.
fn say((n, g): (usize, usize), summary: &LocalizeSummary, rendezvous_ms: f64, rounds_ms: f64) {
    nccl_check_host::outln!(
        "# nccl-check-sim: {n} nodes x {g} simulated GPUs, {} rounds ({} localization), rendezvous {rendezvous_ms:.0} ms, rounds {rounds_ms:.0} ms",
        summary.rounds,
        summary.localization_rounds,
    );
}

/// A long collective's stand-in: `ms` milliseconds, ended early (as an ERROR) when the team
/// fails, polled as the GPU worker's stream wait polls it.
fn hold(ms: usize, team: &Team, deadline: Instant) -> Result<(), RunError> {
    let until = Instant::now() + std::time::Duration::from_millis(ms as u64);
    while Instant::now() < until {
        if team.is_failed() {
            return Err(RunError::Stopped("stopped while holding".into()));
        }
        if Instant::now() >= deadline {
            return Err(RunError::Timeout(
                "no progress within --timeout: the held collective never completed".into(),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// As the GPU runner does after the localizer's last round (`runner::localized`): when it named
/// something, every node's own findings summed over every process; a node's own finding is its
/// cause in every process's verdict, the network reading only for the rest.
fn share_findings(
    opts: &options::Options,
    host: &str,
    topology: &Topology,
    team: &Team,
    reasons: &mut Vec<nccl_check_contract::report::reason::Reason>,
) -> Result<(), RunError> {
    if reasons.is_empty() {
        return Ok(());
    }
    let names = bench_core::localize::own::process_nodes(topology);
    let mine = sim_findings(&opts.env, host)?;
    // No judge here names the node's own finding: every process's is decoded, its own too.
    let own = bench_core::localize::own::exchange(opts.rank as usize, &names, &mine, true, |v| {
        team.sum(v).map_err(|e| RunError::from_team(opts.rank, e))
    })?;
    bench_core::localize::own::own_findings_win(reasons, &own);
    Ok(())
}

/// This process's own findings (NCCL_CHECK_SIM_BUSY=NODE:PID: NODE's GPU0 held by another
/// process PID, 8 GiB, as NVML would list it), for the sum after the localizer's rounds.
fn sim_findings(env: &Environment, host: &str) -> Result<Vec<OwnFinding>, RunError> {
    let Some(spec) = env.get("NCCL_CHECK_SIM_BUSY") else {
        return Ok(Vec::new());
    };
    let bad = || RunError::Runtime(format!("NCCL_CHECK_SIM_BUSY={spec}: not NODE:PID"));
    let (node, pid) = spec.split_once(':').ok_or_else(bad)?;
    let pid: u32 = pid.parse().map_err(|_| bad())?;
    let busy = OwnFinding::GpuBusy {
        gpu: 0,
        pid,
        gib: 8.0,
        probe: None,
    };
    Ok(if node == host { vec![busy] } else { Vec::new() })
}

/// NCCL_CHECK_SIM_FAULTS, with node names resolved to the localizer's indices.
fn faults(env: &Environment, names: &[String]) -> Result<Vec<Fault>, RunError> {
    let spec = env.get("NCCL_CHECK_SIM_FAULTS").unwrap_or_default();
    let bad = |what: &str| RunError::Runtime(format!("NCCL_CHECK_SIM_FAULTS: {what}"));
    let node = |s: &str| {
        names
            .iter()
            .position(|n| n == s)
            .ok_or_else(|| bad(&format!("no node '{s}'")))
    };
    let num = |s: &str| {
        s.parse::<f64>()
            .map_err(|_| bad(&format!("'{s}' is not a number")))
    };
    let mut out = Vec::new();
    for item in spec.split(',').filter(|s| !s.trim().is_empty()) {
        let f: Vec<&str> = item.trim().split(':').collect();
        out.push(match f.as_slice() {
            ["nodenet", x, k] => Fault::NodeNet {
                node: node(x)?,
                factor: num(k)?,
            },
            ["nic", x, r, k] => Fault::Nic {
                node: node(x)?,
                rail: num(r)? as usize,
                factor: num(k)?,
            },
            ["link", x, y, k] => Fault::Link {
                a: node(x)?,
                b: node(y)?,
                factor: num(k)?,
            },
            _ => return Err(bad(&format!("cannot read '{item}'"))),
        });
    }
    Ok(out)
}
