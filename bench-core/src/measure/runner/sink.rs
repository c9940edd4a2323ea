//! What the measuring loop shows while it runs, through a sink it is handed (`Start::show`):
//! the loop says what happened; `render/` (the sink's one implementation, `render::output::Console`)
//! says how it looks. Only the printing rank calls it (`Start::printer`).

use crate::measure::rows::{PairRow, Row};

/// nccl-tests' header fields for one collective's sizes.
pub struct TableHead<'a> {
    pub binary: &'a str,
    pub nthreads: usize,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub warmup: u32,
    pub iters: u32,
    pub check: bool,
}

pub trait Show: Send + Sync {
    /// A progress line on stderr.
    fn phase(&self, what: &str);
    /// A collective's header and column header.
    fn collective(&self, head: &TableHead);
    /// One size's row and what it was held against.
    fn row(&self, row: &Row, held_against: &str);
    /// A collective's last line: nccl-tests' out-of-bounds count and average busbw.
    fn footer(&self, binary: &str, wrong_ranks: u64, avg_busbw: f64);
    /// The pair matrix (or a localization phase's pairs) as a table.
    fn pairs(&self, rows: &[PairRow], bytes: u64, iters: u32, multi_node: bool);
    /// A line of its own (already worded), on stdout.
    fn line(&self, text: &str);
}
