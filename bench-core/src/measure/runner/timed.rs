//! The timed loop of one size: buffers, the pointers of each iteration, enqueueing, the bounded
//! wait for the stream, the check of the data, one table row. A retest of a slow row is timed by
//! the GPU's clock too (`gpu_time`), so the verdict can tell a slow GPU or link from a slow host.
//! The plan's steps around it (sizes, warm-up, budgets, retests): `timed/collective_steps.rs`.

use super::gpu_time::{timed_op, GpuTimer};
use super::{ms, GpuOutcome, GpuThread, RunError};
use crate::measure::cuda::{Gpu, StreamWait};
use crate::measure::loop_probe::LoopProbe;
use crate::measure::nccl::{Comm, Issue, Nccl};
use crate::measure::rows::{GpuSide, Placement, Row};
use crate::meet::team::{Team, TeamError};
use crate::model::collectives::{Collective, Counts};
use crate::model::time_budget::{self, Sizing, StopWhy};
use crate::settings::options::Options;
use std::time::Instant;

mod collective_steps;

/// One placement's seconds per operation by the host's clock, its wrong-element count (when
/// checked), each operation's GPU seconds (when timed on the GPU) and, when sampled one
/// operation at a time, the samples and why they stopped.
type Measured = (f64, Option<u64>, Option<Vec<f64>>, Sampled);

/// The agreed samples of a placement taken one by one (none for a batch) and why they stopped.
pub(super) type Sampled = (Vec<f64>, Option<StopWhy>);

/// How a placement's timed loop runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Timing {
    /// `n` operations back to back, timed as one batch (nccl-tests' loop).
    Count(u32),
    /// One operation at a time, each timed and agreed (the ranks' mean, so every rank stops
    /// together), until `time_budget::stop` with (`least`, `most`) samples and `allowance_s`.
    Sampled {
        least: u32,
        most: u32,
        allowance_s: f64,
    },
}

impl Timing {
    /// The most operations it times.
    pub fn most(self) -> u32 {
        match self {
            Timing::Count(n) => n,
            Timing::Sampled { most, .. } => most,
        }
    }
}

/// A row's samples over both placements: the more samples, the wider spread, the last stop.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RowSamples {
    pub samples: u32,
    pub spread: f64,
    pub stopped: Option<StopWhy>,
}

/// One device buffer of the thread, its device pointer (never freed: the process exits right
/// after the report): ncclMemAlloc as nccl-tests uses from NCCL 2.19 (cuMem memory,
/// registrable), else cuMemAlloc.
pub(super) fn buffer(nccl: &Nccl, bytes: u64) -> Result<u64, String> {
    match nccl.mem_alloc(bytes as usize) {
        Some(allocated) => allocated.map_err(|e| e.to_string()),
        None => unsafe { cudarc::driver::result::malloc_sync(bytes as usize) }
            .map_err(|e| e.to_string()),
    }
}

/// What one GPU thread measures with: its GPU, communicators, team and buffers.
pub(super) struct Measurer<'a> {
    pub thread: &'a GpuThread,
    pub gpu: &'a Gpu,
    pub comm: &'a Comm<'a>,
    /// This node's GPUs only (multi-node checks), for the GPU pair matrix.
    pub node_comm: Option<&'a Comm<'a>>,
    pub team: &'a Team,
    pub send: u64,
    pub recv: u64,
    pub rank: u32,
    pub nranks: u32,
}

/// nccl-tests' pointers for iteration `iter`: rotate through the buffers by whole operations
/// (defeats caches), and in-place operations work inside the receive buffer at the rank's
/// offsets.
pub(super) fn pointers(
    (send, recv): (u64, u64),
    c: &Counts,
    elt: u64,
    max_bytes: u64,
    rank: u32,
    (in_place, iter): (bool, u64),
) -> (u64, u64) {
    let total = c.bytes(elt);
    let steps = max_bytes.checked_div(total).unwrap_or(1).max(1);
    let shift = total * (iter % steps);
    let rank = rank as u64;
    if in_place {
        let base = recv + shift;
        (
            base + c.send_inplace_offset * rank * elt,
            base + c.recv_inplace_offset * rank * elt,
        )
    } else {
        (send + shift, recv + shift)
    }
}

