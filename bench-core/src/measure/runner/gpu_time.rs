//! GPU time of a timed loop beside the host's (issue 18 item 6): two CUDA events around each
//! operation, as `loop_probe` records them for debugging, summed. The retest uses it to tell a
//! slow GPU or link (slow on the GPU's clock too) from a slow host (CPU load, a descheduled
//! launching thread: the GPU waited between operations, which the sum leaves out). Host time
//! stays the reported number, as in nccl-tests; the events cost about a microsecond per
//! operation, and are recorded only in the retest of a result that was already slow.

use crate::measure::cuda::Gpu;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, DriverError};

pub(super) struct GpuTimer {
    before: Vec<CudaEvent>,
    after: Vec<CudaEvent>,
    recorded: usize,
}

impl GpuTimer {
    /// Events for `ops` operations, created before the loop so creating them is not timed.
    pub fn new(gpu: &Gpu, ops: u32) -> Result<GpuTimer, DriverError> {
        let make = || {
            (0..ops)
                .map(|_| gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(GpuTimer {
            before: make()?,
            after: make()?,
            recorded: 0,
        })
    }

    /// Just before operation `recorded` is enqueued.
    pub fn before(&self, gpu: &Gpu) -> Result<(), DriverError> {
        match self.before.get(self.recorded) {
            Some(ev) => ev.record(&gpu.stream),
            None => Ok(()),
        }
    }

    /// Just after it was enqueued.
    pub fn after(&mut self, gpu: &Gpu) -> Result<(), DriverError> {
        if let Some(ev) = self.after.get(self.recorded) {
            ev.record(&gpu.stream)?;
            self.recorded += 1;
        }
        Ok(())
    }

    /// After the stream completed: the operations' summed GPU time in seconds.
    pub fn seconds(&self) -> Result<f64, DriverError> {
        let mut ms = 0.0f64;
        for (b, a) in self.before.iter().zip(&self.after).take(self.recorded) {
            ms += f64::from(b.elapsed_ms(a)?);
        }
        Ok(ms / 1e3)
    }
}
