//! The meeting: the rendezvous with the other processes, then the team and the topology each
//! GPU thread is handed.

use super::loading::Loaded;
use crate::measure::nccl::UniqueId;
use crate::measure::runner::{GpuOutcome, RunError, Start};
use crate::meet::rendezvous::{self, Member};
use crate::meet::team::Team;
use crate::meet::topology::Topology;
use crate::model::thresholds::GpuModel;
use crate::settings::options::Options;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the report records of the meeting: how long it took, then (once joined) every rank and
/// which process holds which.
#[derive(Debug, Default)]
pub(super) struct Meeting {
    pub(super) rendezvous_ms: f64,
    pub(super) nranks: u32,
    pub(super) processes: Vec<Member>,
}

/// The processes met: the team, the topology, the GPU threads running with their ranks.
pub(super) struct Met {
    pub(super) team: Arc<Team>,
    pub(super) topology: Arc<Topology>,
    pub(super) running: Vec<JoinHandle<GpuOutcome>>,
    pub(super) record: Meeting,
}

/// One thread per GPU, each starting its context and waiting for its [`Start`].
pub(super) struct GpuThreads {
    pub(super) senders: Vec<Sender<Start>>,
    pub(super) handles: Vec<JoinHandle<GpuOutcome>>,
}

/// The rendezvous, then each GPU thread gets its rank and the check's topology (built here,
/// once, from the members; returned for the verdict). On an error the threads are told to stop
/// and waited for; what the meeting got to is returned with the error.
pub(super) fn meet(
    opts: &'static Options,
    loaded: &Loaded,
    host: &str,
    deadline: Instant,
    threads: GpuThreads,
    gpu: &Arc<GpuModel>,
) -> Result<Met, (Meeting, RunError)> {
    let t = Instant::now();
    let me = Member {
        proc_rank: opts.rank,
        host: opts.node_or_host(host),
        pid: std::process::id(),
        ngpus: loaded.devices.len() as u32,
        first_rank: 0,
    };
    let joined = opts
        .credential
        .authenticator(opts.munge_socket.clone())
        .and_then(|auth| {
            let setup = rendezvous_setup(opts, auth.as_ref(), deadline);
            setup.join(me, || {
                loaded
                    .nccl
                    .unique_id()
                    .map(|id| id.internal)
                    .map_err(|e| e.to_string())
            })
        });
    let mut record = Meeting {
        rendezvous_ms: t.elapsed().as_secs_f64() * 1e3,
        ..Meeting::default()
    };
    let started = joined.map_err(RunError::Rendezvous).and_then(|joined| {
        record.nranks = joined.nranks();
        record.processes = joined.members.clone();
        start_team(opts, joined, deadline, &threads.senders, gpu)
    });
    match started {
        Ok((team, topology)) => Ok(Met {
            team,
            topology,
            running: threads.handles,
            record,
        }),
        Err(e) => {
            drop(threads.senders);
            for h in threads.handles {
                let _ = h.join();
            }
            Err((record, e))
        }
    }
}

/// The team of the joined processes, watched; each GPU thread's [`Start`] sent.
pub(super) fn start_team(
    opts: &'static Options,
    joined: rendezvous::Joined,
    deadline: Instant,
    senders: &[Sender<Start>],
    gpu: &Arc<GpuModel>,
) -> Result<(Arc<Team>, Arc<Topology>), RunError> {
    let nranks = joined.nranks();
    let first_rank = joined.members[opts.rank as usize].first_rank;
    let topology = Arc::new(Topology::new(&joined.members));
    let team = Arc::new(Team::new(senders.len(), joined.plane, deadline));
    team.watch(rendezvous::plane::Liveness::for_budget(opts.timeout))
        .map_err(|e| RunError::Runtime(format!("cannot start the control plane's watch: {e}")))?;
    let id = UniqueId {
        internal: joined.unique_id,
    };
    let show: Arc<dyn crate::measure::runner::sink::Show> =
        Arc::new(crate::render::output::Console);
    for (slot, tx) in senders.iter().enumerate() {
        let rank = first_rank + slot as u32;
        let _ = tx.send(Start {
            team: team.clone(),
            id,
            rank,
            nranks,
            printer: rank == 0 && !opts.quiet,
            recorder: slot == 0,
            topology: topology.clone(),
            gpu: gpu.clone(),
            opts,
            show: show.clone(),
            slow_pairs: |rows, fraction, floor| {
                !crate::judge::analysis::slow_pairs(rows, fraction, floor).is_empty()
            },
        });
    }
    Ok((team, topology))
}

/// How this process meets the others, from its options and the Slurm step's layout (the nodes
/// and task counts the coordinator names when a process never comes).
pub fn rendezvous_setup<'a>(
    opts: &Options,
    auth: &'a dyn rendezvous::auth::Authenticator,
    deadline: Instant,
) -> rendezvous::Setup<'a> {
    rendezvous::Setup {
        host: opts
            .rendezvous
            .as_deref()
            .and_then(|r| r.rsplit_once(':'))
            .map(|(h, _)| h.to_string())
            .unwrap_or_default(),
        ports: opts.ports.clone(),
        label: opts.label.clone(),
        world: opts.world,
        coordinator: opts.coordinator,
        auth,
        deadline: rendezvous_deadline(deadline, opts.timeout),
        expected: crate::meet::slurm_layout::expected(&|k| opts.env.get(k), opts.world),
    }
}

/// The rendezvous gives up a little before the check's deadline, so that the coordinator can
/// still name the nodes that never came (`rendezvous::absent`) before the watchdog ends the
/// process with a bare timeout: 8 emulated nodes with one never started ended in "no progress
/// within --timeout" naming no node (tests/gpu/results/fabric). A tenth of the budget, 1-5 s.
pub fn rendezvous_deadline(deadline: Instant, timeout: Duration) -> Instant {
    let margin = (timeout / 10).clamp(Duration::from_secs(1), Duration::from_secs(5));
    deadline.checked_sub(margin).unwrap_or(deadline)
}