impl Measurer<'_> {
    pub(super) fn opts(&self) -> &Options {
        self.thread.opts
    }

    /// What this thread is doing now, for the watchdog's line (`GpuThread::set_status`).
    pub(super) fn status(&self, what: &str) {
        let (device, rank) = (self.thread.device, self.rank);
        self.thread
            .set_status(format!("GPU {device} (rank {rank}): {what}"));
    }

    pub(super) fn err_runtime(&self, what: &str, e: impl std::fmt::Display) -> RunError {
        RunError::Runtime(format!(
            "GPU {} (rank {}): {what}: {e}",
            self.thread.device, self.rank
        ))
    }

    pub(super) fn team_err(&self, e: TeamError) -> RunError {
        RunError::from_team(self.rank, e)
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
        issue
            .collective(coll)
            .map_err(|e| self.err_runtime(coll.name(), e))
    }

    /// nccl-tests' pointers of iteration `iter` in this thread's buffers ([`pointers`]).
    fn pointers(&self, c: &Counts, in_place: bool, iter: u64) -> (u64, u64) {
        let o = self.opts();
        pointers(
            (self.send, self.recv),
            c,
            o.datatype.size(),
            o.max_bytes,
            self.rank,
            (in_place, iter),
        )
    }

    /// Waits for the stream, polling NCCL's async error and the team, until the deadline.
    pub(super) fn wait(&self, what: &str) -> Result<(), RunError> {
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

    /// Is this busbw below the threshold for (collective, GPUs, bytes)? Every rank asks the team,
    /// so all agree even if their processes see different GPU names.
    pub(super) fn agree_slow(&self, slow: bool) -> Result<bool, RunError> {
        let s = self
            .team
            .sum(&[slow as u8 as f64])
            .map_err(|e| self.team_err(e))?;
        Ok(s[0] > 0.0)
    }

    /// The largest of every rank's `secs` (the team's min of their negatives).
    pub(super) fn slowest(&self, secs: f64) -> Result<f64, RunError> {
        let m = self.team.min(&[-secs]).map_err(|e| self.team_err(e))?;
        Ok(-m.first().copied().unwrap_or(-secs))
    }

    /// Both placements of one size (`at`: collective and size index, bytes, timing),
    /// combined over all ranks; with `gpu_timed`, also their busbw by the GPU's clock.
    pub(super) fn measure_row(
        &self,
        (ci, si, size, iters): (usize, usize, u64, Timing),
        coll: &'static dyn Collective,
        gpu_timed: bool,
        out: &mut GpuOutcome,
        wrong_ranks: &mut f64,
    ) -> Result<(Row, Option<GpuSide>, RowSamples), RunError> {
        let o = self.opts();
        let elt = o.datatype.size();
        let c = coll.counts(size / elt, elt, self.nranks as u64);
        let mut placements = [Placement::default(); 2];
        let mut gpu_busbw = [0.0f64; 2];
        let mut taken = RowSamples::default();
        for (pi, in_place) in [false, true].into_iter().enumerate() {
            let seed = (ci as u32) << 24 | (si as u32) << 8 | (pi as u32) << 1;
            let what = format!(
                "{} {} {}",
                coll.name(),
                crate::model::size::human(c.bytes(elt)),
                if in_place { "in-place" } else { "out-of-place" }
            );
            self.status(&what);
            let loop_ = (in_place, seed, iters, gpu_timed);
            let (secs, wrong, gpu_secs, (samples, stopped)) =
                self.measure(coll, &c, loop_, &what, out)?;
            taken.samples = taken.samples.max(samples.len() as u32);
            taken.spread = taken.spread.max(time_budget::spread(&samples));
            taken.stopped = stopped.or(taken.stopped);
            let wrong_val = wrong.map_or(-1.0, |w| w as f64);
            let sums = self
                .team
                .sum(&[secs, wrong_val.max(0.0), (wrong_val > 0.0) as u8 as f64])
                .map_err(|e| self.team_err(e))?;
            let time = sums[0] / self.nranks as f64;
            let algbw = super::busbw(c.bytes(elt) as f64, time);
            let busbw = algbw * coll.bus_factor(self.nranks as u64);
            if let Some(g) = gpu_secs {
                let fastest = self.fastest_gpu_time(&g)?;
                if fastest > 0.0 {
                    gpu_busbw[pi] = busbw * time / fastest;
                }
            }
            *wrong_ranks += sums[2];
            placements[pi] = Placement {
                time_us: time * 1e6,
                algbw,
                busbw,
                wrong: wrong.map(|_| sums[1] as u64),
                first_busbw: None,
            };
        }
        let [oop, ip] = placements;
        let gpu = gpu_timed.then(|| GpuSide {
            collective: coll.name(),
            size: c.bytes(elt),
            out_of_place_busbw: gpu_busbw[0],
            in_place_busbw: gpu_busbw[1],
        });
        let row = Row {
            expected: None,
            collective: coll.name().into(),
            size: c.bytes(elt),
            count: c.param,
            dtype: o.datatype.name().into(),
            redop: if coll.uses_op() { o.op.name() } else { "none" }.into(),
            root: if coll.uses_root() { o.root as i32 } else { -1 },
            out_of_place: oop,
            in_place: ip,
        };
        Ok((row, gpu, taken))
    }

    /// The GPUs' seconds per operation: each operation at the rank that waited least inside
    /// it (the one whose host launched it last: every rank finishes an operation together), the
    /// first operation left out (`gpu_time::settled_mean`). `mine`: this rank's per-operation
    /// GPU seconds; the same length on every rank (the loop's iterations).
    fn fastest_gpu_time(&self, mine: &[f64]) -> Result<f64, RunError> {
        let all = self.team.min(mine).map_err(|e| self.team_err(e))?;
        let all: &[f64] = if all.len() == mine.len() { &all } else { mine };
        Ok(super::gpu_time::settled_mean(all))
    }

    /// One placement of one size: returns seconds per operation, the wrong-element count, and
    /// with `gpu_timed` each operation's GPU seconds (`gpu_time`).
    fn measure(
        &self,
        coll: &dyn Collective,
        c: &Counts,
        (in_place, seed, timing, gpu_timed): (bool, u32, Timing, bool),
        what: &str,
        out: &mut GpuOutcome,
    ) -> Result<Measured, RunError> {
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

        let mut timer = (gpu_timed.then(|| GpuTimer::new(self.gpu, timing.most())))
            .transpose()
            .map_err(|e| self.err_runtime("creating timing events", e))?;
        self.team.barrier().map_err(|e| self.team_err(e))?;
        let (secs, sampled, elapsed) = match timing {
            Timing::Count(iters) => {
                self.batch_loop(coll, c, (in_place, iters), &mut timer, what)?
            }
            Timing::Sampled {
                least,
                most,
                allowance_s,
            } => {
                let bounds = (least, most, allowance_s);
                self.sampled_loop(coll, c, in_place, bounds, &mut timer, what)?
            }
        };
        out.phases.timed_loop_ms += ms(elapsed);
        let gpu_secs = (timer.as_ref().map(GpuTimer::durations))
            .transpose()
            .map_err(|e| self.err_runtime("reading timing events", e))?;

        if !o.check || (in_place && !coll.checks_in_place()) {
            return Ok((secs, None, gpu_secs, sampled));
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
        Ok((secs, Some(wrong), gpu_secs, sampled))
    }

    /// nccl-tests' timed loop: `iters` operations back to back, one host clock around them all
    /// (`--debug-timing` records each operation's events too). Seconds per operation, no
    /// samples, and the loop's time.
    fn batch_loop(
        &self,
        coll: &dyn Collective,
        c: &Counts,
        (in_place, iters): (bool, u32),
        timer: &mut Option<GpuTimer>,
        what: &str,
    ) -> Result<(f64, Sampled, std::time::Duration), RunError> {
        let mut probe = LoopProbe::new(self.gpu, iters, self.opts().debug_timing)
            .map_err(|e| self.err_runtime("creating debug events", e))?;
        let timing = |e| self.err_runtime("recording a timing event", e);
        let t = Instant::now();
        if let Some(p) = probe.as_mut() {
            p.start(self.gpu, t)
                .map_err(|e| self.err_runtime("recording a debug event", e))?;
        }
        for iter in 0..iters as u64 {
            timed_op(timer, self.gpu, timing, || {
                self.issue(coll, c, in_place, iter)
            })?;
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
        let secs = elapsed.as_secs_f64() / iters as f64;
        Ok((secs, (Vec::new(), None), elapsed))
    }

    /// A budgeted placement: one operation at a time, each waited for and timed by the host's
    /// clock, the ranks' mean of each (one sum: every rank holds the same samples, so every rank
    /// stops after the same one, `time_budget::stop`). Seconds per operation (the samples' mean),
    /// the samples with why they stopped, and the loop's time.
    fn sampled_loop(
        &self,
        coll: &dyn Collective,
        c: &Counts,
        in_place: bool,
        (least, most, allowance_s): (u32, u32, f64),
        timer: &mut Option<GpuTimer>,
        what: &str,
    ) -> Result<(f64, Sampled, std::time::Duration), RunError> {
        let began = Instant::now();
        let timing = |e| self.err_runtime("recording a timing event", e);
        let mut samples: Vec<f64> = Vec::new();
        let mut spent = 0.0;
        loop {
            let t = Instant::now();
            let iter = samples.len() as u64;
            timed_op(timer, self.gpu, timing, || {
                self.issue(coll, c, in_place, iter)
            })?;
            self.wait(what)?;
            let mine = t.elapsed().as_secs_f64();
            let sum = self.team.sum(&[mine]).map_err(|e| self.team_err(e))?;
            let sample = sum.first().copied().unwrap_or(mine) / self.nranks as f64;
            spent += sample;
            samples.push(sample);
            if let Some(why) = time_budget::stop(&samples, (least, most), spent, allowance_s) {
                let secs = samples.iter().sum::<f64>() / samples.len() as f64;
                return Ok((secs, (samples, Some(why)), began.elapsed()));
            }
        }
    }
}

impl super::Start {
    /// A budgeted step's record: its `#` line on the printer, the report's on the recorder.
    pub(super) fn record_sizing(&self, sizing: Sizing, out: &mut GpuOutcome) {
        if self.printer {
            self.show.line(&sizing_line(&sizing));
        }
        if self.recorder {
            out.sizing.push(sizing);
        }
    }
}

/// The `#` line under a budgeted row: what it was sized from, what it measured, and why.
pub(super) fn sizing_line(s: &Sizing) -> String {
    format!(
        "#  ^ budget {:.2} s: {} read {:.3} GB/s; measured {} ({}), {} samples, spread {:.1}%{}{}\n",
        s.budget_s,
        s.rate_from,
        s.rate_gbs,
        crate::model::size::human(s.bytes),
        s.why.as_str(),
        s.samples,
        s.spread * 100.0,
        s.stopped.map_or(String::new(), |w| format!(", stopped: {}", w.as_str())),
        if s.floor_held {
            ""
        } else {
            "; no floor at this size: judged by its peers"
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budgeted_row_says_what_it_measured_and_who_judged_it() {
        let mut s = Sizing {
            step: "all_reduce".into(),
            budget_s: 0.5,
            rate_gbs: 0.25,
            rate_from: "probe: all_reduce 4 MiB, the slowest rank's time".into(),
            bytes: 4 << 20,
            why: time_budget::SizeWhy::Budget,
            samples: 3,
            spread: 0.012,
            stopped: Some(StopWhy::Stable),
            floor_held: false,
        };
        assert_eq!(
            sizing_line(&s),
            "#  ^ budget 0.50 s: probe: all_reduce 4 MiB, the slowest rank's time read 0.250 GB/s; \
             measured 4 MiB (budget), 3 samples, spread 1.2%, stopped: stable; no floor at this \
             size: judged by its peers\n"
        );
        s.floor_held = true;
        assert!(!sizing_line(&s).contains("peers"));
    }

    #[test]
    fn pointers_rotate_by_whole_operations_and_in_place_uses_the_rank_offsets() {
        // 4-byte elements, 256 elements per rank in, 1024 out (all_gather over 4 ranks).
        let c = Counts {
            send: 256,
            recv: 1024,
            param: 256,
            send_inplace_offset: 256,
            recv_inplace_offset: 0,
        };
        let bufs = (0x1000_0000, 0x2000_0000);
        let total = c.bytes(4);
        assert_eq!(total, 4096);
        // 3 operations fit in 12 KiB: iteration 4 is back at offset 1.
        let p = |in_place, iter| pointers(bufs, &c, 4, 3 * 4096, 2, (in_place, iter));
        assert_eq!(p(false, 0), bufs);
        assert_eq!(p(false, 1), (bufs.0 + 4096, bufs.1 + 4096));
        assert_eq!(p(false, 4), p(false, 1));
        assert_eq!(p(true, 0), (bufs.1 + 256 * 2 * 4, bufs.1));
        // A size larger than the buffer never moves.
        assert_eq!(pointers(bufs, &c, 4, 100, 0, (false, 7)), bufs);
    }
}
