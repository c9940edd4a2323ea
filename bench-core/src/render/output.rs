//! What rank 0 prints while measuring: progress lines on stderr, the tables on stdout.

use crate::measure::rows::{PairRow, Row};
use crate::measure::runner::sink::{Show, TableHead};
use crate::render::table;
use std::io::Write;

/// Writes `text` to stdout at once (the table is read live, line by line).
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The terminal: progress lines on stderr, nccl-tests' tables on stdout.
pub struct Console;

impl Show for Console {
    fn phase(&self, what: &str) {
        nccl_check_host::errln!("nccl-check: {what}");
    }

    fn collective(&self, h: &TableHead) {
        print(&table::header(
            h.binary,
            h.nthreads,
            h.min_bytes,
            h.max_bytes,
            h.step_factor,
            h.warmup,
            h.iters,
            h.check,
        ));
        print(&table::column_header());
    }

    fn row(&self, row: &Row, held_against: &str) {
        print(&format!("{}\n{held_against}\n", table::row(row)));
    }

    fn footer(&self, binary: &str, wrong_ranks: u64, avg_busbw: f64) {
        print(&table::footer(binary, wrong_ranks, avg_busbw));
    }

    fn pairs(&self, rows: &[PairRow], bytes: u64, iters: u32, multi_node: bool) {
        print(&pair_table(rows, bytes, iters, multi_node));
    }

    fn line(&self, text: &str) {
        print(text);
    }
}

/// The pair matrix as a table under the collectives' tables: busbw by the host's clock (as
/// nccl-tests reports it) and by the GPUs' (`gpu_busbw`: what the verdict holds a pair the host
/// slowed to).
fn pair_table(rows: &[PairRow], bytes: u64, iters: u32, multi_node: bool) -> String {
    let mut out = format!(
        "#\n# Pair matrix: sendrecv {bytes} bytes, {iters} iterations, rounds of disjoint pairs\n#  {:>24}  {:>10}  {:>8}  {:>9}\n",
        "pair", "time(us)", "busbw", "gpu_busbw"
    );
    for r in rows {
        let gpu = r.gpu_busbw.map_or("-".to_string(), |g| format!("{g:.2}"));
        out += &format!(
            "   {:>24}  {:>10.1}  {:>8.2}  {gpu:>9}\n",
            r.culprit(multi_node).to_string(),
            r.time_us,
            r.busbw
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rows::Ends;

    #[test]
    fn the_pair_table_names_each_pair_with_its_time_and_busbw() {
        let row = PairRow {
            expected: None,
            ends: Ends::Gpus {
                node: "n1".into(),
                a: 0,
                b: 1,
            },
            ranks: (0, 1),
            bytes: 1 << 20,
            time_us: 12.345,
            busbw: 301.234,
            gpu_busbw: None,
            first_busbw: None,
        };
        let one = pair_table(std::slice::from_ref(&row), 1 << 20, 20, false);
        assert_eq!(
            one,
            "#\n# Pair matrix: sendrecv 1048576 bytes, 20 iterations, rounds of disjoint pairs\n\
             #                      pair    time(us)     busbw  gpu_busbw\n\
             \x20               GPU0<->GPU1        12.3    301.23          -\n"
        );
        let timed = PairRow {
            gpu_busbw: Some(310.5),
            ..row
        };
        let multi = pair_table(&[timed], 1 << 20, 20, true);
        assert!(
            multi.ends_with("          n1 GPU0<->GPU1        12.3    301.23     310.50\n"),
            "{multi}"
        );
    }
}
