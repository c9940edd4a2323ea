//! A GPU thread's communicators: the check's own (bounded non-blocking init, then a blocking
//! child for measuring) and, on multi-node checks, one of its node for the GPU pairs.

use super::{GpuThread, RunError, Start};
use crate::measure::nccl::{Comm, Connecting, NcclError, PendingComm, WaitError};
use std::time::Duration;

/// How long giving a communicator up may take (`ncclCommAbort` can block on NCCL's threads).
const ABORT_WITHIN: Duration = Duration::from_millis(500);

/// Which communicator measures and how its init is bounded. `threaded` (the default on one
/// node): a blocking init on a thread of its own, waited for until the deadline or another
/// process's failure (`nccl::PendingComm`: the floor program's cost, but an init that never
/// returns cannot be aborted). `split` (the default across nodes, where a peer can vanish
/// mid-init and the node's communicator is split off anyway): a non-blocking init bounded by
/// the deadline and abortable, then a blocking communicator split from it (see
/// `Comm::into_blocking`). `nonblocking`: the non-blocking one measures (slow enqueues).
/// `blocking`: a blocking init on the GPU thread, bounded only by the watchdog. Set by
/// `NCCL_CHECK_COMM_MODE`, for diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub(super) enum CommMode {
    Threaded,
    Split,
    NonBlocking,
    Blocking,
}

impl CommMode {
    /// From the value of `NCCL_CHECK_COMM_MODE` (anything else: the default for `nodes`).
    pub(super) fn parse(value: Option<&str>, nodes: u32) -> CommMode {
        let default = if nodes <= 1 {
            CommMode::Threaded
        } else {
            CommMode::Split
        };
        value.and_then(|v| v.parse().ok()).unwrap_or(default)
    }
}

/// The communicators of one GPU thread.
pub(super) struct Comms<'a> {
    pub comm: Comm<'a>,
    /// This node's GPUs only (multi-node checks), for the GPU pair matrix.
    pub node_comm: Option<Comm<'a>>,
}

/// A communicator whose init has started: it connects on NCCL's own thread (non-blocking) or
/// on a thread of its own (`threaded`) while this one does other work (buffers, the local
/// probe); `blocking` mode: already ready.
pub(super) struct CommsStarted<'a> {
    parent: Opening<'a>,
    mode: CommMode,
    /// (color, key) of this rank's node communicator, on multi-node checks.
    node_split: Option<(i32, i32)>,
}

/// The communicator being made: ready (`blocking` mode), connecting on NCCL's own thread
/// (non-blocking), or on a thread of its own that will hand it over (`threaded`).
enum Opening<'a> {
    Ready(Comm<'a>),
    Connecting(Connecting<'a>),
    OnThread(PendingComm),
}

impl CommsStarted<'_> {
    /// Gives the communicator up (bounded): this thread failed before it was ready. A
    /// threaded init aborts its communicator itself once it returns and finds nobody waiting.
    pub(super) fn abort(self) {
        match self.parent {
            Opening::Ready(parent) => parent.abort_within(ABORT_WITHIN),
            Opening::Connecting(parent) => parent.abort_within(ABORT_WITHIN),
            Opening::OnThread(_) => {}
        }
    }
}

/// Starts the init of `start.rank`'s communicator. An error of the init call itself comes back
/// at once.
pub(super) fn begin(
    thread: &GpuThread,
    start: &Start,
    gpu: &crate::measure::cuda::Gpu,
) -> Result<CommsStarted<'static>, RunError> {
    let (dev, rank, nranks) = (thread.device, start.rank, start.nranks);
    let init_err = |e| init_error(dev, rank, nranks, WaitError::Nccl(e));
    let topology = &start.topology;
    let mode = CommMode::parse(thread.opts.comm_mode.as_deref(), topology.node_count());
    let nccl = thread.nccl;
    // With several nodes, GPU pairs are measured on a communicator of their own node: in a
    // multi-node communicator NCCL sizes point-to-point channels for the network, and an
    // NVLink pair measured there shows the network's share (34 GB/s instead of ~300 GB/s
    // on H200 with sockets between the nodes, 2026-11-21).
    let node_split = (topology.node_count() > 1).then(|| {
        let r = rank as usize;
        let color = topology.node_index(r).unwrap_or(0);
        (color as i32, topology.local_index(r).unwrap_or(0) as i32)
    });
    let (id, deadline) = (start.id, thread.deadline);
    let parent = match mode {
        CommMode::Blocking => {
            Opening::Ready(Comm::init_blocking(nccl, nranks, id, rank, deadline).map_err(init_err)?)
        }
        CommMode::Threaded => {
            let ctx = gpu.ctx.clone();
            let bind = Box::new(move || ctx.bind_to_thread().map_err(|e| e.to_string()));
            let pending = PendingComm::start(nccl, nranks, id, rank, deadline, bind);
            Opening::OnThread(pending.map_err(init_err)?)
        }
        CommMode::Split | CommMode::NonBlocking => {
            // A node-local child must not share: shared children get the parent's few
            // point-to-point channels, sized for the network (measured on H200 with sockets
            // between emulated nodes: an NVLink pair at 34.6 GB/s instead of ~300).
            let share = node_split.is_none();
            let parent = Comm::start_init(nccl, nranks, id, rank, deadline, share);
            Opening::Connecting(parent.map_err(init_err)?)
        }
    };
    // A blocking init's communicator splits nothing (`finish`), whatever `node_split` says.
    Ok(CommsStarted {
        parent,
        mode,
        node_split,
    })
}

