//! The per-node result table of `--nccl-check=...,verbose` (or plugstack `verbose=1`): rank 0
//! prints the header, every task its own row as soon as its worker ends, so the rows of a step
//! arrive together on srun's stderr, one line each.

use crate::worker::Outcome;

/// Longest detail in a row (the full sentence stays in the kept report).
const DETAIL_CHARS: usize = 160;

/// The table's header line.
pub fn header() -> String {
    format!(
        "nccl-check: {:<16} {:>9} {:<7} {:>7}  {}",
        "node", "rank", "verdict", "time", "result"
    )
}

/// One task's row.
pub fn row(node: &str, rank: u32, world: u32, outcome: &Outcome) -> String {
    let node: String = node.chars().filter(|c| !c.is_control()).take(64).collect();
    let detail: String = outcome.detail.chars().take(DETAIL_CHARS).collect();
    format!(
        "nccl-check: {node:<16} {:>9} {:<7} {:>6.1}s  {detail}",
        format!("{rank}/{world}"),
        outcome.verdict.to_string(),
        outcome.elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::verdict::Verdict;
    use std::time::Duration;

    #[test]
    fn rows_line_up_under_the_header() {
        let out = Outcome {
            verdict: Verdict::Fail,
            ending: Ok(nccl_check_contract::supervise::Ending::Exited(1)),
            detail: "all_reduce busbw 12.3 < 300.0 GB/s; responsible: n2 GPU 0".into(),
            host: None,
            elapsed: Duration::from_millis(3140),
            keep_problem: None,
        };
        let (h, r) = (header(), row("n2", 1, 2, &out));
        assert_eq!(
            r,
            "nccl-check: n2                     1/2 FAIL       3.1s  all_reduce busbw 12.3 < \
             300.0 GB/s; responsible: n2 GPU 0"
        );
        assert_eq!(h.find("result"), r.find("all_reduce"));
        assert_eq!(h.find("verdict"), r.find("FAIL"));
    }
}
