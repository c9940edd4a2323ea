//! A GPU thread's communicators: the check's own (bounded non-blocking init, then a blocking
//! child for measuring) and, on multi-node checks, one of its node for the GPU pairs.

use super::{GpuThread, RunError, Start};
use crate::measure::nccl::{Comm, NcclError, PendingComm, WaitError};

/// Which communicator measures and how its init is bounded. `threaded` (the default on one
/// node): a blocking init on a thread of its own, waited for until the deadline or another
/// process's failure (`nccl::PendingComm`: the floor program's cost, but an init that never
/// returns cannot be aborted). `split` (the default across nodes, where a peer can vanish
/// mid-init and the node's communicator is split off anyway): a non-blocking init bounded by
/// the deadline and abortable, then a blocking communicator split from it (see
/// `Comm::into_blocking`). `nonblocking`: the non-blocking one measures (slow enqueues).
/// `blocking`: a blocking init on the GPU thread, bounded only by the watchdog. Set by
/// `NCCL_CHECK_COMM_MODE`, for diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommMode {
    Threaded,
    Split,
    NonBlocking,
    Blocking,
}

impl CommMode {
    /// From the value of `NCCL_CHECK_COMM_MODE` (anything else: the default for `nodes`).
    pub(super) fn parse(value: Option<&str>, nodes: u32) -> CommMode {
        match value {
            Some("threaded") => CommMode::Threaded,
            Some("split") => CommMode::Split,
            Some("nonblocking") => CommMode::NonBlocking,
            Some("blocking") => CommMode::Blocking,
            _ if nodes <= 1 => CommMode::Threaded,
            _ => CommMode::Split,
        }
    }
}

/// The communicators of one GPU thread.
pub(super) struct Comms<'a> {
    pub comm: Comm<'a>,
    /// This node's GPUs only (multi-node checks), for the GPU pair matrix.
    pub node_comm: Option<Comm<'a>>,
    /// Whether the non-blocking init finished (always Ok for the blocking modes).
    pub ready: Result<(), WaitError>,
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

/// The communicator being made: its handle (non-blocking or already ready), or the thread
/// that will hand it over.
enum Opening<'a> {
    Started(Comm<'a>),
    OnThread(PendingComm),
}

impl CommsStarted<'_> {
    /// Gives the communicator up (bounded): this thread failed before it was ready. A
    /// threaded init aborts its communicator itself once it returns and finds nobody waiting.
    pub(super) fn abort(self) {
        if let Opening::Started(parent) = self.parent {
            parent.abort_within(std::time::Duration::from_millis(500));
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
    let init_err =
        |e: NcclError| RunError::Runtime(format!("GPU {dev} (rank {rank}): NCCL init: {e}"));
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
    if mode == CommMode::Blocking {
        let parent =
            Comm::init_blocking(nccl, nranks, start.id, rank, thread.deadline).map_err(init_err)?;
        return Ok(CommsStarted {
            parent: Opening::Started(parent),
            mode,
            node_split: None,
        });
    }
    if mode == CommMode::Threaded {
        let ctx = gpu.ctx.clone();
        let bind = Box::new(move || ctx.bind_to_thread().map_err(|e| e.to_string()));
        let pending = PendingComm::start(nccl, nranks, start.id, rank, thread.deadline, bind)
            .map_err(init_err)?;
        return Ok(CommsStarted {
            parent: Opening::OnThread(pending),
            mode,
            node_split,
        });
    }
    // A node-local child must not share: shared children get the parent's few
    // point-to-point channels, sized for the network (measured on H200 with sockets
    // between emulated nodes: an NVLink pair at 34.6 GB/s instead of ~300).
    let share = node_split.is_none();
    let parent =
        Comm::start_init(nccl, nranks, start.id, rank, thread.deadline, share).map_err(init_err)?;
    Ok(CommsStarted {
        parent: Opening::Started(parent),
        mode,
        node_split,
    })
}

/// Waits (bounded) until the communicator [`begin`] started is ready, then splits the
/// measuring communicators from it. An error that NCCL reports while connecting comes back in
/// `ready`, so the caller can still abort the communicator.
pub(super) fn finish(
    thread: &GpuThread,
    start: &Start,
    opening: CommsStarted<'static>,
) -> Result<Comms<'static>, RunError> {
    let (dev, rank) = (thread.device, start.rank);
    let init_err =
        |e: NcclError| RunError::Runtime(format!("GPU {dev} (rank {rank}): NCCL init: {e}"));
    let CommsStarted {
        parent,
        mode,
        node_split,
    } = opening;
    let parent = match parent {
        Opening::Started(parent) => parent,
        Opening::OnThread(pending) => {
            // A process gone mid-init (the team's watch fails the team) ends the wait at once.
            let comm = pending
                .wait(&|| start.team.is_failed())
                .map_err(|e| init_error(dev, rank, start.nranks, e))?;
            let node_comm = match node_split {
                Some((color, key)) => comm
                    .split_blocking(color, key)
                    .transpose()
                    .map_err(init_err)?,
                None => None,
            };
            return Ok(Comms {
                comm,
                node_comm,
                ready: Ok(()),
            });
        }
    };
    if mode == CommMode::Blocking {
        return Ok(Comms {
            comm: parent,
            node_comm: None,
            ready: Ok(()),
        });
    }
    // A process gone mid-init (the team's watch fails the team) ends the wait at once.
    let ready = parent.wait_ready_unless(&|| start.team.is_failed());
    if mode != CommMode::Split || ready.is_err() {
        return Ok(Comms {
            comm: parent,
            node_comm: None,
            ready,
        });
    }
    let node_comm = match node_split {
        Some((color, key)) => parent
            .split_blocking(color, key)
            .transpose()
            .map_err(init_err)?,
        None => None,
    };
    let comm = match parent.into_blocking() {
        Some(child) => child.map_err(init_err)?,
        None => parent,
    };
    Ok(Comms {
        comm,
        node_comm,
        ready: Ok(()),
    })
}

/// The error of a non-blocking init that did not become ready.
pub(super) fn init_error(dev: usize, rank: u32, nranks: u32, e: WaitError) -> RunError {
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
