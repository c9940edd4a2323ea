//! The alltoall beside the all_reduce of a multi-node check: one alltoall over every rank,
//! whose busbw against the all_reduce's decides whether the localizer measures every node pair
//! after its other rounds (the decision: `localized.rs` over `localize::paths`).
use super::timed::{Measurer, Timing};
use super::{GpuOutcome, RunError, Start};
use crate::model::collectives::AlltoAll;

/// Timed operations of the alltoall, each placement (one untimed operation before them).
const ITERS: u32 = 3;

/// What the alltoall read, the same on every rank (the team's sums): busbw in GB/s.
pub(super) struct AlltoallReading {
    pub size: u64,
    /// By the faster of the two clocks: slow only when slow by both (a late launch slows
    /// only the host's).
    pub delivered: f64,
    pub host: f64,
    pub gpu: f64,
}

impl Measurer<'_> {
    /// The alltoall of `size` bytes over every rank, both placements (the slower one counts),
    /// timed by the host and the GPUs. Its data is checked bit-exact: wrong elements put its
    /// row in the report, where they FAIL as any collective's do.
    pub(super) fn alltoall_reading(
        &self,
        size: u64,
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<AlltoallReading, RunError> {
        start.phase(&format!(
            "alltoall {} over every rank (every node pair at once)",
            crate::model::size::human(size)
        ));
        // A step index past the plan's: its own fill seeds.
        let at = (self.opts().steps.len(), 0, size, Timing::Count(ITERS));
        let mut wrong = 0.0;
        let (row, gpu, _) = self.measure_row(at, &AlltoAll, true, out, &mut wrong)?;
        let host = row.out_of_place.busbw.min(row.in_place.busbw);
        let gpu = gpu.map_or(0.0, |g| g.out_of_place_busbw.min(g.in_place_busbw));
        let reading = AlltoallReading {
            size: row.size,
            delivered: host.max(gpu),
            host,
            gpu,
        };
        let corrupted = [row.out_of_place.wrong, row.in_place.wrong]
            .iter()
            .any(|w| w.is_some_and(|w| w > 0));
        if corrupted && start.recorder {
            out.rows.push(row);
        }
        Ok(reading)
    }
}
