//! `alltoall`: see nccl-tests `src/alltoall.cu`.

use super::{Call, Collective, Counts, ExpectedData};

pub struct AlltoAll;

impl Collective for AlltoAll {
    fn name(&self) -> &'static str {
        "alltoall"
    }
    fn call(&self) -> Call {
        Call::AlltoAll
    }
    fn counts(&self, count: u64, elt: u64, nranks: u64) -> Counts {
        let per_peer = super::chunk_count(count, elt, nranks);
        Counts {
            send: per_peer * nranks,
            recv: per_peer * nranks,
            param: per_peer,
            send_inplace_offset: 0,
            recv_inplace_offset: 0,
        }
    }
    fn bus_factor(&self, nranks: u64) -> f64 {
        (nranks - 1) as f64 / nranks as f64
    }
    fn checks_in_place(&self) -> bool {
        false
    }
    fn expected(&self, rank: u32, _nranks: u32, _root: u32, c: &Counts) -> ExpectedData {
        // chunk j of my output is chunk `rank` of rank j's input
        ExpectedData::Chunks {
            chunk: c.param,
            index_base: rank as u64 * c.param,
        }
    }
}
