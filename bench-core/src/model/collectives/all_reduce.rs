//! `all_reduce`: see nccl-tests `src/all_reduce.cu`.

use super::{Call, Collective, Counts, ExpectedData};

pub struct AllReduce;

impl Collective for AllReduce {
    fn name(&self) -> &'static str {
        "all_reduce"
    }
    fn call(&self) -> Call {
        Call::AllReduce
    }
    fn counts(&self, count: u64, _elt: u64, _nranks: u64) -> Counts {
        Counts::same(count)
    }
    fn bus_factor(&self, nranks: u64) -> f64 {
        2.0 * (nranks - 1) as f64 / nranks as f64
    }
    fn uses_op(&self) -> bool {
        true
    }
    fn expected(&self, _rank: u32, _nranks: u32, _root: u32, _c: &Counts) -> ExpectedData {
        ExpectedData::Reduction { index_base: 0 }
    }
}
