//! One thread per GPU: context, buffers, communicator, then the measurement loop, exactly in the
//! order nccl-tests uses (global warm-up sweep; per size and placement: one untimed operation, a
//! barrier, the timed loop with rotating buffer offsets, then the bit-exact check).

use crate::collectives::{Collective, Counts};
use crate::config::worker::Step;
use crate::cuda::{Gpu, GpuInfo, StreamWait};
use crate::loop_probe::LoopProbe;
use crate::nccl::{Comm, Issue, Nccl, UniqueId};
use crate::options::Options;
use crate::report::json::Phases;
use crate::report::{table, PairKind, PairRow, Placement, Row};
use crate::team::Team;
use std::io::Write;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Why a run ended in ERROR. The variant picks the exit code.
#[derive(Debug, Clone)]
pub enum RunError {
    Library(String),
    NoGpu(String),
    Rendezvous(String),
    Timeout(String),
    Runtime(String),
    /// This thread stopped because another one failed; never the reason shown if a real one exists.
    Stopped(String),
}

impl RunError {
    pub fn exit_code(&self) -> crate::verdict::ExitCode {
        use crate::verdict::ExitCode;
        match self {
            RunError::Library(_) => ExitCode::NcclLibrary,
            RunError::NoGpu(_) => ExitCode::NoGpu,
            RunError::Rendezvous(_) => ExitCode::Rendezvous,
            RunError::Timeout(_) => ExitCode::Timeout,
            RunError::Runtime(_) | RunError::Stopped(_) => ExitCode::Runtime,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            RunError::Library(m)
            | RunError::NoGpu(m)
            | RunError::Rendezvous(m)
            | RunError::Timeout(m)
            | RunError::Runtime(m)
            | RunError::Stopped(m) => m,
        }
    }
}

/// What each GPU thread is doing now, for the watchdog's "waiting for ..." line.
pub type Status = Arc<Mutex<Vec<String>>>;

/// What the main thread sends each GPU thread once the processes have met.
pub struct Start {
    pub team: Arc<Team>,
    pub id: UniqueId,
    pub rank: u32,
    pub nranks: u32,
    /// Global rank 0 prints the table.
    pub printer: bool,
    /// Local thread 0 keeps the rows for this process's report.
    pub recorder: bool,
    /// Per global rank: its node (host, or NCCL_HOSTID when set) and its index on that node.
    pub node_of: Arc<Vec<(String, usize)>>,
    pub nodes: u32,
    /// The GPU name thresholds are looked up by (this process's first GPU).
    pub gpu_name: Arc<String>,
    pub opts: &'static Options,
}

impl Start {
    /// Node names in order of their first rank.
    pub fn node_names(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for (n, _) in self.node_of.iter() {
            if !v.contains(n) {
                v.push(n.clone());
            }
        }
        v
    }

    /// Global ranks on `node`, by local index.
    pub fn ranks_of(&self, node: &str) -> Vec<usize> {
        let mut v: Vec<(usize, usize)> = self
            .node_of
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| n == node)
            .map(|(r, (_, i))| (*i, r))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, r)| r).collect()
    }

    /// The config's threshold for (collective, GPUs measured together, bytes), if any. GPU
    /// pairs (`sendrecv`, 2 GPUs) are always judged as one node.
    pub fn floor_rule(&self, collective: &str, gpus: u32, bytes: u64) -> Option<f64> {
        let rules = &self.opts.config.thresholds;
        crate::thresholds::floor(rules, &self.gpu_name, self.nodes, collective, gpus, bytes)
    }

    /// The floor of a collective row: the config's rule and `--min-busbw`, the higher.
    pub fn floor(&self, collective: &str, gpus: u32, bytes: u64) -> Option<f64> {
        crate::thresholds::with_min(
            self.floor_rule(collective, gpus, bytes),
            self.opts.min_busbw,
        )
    }
}

pub struct Outcome {
    pub info: Option<GpuInfo>,
    pub rank: Option<u32>,
    pub phases: Phases,
    pub rows: Vec<Row>,
    pub pairs: Vec<PairRow>,
    pub error: Option<RunError>,
}

