//! The plane's one message, either way: which operation (`Op`), its values or entries, a
//! reply, an abort or a beat.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How `reduce` combines the processes' vectors, element by element.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    #[default]
    Sum,
    Min,
    /// Sparse entries up, one reply per process down.
    Gather,
}

impl Op {
    /// `v` combined into `t`: the minimum for `Min`, else the sum.
    pub fn combine(self, t: &mut f64, v: f64) {
        match self {
            Op::Min => *t = t.min(v),
            _ => *t += v,
        }
    }
}

/// One message of the plane, either way. Fields an operation does not use stay empty.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct Frame {
    pub(super) seq: u64,
    #[serde(default)]
    pub(super) op: Op,
    /// `reduce`: the vector (up) or the result (down).
    #[serde(default)]
    pub(super) values: Vec<f64>,
    /// `gather`: the vector's length, which every process must agree on.
    #[serde(default)]
    pub(super) len: u64,
    /// `gather`, up: (index, value) entries; several for one index are added.
    #[serde(default)]
    pub(super) entries: Vec<(u64, f64)>,
    /// `gather`, down: this process's reply.
    #[serde(default)]
    pub(super) reply: Option<Value>,
    /// Set by a process that gives up, so the others stop at once instead of at their deadline.
    #[serde(default)]
    pub(super) abort: Option<String>,
    /// Only says the sender lives ([`super::link`]); carries nothing else and is never answered.
    #[serde(default)]
    pub(super) beat: bool,
}
