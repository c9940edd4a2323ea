//! `reduce_scatter`: see nccl-tests `src/reduce_scatter.cu`.

use super::{Call, Collective, Counts, ExpectedData};

pub struct ReduceScatter;

impl Collective for ReduceScatter {
    fn name(&self) -> &'static str {
        "reduce_scatter"
    }
    fn call(&self) -> Call {
        Call::ReduceScatter
    }
    fn counts(&self, count: u64, elt: u64, nranks: u64) -> Counts {
        let base = super::chunk_count(count, elt, nranks);
        Counts {
            send: base * nranks,
            recv: base,
            param: base,
            send_inplace_offset: 0,
            recv_inplace_offset: base,
        }
    }
    fn bus_factor(&self, nranks: u64) -> f64 {
        (nranks - 1) as f64 / nranks as f64
    }
    fn uses_op(&self) -> bool {
        true
    }
    fn expected(&self, rank: u32, _nranks: u32, _root: u32, c: &Counts) -> ExpectedData {
        ExpectedData::Reduction {
            index_base: rank as u64 * c.recv,
        }
    }
}
