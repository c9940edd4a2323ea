//! `sendrecv`: see nccl-tests `src/sendrecv.cu`.

use super::{Call, Collective, Counts, ExpectedData};

pub struct SendRecv;

impl Collective for SendRecv {
    fn name(&self) -> &'static str {
        "sendrecv"
    }
    fn call(&self) -> Call {
        Call::SendRecv
    }
    fn counts(&self, count: u64, _elt: u64, _nranks: u64) -> Counts {
        Counts::same(count)
    }
    fn bus_factor(&self, _nranks: u64) -> f64 {
        1.0
    }
    fn checks_in_place(&self) -> bool {
        false
    }
    fn expected(&self, rank: u32, nranks: u32, _root: u32, _c: &Counts) -> ExpectedData {
        ExpectedData::CopyFrom {
            src_rank: (rank + nranks - 1) % nranks,
            index_base: 0,
        }
    }
}
