//! The operations on a communicator, each settled before it returns (`Comm::settle`): one
//! collective of the measuring loop as its [`Issue`] (the NCCL call each collective makes), the
//! groups, the all_reduce the localizer's rounds sum with, and the point-to-point calls of the
//! pair matrix and of alltoall where the library has no `ncclAlltoAll`.

// Stream handles are opaque CUDA handles passed through to NCCL, never dereferenced here.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::comm::Comm;
use super::error::NcclError;
use super::library::{FnReduce, RawStream};
use std::ffi::c_void;

/// The arguments of one collective on one rank, shared by every [`crate::model::collectives::Collective`].
pub struct Issue<'a> {
    pub comm: &'a Comm<'a>,
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub elt: u64,
    pub dtype: u32,
    pub op: u32,
    pub root: u32,
    pub rank: u32,
    pub nranks: u32,
    pub stream: RawStream,
}

impl Issue<'_> {
    /// Issues collective `c` on this communicator (the caller groups and waits): the NCCL call
    /// each collective of [`crate::model::collectives::COLLECTIVES`] makes.
    pub fn collective(
        &self,
        c: &dyn crate::model::collectives::Collective,
    ) -> Result<(), NcclError> {
        use crate::model::collectives::Call;
        let (nccl, comm, n) = (self.comm.nccl, self.comm, self.nranks);
        let (send, recv, count, dtype) = (self.send, self.recv, self.count, self.dtype);
        let stream = self.stream;
        let reduce =
            |f, call, arg| comm.reduce((f, call), (send, recv), (count, dtype, arg), stream);
        match c.call() {
            Call::AllReduce => reduce(nccl.all_reduce, "ncclAllReduce", self.op),
            Call::ReduceScatter => reduce(nccl.reduce_scatter, "ncclReduceScatter", self.op),
            Call::Broadcast => reduce(nccl.broadcast, "ncclBroadcast", self.root),
            Call::AllGather => {
                let (send, recv) = (send as *const c_void, recv as *mut c_void);
                let (count, dtype) = (count as usize, dtype as i32);
                // SAFETY: send and recv are device buffers of this comm's GPU holding what the
                // collective's counts say (`Collective::counts`).
                let rc = unsafe { (nccl.all_gather)(send, recv, count, dtype, comm.raw, stream) };
                comm.settle(rc, "ncclAllGather")
            }
            Call::AlltoAll => self.alltoall(),
            // Each rank sends to rank+1 and receives from rank-1 in one group (a ring of pairs).
            Call::SendRecv => {
                let (to, from) = ((self.rank + 1) % n, (self.rank + n - 1) % n);
                comm.send_recv(send, to, recv, from, count, dtype, stream)
            }
        }
    }

    /// `ncclAlltoAll` where the library has it (2.28+), else one send and one receive per peer
    /// in a group, exactly as nccl-tests 2.19.6 chooses.
    fn alltoall(&self) -> Result<(), NcclError> {
        let (comm, send, recv, count) = (self.comm, self.send, self.recv, self.count);
        let (dtype, stream) = (self.dtype, self.stream);
        if let Some(f) = comm.nccl.alltoall {
            let (s, r, n) = (send as *const c_void, recv as *mut c_void, count as usize);
            // SAFETY: send/recv hold count*nranks elements on this comm's GPU.
            let rc = unsafe { f(s, r, n, dtype as i32, comm.raw, stream) };
            return comm.settle(rc, "ncclAlltoAll");
        }
        let chunk = count * self.elt;
        let peers = (0..self.nranks).map(|peer| (peer as u64 * chunk, peer));
        comm.group_each(peers, (send, recv), (count, dtype), stream)
    }
}

impl Comm<'_> {
    pub fn group_start(&self) -> Result<(), NcclError> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.nccl.group_start)() };
        self.settle(rc, "ncclGroupStart")
    }

    pub fn group_end(&self) -> Result<(), NcclError> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.nccl.group_end)() };
        self.settle(rc, "ncclGroupEnd")
    }

    pub fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: u32,
        op: u32,
        stream: RawStream,
    ) -> Result<(), NcclError> {
        let all_reduce = (self.nccl.all_reduce, "ncclAllReduce");
        self.reduce(all_reduce, (send, recv), (count, dtype, op), stream)
    }

    /// One call of `ncclAllReduce`'s shape (`ncclReduceScatter`; `ncclBroadcast` with the root
    /// where the op is): `f`, named `call`, of `count` elements with `arg`.
    fn reduce(
        &self,
        (f, call): (FnReduce, &'static str),
        (send, recv): (u64, u64),
        (count, dtype, arg): (u64, u32, u32),
        stream: RawStream,
    ) -> Result<(), NcclError> {
        let (send, recv) = (send as *const c_void, recv as *mut c_void);
        let (n, dt, arg, raw) = (count as usize, dtype as i32, arg as i32, self.raw);
        // SAFETY: send/recv are device buffers of this comm's GPU holding what the collective's
        // counts say (`Collective::counts`).
        let rc = unsafe { f(send, recv, n, dt, arg, raw, stream) };
        self.settle(rc, call)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn send_recv(
        &self,
        send: u64,
        to: u32,
        recv: u64,
        from: u32,
        count: u64,
        dtype: u32,
        stream: RawStream,
    ) -> Result<(), NcclError> {
        self.group_start()?;
        let exchanged = self.send_and_recv((send, to), (recv, from), count, dtype, stream);
        exchanged.and(self.group_end())
    }

    /// One byte each way with every peer of `peers` at once, in one group (the k-th peer's
    /// byte at offset k of `send` and `recv`): NCCL connects a peer's point-to-point channels
    /// at the first operation with it, so this connects every peer in one step.
    pub fn connect_peers(
        &self,
        peers: &[u32],
        send: u64,
        recv: u64,
        stream: RawStream,
    ) -> Result<(), NcclError> {
        let peers = peers.iter().enumerate().map(|(k, &peer)| (k as u64, peer));
        self.group_each(peers, (send, recv), (1, 0), stream)
    }

    /// For each (offset, peer) of `peers`, one send at `send` and one receive at `recv`, both
    /// plus the offset, of `count` elements with that peer, all in one group, each made
    /// whatever the others returned.
    fn group_each(
        &self,
        peers: impl Iterator<Item = (u64, u32)>,
        (send, recv): (u64, u64),
        (count, dtype): (u64, u32),
        stream: RawStream,
    ) -> Result<(), NcclError> {
        self.group_start()?;
        let mut result = Ok(());
        for (off, peer) in peers {
            let both = ((send + off, peer), (recv + off, peer));
            result = result.and(self.send_and_recv(both.0, both.1, count, dtype, stream));
        }
        result.and(self.group_end())
    }

    /// One send of `count` elements at `send` to rank `to` and one receive at `recv` from
    /// rank `from`, both made whatever the other returned (the caller groups them).
    fn send_and_recv(
        &self,
        (send, to): (u64, u32),
        (recv, from): (u64, u32),
        count: u64,
        dtype: u32,
        stream: RawStream,
    ) -> Result<(), NcclError> {
        let (n, dt, raw) = (count as usize, dtype as i32, self.raw);
        // SAFETY: send holds count elements on this comm's GPU.
        let rc = unsafe { (self.nccl.send)(send as *const c_void, n, dt, to as i32, raw, stream) };
        let sent = self.settle(rc, "ncclSend");
        // SAFETY: recv holds count elements on this comm's GPU.
        let rc = unsafe { (self.nccl.recv)(recv as *mut c_void, n, dt, from as i32, raw, stream) };
        sent.and(self.settle(rc, "ncclRecv"))
    }
}