pub struct GpuThread {
    pub slot: usize,
    pub device: usize,
    pub nccl: &'static Nccl,
    pub opts: &'static Options,
    pub deadline: Instant,
    pub status: Status,
}

impl GpuThread {
    fn set_status(&self, what: String) {
        if let Ok(mut s) = self.status.lock() {
            s[self.slot] = what;
        }
    }

    pub fn run(self, start: Receiver<Start>) -> Outcome {
        let mut out = Outcome {
            info: None,
            rank: None,
            phases: Phases::default(),
            rows: Vec::new(),
            pairs: Vec::new(),
            error: None,
        };
        let began = Instant::now();
        let dev = self.device;
        self.set_status(format!("GPU {dev}: creating its CUDA context"));
        let gpu = match Gpu::open(dev) {
            Ok(g) => g,
            Err(e) => {
                out.error = Some(RunError::Runtime(format!("GPU {dev}: CUDA context: {e}")));
                return out;
            }
        };
        out.info = crate::cuda::gpu_info(dev).ok();
        out.phases.contexts_ms = ms(began.elapsed());

        let t = Instant::now();
        self.set_status(format!("GPU {dev}: allocating buffers"));
        let bytes = self.opts.max_bytes.max(16);
        let buffers = match (Buffer::new(self.nccl, bytes), Buffer::new(self.nccl, bytes)) {
            (Ok(s), Ok(r)) => (s, r),
            (Err(e), _) | (_, Err(e)) => {
                out.error = Some(RunError::Runtime(format!(
                    "GPU {dev}: allocating 2 x {bytes} bytes: {e}"
                )));
                return out;
            }
        };
        out.phases.allocation_ms = ms(t.elapsed());

        self.set_status(format!(
            "GPU {dev}: waiting for the other processes (rendezvous)"
        ));
        let left = self.deadline.saturating_duration_since(Instant::now());
        let Ok(start) = start.recv_timeout(left) else {
            // The main thread reports why (rendezvous failed or timed out).
            out.error = Some(RunError::Stopped(format!("GPU {dev}: no start")));
            return out;
        };
        out.rank = Some(start.rank);
        let result = self.measure_all(&gpu, &buffers, &start, &mut out);
        if let Err(e) = result {
            start.team.fail(e.message());
            out.error = Some(e);
        }
        out
    }

