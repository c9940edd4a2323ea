//! A GPU thread's run: the setup in its order (context, local probe, sharing, communicators),
//! the plan's steps through `timed::Measurer`, and giving up with the others told. The types it
//! works on (`GpuThread`, `Start`, `GpuOutcome`) are `runner`'s, shared with `timed` and `comms`.

use super::timed::{buffer, Measurer};
use super::{comms, ms, probe, shared, GpuOutcome, GpuThread, RunError, Start};
use crate::measure::cuda::Gpu;
use std::sync::mpsc::Receiver;
use std::time::Instant;

impl GpuThread {
    /// The local probe of this GPU into `out`, its time in the phases.
    fn probe(&self, gpu: &Gpu, out: &mut GpuOutcome) {
        let t = Instant::now();
        let probe = probe::measure(gpu, self.device, self.deadline);
        if let Ok(p) = &probe {
            // What the sum of own findings tells the other nodes of a GPU another process holds.
            self.own.probed(self.device, p.copy_gbs);
        }
        out.probe = Some(probe);
        out.phases.probe_ms = ms(t.elapsed());
    }

    /// Whether `NCCL_CHECK_SETUP` asks for this setup step in its older order.
    pub(super) fn old_setup(&self, step: &str) -> bool {
        setup_asks(self.opts.setup.as_deref(), step)
    }

    /// Time since the process started (its deadline less `--timeout`).
    fn since_start(&self) -> std::time::Duration {
        self.deadline
            .checked_sub(self.opts.timeout)
            .map_or(std::time::Duration::ZERO, |t0| t0.elapsed())
    }

    pub(super) fn set_status(&self, what: String) {
        if let Ok(mut s) = self.status.lock() {
            s[self.slot] = what;
        }
    }

    pub fn run(self, start: Receiver<Start>) -> GpuOutcome {
        let mut out = GpuOutcome::default();
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
        out.info = crate::measure::cuda::gpu_info(dev).ok();
        out.phases.contexts_ms = ms(began.elapsed());

        // One process has met itself by now (the rendezvous ends while the contexts start):
        // then NCCL's init starts at once, as the floor program starts it right after the
        // context, and connects on NCCL's own thread while this one allocates the buffers and
        // probes the GPU. Processes that may share a GPU keep the order below (they probe in
        // turns once they have met).
        let early_ok = !self.opts.shared_gpus && !self.old_setup("probe-first");
        let (early, held) = early_or_held(start.try_recv().ok(), early_ok);
        let opening = match &early {
            Some(s) => match self.begin_early(&gpu, s, &mut out) {
                Ok(o) => o,
                Err(e) => return self.give_up(e, Some(s), None, out),
            },
            None => None,
        };

        // The check kernels' PTX is compiled by the driver (or taken from its cache) while NCCL
        // connects, on the early path.
        self.set_status(format!("GPU {dev}: loading the check kernels"));
        if let Err(e) = gpu.load_kernels() {
            let e = RunError::Runtime(format!("GPU {dev}: loading the check kernels: {e}"));
            return self.give_up(e, early.as_ref().or(held.as_ref()), opening, out);
        }
        let t = Instant::now();
        self.set_status(format!("GPU {dev}: allocating buffers"));
        let bytes = self.opts.max_bytes.max(16);
        let buffers = match (buffer(self.nccl, bytes), buffer(self.nccl, bytes)) {
            (Ok(s), Ok(r)) => (s, r),
            (Err(e), _) | (_, Err(e)) => {
                let e = RunError::Runtime(format!("GPU {dev}: allocating 2 x {bytes} bytes: {e}"));
                return self.give_up(e, early.as_ref().or(held.as_ref()), opening, out);
            }
        };
        out.phases.allocation_ms = ms(t.elapsed());
        // Processes that may share this GPU probe it in turns once they have met (`shared`).
        if !self.opts.shared_gpus {
            self.set_status(format!("GPU {dev}: local probe"));
            self.probe(&gpu, &mut out);
        }

        let start = match early.or(held) {
            Some(s) => s,
            None => {
                self.set_status(format!(
                    "GPU {dev}: waiting for the other processes (rendezvous)"
                ));
                let left = self.deadline.saturating_duration_since(Instant::now());
                let Ok(s) = start.recv_timeout(left) else {
                    // The main thread reports why (rendezvous failed or timed out).
                    out.error = Some(RunError::Stopped(format!("GPU {dev}: no start")));
                    return out;
                };
                s
            }
        };
        out.rank = Some(start.rank);
        let result = self.measure_all(&gpu, buffers, &start, opening, &mut out);
        if let Err(e) = result {
            start.team.fail(e.message());
            out.error = Some(e);
        }
        out
    }

