//! A fake libnccl for the tests of the NCCL layer without a GPU: [`Nccl`]'s function table over
//! communicators that keep NCCL 2.28.9's non-blocking contract, so a wrong order of calls fails
//! every time instead of once in a few runs.
//!
//! What it models, from NCCL's own source (v2.28.9-1):
//! - `ncclCommInitRankConfig` with `blocking = 0`, and every enqueue on such a communicator,
//!   return `ncclInProgress`; the communicator is ready once `ncclCommGetAsyncError` stops
//!   saying `ncclInProgress` (here: after [`Script::busy_polls`] polls).
//! - `ncclCommSplit` on a non-blocking parent sets `*newcomm` to NULL, returns `ncclInProgress`
//!   and finishes on NCCL's group thread: `ncclCommInitRankFunc` stores the child's handle
//!   (init.cc, its `exit:` label) and only afterwards does `groupLaunch` set the parent's state
//!   back to `ncclSuccess` (group.cc, `ncclCommSetAsyncError(job->comm, ret)`). Between the two
//!   the parent still reads `ncclInProgress`: here for [`Script::split_lag`] polls of the
//!   parent after the child's handle appeared (a group thread descheduled for that long).
//! - Any call on a communicator whose last operation still reads `ncclInProgress` returns
//!   `ncclInvalidArgument`, as `ncclCommEnsureReady` does ("Attempt to use communicator before
//!   the previous operation returned ncclSuccess"); the fake also records it as a misuse.
//!
//! Each communicator is a leaked [`FakeComm`] (its address is the handle); its [`World`] (the
//! script and the log of calls) travels in the unique id, so tests running at once never share
//! state.

use super::library::{Nccl, NcclConfig, RawComm, RawStream, UniqueId};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

const SUCCESS: c_int = 0;
const INVALID_ARGUMENT: c_int = 4;
const IN_PROGRESS: c_int = 7;

/// How the fake communicators of one [`World`] behave.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// Polls of `ncclCommGetAsyncError` for which a non-blocking init or enqueue stays in progress.
    pub busy_polls: u32,
    /// Polls of the parent for which it still reads `ncclInProgress` after a split wrote the
    /// child's handle; `None`: the split never completes.
    pub split_lag: Option<u32>,
    /// Polls of the parent for which it already reads `ncclSuccess` while the child's handle
    /// is not written yet: the other order, seen on one H200 (NCCL 2.28.9, 8 emulated nodes:
    /// every check that trusted the parent's state alone found no communicator).
    pub handle_lag: u32,
}

/// The script and the log of the calls of one test's communicators.
pub struct World {
    script: Script,
    log: Mutex<Vec<String>>,
}

impl World {
    /// A world that lives for the rest of the test process (the handles point into it).
    pub fn new(script: Script) -> &'static World {
        Box::leak(Box::new(World {
            script,
            log: Mutex::new(Vec::new()),
        }))
    }

    /// The unique id that makes `ncclCommInitRankConfig` create communicators of this world.
    pub fn id(&'static self) -> UniqueId {
        let mut id = UniqueId { internal: [0; 128] };
        id.internal[..8].copy_from_slice(&(self as *const World as usize).to_le_bytes());
        id
    }

    /// Every call the fake saw, in order.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The calls made on a communicator whose previous operation had not returned ncclSuccess.
    pub fn misuses(&self) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|l| l.starts_with("MISUSE"))
            .collect()
    }

    fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

/// What a communicator is still doing.
enum Job {
    /// An init or an enqueue: in progress for this many more polls.
    Busy(u32),
    /// A split: the child's handle not yet written to `out` (`written` false), then the
    /// parent in progress for `lag` more polls (`None`: forever).
    Split {
        out: usize,
        child: usize,
        written: bool,
        lag: Option<u32>,
        hold: u32,
    },
}

/// One fake communicator; its address is its handle.
struct FakeComm {
    world: &'static World,
    name: String,
    blocking: bool,
    job: Mutex<Option<Job>>,
}

