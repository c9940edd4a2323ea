//! The alltoall beside the all_reduce of a multi-node check: one alltoall over every rank,
//! whose busbw against the all_reduce's (and, after the rounds, the node pairs'), or a busy
//! host, decides whether the localizer measures every node pair after its other rounds (the
//! rules: `localize::paths`; agreed here, handed on by `localized.rs`).
use super::timed::{Measurer, Timing};
use super::{GpuOutcome, RunError, Start};
use crate::model::collectives::AlltoAll;
use crate::model::localization::PathsDecision;

/// Timed operations of the alltoall, each placement (one untimed operation before them).
const ITERS: u32 = 3;

impl Measurer<'_> {
    /// Whether every node pair is measured after the localizer's other rounds
    /// (`localize::paths::measures_every_path`): the alltoall beside the all_reduce (`all_paths`) slow
    /// against it, or some node's host busy (its own `host_busy` fact: a busy scheduler paces
    /// both collectives alike). Both readings are the team's sums and both flags are agreed by
    /// one more sum, as each process reads its own `alltoall_fraction` and its own host. None
    /// without measuring when the check's node count is outside `paths::checks_paths` or its
    /// last collective was not an all_reduce over every rank.
    pub(super) fn paths_wanted(
        &self,
        bytes: u64,
        (nodes, gpus): (usize, usize),
        start: &Start,
        out: &mut GpuOutcome,
    ) -> Result<Option<PathsDecision>, RunError> {
        use crate::localize::paths::{
            alltoall_size, alltoall_slow, checks_paths, measures_every_path,
        };
        use crate::model::collectives::{AllReduce, Collective};
        let all_reduce = match out.last_collective {
            Some((c, _, busbw)) if c == AllReduce.name() && checks_paths(nodes) => busbw,
            _ => return Ok(None),
        };
        let began = std::time::Instant::now();
        // The alltoall over every rank, both placements (the slower one counts), timed by the
        // host and the GPUs; the same on every rank (the team's sums). Its data is checked
        // bit-exact: wrong elements put its row in the report, where they FAIL as any
        // collective's do.
        let size = alltoall_size(bytes);
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
        // By the faster of the two clocks: slow only when slow by both (a late launch slows
        // only the host's).
        let (size, delivered) = (row.size, host.max(gpu));
        let corrupted = [row.out_of_place.wrong, row.in_place.wrong]
            .iter()
            .any(|w| w.is_some_and(|w| w > 0));
        if corrupted && start.recorder {
            out.rows.push(row);
        }
        let fraction = self.opts().config.outliers.alltoall_fraction;
        let slow = alltoall_slow(delivered, all_reduce, (nodes, gpus), fraction);
        // Others' load only: the check's own processes outnumbering the cores (emulated
        // nodes) pace nothing a real allocation's would.
        let busy = self.thread.own.busy_by_others(&start.topology);
        // The pairs' limit as the coordinator's recorder computes it (one value plus zeros), so
        // every copy of the localizer decides alike whatever each process's fraction.
        let limit = crate::localize::paths::pairs_limit(delivered, (nodes, gpus), fraction);
        let speaks = self.team.coordinates() && start.recorder;
        let limit_slots = match (speaks, limit) {
            (true, Some(l)) => [1.0, l],
            _ => [0.0, 0.0],
        };
        let flags = [slow as u8 as f64, busy as u8 as f64];
        let agreed = (self.team.sum(&[flags.as_slice(), &limit_slots].concat()))
            .map_err(|e| self.team_err(e))?;
        let (slow, busy) = (agreed[0] > 0.0, agreed[1] > 0.0);
        let pairs_limit = (agreed[2] > 0.0).then_some(agreed[3]);
        let decision = PathsDecision {
            alltoall_bytes: size,
            alltoall_busbw: delivered,
            all_reduce_busbw: all_reduce,
            alltoall_slow: slow,
            host_busy: busy,
            measured: measures_every_path(slow, busy),
            pairs_limit,
        };
        // What the step costs a healthy check (no pair round follows it on an idle host).
        let ms = began.elapsed().as_secs_f64() * 1e3;
        if start.printer {
            let ratio = crate::localize::paths::expected_alltoall_ratio(nodes, gpus);
            let then = match (slow, busy) {
                (true, _) => "every node pair measured",
                (false, true) => "not slow, but a host is busy: every node pair measured",
                (false, false) => "not slow against it; against the node pairs after the rounds",
            };
            start.show.line(&format!(
                "# alltoall {}: busbw {:.4} GB/s (host clock {:.4}, GPU clock {:.4}), {:.2} x the \
                 all_reduce's {:.4} GB/s; slow below {:.4} ({fraction} x {ratio:.3} x it): {then}; \
                 {ms:.0} ms\n",
                crate::model::size::human(size),
                delivered,
                host,
                gpu,
                delivered / all_reduce,
                all_reduce,
                fraction * ratio * all_reduce,
            ));
        }
        Ok(Some(decision))
    }
}
