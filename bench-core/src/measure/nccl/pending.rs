//! A blocking communicator whose init runs on a thread of its own, waited for with a deadline.
//!
//! Why: a blocking communicator is what nccl-tests measures with (enqueues of a few
//! microseconds), and one blocking init is the floor program's cost. The non-blocking init that
//! keeps the wait bounded needs a blocking child split from it to measure with, and that split
//! cost 60-90 ms a check (2x H200, NCCL 2.28.9: NCCL init 580-720 ms against the floor's
//! 440-640). Here the blocking init runs on its own thread while the GPU thread allocates and
//! probes, and the GPU thread's wait on it ends at the deadline or when another process of the
//! check failed. What this gives up: a blocking init cannot be aborted. An init that never
//! returns leaves its thread inside NCCL; the worker still ends in time (the verdict is known,
//! and the process leaves with `_exit`, which does not wait for it). An init that returns after
//! its waiter left is aborted by its own thread.

use super::comm::{Comm, WaitError};
use super::error::NcclError;
use super::library::{Nccl, RawComm, UniqueId};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A raw communicator handed from the init thread to its waiter.
struct Handed(RawComm);
// SAFETY: an NCCL communicator handle may be used from any thread, one at a time; the init
// thread hands it over and never touches it again.
unsafe impl Send for Handed {}

/// The init started by [`PendingComm::start`].
pub struct PendingComm {
    nccl: &'static Nccl,
    rx: Receiver<Result<Handed, NcclError>>,
    deadline: Instant,
}

impl PendingComm {
    /// Starts `ncclCommInitRankConfig` (blocking) on a new thread; `bind` makes the GPU's
    /// context current there first (NCCL inits the current device's communicator).
    pub fn start(
        nccl: &'static Nccl,
        nranks: u32,
        id: UniqueId,
        rank: u32,
        deadline: Instant,
        bind: Box<dyn FnOnce() -> Result<(), String> + Send>,
    ) -> Result<PendingComm, NcclError> {
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("nccl-init{rank}"))
            .spawn(move || {
                let result = bind()
                    .map_err(|detail| NcclError::new(1, "binding the GPU's context", detail))
                    .and_then(|()| Comm::init_blocking(nccl, nranks, id, rank, deadline))
                    .map(|comm| comm.raw);
                if let Err(mpsc::SendError(Ok(Handed(raw)))) = tx.send(result.map(Handed)) {
                    // The waiter left (deadline, another process failed): nobody will use it.
                    // SAFETY: raw is a ready communicator no one else holds.
                    unsafe { (nccl.abort)(raw) };
                }
            });
        match spawned {
            Ok(_) => Ok(PendingComm { nccl, rx, deadline }),
            Err(e) => Err(NcclError::new(
                1,
                "starting NCCL's init thread",
                e.to_string(),
            )),
        }
    }

    /// The communicator once its init returned; ends at the deadline ([`WaitError::Deadline`])
    /// or as soon as `stop` says so ([`WaitError::Stopped`], asked every 5 ms).
    pub fn wait(self, stop: &dyn Fn() -> bool) -> Result<Comm<'static>, WaitError> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WaitError::Deadline);
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(5))) {
                Ok(Ok(Handed(raw))) => return Ok(Comm::of(self.nccl, raw, self.deadline)),
                Ok(Err(e)) => return Err(WaitError::Nccl(e)),
                Err(RecvTimeoutError::Disconnected) => {
                    let detail = "NCCL's init thread ended without an answer";
                    return Err(WaitError::Nccl(NcclError::new(
                        1,
                        "ncclCommInitRankConfig",
                        detail,
                    )));
                }
                Err(RecvTimeoutError::Timeout) if stop() => return Err(WaitError::Stopped),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
