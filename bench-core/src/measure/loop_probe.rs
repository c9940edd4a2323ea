//! `NCCL_CHECK_DEBUG_TIMING=1` (diagnosis only): what one timed loop did, per GPU thread. When
//! each thread left the barrier (one process-wide clock, to see start skew between GPUs), when each
//! operation was enqueued, and how long each took on the GPU, from timing events around it. The
//! events cost launch time, so debug numbers read a little low; without the variable nothing here
//! runs and the timed loop is exactly nccl-tests'.

use crate::measure::cuda::Gpu;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, DriverError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The instant all threads' times are given from. Static because the clock is the process's:
/// every GPU thread's loop is timed from the same instant, whichever thread asks first.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

pub struct LoopProbe {
    /// One before the first operation and one after each; `enqueued.len() + 1` are recorded.
    events: Vec<CudaEvent>,
    /// Microseconds after `start` at which each operation's enqueue returned.
    enqueued: Vec<f64>,
    start: Instant,
}

impl LoopProbe {
    /// `None` unless `enabled` (`Options::debug_timing`). Creates the events before the loop so that creating them is not timed.
    pub fn new(gpu: &Gpu, ops: u32, enabled: bool) -> Result<Option<LoopProbe>, DriverError> {
        if !enabled {
            return Ok(None);
        }
        epoch();
        let events = (0..=ops)
            .map(|_| gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(LoopProbe {
            events,
            enqueued: Vec::new(),
            start: Instant::now(),
        }))
    }

    /// The timed loop started at `start` (right after the barrier): the event before the first op.
    pub fn start(&mut self, gpu: &Gpu, start: Instant) -> Result<(), DriverError> {
        self.start = start;
        self.events[0].record(&gpu.stream)
    }

    /// One operation was just enqueued: the event after it.
    pub fn enqueued(&mut self, gpu: &Gpu) -> Result<(), DriverError> {
        self.enqueued.push(self.start.elapsed().as_secs_f64() * 1e6);
        match self.events.get(self.enqueued.len()) {
            Some(ev) => ev.record(&gpu.stream),
            None => Ok(()),
        }
    }

    /// After the stream completed: one line on stderr.
    pub fn report(&self, rank: u32, what: &str, elapsed: Duration) {
        let recorded = (self.enqueued.len() + 1).min(self.events.len());
        let gpu_us: Vec<i64> = self.events[..recorded]
            .windows(2)
            .map(|w| {
                w[0].elapsed_ms(&w[1])
                    .map_or(-1, |v| (v * 1e3).round() as i64)
            })
            .collect();
        let enqueued: Vec<i64> = self.enqueued.iter().map(|v| v.round() as i64).collect();
        nccl_check_host::errln!(
            "nccl-check: debug rank {rank} {what}: barrier left at {:.0} us, enqueued at {enqueued:?} us, \
             done at {:.0} us, GPU per op {gpu_us:?} us",
            self.start.duration_since(epoch()).as_secs_f64() * 1e6,
            elapsed.as_secs_f64() * 1e6,
        );
    }
}
