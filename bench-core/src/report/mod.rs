//! What a run reports: the nccl-tests-compatible table (`table`) and the JSON report (`json`).

pub mod json;
pub mod table;

use serde::Serialize;

/// One placement (out-of-place or in-place) of one row, combined over all ranks.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Placement {
    /// Seconds per operation, averaged over ranks (nccl-tests `-a 1`), in microseconds.
    pub time_us: f64,
    /// GB/s, GB = 1e9 bytes.
    pub algbw: f64,
    pub busbw: f64,
    /// Elements that differ bitwise from the expected output, summed over ranks; `None` = not
    /// checked (in-place alltoall and sendrecv, or `--check 0`).
    pub wrong: Option<u64>,
}

/// One printed line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub collective: &'static str,
    /// Bytes: max(send, recv), as nccl-tests prints.
    pub size: u64,
    /// The count passed to NCCL.
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub redop: &'static str,
    pub root: i32,
    pub out_of_place: Placement,
    pub in_place: Placement,
}

impl Row {
    pub fn wrong(&self) -> u64 {
        self.out_of_place.wrong.unwrap_or(0) + self.in_place.wrong.unwrap_or(0)
    }
}