    /// Ends the thread with `e` before measuring: the others are told (when the processes have
    /// met) and a communicator already started is aborted (bounded).
    fn give_up(
        &self,
        e: RunError,
        start: Option<&Start>,
        opening: Option<(comms::CommsStarted<'static>, Instant)>,
        mut out: GpuOutcome,
    ) -> GpuOutcome {
        if let Some(s) = start {
            s.team.fail(e.message());
        }
        if let Some((o, _)) = opening {
            o.abort();
        }
        out.error = Some(e);
        out
    }

    /// With the start already here: the sharing check, then NCCL's init started (none with one
    /// rank), with the instant it started.
    fn begin_early(
        &self,
        gpu: &Gpu,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<Option<(comms::CommsStarted<'static>, Instant)>, RunError> {
        out.rank = Some(start.rank);
        if start.nranks < 2 {
            return Ok(None);
        }
        self.check_sharing(gpu, start, out)?;
        self.begin_comms(start, gpu).map(Some)
    }

    /// Starts NCCL's init of this rank's communicator.
    fn begin_comms(
        &self,
        start: &Start,
        gpu: &Gpu,
    ) -> Result<(comms::CommsStarted<'static>, Instant), RunError> {
        self.set_status(format!(
            "GPU {}: NCCL init (rank {} of {})",
            self.device, start.rank, start.nranks
        ));
        let t = Instant::now();
        comms::begin(self, start, gpu).map(|o| (o, t))
    }

    /// The communicators (their init already started by `opening`, else started here), then
    /// the plan; on failure the others are told and the communicator is aborted (bounded).
    fn measure_all(
        &self,
        gpu: &Gpu,
        (send, recv): (u64, u64),
        start: &Start,
        opening: Option<(comms::CommsStarted<'static>, Instant)>,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let (rank, nranks) = (start.rank, start.nranks);
        let (opening, t) = match opening {
            Some(o) => o,
            None => {
                if nranks > 1 {
                    self.check_sharing(gpu, start, out)?;
                } else if self.opts.shared_gpus {
                    self.probe(gpu, out);
                }
                if nranks == 1 {
                    // No collective with one rank (its busbw is 0 by definition): the probe
                    // is the check.
                    start.phase("1 GPU: no collective; the local probe is the check");
                    return Ok(());
                }
                self.begin_comms(start, gpu)?
            }
        };
        self.set_status(format!(
            "GPU {}: NCCL init (rank {rank} of {nranks})",
            self.device
        ));
        let comms = comms::finish(self, start, opening);
        out.phases.nccl_init_ms = ms(t.elapsed());
        out.phases.comms_ready_at_ms = ms(self.since_start());
        let comms = comms?;
        let m = Measurer {
            thread: self,
            gpu,
            comm: &comms.comm,
            node_comm: comms.node_comm.as_ref(),
            team: &start.team,
            send,
            recv,
            rank,
            nranks,
        };
        // On success, fast exit: the process ends right after the report; destroying
        // communicators would only add NCCL's teardown (~0.4 s) to the time to verdict.
        // (Comm has no Drop: the communicator is simply left to the process exit.)
        let ran = m.run_plan(start, out);
        if let Err(e) = &ran {
            start.team.fail(e.message());
            comms
                .comm
                .abort_within(std::time::Duration::from_millis(500));
        }
        ran
    }
}

impl GpuThread {
    /// Whether another process of this check drives this GPU: an ERROR naming both, unless
    /// `--shared-gpus`; then the probes of each group take turns (every rank passes the same
    /// barriers), and the outcome records the group.
    fn check_sharing(
        &self,
        gpu: &Gpu,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<(), RunError> {
        let dev = self.device;
        let team_err = |e| RunError::from_team(start.rank, e);
        let uuid = out.info.as_ref().map_or(String::new(), |i| i.uuid.clone());
        let key = (!uuid.is_empty()).then(|| shared::uuid_key(&uuid));
        let procs = start.topology.processes_by_rank();
        let nprocs = procs.iter().copied().max().map_or(1, |p| p as usize + 1);
        let sharing: shared::Sharing = start
            .team
            .gather(
                start.nranks as usize,
                &[(u64::from(start.rank), key.unwrap_or(0.0))],
                |keys| Ok(vec![shared::groups(keys); nprocs]),
            )
            .map_err(team_err)?;
        let mine = sharing.group_of(start.rank).map(<[u32]>::to_vec);
        let me = procs.get(start.rank as usize).copied();
        let foreign = mine
            .as_ref()
            .is_some_and(|g| g.iter().any(|&r| procs.get(r as usize).copied() != me));
        if foreign && !self.opts.shared_gpus {
            let who: Vec<String> = mine
                .unwrap_or_default()
                .iter()
                .map(|&r| {
                    let p = procs.get(r as usize).copied().unwrap_or(u32::MAX);
                    let host = start.topology.node_of(r as usize).unwrap_or("?");
                    format!("rank {r} (process {p} on {host})")
                })
                .collect();
            return Err(RunError::Runtime(format!(
                "GPU {dev} ({uuid}) is driven by {} processes of this check: {}; processes \
                 sharing a GPU measure each other, not the GPU: give each process its own GPUs \
                 (tests and labs with emulated nodes: --shared-gpus or NCCL_CHECK_SHARED_GPUS=1)",
                who.len(),
                who.join(", ")
            )));
        }
        if self.opts.shared_gpus {
            let my_turn = mine
                .as_ref()
                .and_then(|g| g.iter().position(|&r| r == start.rank))
                .unwrap_or(0);
            for turn in 0..sharing.turns() {
                start.team.barrier().map_err(team_err)?;
                if turn == my_turn {
                    self.set_status(format!("GPU {dev}: local probe (turn {})", turn + 1));
                    self.probe(gpu, out);
                }
            }
            start.team.barrier().map_err(team_err)?;
            out.shared = mine.filter(|_| foreign);
        }
        Ok(())
    }
}

/// A start already received goes to the early path when it may (`early_ok`), else it is held
/// for the order after the probe: the main thread sends it once, so one taken from the channel
/// must never be dropped (the thread would then wait for it until the deadline).
fn early_or_held<T>(got: Option<T>, early_ok: bool) -> (Option<T>, Option<T>) {
    match got {
        Some(s) if early_ok => (Some(s), None),
        other => (None, other),
    }
}

/// Whether the `NCCL_CHECK_SETUP` value (comma-separated steps) names `step`.
fn setup_asks(value: Option<&str>, step: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|s| s.trim() == step))
}

#[cfg(test)]
mod tests {
    use super::{early_or_held, setup_asks};

    #[test]
    fn a_start_taken_early_is_never_dropped() {
        assert_eq!(early_or_held(Some(7), true), (Some(7), None));
        // --shared-gpus or probe-first: the same start, held for after the probe.
        assert_eq!(early_or_held(Some(7), false), (None, Some(7)));
        assert_eq!(early_or_held(None::<u8>, true), (None, None));
        assert_eq!(early_or_held(None::<u8>, false), (None, None));
    }

    #[test]
    fn the_old_setup_steps_are_named_one_by_one() {
        assert!(setup_asks(Some("probe-first"), "probe-first"));
        assert!(setup_asks(
            Some("pairs-by-round, probe-first"),
            "probe-first"
        ));
        assert!(!setup_asks(Some("probe-first"), "pairs-by-round"));
        assert!(!setup_asks(Some("probe-firstx"), "probe-first"));
        assert!(!setup_asks(None, "probe-first"));
    }
}
