//! The alltoall beside the all_reduce of a multi-node check (`localize::paths`): one alltoall
//! over every rank, whose busbw against the all_reduce's decides whether the localizer measures
//! every node pair after its other rounds.
use super::timed::Measurer;
use super::{GpuOutcome, RunError, Start};
use crate::localize::paths::{alltoall_size, alltoall_slow, checks_paths, expected_alltoall_ratio};
use crate::measure::collectives::AlltoAll;

/// Timed operations of the alltoall, each placement (one untimed operation before them).
const ITERS: u32 = 3;

impl Measurer<'_> {
    /// Whether the alltoall was slow, the same in every process (the alltoall's and the
    /// all_reduce's busbw are the team's sums; the decision is agreed by one more). `false` without measuring when
    /// the check's node count is outside `paths::checks_paths` or its last collective was not
    /// an all_reduce over every rank. Its data is checked bit-exact: wrong elements put its row
    /// in the report, where they FAIL as any collective's do.
    pub(super) fn alltoall_beside(
        &self,
        bytes: u64,
        (nodes, gpus): (usize, usize),
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<bool, RunError> {
        let all_reduce = match out.last_collective {
            Some(("all_reduce", _, busbw)) => busbw,
            _ => return Ok(false),
        };
        if !checks_paths(nodes) {
            return Ok(false);
        }
        let size = alltoall_size(bytes);
        start.phase(&format!(
            "alltoall {} over every rank (every node pair at once)",
            crate::measure::size::human(size)
        ));
        // A step index past the plan's: its own fill seeds.
        let at = (self.opts().steps.len(), 0, size, ITERS);
        let mut wrong = 0.0;
        let (row, gpu) = self.measure_row(at, &AlltoAll, true, out, &mut wrong)?;
        let host = row.out_of_place.busbw.min(row.in_place.busbw);
        let by_gpu = gpu.map_or(0.0, |g| g.out_of_place_busbw.min(g.in_place_busbw));
        // Slow by both clocks: a late launch slows only the host's.
        let delivered = host.max(by_gpu);
        let fraction = self.opts().config.outliers.alltoall_fraction;
        // Every process reads its own config: any that finds it slow makes it slow for all, so
        // every copy of the localizer runs the same rounds.
        let slow = self.agree_slow(alltoall_slow(
            delivered,
            all_reduce,
            (nodes, gpus),
            fraction,
        ))?;
        if start.printer {
            let expected = fraction * expected_alltoall_ratio(nodes, gpus) * all_reduce;
            start.show.line(&format!(
                "# alltoall {}: busbw {:.4} GB/s (host clock {:.4}, GPU clock {:.4}), {:.2} x the \
                 all_reduce's {:.4}; slow below {:.4}: {}\n",
                crate::measure::size::human(row.size),
                delivered,
                host,
                by_gpu,
                delivered / all_reduce,
                all_reduce,
                expected,
                if slow {
                    "slow, every node pair measured"
                } else {
                    "not slow"
                }
            ));
        }
        let corrupted = [row.out_of_place.wrong, row.in_place.wrong]
            .iter()
            .any(|w| w.is_some_and(|w| w > 0));
        if corrupted && start.recorder {
            out.rows.push(row);
        }
        Ok(slow)
    }
}
