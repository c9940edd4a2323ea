//! One NCCL communicator, created non-blocking so every wait on it has a deadline.
//!
//! Rules from nccl.h / the NCCL docs that shape this file: with `blocking = 0` any call may return
//! `ncclInProgress`, and then `ncclCommGetAsyncError` must be polled (polling is what completes
//! the pending work) until it reports success before the next NCCL call; on a deadline,
//! `ncclCommAbort` unblocks NCCL's threads and sockets.
//!
//! Two types keep that rule: a [`Connecting`] (an init not yet confirmed) offers only the wait
//! and the abort, and every call on a [`Comm`] returns through `Comm::settle`, which polls until
//! the call's work is confirmed done, so no operation of a `Comm` is pending between two calls.
//! A split counts as an operation of its parent: done when the parent says so, not when the
//! child's handle appears (NCCL writes that first). The operations themselves: `ops.rs`.

// Stream handles are opaque CUDA handles passed through to NCCL, never dereferenced here.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::error::{NcclError, IN_PROGRESS};
use super::library::{Nccl, NcclConfig, RawComm, UniqueId};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// A communicator of one GPU, owned by the thread that drives that GPU.
pub struct Comm<'a> {
    pub(super) nccl: &'a Nccl,
    pub(super) raw: RawComm,
    /// Every wait on this communicator ends by this instant.
    pub deadline: Instant,
}

/// A non-blocking communicator whose init may still be running ([`Comm::start_init`]). NCCL
/// takes no other call on it before its init is confirmed complete, so this offers only the
/// wait that confirms it, and the abort: a split or a collective on it does not compile.
pub struct Connecting<'a>(Comm<'a>);

impl<'a> Connecting<'a> {
    /// The communicator once its init completed; the error and this one back (to abort) when
    /// NCCL failed it, the deadline passed or `stop` said so (asked every 64 polls).
    pub fn ready_unless(
        self,
        stop: &dyn Fn() -> bool,
    ) -> Result<Comm<'a>, (WaitError, Connecting<'a>)> {
        match self.0.wait_ready_unless(stop) {
            Ok(()) => Ok(self.0),
            Err(e) => Err((e, self)),
        }
    }

    /// [`Comm::abort_within`].
    pub fn abort_within(self, within: Duration) {
        self.0.abort_within(within)
    }
}

/// Why a wait ended without success.
#[derive(Debug)]
pub enum WaitError {
    Nccl(NcclError),
    Deadline,
    /// The caller's `stop` said so (another process is gone: the init cannot finish).
    Stopped,
}

impl WaitError {
    /// As an error of NCCL's `call`: a deadline or a stop as `ncclInProgress` with `detail`.
    fn or_in_progress(self, call: &'static str, detail: &str) -> NcclError {
        match self {
            WaitError::Nccl(e) => e,
            WaitError::Deadline | WaitError::Stopped => NcclError::new(IN_PROGRESS, call, detail),
        }
    }
}

