//! One check of this process, from loading CUDA and NCCL to the verdict: one thread per GPU,
//! the rendezvous with the other processes meanwhile, then the threads' outcomes gathered into
//! the report and judged (`judge`). The node's facts (`facts::node`: inventory, NVML on its
//! own thread, the NICs NCCL used) are gathered beside the measurement, never delaying it.
//! Errors come back as [`RunError`]; printing and the exit code are the binary's.

use crate::config::network::NetworkProfile;
use crate::config::network::TransportExpectation;
use crate::facts::interconnect::Interconnect;
use crate::facts::node::NodeFacts;
use crate::facts::transport::{TransportInfo, TransportSummary};
use crate::judge::overall::{self, Basis, Judging};
use crate::measure::cuda;
use crate::measure::nccl_env::LogPlace;
use crate::measure::rows::Phases;
use crate::measure::runner::{GpuOutcome, GpuThread, RunError, Status};
use crate::meet::team::Team;
use crate::meet::topology::Topology;
use crate::model::thresholds::GpuModel;
use crate::report::assemble::{Judgement, Measured};
use crate::report::json::{GpuEntry, Report};
use crate::settings::options::Options;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod gather_facts;
mod loading;
mod meeting;

use loading::{explain_check, identify, load, read_gpus, Loaded, Loading};
pub use meeting::rendezvous_setup;
use meeting::{meet, GpuThreads, Meeting};

/// How a run ended without error.
pub enum Ran {
    /// Measured: judged on what it was measured on, with NCCL's log of the paths when it was
    /// recorded.
    Measured(Basis, Option<TransportSummary>),
    /// `--explain-thresholds`: the text to print; nothing was measured.
    Explained(String),
}

/// Loads, starts the GPU threads, meets the other processes and gathers the outcomes; returns
/// what was measured and read (as far as it got, on an error too) for the report. Every wait is
/// bounded by `t0 + --timeout`. `host` is this machine's name, `nccl_log` where NCCL logs.
pub fn run(
    opts: &'static Options,
    t0: Instant,
    status: &Status,
    host: &str,
    nccl_log: &LogPlace,
) -> (Measured, Result<Ran, RunError>) {
    if opts.explain_thresholds && opts.gpu_model.is_some() {
        // Another GPU model, or a login node: no GPU, no NCCL.
        let text = explain_check(opts, None, None);
        return (Measured::default(), Ok(Ran::Explained(text)));
    }
    let (reached, ran) = match measure(opts, t0, status, host, nccl_log) {
        Ok((reached, ran)) => (reached, Ok(ran)),
        Err((reached, e)) => (reached, Err(e)),
    };
    (reached.record(), ran)
}

/// [`run`] on this node's GPUs, one stage a line, each handed what the earlier ones returned;
/// on an error, what the stages before it returned (moved once, to the report: not boxed).
#[allow(clippy::result_large_err)]
fn measure(
    opts: &'static Options,
    t0: Instant,
    status: &Status,
    host: &str,
    nccl_log: &LogPlace,
) -> Result<(Reached, Ran), (Reached, RunError)> {
    let deadline = t0 + opts.timeout;
    let health = gather_facts::start_nvml();
    let loaded = load(opts, status).map_err(|(l, e)| (Reached::so_far(l, None, None), e))?;
    if opts.explain_thresholds {
        let nvml = health.resolve(deadline).facts;
        let text = explain_check(opts, Some(&loaded.devices), Some(&nvml));
        return Ok((Reached::default(), Ran::Explained(text)));
    }
    let so_far = |node: Option<&Node>, m| Reached::so_far(loaded.record.clone(), node, m);
    // What the check's sum of own findings tells the other nodes of this one (`localize::own`).
    let own = Arc::new(crate::facts::known::ThisNode::default());
    let threads = spawn_gpu_threads(opts, &loaded, deadline, status, &own)
        .map_err(|e| (so_far(None, None), e))?;
    let node = read_node(opts, host, &loaded, health, deadline, &own);
    let met = meet(opts, &loaded, host, deadline, threads, &node.gpu)
        .map_err(|(m, e)| (so_far(Some(&node), Some(m)), e))?;
    let outcomes = wait_for_gpus(
        met.running,
        (&met.team, &own),
        &met.topology,
        opts,
        host,
        node,
    );
    let so_far = Reached::so_far(loaded.record, None, Some(met.record));
    read_paths(so_far, outcomes, nccl_log, met.topology)
}

