//! GPU time of a timed loop beside the host's: two CUDA events around each operation, as
//! `loop_probe` records them for debugging. It tells a slow GPU or link (slow on the GPU's clock
//! too) from a slow host (CPU load, a descheduled launching thread: the GPU waited between
//! operations, which the per-operation sum leaves out). Host time stays the reported number, as
//! in nccl-tests; the events cost about a microsecond per operation. The collectives' rows record
//! them only in the retest of a result that was already slow (each operation at the rank that
//! waited least inside it, the first left out); every pair round records them
//! (`pair_matrix`), since a pair's two ends are launched by two threads that a busy host
//! deschedules independently.

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

    /// Each recorded operation's GPU seconds, in order.
    pub fn durations(&self) -> Result<Vec<f64>, DriverError> {
        self.before
            .iter()
            .zip(&self.after)
            .take(self.recorded)
            .map(|(b, a)| Ok(f64::from(b.elapsed_ms(a)?) / 1e3))
            .collect()
    }
}

/// `enqueue`d as the next operation of `timer` (its events just before and after it), or
/// untimed without one; `timing` turns a failed event record into the caller's error.
pub(super) fn timed_op<E>(
    timer: &mut Option<GpuTimer>,
    gpu: &Gpu,
    timing: impl Fn(DriverError) -> E,
    enqueue: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    if let Some(t) = timer.as_ref() {
        t.before(gpu).map_err(&timing)?;
    }
    enqueue()?;
    if let Some(t) = timer.as_mut() {
        t.after(gpu).map_err(timing)?;
    }
    Ok(())
}

/// Per operation, the faster of a pair's two ends (`a`, `b`: each end's per-operation GPU
/// seconds): an end whose host launched operation k late left its partner waiting inside k, so
/// the partner's k holds that wait and its own does not. Where one end timed nothing, the other.
pub fn faster_end(a: &[f64], b: &[f64]) -> Vec<f64> {
    let timed = |v: &[f64]| !v.is_empty() && v.iter().any(|&x| x > 0.0);
    match (timed(a), timed(b)) {
        (true, true) => a.iter().zip(b).map(|(x, y)| x.min(*y)).collect(),
        (true, false) => a.to_vec(),
        (false, true) => b.to_vec(),
        (false, false) => Vec::new(),
    }
}

/// The mean of per-operation GPU times of a send/receive loop without its first operation. Both
/// ends of an exchange must be inside the operation for data to move, so the end whose thread
/// launched first waits inside operation 0 until its partner arrives: that wait is the host's
/// (a descheduled launching thread), not the link's. Operation 0 ends on both GPUs at the same
/// moment, so from operation 1 on both streams run in step and each operation's GPU time is the
/// transfer's (as long as the hosts enqueued ahead, which a loop of asynchronous launches does).
/// With one operation there is nothing to leave out.
pub fn settled_mean(per_op: &[f64]) -> f64 {
    let settled = per_op.get(1..).filter(|s| !s.is_empty()).unwrap_or(per_op);
    if settled.is_empty() {
        0.0
    } else {
        settled.iter().sum::<f64>() / settled.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::{faster_end, settled_mean};

    #[test]
    fn each_operation_takes_the_end_that_did_not_wait_for_its_partner() {
        // Operation 1: a's host was late (b waited 5 ms); operation 2: b's host was late.
        let a = [0.010, 0.001, 0.006, 0.001];
        let b = [0.001, 0.006, 0.001, 0.001];
        let each = faster_end(&a, &b);
        assert_eq!(each, vec![0.001, 0.001, 0.001, 0.001]);
        assert_eq!(settled_mean(&each), 0.001);
        // The end means alone would both read slow.
        assert!(settled_mean(&a) > 0.002 && settled_mean(&b) > 0.002);
        // An end that timed nothing: the other's operations.
        assert_eq!(faster_end(&a, &[0.0; 4]), a.to_vec());
        assert_eq!(faster_end(&[], &[]), Vec::<f64>::new());
    }

    #[test]
    fn the_first_operation_of_an_exchange_holds_the_partners_lateness_and_is_left_out() {
        // The early end waited 9 ms for its partner inside operation 0; the link needs 1 ms.
        assert_eq!(settled_mean(&[0.010, 0.001, 0.001, 0.001]), 0.001);
        // One operation: all there is.
        assert_eq!(settled_mean(&[0.002]), 0.002);
        assert_eq!(settled_mean(&[]), 0.0);
        // A slow link is slow in every operation, the first one left out or not.
        assert_eq!(settled_mean(&[0.004, 0.004, 0.004]), 0.004);
    }
}