    fn measure_all(
        &self,
        gpu: &Gpu,
        buffers: &(Buffer, Buffer),
        start: &Start,
        out: &mut Outcome,
    ) -> Result<(), RunError> {
        let dev = self.device;
        let (rank, nranks) = (start.rank, start.nranks);
        let t = Instant::now();
        self.set_status(format!("GPU {dev}: NCCL init (rank {rank} of {nranks})"));
        let init_err = |e: crate::nccl::NcclError| {
            RunError::Runtime(format!("GPU {dev} (rank {rank}): NCCL init: {e}"))
        };
        let mode = comm_mode();
        // With several nodes, GPU pairs are measured on a communicator of their own node: in a
        // multi-node communicator NCCL sizes point-to-point channels for the network, and an
        // NVLink pair measured there shows the network's share (34 GB/s instead of ~300 GB/s
        // on H200 with sockets between the nodes, 2026-11-21).
        let node_split = (start.nodes > 1).then(|| {
            let (node, local) = &start.node_of[rank as usize];
            let color = start
                .node_names()
                .iter()
                .position(|n| n == node)
                .unwrap_or(0);
            (color as i32, *local as i32)
        });
        let (comm, node_comm, ready) = if mode == CommMode::Blocking {
            (
                Comm::init_blocking(self.nccl, nranks, start.id, rank, self.deadline)
                    .map_err(init_err)?,
                None,
                Ok(()),
            )
        } else {
            // A node-local child must not share: shared children get the parent's few
            // point-to-point channels, sized for the network (measured on H200 with sockets
            // between emulated nodes: an NVLink pair at 34.6 GB/s instead of ~300).
            let share = node_split.is_none();
            let parent = Comm::start_init(self.nccl, nranks, start.id, rank, self.deadline, share)
                .map_err(init_err)?;
            let ready = parent.wait_ready();
            match (mode, ready) {
                (CommMode::Split, Ok(())) => {
                    let node_comm = match node_split {
                        Some((color, key)) => parent
                            .split_blocking(color, key)
                            .transpose()
                            .map_err(init_err)?,
                        None => None,
                    };
                    match parent.into_blocking() {
                        Some(child) => (child.map_err(init_err)?, node_comm, Ok(())),
                        None => (parent, node_comm, Ok(())),
                    }
                }
                (_, ready) => (parent, None, ready),
            }
        };
        out.phases.nccl_init_ms = ms(t.elapsed());
        let m = Measurer {
            thread: self,
            gpu,
            comm: &comm,
            node_comm: node_comm.as_ref(),
            team: &start.team,
            send: buffers.0.ptr,
            recv: buffers.1.ptr,
            rank,
            nranks,
        };
        let result = match ready {
            Ok(()) => m.run_plan(start, out),
            Err(crate::nccl::WaitError::Nccl(e)) => Err(RunError::Runtime(format!(
                "GPU {dev} (rank {rank}): NCCL init: {e}"
            ))),
            Err(crate::nccl::WaitError::Deadline) => Err(RunError::Timeout(format!(
                "GPU {dev} (rank {rank}): NCCL init of {nranks} ranks did not finish"
            ))),
        };
        match result {
            Ok(()) => {
                // Fast exit: the process ends right after the report; destroying communicators
                // would only add NCCL's teardown (~0.4 s) to the time to verdict.
                // (Comm has no Drop: the communicator is simply left to the process exit.)
                let _ = comm;
                Ok(())
            }
            Err(e) => {
                start.team.fail(e.message());
                comm.abort_within(std::time::Duration::from_millis(500));
                Err(e)
            }
        }
    }
}

struct Buffer {
    ptr: u64,
}

impl Buffer {
    /// ncclMemAlloc as nccl-tests uses from NCCL 2.19 (cuMem memory, registrable), else cuMemAlloc.
    fn new(nccl: &Nccl, bytes: u64) -> Result<Buffer, String> {
        match nccl.mem_alloc(bytes as usize) {
            Some(Ok(ptr)) => Ok(Buffer { ptr }),
            Some(Err(e)) => Err(e.to_string()),
            None => unsafe { cudarc::driver::result::malloc_sync(bytes as usize) }
                .map(|ptr| Buffer { ptr })
                .map_err(|e| e.to_string()),
        }
    }
}

struct Measurer<'a> {
    thread: &'a GpuThread,
    gpu: &'a Gpu,
    comm: &'a Comm<'a>,
    /// This node's GPUs only (multi-node checks), for the GPU pair matrix.
    node_comm: Option<&'a Comm<'a>>,
    team: &'a Team,
    send: u64,
    recv: u64,
    rank: u32,
    nranks: u32,
}

/// Which communicator measures. `split` (default): a non-blocking init bounded by the deadline,
/// then a blocking communicator split from it (see `Comm::into_blocking`). `nonblocking`: the
/// non-blocking one measures (slow enqueues). `blocking`: a blocking init, bounded only by the
/// watchdog. Set by `NCCL_CHECK_COMM_MODE`, for diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommMode {
    Split,
    NonBlocking,
    Blocking,
}