impl FakeComm {
    fn create(world: &'static World, name: String, blocking: bool) -> RawComm {
        let job = (!blocking).then_some(Job::Busy(world.script.busy_polls));
        world.note(format!(
            "create {name} ({})",
            if blocking { "blocking" } else { "non-blocking" }
        ));
        Box::into_raw(Box::new(FakeComm {
            world,
            name,
            blocking,
            job: Mutex::new(job),
        })) as RawComm
    }

    /// The communicator behind a handle this fake made.
    fn of(raw: RawComm) -> &'static FakeComm {
        // SAFETY: NCCL's callers only pass handles NCCL made: here [`FakeComm::create`]'s,
        // which are never freed.
        unsafe { &*(raw as *const FakeComm) }
    }

    /// `ncclCommEnsureReady`: `Err(ncclInvalidArgument)` while the last operation is in progress.
    fn ensure_ready(&self, call: &str) -> Result<(), c_int> {
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner());
        if job.is_some() {
            MISUSED.store(true, Ordering::Relaxed);
            self.world.note(format!(
                "MISUSE {call} on {} before its previous operation returned ncclSuccess",
                self.name
            ));
            return Err(INVALID_ARGUMENT);
        }
        Ok(())
    }

    /// One poll of `ncclCommGetAsyncError`: advances the job, says whether it is still running.
    fn poll(&self) -> c_int {
        let mut job = self.job.lock().unwrap_or_else(|p| p.into_inner());
        let state = match job.as_mut() {
            None => return SUCCESS,
            Some(Job::Busy(0)) => SUCCESS,
            Some(Job::Busy(n)) => {
                *n -= 1;
                IN_PROGRESS
            }
            Some(Job::Split {
                out,
                child,
                written,
                lag,
                hold,
            }) => {
                if !*written && *hold > 0 {
                    *hold -= 1;
                    return SUCCESS;
                }
                if !*written {
                    // SAFETY: `out` is the caller's newcomm, which outlives the split.
                    let out = unsafe { &*(*out as *const AtomicPtr<c_void>) };
                    out.store(*child as RawComm, Ordering::Release);
                    *written = true;
                    self.world
                        .note(format!("{}: child handle written", self.name));
                }
                match lag {
                    None => IN_PROGRESS,
                    Some(0) => SUCCESS,
                    Some(k) => {
                        *k -= 1;
                        IN_PROGRESS
                    }
                }
            }
        };
        if state == SUCCESS {
            *job = None;
            self.world.note(format!("{}: done", self.name));
        }
        state
    }

    /// An enqueue (a collective, a send): in progress for a while on a non-blocking communicator.
    fn enqueue(&self, call: &str) -> c_int {
        if let Err(rc) = self.ensure_ready(call) {
            return rc;
        }
        self.world.note(format!("{call} on {}", self.name));
        if self.blocking {
            return SUCCESS;
        }
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Job::Busy(self.world.script.busy_polls));
        IN_PROGRESS
    }
}

/// Whether any call was refused as a misuse (what `ncclGetLastError` then reports). Static as
/// the library's own last error is: process-wide (tests only).
static MISUSED: AtomicBool = AtomicBool::new(false);

/// The fake library: the same table for every test (the behaviour lives in each [`World`]).
pub fn nccl() -> &'static Nccl {
    static FAKE: OnceLock<Nccl> = OnceLock::new();
    FAKE.get_or_init(|| Nccl {
        // A handle on this test binary itself: the table below needs no library of its own.
        _lib: libloading::os::unix::Library::this().into(),
        path: "fake-libnccl".into(),
        version: 22809,
        get_unique_id,
        init_rank_config,
        async_error,
        split: Some(split),
        abort,
        error_string,
        last_error: Some(last_error),
        mem_alloc: None,
        group_start: group_call,
        group_end: group_call,
        all_reduce,
        all_gather,
        reduce_scatter,
        broadcast,
        send,
        recv,
        alltoall: None,
    })
}

extern "C" fn get_unique_id(id: *mut UniqueId) -> c_int {
    // SAFETY: the caller's id, as ncclGetUniqueId writes it.
    unsafe { (*id).internal = [0; 128] };
    SUCCESS
}