/// Waits (bounded) until the communicator [`begin`] started is ready, then splits the
/// measuring communicators from it. A non-blocking init that does not become ready is aborted
/// here, after the other processes are told.
pub(super) fn finish(
    thread: &GpuThread,
    start: &Start,
    opening: CommsStarted<'static>,
) -> Result<Comms<'static>, RunError> {
    let (dev, rank) = (thread.device, start.rank);
    let init_err = |e| init_error(dev, rank, start.nranks, WaitError::Nccl(e));
    let CommsStarted {
        parent,
        mode,
        node_split,
    } = opening;
    // A process gone mid-init (the team's watch fails the team) ends the wait at once.
    let stop = || start.team.is_failed();
    // What is split from the ready communicator (`split_off`): a blocking one measures itself,
    // and so does a non-blocking one outside `split` mode, which splits nothing.
    let (parent, splits) = match parent {
        Opening::Ready(comm) => (comm, (None, false)),
        Opening::OnThread(pending) => {
            let comm = pending
                .wait(&stop)
                .map_err(|e| init_error(dev, rank, start.nranks, e))?;
            (comm, (node_split, false))
        }
        Opening::Connecting(parent) => match parent.ready_unless(&stop) {
            Ok(parent) if mode == CommMode::Split => (parent, (node_split, true)),
            Ok(parent) => (parent, (None, false)),
            Err((e, parent)) => {
                let e = init_error(dev, rank, start.nranks, e);
                // The others first: the abort may take its whole bound.
                start.team.fail(e.message());
                parent.abort_within(ABORT_WITHIN);
                return Err(e);
            }
        },
    };
    let (comm, node_comm) = split_off(parent, splits.0, splits.1).map_err(init_err)?;
    Ok(Comms { comm, node_comm })
}

/// The communicators split from a ready `parent`: this node's (`node_split`: color, key), then,
/// with `to_blocking`, the blocking one over all ranks that measures (the parent itself without).
/// Every rank makes the same splits in the same order (each is collective over the parent).
fn split_off<'a>(
    parent: Comm<'a>,
    node_split: Option<(i32, i32)>,
    to_blocking: bool,
) -> Result<(Comm<'a>, Option<Comm<'a>>), NcclError> {
    let node_comm = match node_split {
        Some((color, key)) => parent.split_blocking(color, key).transpose()?,
        None => None,
    };
    let comm = match to_blocking.then(|| parent.into_blocking()).flatten() {
        Some(child) => child?,
        None => parent,
    };
    Ok((comm, node_comm))
}