/// What the stages handed back, as far as the run got (the defaults for a stage not reached):
/// the run's record, put together in one piece by [`Reached::record`].
#[derive(Default)]
struct Reached {
    loading: Loading,
    node: Option<Node>,
    meeting: Meeting,
    /// The GPU threads' part of the record (their fields of [`Measured`]).
    gathered: Measured,
    /// Once every GPU thread ended well: NCCL's log of the paths (and NVML's facts recorded).
    transports: Option<TransportInfo>,
}

impl Reached {
    /// The stages up to the meeting (`node`, `meeting`: where they were reached).
    fn so_far(loading: Loading, node: Option<&Node>, meeting: Option<Meeting>) -> Reached {
        Reached {
            loading,
            node: node.cloned(),
            meeting: meeting.unwrap_or_default(),
            ..Reached::default()
        }
    }

    /// The run's record.
    fn record(self) -> Measured {
        let (loading, meeting, gathered) = (self.loading, self.meeting, self.gathered);
        let nvml = |n: gather_facts::Resolved| (n.facts, n.waited_ms);
        let (facts, sku, interconnect, nvml) = self.node.map_or(Default::default(), |n| {
            (
                Some(n.facts),
                Some(n.sku),
                Some(n.interconnect),
                Some(nvml(n.nvml)),
            )
        });
        Measured {
            phases: Phases {
                cuda_init_ms: loading.cuda_init_ms,
                nccl_load_ms: loading.nccl_load_ms,
                rendezvous_ms: meeting.rendezvous_ms,
                ..gathered.phases
            },
            nccl: loading.nccl,
            facts,
            sku,
            interconnect,
            nranks: meeting.nranks,
            processes: meeting.processes,
            nvml: nvml.filter(|_| self.transports.is_some()),
            transports: self.transports,
            ..gathered
        }
    }
}

/// This process's GPUs as the floors and the verdict know them, read once while the contexts
/// start: the GPU model (the floors' key), NVML's facts, and what the report shows: the node's
/// facts (the inventory, then what the watches saw and the NICs NCCL used), the first GPU's
/// identity, how the GPUs reach each other.
#[derive(Debug, Clone)]
struct Node {
    gpu: Arc<GpuModel>,
    nvml: gather_facts::Resolved,
    facts: NodeFacts,
    sku: String,
    interconnect: Interconnect,
}

/// The GPU threads' outcomes as far as they came back, the node with what the off-CPU and
/// host-load watches saw meanwhile, and how the threads ended.
struct Outcomes {
    gathered: Measured,
    node: Node,
    ended: Result<(), RunError>,
}

fn spawn_gpu_threads(
    opts: &'static Options,
    loaded: &Loaded,
    deadline: Instant,
    status: &Status,
    own: &Arc<crate::facts::known::ThisNode>,
) -> Result<GpuThreads, RunError> {
    if !opts.quiet && opts.rank == 0 {
        nccl_check_host::outln!(
            "# nccl-check {} (nccl-tests 2.19.6 table format) nccl-library={} {}",
            env!("CARGO_PKG_VERSION"),
            loaded.nccl.version,
            loaded.nccl.path.display()
        );
    }
    // One thread per GPU starts its context now; the rendezvous runs meanwhile.
    *status.lock().unwrap_or_else(|p| p.into_inner()) = vec![String::new(); loaded.devices.len()];
    let mut threads = GpuThreads {
        senders: Vec::new(),
        handles: Vec::new(),
    };
    for (slot, &device) in loaded.devices.iter().enumerate() {
        let (tx, rx) = std::sync::mpsc::channel();
        threads.senders.push(tx);
        let thread = GpuThread {
            slot,
            device,
            nccl: loaded.nccl,
            opts,
            deadline,
            status: status.clone(),
            own: own.clone(),
        };
        let h = std::thread::Builder::new()
            .name(format!("gpu{device}"))
            .spawn(move || thread.run(rx))
            .map_err(|e| RunError::Runtime(format!("cannot start a thread: {e}")))?;
        threads.handles.push(h);
    }
    Ok(threads)
}

