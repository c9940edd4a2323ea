//! `all_gather`: see nccl-tests `src/all_gather.cu`.

use super::{Call, Collective, Counts, ExpectedData};

pub struct AllGather;

impl Collective for AllGather {
    fn name(&self) -> &'static str {
        "all_gather"
    }
    fn call(&self) -> Call {
        Call::AllGather
    }
    fn counts(&self, count: u64, elt: u64, nranks: u64) -> Counts {
        let base = super::chunk_count(count, elt, nranks);
        Counts {
            send: base,
            recv: base * nranks,
            param: base,
            send_inplace_offset: base,
            recv_inplace_offset: 0,
        }
    }
    fn bus_factor(&self, nranks: u64) -> f64 {
        (nranks - 1) as f64 / nranks as f64
    }
    fn expected(&self, _rank: u32, _nranks: u32, _root: u32, c: &Counts) -> ExpectedData {
        ExpectedData::Chunks {
            chunk: c.send,
            index_base: 0,
        }
    }
}