extern "C" fn init_rank_config(
    out: *mut RawComm,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    cfg: *mut NcclConfig,
) -> c_int {
    let mut addr = [0u8; 8];
    addr.copy_from_slice(&id.internal[..8]);
    let world = usize::from_le_bytes(addr) as *const World;
    if world.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a non-null id address is a leaked World's ([`World::id`]); cfg and out are the
    // caller's, as for ncclCommInitRankConfig.
    let (world, blocking) = unsafe { (&*world, (*cfg).blocking != 0) };
    let comm = FakeComm::create(world, format!("comm {rank}/{nranks}"), blocking);
    // SAFETY: as above.
    unsafe { *out = comm };
    if blocking {
        SUCCESS
    } else {
        IN_PROGRESS
    }
}

extern "C" fn async_error(comm: RawComm, state: *mut c_int) -> c_int {
    let polled = FakeComm::of(comm).poll();
    // SAFETY: the caller's out-parameter, as for ncclCommGetAsyncError.
    unsafe { *state = polled };
    SUCCESS
}

extern "C" fn split(
    comm: RawComm,
    color: c_int,
    key: c_int,
    out: *mut RawComm,
    cfg: *mut NcclConfig,
) -> c_int {
    let parent = FakeComm::of(comm);
    if let Err(rc) = parent.ensure_ready("ncclCommSplit") {
        return rc;
    }
    // init.cc: "*newcomm should be NCCL_COMM_NULL until comm split fully complete".
    // SAFETY: out and cfg are the caller's, as for ncclCommSplit.
    let blocking = unsafe {
        *out = std::ptr::null_mut();
        (*cfg).blocking != 0
    };
    let name = format!("{}/split({color},{key})", parent.name);
    let child = FakeComm::create(parent.world, name, blocking);
    parent
        .world
        .note(format!("ncclCommSplit on {}", parent.name));
    if parent.blocking {
        // A blocking parent's group runs on the calling thread: done when the call returns.
        // SAFETY: as above.
        unsafe { *out = child };
        return SUCCESS;
    }
    *parent.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(Job::Split {
        out: out as usize,
        child: child as usize,
        written: false,
        lag: parent.world.script.split_lag,
        hold: parent.world.script.handle_lag,
    });
    IN_PROGRESS
}

extern "C" fn abort(comm: RawComm) -> c_int {
    let c = FakeComm::of(comm);
    c.world.note(format!("ncclCommAbort on {}", c.name));
    SUCCESS
}

extern "C" fn error_string(code: c_int) -> *const c_char {
    match code {
        SUCCESS => c"no error",
        INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        IN_PROGRESS => c"NCCL operation in progress",
        _ => c"unhandled error",
    }
    .as_ptr()
}

extern "C" fn last_error(_comm: RawComm) -> *const c_char {
    if MISUSED.load(Ordering::Relaxed) {
        c"Attempt to use communicator before the previous operation returned ncclSuccess".as_ptr()
    } else {
        c"".as_ptr()
    }
}

extern "C" fn group_call() -> c_int {
    SUCCESS
}

extern "C" fn all_reduce(
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: c_int,
    _: c_int,
    comm: RawComm,
    _: RawStream,
) -> c_int {
    FakeComm::of(comm).enqueue("ncclAllReduce")
}

extern "C" fn reduce_scatter(
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: c_int,
    _: c_int,
    comm: RawComm,
    _: RawStream,
) -> c_int {
    FakeComm::of(comm).enqueue("ncclReduceScatter")
}

extern "C" fn all_gather(
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: c_int,
    comm: RawComm,
    _: RawStream,
) -> c_int {
    FakeComm::of(comm).enqueue("ncclAllGather")
}

extern "C" fn broadcast(
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: c_int,
    _: c_int,
    comm: RawComm,
    _: RawStream,
) -> c_int {
    FakeComm::of(comm).enqueue("ncclBroadcast")
}

extern "C" fn send(
    _: *const c_void,
    _: usize,
    _: c_int,
    _: c_int,
    comm: RawComm,
    _: RawStream,
) -> c_int {
    FakeComm::of(comm).enqueue("ncclSend")
}

extern "C" fn recv(
    _: *mut c_void,
    _: usize,
    _: c_int,
    _: c_int,
    comm: RawComm,
    _: RawStream,
) -> c_int {
    FakeComm::of(comm).enqueue("ncclRecv")
}
