//! The per-GPU local probe: device-local copy bandwidth, measured by each GPU
//! thread right after its buffers, so every GPU of the process probes at once and beside the
//! rendezvous. Thin on purpose: copies and two timing events; `facts::local_probe` judges.
//!
//! One copy of `BYTES` (256 MiB: far beyond every L2, so HBM is what is measured) is timed first;
//! then as many copies as fill `TARGET_MS` (at least `MIN_ITERS`, at most `MAX_ITERS`) are timed
//! between two CUDA events. Every wait polls against the check's deadline.

use crate::measure::cuda::{Gpu, StreamWait};
use crate::model::local_copy::LocalProbe;
use cudarc::driver::result as cu;
use cudarc::driver::sys::CUevent_flags;
use std::time::Instant;

/// Bytes per copy.
pub const BYTES: u64 = 256 << 20;
/// GPU time the timed copies should take.
pub const TARGET_MS: f64 = 20.0;
pub const MIN_ITERS: u32 = 3;
pub const MAX_ITERS: u32 = 200;

/// Timed copies that fill `TARGET_MS` when one copy took `one_ms`.
pub fn iterations(one_ms: f64) -> u32 {
    if one_ms.is_nan() || one_ms <= 0.0 {
        return MIN_ITERS;
    }
    ((TARGET_MS / one_ms).ceil() as u32).clamp(MIN_ITERS, MAX_ITERS)
}

/// Two device buffers, freed by `free` once the stream that used them is idle.
struct Pair {
    src: u64,
    dst: u64,
}

impl Pair {
    fn new() -> Result<Pair, String> {
        // SAFETY: the GPU thread's context is current (Gpu::open bound it to this thread).
        let src = unsafe { cu::malloc_sync(BYTES as usize) }.map_err(|e| e.to_string())?;
        let dst = unsafe { cu::malloc_sync(BYTES as usize) }.map_err(|e| {
            // SAFETY: src was allocated above and nothing uses it.
            let _ = unsafe { cu::free_sync(src) };
            e.to_string()
        })?;
        Ok(Pair { src, dst })
    }

    fn free(self) {
        // SAFETY: both come from cuMemAlloc and the stream that used them has completed.
        unsafe {
            let _ = cu::free_sync(self.src);
            let _ = cu::free_sync(self.dst);
        }
    }
}

/// Measures device `device`'s copy rate on its stream; an error says why it could not.
pub fn measure(gpu: &Gpu, device: usize, deadline: Instant) -> Result<LocalProbe, String> {
    let bufs = Pair::new().map_err(|e| format!("allocating 2 x {BYTES} bytes: {e}"))?;
    let result = timed(gpu, &bufs, deadline);
    // A stream still busy at the deadline keeps its buffers (freeing would wait for it; the
    // process ends soon and the driver frees them).
    if !matches!(&result, Err(Busy::Deadline)) {
        bufs.free();
    }
    result
        .map(|(iters, ms)| LocalProbe::new(device, BYTES, iters, ms))
        .map_err(|e| match e {
            Busy::Deadline => "copies not done by the check's deadline".to_string(),
            Busy::Failed(why) => why,
        })
}

/// Why the timed copies gave no number.
enum Busy {
    /// The stream was still copying at the check's deadline.
    Deadline,
    Failed(String),
}

/// (timed copies, their GPU milliseconds).
fn timed(gpu: &Gpu, bufs: &Pair, deadline: Instant) -> Result<(u32, f64), Busy> {
    let e = |what: &str, err: cudarc::driver::DriverError| Busy::Failed(format!("{what}: {err}"));
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = gpu.ctx.new_event(flags).map_err(|x| e("event", x))?;
    let end = gpu.ctx.new_event(flags).map_err(|x| e("event", x))?;
    let raw = gpu.stream.cu_stream();
    // SAFETY: src holds BYTES bytes of this context; the stream is this context's.
    unsafe { cu::memset_d8_async(bufs.src, 0x5a, BYTES as usize, raw) }
        .map_err(|x| e("memset", x))?;
    let copies = |n: u32| -> Result<f64, Busy> {
        start.record(&gpu.stream).map_err(|x| e("event", x))?;
        for _ in 0..n {
            // SAFETY: both buffers hold BYTES bytes of this context and do not overlap.
            unsafe { cu::memcpy_dtod_async(bufs.dst, bufs.src, BYTES as usize, raw) }
                .map_err(|x| e("cuMemcpyDtoDAsync", x))?;
        }
        end.record(&gpu.stream).map_err(|x| e("event", x))?;
        match gpu.wait(deadline, || Ok::<(), ()>(())) {
            Ok(()) => {}
            Err(Ok(StreamWait::Cuda(x))) => return Err(e("copy", x)),
            Err(Ok(StreamWait::Deadline)) | Err(Err(())) => return Err(Busy::Deadline),
        }
        start
            .elapsed_ms(&end)
            .map(f64::from)
            .map_err(|x| e("event time", x))
    };
    let one = copies(1)?; // also the warm-up
    let n = iterations(one);
    Ok((n, copies(n)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timed_copies_fill_tens_of_milliseconds_within_bounds() {
        // H200: 256 MiB at ~2.1 TB/s of copy rate takes ~0.13 ms: 157 copies for 20 ms.
        assert_eq!(iterations(0.128), 157);
        assert_eq!(iterations(0.01), MAX_ITERS);
        assert_eq!(iterations(50.0), MIN_ITERS);
        assert_eq!(iterations(0.0), MIN_ITERS);
        assert_eq!(iterations(f64::NAN), MIN_ITERS);
    }
}
