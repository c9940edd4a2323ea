//! What one GPU's device-local copy probe measured: the measuring loop fills it
//! (`measure::runner::probe`), facts holds it against the GPU's model and its siblings
//! (`facts::local_probe`), and the report keeps it per GPU.

use serde::{Deserialize, Serialize};

/// What one GPU's probe measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalProbe {
    /// CUDA device index in this process.
    pub device: usize,
    /// Bytes per copy.
    pub bytes: u64,
    /// Timed copies.
    pub iters: u32,
    /// GPU time of the timed copies (CUDA events), milliseconds.
    pub gpu_ms: f64,
    /// Copy rate: bytes x iters / time, GB/s (1e9 bytes).
    pub copy_gbs: f64,
}

impl LocalProbe {
    /// The rate of `iters` copies of `bytes` that took `gpu_ms` on the GPU.
    pub fn new(device: usize, bytes: u64, iters: u32, gpu_ms: f64) -> LocalProbe {
        let copy_gbs = if gpu_ms > 0.0 {
            bytes as f64 * f64::from(iters) / (gpu_ms / 1e3) / 1e9
        } else {
            0.0
        };
        LocalProbe {
            device,
            bytes,
            iters,
            gpu_ms,
            copy_gbs,
        }
    }
}