/// The node's inventory (sysfs and Slurm's config files, read while the contexts start, not
/// before), then NVML's facts, which decide which floors apply (the interconnect), so the
/// measuring threads and the verdict hold results to the same floors: waited for (bounded,
/// `NVML_BUDGET` from the start; NVML usually answered while CUDA started).
fn read_node(
    opts: &Options,
    host: &str,
    loaded: &Loaded,
    health: gather_facts::Pending,
    deadline: Instant,
    own: &crate::facts::known::ThisNode,
) -> Node {
    let facts = gather_facts::gather_inventory(opts, host, loaded.visible);
    let nvml = health.resolve(deadline);
    // What the floors are looked up by: the first GPU's model (its SKU by PCI device ID) and
    // how this process's GPUs reach each other (read from NVML), with the identity and
    // interconnect the report records.
    let (name, id, interconnect) = read_gpus(&loaded.devices, &nvml.facts);
    let (gpu, sku) = identify(name, id, &interconnect);
    own.record(&loaded.devices, &nvml.facts, Some(&facts));
    if !opts.quiet && opts.rank == 0 {
        nccl_check_host::outln!("# GPU: {sku}; interconnect: {interconnect}");
    }
    Node {
        gpu: Arc::new(gpu),
        nvml,
        facts,
        sku,
        interconnect,
    }
}

/// Waits for the GPU threads (bounded once a process is lost) and collects their outcomes, with
/// what the off-CPU watch and the host's load saw meanwhile put in the `node`'s facts.
fn wait_for_gpus(
    running: Vec<JoinHandle<GpuOutcome>>,
    (team, own): (&Team, &crate::facts::known::ThisNode),
    topology: &Topology,
    opts: &Options,
    host: &str,
    mut node: Node,
) -> Outcomes {
    // Whether this process could run while it measured (a starved worker starves NCCL's
    // proxy threads: `runner::off_cpu`), and how busy the host's CPUs were meanwhile, and with
    // whom (`facts::host_load`).
    let off_cpu = own.watch();
    let (gathered, ended) = match join_unless(running, || team.lost().is_some(), LOST_GRACE) {
        Ok(handles) => {
            let (gathered, ended) = gather(handles, host);
            (gathered, Some(ended))
        }
        // A GPU thread still inside NCCL after the watch named a lost process: the thread may
        // never come back (seen on one H100 with 16 emulated nodes: a link down during NCCL
        // init held `ncclCommInitRankConfig` until --timeout), and the verdict is known.
        Err(()) => (Measured::default(), None),
    };
    if let Some(seen) = off_cpu.and_then(|w| w.stop()) {
        node.facts.set_off_cpu(&opts.node_or_host(host), seen);
    }
    // Every process of the check is its own load, not another's (emulated nodes share a
    // host; seen at 16: the check's workers named as the top consumers of a busy host).
    node.facts.host = own.load_for_report(topology.pids());
    let lost = match ended {
        Some(Ok(())) => None,
        _ => team.lost_or_told(LAST_WORD),
    };
    Outcomes {
        gathered,
        node,
        ended: after_the_team(ended, lost, opts.rank),
    }
}

