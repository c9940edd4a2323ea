//! `broadcast`: see nccl-tests `src/broadcast.cu`.

use super::{Call, Collective, Counts, ExpectedData};

pub struct Broadcast;

impl Collective for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }
    fn call(&self) -> Call {
        Call::Broadcast
    }
    fn counts(&self, count: u64, _elt: u64, _nranks: u64) -> Counts {
        Counts::same(count)
    }
    fn bus_factor(&self, _nranks: u64) -> f64 {
        1.0
    }
    fn uses_root(&self) -> bool {
        true
    }
    fn expected(&self, _rank: u32, _nranks: u32, root: u32, _c: &Counts) -> ExpectedData {
        ExpectedData::CopyFrom {
            src_rank: root,
            index_base: 0,
        }
    }
}