/// The error of an init that did not become ready.
fn init_error(dev: usize, rank: u32, nranks: u32, e: WaitError) -> RunError {
    match e {
        WaitError::Nccl(e) => RunError::Runtime(format!("GPU {dev} (rank {rank}): NCCL init: {e}")),
        WaitError::Deadline => RunError::Timeout(format!(
            "GPU {dev} (rank {rank}): NCCL init of {nranks} ranks did not finish"
        )),
        WaitError::Stopped => RunError::Stopped(format!(
            "GPU {dev} (rank {rank}): NCCL init stopped: another process failed"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::nccl::fake::{self, Script, World};
    use std::time::{Duration, Instant};

    /// A non-blocking parent as `begin` starts it on a multi-node check, waited for as `finish`
    /// waits for it.
    fn ready_parent(world: &'static World, deadline: Instant) -> Comm<'static> {
        let parent = Comm::start_init(fake::nccl(), 2, world.id(), 0, deadline, false)
            .expect("the fake init starts");
        match parent.ready_unless(&|| false) {
            Ok(parent) => parent,
            Err((e, _)) => panic!("the fake init completes: {e:?}"),
        }
    }

    #[test]
    fn the_second_split_waits_until_the_first_one_completed_on_the_parent() {
        // NCCL writes the child's handle before it sets the parent's state back to success;
        // here the parent still reads ncclInProgress for 5 polls after the handle appeared.
        let world = World::new(Script {
            busy_polls: 3,
            split_lag: Some(5),
            handle_lag: 0,
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let parent = ready_parent(world, deadline);
        let made = split_off(parent, Some((1, 0)), true);
        assert_eq!(world.misuses(), Vec::<String>::new(), "{:#?}", world.log());
        let (comm, node_comm) = made.unwrap_or_else(|e| panic!("{e}: {:#?}", world.log()));
        assert!(node_comm.is_some());
        assert!(comm.poll().expect("polls") && node_comm.is_some_and(|c| c.poll().is_ok()));
        let log = world.log();
        let splits: Vec<usize> = (0..log.len())
            .filter(|&i| log[i].starts_with("ncclCommSplit"))
            .collect();
        assert_eq!(splits.len(), 2, "{log:#?}");
        assert!(
            log[splits[0]..splits[1]].contains(&"comm 0/2: done".to_string()),
            "the parent was confirmed done between the splits: {log:#?}"
        );
    }

    /// The other order: the parent reads success before the child's handle is written (what
    /// NCCL 2.28.9 did on one H200 in every 8-node check): the split waits for the handle too.
    #[test]
    fn a_split_waits_for_the_childs_handle_when_the_parent_is_done_first() {
        let world = World::new(Script {
            busy_polls: 2,
            split_lag: Some(0),
            handle_lag: 6,
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let parent = ready_parent(world, deadline);
        let made = split_off(parent, Some((1, 0)), true);
        assert_eq!(world.misuses(), Vec::<String>::new(), "{:#?}", world.log());
        let (comm, node_comm) = made.unwrap_or_else(|e| panic!("{e}: {:#?}", world.log()));
        assert!(comm.poll().expect("polls") && node_comm.is_some());
    }

    #[test]
    fn a_split_that_never_completes_ends_at_the_deadline() {
        let world = World::new(Script {
            busy_polls: 0,
            split_lag: None,
            handle_lag: 0,
        });
        let began = Instant::now();
        let parent = ready_parent(world, began + Duration::from_millis(300));
        let made = split_off(parent, Some((0, 0)), true);
        let e = made
            .err()
            .expect("a split still in progress at the deadline is an error");
        assert_eq!((e.call, e.code), ("ncclCommSplit", 7), "{e}");
        assert!(e.detail.contains("deadline"), "{e}");
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
        assert_eq!(world.misuses(), Vec::<String>::new(), "{:#?}", world.log());
    }

    #[test]
    fn an_init_that_never_completes_ends_at_the_deadline_and_can_be_aborted() {
        let world = World::new(Script {
            busy_polls: u32::MAX,
            split_lag: Some(0),
            handle_lag: 0,
        });
        let began = Instant::now();
        let connecting = Comm::start_init(
            fake::nccl(),
            2,
            world.id(),
            1,
            began + Duration::from_millis(200),
            false,
        )
        .expect("the fake init starts");
        let Err((e, connecting)) = connecting.ready_unless(&|| false) else {
            panic!(
                "an init in progress forever is not ready: {:#?}",
                world.log()
            );
        };
        assert!(matches!(e, WaitError::Deadline), "{e:?}");
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
        connecting.abort_within(ABORT_WITHIN);
        assert!(
            world
                .log()
                .contains(&"ncclCommAbort on comm 1/2".to_string()),
            "{:#?}",
            world.log()
        );
    }

    #[test]
    fn a_collective_on_the_parent_is_confirmed_done_before_the_next_call() {
        let world = World::new(Script {
            busy_polls: 4,
            split_lag: Some(2),
            handle_lag: 0,
        });
        let parent = ready_parent(world, Instant::now() + Duration::from_secs(20));
        let null = std::ptr::null_mut();
        parent
            .all_reduce(0, 0, 1, 7, 0, null)
            .expect("the fake all_reduce completes");
        let made = split_off(parent, None, true);
        assert_eq!(world.misuses(), Vec::<String>::new(), "{:#?}", world.log());
        assert!(made.is_ok(), "{:#?}", world.log());
    }

    #[test]
    fn a_blocking_parent_keeps_measuring_and_gives_its_node_split() {
        let world = World::new(Script {
            busy_polls: 0,
            split_lag: Some(3),
            handle_lag: 0,
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let parent = Comm::init_blocking(fake::nccl(), 2, world.id(), 0, deadline)
            .expect("the fake blocking init");
        let (comm, node_comm) = split_off(parent, Some((0, 1)), false).expect("one split");
        assert!(node_comm.is_some() && comm.poll().is_ok());
        let splits = world
            .log()
            .iter()
            .filter(|l| l.starts_with("ncclCommSplit"))
            .count();
        assert_eq!(splits, 1, "{:#?}", world.log());
    }

    #[test]
    fn the_comm_mode_defaults_to_threaded_on_one_node_and_split_across_nodes() {
        assert_eq!(CommMode::parse(None, 1), CommMode::Threaded);
        assert_eq!(CommMode::parse(None, 2), CommMode::Split);
        assert_eq!(CommMode::parse(Some("split"), 1), CommMode::Split);
        assert_eq!(CommMode::parse(Some("threaded"), 4), CommMode::Threaded);
        assert_eq!(
            CommMode::parse(Some("nonblocking"), 1),
            CommMode::NonBlocking
        );
        assert_eq!(CommMode::parse(Some("blocking"), 1), CommMode::Blocking);
        assert_eq!(CommMode::parse(Some("Blocking"), 2), CommMode::Split);
    }
}