/// The last stage, once every GPU thread ended well: what NCCL's log says of the paths and the
/// NICs it used; the run's record, and the run to judge on the `topology` and the GPU model.
#[allow(clippy::result_large_err)]
fn read_paths(
    so_far: Reached,
    outcomes: Outcomes,
    nccl_log: &LogPlace,
    topology: Arc<Topology>,
) -> Result<(Reached, Ran), (Reached, RunError)> {
    let Outcomes {
        gathered,
        mut node,
        ended,
    } = outcomes;
    if let Err(e) = ended {
        return Err((
            Reached {
                node: Some(node),
                gathered,
                ..so_far
            },
            e,
        ));
    }
    let (transports, log) = crate::facts::nccl_log::read_transports(nccl_log);
    let lines = log.as_ref().map(|l| l.net_using.as_slice());
    let nodes = topology.node_count();
    node.facts
        .set_net(std::path::Path::new("/"), lines, nodes, &Default::default());
    let gpu = node.gpu.clone();
    let reached = Reached {
        node: Some(node),
        gathered,
        transports: Some(transports),
        ..so_far
    };
    Ok((reached, Ran::Measured(Basis { topology, gpu }, log)))
}

/// The GPU threads' outcome (`None`: left behind, stuck) read beside what the plane's watch
/// found. A process that stopped answering is why the others' NCCL calls stalled or failed: its
/// name is the reason, ahead of theirs. But once every GPU thread ended without an error, every
/// collective and every sum over the plane is in: a process that went away after them (the
/// coordinator, done first, exits while a slower process still writes its results) changes
/// nothing that was measured.
fn after_the_team(
    gathered: Option<Result<(), RunError>>,
    lost: Option<crate::meet::rendezvous::plane::PlaneError>,
    rank: u32,
) -> Result<(), RunError> {
    match (gathered, lost) {
        (Some(Ok(())), _) => Ok(()),
        (_, Some(lost)) => Err(RunError::from_team(
            rank,
            crate::meet::team::TeamError::Plane(lost),
        )),
        (gathered, None) => gathered.unwrap_or(Ok(())),
    }
}

/// How long the GPU threads get to come back once the watch has named a lost process.
const LOST_GRACE: Duration = Duration::from_secs(2);
/// How long a process whose GPU work failed listens for the others' reason first (the
/// coordinator sends it before it exits, so it is there by the time NCCL sees the exit).
const LAST_WORD: Duration = Duration::from_millis(500);