fn comm_mode() -> CommMode {
    match std::env::var("NCCL_CHECK_COMM_MODE").as_deref() {
        Ok("nonblocking") => CommMode::NonBlocking,
        Ok("blocking") => CommMode::Blocking,
        _ => CommMode::Split,
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

impl Measurer<'_> {
    fn opts(&self) -> &Options {
        self.thread.opts
    }

    fn err_runtime(&self, what: &str, e: impl std::fmt::Display) -> RunError {
        RunError::Runtime(format!(
            "GPU {} (rank {}): {what}: {e}",
            self.thread.device, self.rank
        ))
    }

    fn team_err(&self, e: String) -> RunError {
        if e.starts_with("stopped:") {
            RunError::Stopped(e)
        } else if e.contains("deadline") || e.contains("arrived") {
            RunError::Timeout(format!("rank {}: {e}", self.rank))
        } else {
            RunError::Rendezvous(format!("rank {}: {e}", self.rank))
        }
    }

    /// Enqueues one operation at iteration `iter`'s buffer offset.
    fn issue(
        &self,
        coll: &dyn Collective,
        c: &Counts,
        in_place: bool,
        iter: u64,
    ) -> Result<(), RunError> {
        let (send, recv) = self.pointers(c, in_place, iter);
        let o = self.opts();
        let issue = Issue {
            comm: self.comm,
            send,
            recv,
            count: c.param,
            elt: o.datatype.size(),
            dtype: o.datatype.code(),
            op: o.op.code(),
            root: o.root,
            rank: self.rank,
            nranks: self.nranks,
            stream: self.gpu.raw_stream(),
        };
        coll.issue(&issue)
            .map_err(|e| self.err_runtime(coll.name(), e))
    }

    /// nccl-tests' pointers: rotate through the buffer by whole operations (defeats caches), and
    /// in-place operations work inside the receive buffer at the rank's offsets.
    fn pointers(&self, c: &Counts, in_place: bool, iter: u64) -> (u64, u64) {
        let elt = self.opts().datatype.size();
        let total = c.bytes(elt);
        let steps = self.opts().max_bytes.checked_div(total).unwrap_or(1).max(1);
        let shift = total * (iter % steps);
        let rank = self.rank as u64;
        if in_place {
            let base = self.recv + shift;
            (
                base + c.send_inplace_offset * rank * elt,
                base + c.recv_inplace_offset * rank * elt,
            )
        } else {
            (self.send + shift, self.recv + shift)
        }
    }

    /// Waits for the stream, polling NCCL's async error and the team, until the deadline.
    fn wait(&self, what: &str) -> Result<(), RunError> {
        let mut n = 0u32;
        let polled = self.gpu.wait(self.thread.deadline, || {
            n = n.wrapping_add(1);
            if n % 256 == 0 && self.team.is_failed() {
                return Err(RunError::Stopped(format!(
                    "rank {}: stopped while waiting for {what}",
                    self.rank
                )));
            }
            match self.comm.poll() {
                Ok(_) => Ok(()),
                Err(e) => Err(self.err_runtime(what, e)),
            }
        });
        match polled {
            Ok(()) => Ok(()),
            Err(Ok(StreamWait::Cuda(e))) => Err(self.err_runtime(what, e)),
            Err(Ok(StreamWait::Deadline)) => Err(RunError::Timeout(format!(
                "GPU {} (rank {}): waiting for {what} to complete (a peer may be stuck or gone)",
                self.thread.device, self.rank
            ))),
            Err(Err(e)) => Err(e),
        }
    }

    fn run_plan(&self, start: &Start, out: &mut Outcome) -> Result<(), RunError> {
        let o = self.opts();
        self.team.barrier().map_err(|e| self.team_err(e))?;
        for (ci, step) in o.steps.iter().enumerate() {
            match step {
                Step::Collective {
                    collective,
                    sizes,
                    warmup,
                    iters,
                } => self.run_collective(ci, *collective, sizes, *warmup, *iters, start, out)?,
                Step::Pairs {
                    bytes,
                    warmup,
                    iters,
                } => self.run_pairs(*bytes, *warmup, *iters, start, out)?,
            }
        }
        Ok(())
    }

    fn phase(&self, start: &Start, what: &str) {
        if start.printer {
            eprintln!("nccl-check: {what}");
        }
    }

    /// Is this busbw below the threshold for (collective, GPUs, bytes)? Every rank asks the team,
    /// so all agree even if their processes see different GPU names.
    fn agree_slow(&self, slow: bool) -> Result<bool, RunError> {
        let s = self
            .team
            .sum(&[slow as u8 as f64])
            .map_err(|e| self.team_err(e))?;
        Ok(s[0] > 0.0)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_collective(
        &self,
        ci: usize,
        coll: &'static dyn Collective,
        sizes: &[u64],
        warmup: u32,
        iters: u32,
        start: &Start,
        out: &mut Outcome,
    ) -> Result<(), RunError> {
        let o = self.opts();
        let elt = o.datatype.size();
        let (min_bytes, max_bytes) = (sizes[0], sizes[sizes.len() - 1]);
        self.phase(
            start,
            &format!(
                "{} {}..{}",
                coll.name(),
                crate::size::human(min_bytes),
                crate::size::human(max_bytes)
            ),
        );
        if start.printer {
            print(&table::header(
                coll.nccl_tests_binary(),
                self.nranks as usize,
                min_bytes,
                max_bytes,
                o.step_factor,
                warmup,
                iters,
                o.check,
            ));
            print(&table::column_header());
        }
        self.thread.set_status(format!(
            "GPU {} (rank {}): {} warm-up",
            self.thread.device,
            self.rank,
            coll.name()
        ));
        let t = Instant::now();
        // nccl-tests' global warm-up (TimeTest): every size from min to max by doubling,
        // out-of-place, at rotating offsets, completing each size before the next.
        let mut size = min_bytes;
        while size <= max_bytes {
            let c = coll.counts(size / elt, elt, self.nranks as u64);
            for iter in 0..warmup as u64 {
                self.issue(coll, &c, false, iter)?;
            }
            self.wait(&format!("{} warm-up", coll.name()))?;
            if size == 0 {
                break;
            }
            size = size.saturating_mul(2);
        }
        out.phases.warmup_ms += ms(t.elapsed());
        let mut busbw_sum = 0.0;
        let mut wrong_ranks = 0.0;
        for (si, &size) in sizes.iter().enumerate() {
            let mut row = self.measure_row(ci, si, coll, size, iters, out, &mut wrong_ranks)?;
            let floor = start.floor(coll.name(), self.nranks, row.size);
            let slow = floor.is_some_and(|f| row.out_of_place.busbw.min(row.in_place.busbw) < f);
            if o.config.outliers.retest && self.agree_slow(slow)? {
                self.phase(
                    start,
                    &format!(
                        "{} {}: below threshold, measuring once more",
                        coll.name(),
                        crate::size::human(row.size)
                    ),
                );
                let again = self.measure_row(ci, si, coll, size, iters, out, &mut wrong_ranks)?;
                let first = (row.out_of_place.busbw, row.in_place.busbw);
                row = again;
                row.out_of_place.first_busbw = Some(first.0);
                row.in_place.first_busbw = Some(first.1);
            }
            busbw_sum += row.out_of_place.busbw + row.in_place.busbw;
            if start.printer {
                print(&format!("{}\n", table::row(&row)));
            }
            if start.recorder {
                out.rows.push(row);
            }
        }
        if start.printer {
            let rows = (sizes.len() * 2) as f64;
            print(&table::footer(
                coll.nccl_tests_binary(),
                wrong_ranks as u64,
                busbw_sum / rows,
            ));
        }
        Ok(())
    }

    /// Both placements of one size, combined over all ranks.
    #[allow(clippy::too_many_arguments)]
    fn measure_row(
        &self,
        ci: usize,
        si: usize,
        coll: &'static dyn Collective,
        size: u64,
        iters: u32,
        out: &mut Outcome,
        wrong_ranks: &mut f64,
    ) -> Result<Row, RunError> {
        let o = self.opts();
        let elt = o.datatype.size();
        let c = coll.counts(size / elt, elt, self.nranks as u64);
        let mut placements = [None, None];
        for (pi, in_place) in [false, true].into_iter().enumerate() {
            let seed = (ci as u32) << 24 | (si as u32) << 8 | (pi as u32) << 1;
            let what = format!(
                "{} {} {}",
                coll.name(),
                crate::size::human(c.bytes(elt)),
                if in_place { "in-place" } else { "out-of-place" }
            );
            self.thread.set_status(format!(
                "GPU {} (rank {}): {what}",
                self.thread.device, self.rank
            ));
            let (secs, wrong) = self.measure(coll, &c, in_place, seed, iters, &what, out)?;
            let wrong_val = wrong.map_or(-1.0, |w| w as f64);
            let sums = self
                .team
                .sum(&[secs, wrong_val.max(0.0), (wrong_val > 0.0) as u8 as f64])
                .map_err(|e| self.team_err(e))?;
            let time = sums[0] / self.nranks as f64;
            let algbw = if time > 0.0 {
                c.bytes(elt) as f64 / 1e9 / time
            } else {
                0.0
            };
            let busbw = algbw * coll.bus_factor(self.nranks as u64);
            *wrong_ranks += sums[2];
            placements[pi] = Some(Placement {
                time_us: time * 1e6,
                algbw,
                busbw,
                wrong: wrong.map(|_| sums[1] as u64),
                first_busbw: None,
            });
        }
        let [Some(oop), Some(ip)] = placements else {
            unreachable!("both placements measured")
        };
        Ok(Row {
            collective: coll.name(),
            size: c.bytes(elt),
            count: c.param,
            dtype: o.datatype.name(),
            redop: if coll.uses_op() { o.op.name() } else { "none" },
            root: if coll.uses_root() { o.root as i32 } else { -1 },
            out_of_place: oop,
            in_place: ip,
        })
    }

    /// The pair matrix: GPU pairs inside each node (rounds of disjoint pairs), then node pairs
    /// (GPU i of one node with GPU i of the other, all GPUs at once). Slow pairs, by the same
    /// rule the verdict uses, make the whole matrix run once more.
    fn run_pairs(
        &self,
        bytes: u64,
        warmup: u32,
        iters: u32,
        start: &Start,
        out: &mut Outcome,
    ) -> Result<(), RunError> {
        let o = self.opts();
        self.phase(
            start,
            &format!("pair matrix, sendrecv {}", crate::size::human(bytes)),
        );
        let mut rows = self.pair_matrix(bytes, warmup, iters, start, out)?;
        let floor = |c: &str, g: u32, b: u64| start.floor_rule(c, g, b);
        let slow =
            !crate::analysis::slow_pairs(&rows, o.config.outliers.fraction, &floor).is_empty();
        if o.config.outliers.retest && self.agree_slow(slow)? {
            self.phase(start, "slow pairs: measuring the pair matrix once more");
            let again = self.pair_matrix(bytes, warmup, iters, start, out)?;
            for (r, a) in rows.iter_mut().zip(again) {
                let first = r.busbw;
                *r = a;
                r.first_busbw = Some(first);
            }
        }
        if start.printer {
            let multi = start.nodes > 1;
            print(&format!("#\n# Pair matrix: sendrecv {} bytes, {iters} iterations, rounds of disjoint pairs\n#  {:>24}  {:>10}  {:>8}\n", bytes, "pair", "time(us)", "busbw"));
            for r in &rows {
                print(&format!(
                    "   {:>24}  {:>10.1}  {:>8.2}\n",
                    r.subject(multi),
                    r.time_us,
                    r.busbw
                ));
            }
        }
        if start.recorder {
            out.pairs.extend(rows);
        }
        Ok(())
    }

    fn pair_matrix(
        &self,
        bytes: u64,
        warmup: u32,
        iters: u32,
        start: &Start,
        out: &mut Outcome,
    ) -> Result<Vec<PairRow>, RunError> {
        let me = self.rank as usize;
        let n = self.nranks as usize;
        // GPU pairs: per node, rounds over its local ranks; all nodes run their rounds at once.
        let mut gpu_rounds: Vec<Vec<(usize, usize)>> = Vec::new();
        for node in start.node_names() {
            let locals = start.ranks_of(&node);
            for (k, round) in crate::pairs::rounds(locals.len()).into_iter().enumerate() {
                if gpu_rounds.len() <= k {
                    gpu_rounds.push(Vec::new());
                }
                gpu_rounds[k].extend(round.into_iter().map(|(a, b)| (locals[a], locals[b])));
            }
        }
        // Node pairs: GPU i of node A with GPU i of node B.
        let names = start.node_names();
        type NodeRound = (Vec<(usize, usize)>, Vec<(String, String)>);
        let mut node_rounds: Vec<NodeRound> = Vec::new();
        for round in crate::pairs::rounds(names.len()) {
            let mut ranks = Vec::new();
            let mut nodes = Vec::new();
            for (a, b) in round {
                let (ra, rb) = (start.ranks_of(&names[a]), start.ranks_of(&names[b]));
                for i in 0..ra.len().min(rb.len()) {
                    ranks.push((ra[i], rb[i]));
                }
                nodes.push((names[a].clone(), names[b].clone()));
            }
            node_rounds.push((ranks, nodes));
        }
        let mut rows = Vec::new();
        let elt = 1u64; // bytes as int8, like nccl-tests sendrecv -d int8 would count them
        let count = bytes / elt;
        for round in &gpu_rounds {
            let times = self.pair_round(round, me, n, count, warmup, iters, true, start, out)?;
            for &(a, b) in round {
                let t = times[a].max(times[b]);
                let (node, la) = start.node_of[a].clone();
                let lb = start.node_of[b].1;
                rows.push(PairRow {
                    kind: PairKind::Gpu,
                    node,
                    a: format!("GPU{la}"),
                    b: format!("GPU{lb}"),
                    ranks: (a as u32, b as u32),
                    bytes,
                    time_us: t * 1e6,
                    busbw: if t > 0.0 { bytes as f64 / 1e9 / t } else { 0.0 },
                    first_busbw: None,
                });
            }
        }
        for (round, nodes) in &node_rounds {
            let times = self.pair_round(round, me, n, count, warmup, iters, false, start, out)?;
            for (na, nb) in nodes {
                let members: Vec<&(usize, usize)> = round
                    .iter()
                    .filter(|(a, b)| &start.node_of[*a].0 == na && &start.node_of[*b].0 == nb)
                    .collect();
                let t = members
                    .iter()
                    .map(|&&(a, b)| times[a].max(times[b]))
                    .fold(0.0, f64::max);
                // All GPUs of the two nodes at once: the node pair's bandwidth is their sum.
                let total = bytes as f64 * members.len() as f64;
                rows.push(PairRow {
                    kind: PairKind::Node,
                    node: String::new(),
                    a: na.clone(),
                    b: nb.clone(),
                    ranks: members
                        .first()
                        .map_or((0, 0), |&&(a, b)| (a as u32, b as u32)),
                    bytes,
                    time_us: t * 1e6,
                    busbw: if t > 0.0 { total / 1e9 / t } else { 0.0 },
                    first_busbw: None,
                });
            }
        }
        Ok(rows)
    }

    /// One round: every rank in a pair exchanges `count` bytes with its partner (send and
    /// receive at once, as nccl-tests sendrecv with 2 GPUs), the others wait. Returns each
    /// rank's seconds per operation (0 for ranks without a partner), the same on every rank.
    #[allow(clippy::too_many_arguments)]
    fn pair_round(
        &self,
        round: &[(usize, usize)],
        me: usize,
        n: usize,
        count: u64,
        warmup: u32,
        iters: u32,
        in_node: bool,
        start: &Start,
        out: &mut Outcome,
    ) -> Result<Vec<f64>, RunError> {
        let partner = crate::pairs::partner(round, me);
        // Inside a node, on the node's own communicator when there is one: peers by local index.
        let (comm, peer_of): (&Comm, Box<dyn Fn(usize) -> u32>) = match (in_node, self.node_comm) {
            (true, Some(c)) => (c, Box::new(|p: usize| start.node_of[p].1 as u32)),
            _ => (self.comm, Box::new(|p: usize| p as u32)),
        };
        let what = match partner {
            Some(p) => format!("sendrecv with rank {p}"),
            None => "pair round (idle)".into(),
        };
        self.thread.set_status(format!(
            "GPU {} (rank {}): {what}",
            self.thread.device, self.rank
        ));
        let exchange = |iter: u64| -> Result<(), RunError> {
            let Some(p) = partner else { return Ok(()) };
            let steps = (self.opts().max_bytes / count.max(1)).max(1);
            let shift = count * (iter % steps);
            comm.send_recv(
                self.send + shift,
                peer_of(p),
                self.recv + shift,
                peer_of(p),
                count,
                0,
                self.gpu.raw_stream(),
            )
            .map_err(|e| self.err_runtime("sendrecv", e))
        };
        let t = Instant::now();
        for iter in 0..warmup.max(1) as u64 {
            exchange(iter)?;
        }
        self.wait(&what)?;
        out.phases.warmup_ms += ms(t.elapsed());
        self.team.barrier().map_err(|e| self.team_err(e))?;
        let t = Instant::now();
        for iter in 0..iters as u64 {
            exchange(iter)?;
        }
        self.wait(&what)?;
        let secs = if partner.is_some() {
            t.elapsed().as_secs_f64() / iters as f64
        } else {
            0.0
        };
        out.phases.timed_loop_ms += ms(t.elapsed());
        let mut mine = vec![0.0; n];
        mine[me] = secs;
        self.team.sum(&mine).map_err(|e| self.team_err(e))
    }

    /// One placement of one size: returns seconds per operation and the wrong-element count.
    #[allow(clippy::too_many_arguments)]
    fn measure(
        &self,
        coll: &dyn Collective,
        c: &Counts,
        in_place: bool,
        seed: u32,
        iters: u32,
        what: &str,
        out: &mut Outcome,
    ) -> Result<(f64, Option<u64>), RunError> {
        let o = self.opts();
        let elt = o.datatype.size();
        let (dt, op) = (o.datatype.code(), o.op.code());
        let t = Instant::now();
        let (input, _) = self.pointers(c, in_place, 0);
        self.gpu
            .fill(input, c.send, dt, op, seed, self.rank, self.nranks, 0)
            .map_err(|e| self.err_runtime("filling input", e))?;
        self.issue(coll, c, in_place, 0)?;
        self.wait(what)?;
        out.phases.warmup_ms += ms(t.elapsed());

        let mut probe = LoopProbe::new(self.gpu, iters)
            .map_err(|e| self.err_runtime("creating debug events", e))?;
        self.team.barrier().map_err(|e| self.team_err(e))?;
        let t = Instant::now();
        if let Some(p) = probe.as_mut() {
            p.start(self.gpu, t)
                .map_err(|e| self.err_runtime("recording a debug event", e))?;
        }
        for iter in 0..iters as u64 {
            self.issue(coll, c, in_place, iter)?;
            if let Some(p) = probe.as_mut() {
                p.enqueued(self.gpu)
                    .map_err(|e| self.err_runtime("recording a debug event", e))?;
            }
        }
        self.wait(what)?;
        let elapsed = t.elapsed();
        if let Some(p) = &probe {
            p.report(self.rank, what, elapsed);
        }
        out.phases.timed_loop_ms += ms(elapsed);
        let secs = elapsed.as_secs_f64() / iters as f64;

        if !o.check || (in_place && !coll.checks_in_place()) {
            return Ok((secs, None));
        }
        let t = Instant::now();
        let check_seed = seed | 1;
        let (input, output) = self.pointers(c, in_place, 0);
        self.gpu
            .fill(input, c.send, dt, op, check_seed, self.rank, self.nranks, 0)
            .map_err(|e| self.err_runtime("filling input", e))?;
        if !in_place {
            self.gpu
                .poison(output, c.recv * elt)
                .map_err(|e| self.err_runtime("clearing output", e))?;
        }
        self.issue(coll, c, in_place, 0)?;
        let expected = coll.expected(self.rank, self.nranks, o.root, c);
        self.gpu
            .verify(output, c.recv, dt, op, check_seed, self.nranks, expected)
            .map_err(|e| self.err_runtime("verifying", e))?;
        self.wait(&format!("{what} (check)"))?;
        let wrong = self
            .gpu
            .read_wrong()
            .map_err(|e| self.err_runtime("reading the check result", e))?;
        out.phases.verification_ms += ms(t.elapsed());
        Ok((secs, Some(wrong)))
    }
}