impl<'a> Comm<'a> {
    /// Starts `ncclCommInitRankConfig` non-blocking: usable once [`Connecting::ready_unless`]
    /// confirmed it.
    pub fn start_init(
        nccl: &'a Nccl,
        nranks: u32,
        id: UniqueId,
        rank: u32,
        deadline: Instant,
        share_with_children: bool,
    ) -> Result<Connecting<'a>, NcclError> {
        // splitShare is read from the *parent* (init.cc ncclCommInitChildComm): with it, the
        // measuring child reuses the parent's resources (cheap, into_blocking), but every child
        // is also limited to the parent's channels; see split_blocking.
        let mut cfg = NcclConfig {
            split_share: share_with_children as i32,
            ..NcclConfig::non_blocking()
        };
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: cfg and raw outlive the call; NCCL copies the config.
        let rc =
            unsafe { (nccl.init_rank_config)(&mut raw, nranks as i32, id, rank as i32, &mut cfg) };
        nccl.check(rc, "ncclCommInitRankConfig", raw)?;
        Ok(Connecting(Comm::of(nccl, raw, deadline)))
    }

    /// The communicator of `raw`, a handle NCCL returned: an init started or done (here or on
    /// another thread, `pending`), a split's child.
    pub(super) fn of(nccl: &'a Nccl, raw: RawComm, deadline: Instant) -> Comm<'a> {
        Comm {
            nccl,
            raw,
            deadline,
        }
    }

    /// Starts `ncclCommInitRankConfig` blocking (the `blocking` comm mode): the call returns
    /// when the communicator is ready; only the watchdog bounds it.
    pub fn init_blocking(
        nccl: &'a Nccl,
        nranks: u32,
        id: UniqueId,
        rank: u32,
        deadline: Instant,
    ) -> Result<Comm<'a>, NcclError> {
        let mut cfg = NcclConfig::blocking_shared();
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: cfg and raw outlive the call; NCCL copies the config.
        let rc =
            unsafe { (nccl.init_rank_config)(&mut raw, nranks as i32, id, rank as i32, &mut cfg) };
        nccl.check(rc, "ncclCommInitRankConfig", raw)?;
        Ok(Comm::of(nccl, raw, deadline))
    }

    /// A blocking communicator over the same ranks, split from this one.
    ///
    /// Why: on a non-blocking communicator NCCL finishes every launch on a thread it creates
    /// per `ncclGroupEnd` (group.cc), so each enqueue costs 50-170 us (measured on 4x H200,
    /// 2026-11-21): more than a 32 MiB all_gather takes on the GPUs. nccl-tests measures with
    /// a blocking communicator, whose enqueue costs a few microseconds. The split shares the
    /// parent's resources (`splitShare = 1`), so it costs far less than a second init.
    /// `None` when the library has no `ncclCommSplit` (before 2.18).
    pub fn into_blocking(&self) -> Option<Result<Comm<'a>, NcclError>> {
        self.split_blocking(0, 0)
    }

    /// A blocking communicator of the ranks that pass the same `color`, ordered by `key` (then
    /// by rank). Collective over all ranks of `self`; bounded by `self.deadline`. Whether the
    /// child shares the parent's resources was fixed at the parent's init (`start_init`).
    pub fn split_blocking(&self, color: i32, key: i32) -> Option<Result<Comm<'a>, NcclError>> {
        let split = self.nccl.split?;
        let mut cfg = NcclConfig::blocking_shared();
        // NCCL writes the child's handle from its own thread (init.cc: "*newcomm should be
        // NCCL_COMM_NULL until comm split fully complete"), so the out-parameter is an atomic.
        let out = std::sync::atomic::AtomicPtr::<c_void>::new(std::ptr::null_mut());
        // SAFETY: self.raw is a ready communicator; cfg and `out` outlive the call and the wait
        // below, which returns only once NCCL is done with the split (or at the deadline).
        let rc = unsafe { split(self.raw, color, key, out.as_ptr() as *mut RawComm, &mut cfg) };
        // The split is an operation of the parent: on a non-blocking parent it is done when
        // the parent's state leaves ncclInProgress, not when the child's handle appears. NCCL's
        // group thread writes the handle first (ncclCommInitRankFunc) and sets the parent's
        // state afterwards (groupLaunch): a next split in between is refused with
        // ncclInvalidArgument ("Attempt to use communicator before the previous operation
        // returned ncclSuccess", ncclCommEnsureReady), as 1 in 2 32-node checks on one H200 were.
        // Seen on one H200 (NCCL 2.28.9, 8 emulated nodes): the parent leaves ncclInProgress
        // before the handle is written as well, so the split is done only when both hold: the
        // handle is there and the parent is no longer in progress.
        if let Err(e) = self.nccl.check(rc, "ncclCommSplit", self.raw) {
            return Some(Err(e));
        }
        let raw = match self.split_done(&out) {
            Ok(raw) => raw,
            Err(e) => return Some(Err(e)),
        };
        let child = Comm::of(self.nccl, raw, self.deadline);
        let late = |e: WaitError| {
            e.or_in_progress("ncclCommSplit", "the child was not ready at the deadline")
        };
        Some(child.wait_ready().map(|()| child).map_err(late))
    }

    /// Polls until a split of this communicator wrote its child's handle into `out` and this
    /// communicator left ncclInProgress (in whichever order NCCL's thread does the two), or it
    /// failed, or the deadline passed.
    fn split_done(&self, out: &std::sync::atomic::AtomicPtr<c_void>) -> Result<RawComm, NcclError> {
        let began = Instant::now();
        loop {
            let raw = out.load(std::sync::atomic::Ordering::Acquire) as RawComm;
            if self.poll()? && !raw.is_null() {
                return Ok(raw);
            }
            if Instant::now() >= self.deadline {
                let detail = if raw.is_null() {
                    "no communicator at the deadline"
                } else {
                    "the parent still in progress at the deadline"
                };
                return Err(NcclError::new(IN_PROGRESS, "ncclCommSplit", detail));
            }
            if began.elapsed() < Duration::from_millis(2) {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// `Ok(true)` when ready, `Ok(false)` while in progress, the error otherwise.
    pub fn poll(&self) -> Result<bool, NcclError> {
        let mut state = 0;
        // SAFETY: raw is a communicator handle from ncclCommInitRankConfig.
        let rc = unsafe { (self.nccl.async_error)(self.raw, &mut state) };
        self.nccl.check(rc, "ncclCommGetAsyncError", self.raw)?;
        match state {
            0 => Ok(true),
            IN_PROGRESS => Ok(false),
            code => Err(self.nccl.error(code, "ncclCommGetAsyncError", self.raw)),
        }
    }

    /// Polls until the communicator is ready, it fails, or the deadline passes.
    ///
    /// On a non-blocking communicator every enqueue returns `ncclInProgress` and NCCL finishes
    /// the launch on a thread of its own (group.cc), typically within tens of microseconds. The
    /// first millisecond is a busy poll: measured on 4x H200 (2026-11-21), yielding and
    /// then sleeping 200 us here made each enqueue cost 60-170 us, longer than a 32 MiB
    /// all_gather itself, so the timed loop measured our launch rate instead of the GPUs.
    fn wait_ready(&self) -> Result<(), WaitError> {
        self.wait_ready_unless(&|| false)
    }

    /// [`Comm::wait_ready`], ended early with [`WaitError::Stopped`] once `stop` says so
    /// (asked every 64 polls).
    fn wait_ready_unless(&self, stop: &dyn Fn() -> bool) -> Result<(), WaitError> {
        let began = Instant::now();
        let mut polls = 0u32;
        loop {
            if self.poll().map_err(WaitError::Nccl)? {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 && Instant::now() >= self.deadline {
                return Err(WaitError::Deadline);
            }
            if polls % 64 == 0 && stop() {
                return Err(WaitError::Stopped);
            }
            let waited = began.elapsed();
            if waited < Duration::from_millis(1) {
                std::hint::spin_loop();
            } else if waited < Duration::from_millis(20) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Aborts the communicator from a helper thread and waits at most `within` for it: abort can
    /// itself block on NCCL's proxy thread, and the caller must still exit in time.
    pub fn abort_within(self, within: Duration) {
        let raw = self.raw as usize;
        let abort = self.nccl.abort;
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("nccl-abort".into())
            .spawn(move || {
                // SAFETY: the communicator is not used by anyone after this point.
                unsafe { abort(raw as RawComm) };
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(within);
        }
    }

    /// Handles the return code of every call on this communicator: `ncclInProgress` means the
    /// call's work is not done yet, and NCCL refuses any other call on the communicator until
    /// `ncclCommGetAsyncError` says so; this polls until then (bounded by the deadline), so no
    /// method returns with an operation of this communicator still pending.
    pub(super) fn settle(&self, rc: i32, call: &'static str) -> Result<(), NcclError> {
        self.nccl.check(rc, call, self.raw)?;
        if rc == IN_PROGRESS {
            let late = |e: WaitError| e.or_in_progress(call, "still in progress at the deadline");
            self.wait_ready().map_err(late)?;
        }
        Ok(())
    }
}