/// Waits for every GPU thread to finish, unless `lost` (the team's watch named a lost process)
/// and the threads are still not all back `grace` later: then `Err(())`, and the caller reports
/// the lost process without them (they are left to the process exit).
fn join_unless<T>(
    handles: Vec<JoinHandle<T>>,
    lost: impl Fn() -> bool,
    grace: Duration,
) -> Result<Vec<JoinHandle<T>>, ()> {
    let mut lost_since: Option<Instant> = None;
    // Bounded by the watchdog, which ends the process at the budget's end.
    while !handles.iter().all(|h| h.is_finished()) {
        if lost() {
            let since = *lost_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= grace {
                return Err(());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(handles)
}

/// Joins the GPU threads: their part of the record, as far as they came back, and the first
/// real error (not the threads that stopped because of it).
fn gather(handles: Vec<JoinHandle<GpuOutcome>>, host: &str) -> (Measured, Result<(), RunError>) {
    let mut record = Measured::default();
    let mut errors = Vec::new();
    for h in handles {
        let Ok(out) = h.join() else {
            return (
                record,
                Err(RunError::Runtime("a GPU thread panicked".into())),
            );
        };
        let p = &mut record.phases;
        p.contexts_ms = p.contexts_ms.max(out.phases.contexts_ms);
        p.nccl_init_ms = p.nccl_init_ms.max(out.phases.nccl_init_ms);
        p.allocation_ms = p.allocation_ms.max(out.phases.allocation_ms);
        p.probe_ms = p.probe_ms.max(out.phases.probe_ms);
        p.comms_ready_at_ms = p.comms_ready_at_ms.max(out.phases.comms_ready_at_ms);
        p.pairs_ms = p.pairs_ms.max(out.phases.pairs_ms);
        if !out.rows.is_empty() {
            p.warmup_ms = out.phases.warmup_ms;
            p.timed_loop_ms = out.phases.timed_loop_ms;
            p.verification_ms = out.phases.verification_ms;
            record.results = out.rows;
            record.pairs = out.pairs;
        }
        if out.localization.is_some() {
            record.localization = out.localization;
        }
        record.node_findings.extend(out.node_findings);
        if let Some(group) = out.shared.filter(|g| !record.shared_gpus.contains(g)) {
            record.shared_gpus.push(group);
        }
        if let Some(info) = out.info {
            let mut gpu = GpuEntry::new(out.rank.unwrap_or(u32::MAX), host.to_string(), info);
            match out.probe {
                Some(Ok(p)) => gpu.local_probe = Some(p),
                Some(Err(e)) => gpu.local_probe_error = Some(e),
                None => {}
            }
            record.gpus.push(gpu);
        }
        record.gpu_side.extend(out.gpu_side);
        record.sizing.extend(out.sizing);
        record.localization_noise = record.localization_noise.or(out.localization_noise);
        errors.extend(out.error);
    }
    errors.sort_by_key(|e| matches!(e, RunError::Stopped(_)));
    (record, errors.into_iter().next().map_or(Ok(()), Err))
}

/// PASS or FAIL of a measured run (see `judge`), with CUDA's peer access for the transport
/// rule.
pub fn verdict(
    opts: &Options,
    report: &Report,
    basis: &Basis,
    profile: Option<&NetworkProfile>,
    log: Option<&TransportSummary>,
) -> Judgement {
    let expect = crate::measure::nccl_env::path_expectation(opts, profile);
    overall::judge(
        report,
        &judging(opts, &expect),
        basis,
        log,
        &cuda::can_access_peer,
    )
}

/// What the configuration and the options say about judging.
fn judging<'a>(opts: &'a Options, expect: &'a TransportExpectation) -> Judging<'a> {
    Judging {
        thresholds: &opts.config.thresholds,
        outlier_fraction: opts.config.outliers.fraction,
        min_busbw: opts.min_busbw,
        expect,
    }
}

/// `--plot` on rank 0: the judged report's results against their floors.
pub fn plot(opts: &Options, report: &Report, basis: &Basis) {
    let Some(path) = opts.plot.as_ref().filter(|_| opts.rank == 0) else {
        return;
    };
    let expect = TransportExpectation::default();
    let judging = judging(opts, &expect);
    let floors = overall::floors(report, &judging, basis);
    let plot_floor = |c: &str, g: u32, b: u64| floors.floor(c, g, b);
    let headline = format!("{}: {}", report.head.verdict, report.head.summary);
    let input = crate::render::plot::PlotInput {
        rows: &report.results,
        pairs: &report.pairs,
        gpu_name: &basis.gpu.name,
        sku: basis.gpu.sku.map(|s| s.key),
        gpus: report.nranks,
        headline: &headline,
        floor: &plot_floor,
        outlier_fraction: opts.config.outliers.fraction,
    };
    match crate::render::plot::draw(path, &input) {
        Ok(()) => nccl_check_host::errln!("nccl-check: plot written to {}", path.display()),
        Err(e) => nccl_check_host::errln!("nccl-check: WARNING no plot: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A starved process (stopped 60% of the time) ended in ERROR naming the coordinator on
    /// GPUs: the coordinator had finished and exited, and the slower process's watch saw its
    /// connection close after every collective was in.
    #[test]
    fn a_process_that_leaves_after_every_gpu_thread_ended_well_changes_no_outcome() {
        use crate::meet::rendezvous::plane::PlaneError;
        let gone = || Some(PlaneError::Lost("the coordinator (h1:1): closed".into()));
        assert!(after_the_team(Some(Ok(())), gone(), 2).is_ok());
        // Before that, the lost process is the reason, ahead of the threads' own errors.
        let stopped = Some(Err(RunError::Stopped("peer gone".into())));
        let e = after_the_team(stopped, gone(), 2).unwrap_err();
        assert!(
            matches!(&e, RunError::Rendezvous(m) if m.contains("the coordinator (h1:1)")),
            "{e:?}"
        );
        assert!(matches!(
            after_the_team(None, gone(), 2),
            Err(RunError::Rendezvous(_))
        ));
        let failed = Some(Err(RunError::Runtime("CUDA".into())));
        assert!(matches!(
            after_the_team(failed, None, 2),
            Err(RunError::Runtime(_))
        ));
    }

    /// A GPU thread stuck in NCCL after the watch named a lost process does not hold the
    /// verdict until --timeout: the join gives up `grace` after `lost`, and not before.
    #[test]
    fn a_stuck_gpu_thread_is_left_behind_once_a_process_is_lost_and_only_then() {
        let release = Arc::new(AtomicBool::new(false));
        let stuck = |r: Arc<AtomicBool>| {
            std::thread::spawn(move || {
                let t = Instant::now();
                while !r.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let lost = Arc::new(AtomicBool::new(false));
        let l = lost.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            l.store(true, Ordering::Relaxed);
        });
        let t = Instant::now();
        let joined = join_unless(
            vec![stuck(release.clone())],
            || lost.load(Ordering::Relaxed),
            Duration::from_millis(200),
        );
        let took = t.elapsed();
        assert!(joined.is_err());
        assert!(
            took >= Duration::from_millis(500),
            "gave up before lost + grace: {took:?}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
        release.store(true, Ordering::Relaxed);
        setter.join().unwrap();
        // Threads that come back are all joined, lost or not.
        let done = join_unless(
            vec![std::thread::spawn(|| 7)],
            || true,
            Duration::from_secs(2),
        );
        assert_eq!(done.unwrap().pop().unwrap().join().unwrap(), 7);
        let r2 = Arc::new(AtomicBool::new(false));
        let h = stuck(r2.clone());
        let r3 = r2.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            r3.store(true, Ordering::Relaxed);
        });
        assert!(join_unless(vec![h], || false, Duration::ZERO).is_ok());
    }

    /// Each stage's phases come from the stage that timed them; a stage not reached leaves its
    /// part of the record empty.
    #[test]
    fn the_record_takes_each_stage_s_part_and_nothing_of_a_stage_not_reached() {
        let loading = Loading {
            cuda_init_ms: 1.0,
            nccl_load_ms: 2.0,
            nccl: None,
        };
        let meeting = Meeting {
            rendezvous_ms: 3.0,
            nranks: 8,
            processes: Vec::new(),
        };
        let mut gathered = Measured::default();
        gathered.phases.contexts_ms = 4.0;
        gathered.phases.rendezvous_ms = 99.0;
        gathered.localization_noise = Some(0.1);
        let reached = Reached {
            loading,
            meeting,
            gathered,
            ..Reached::default()
        };
        let r = reached.record();
        let p = &r.phases;
        let times = (
            p.cuda_init_ms,
            p.nccl_load_ms,
            p.rendezvous_ms,
            p.contexts_ms,
        );
        assert_eq!(times, (1.0, 2.0, 3.0, 4.0));
        assert_eq!((r.nranks, r.localization_noise), (8, Some(0.1)));
        assert!(r.facts.is_none() && r.sku.is_none() && r.nvml.is_none());
        assert!(r.transports.is_none());
    }

    #[test]
    fn the_rendezvous_ends_a_tenth_of_the_budget_early_between_1_and_5_s() {
        let d = Instant::now() + Duration::from_secs(100);
        let at = |t: u64| d - meeting::rendezvous_deadline(d, Duration::from_secs(t));
        assert_eq!(at(40), Duration::from_secs(4));
        assert_eq!(at(120), Duration::from_secs(5));
        assert_eq!(at(5), Duration::from_secs(1));
    }
}
