//! The operations on a communicator, each settled before it returns (`Comm::settle`): one
//! collective of the measuring loop as its [`Issue`] (the NCCL call each collective makes), the
//! groups, the all_reduce the localizer's rounds sum with, and the point-to-point calls of the
//! pair matrix and of alltoall where the library has no `ncclAlltoAll`.

// Stream handles are opaque CUDA handles passed through to NCCL, never dereferenced here.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::comm::Comm;
use super::error::NcclError;
use super::library::RawStream;
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
        let (nccl, raw, stream) = (self.comm.nccl, self.comm.raw, self.stream);
        let (send, recv) = (self.send as *const c_void, self.recv as *mut c_void);
        let (count, dtype) = (self.count as usize, self.dtype as i32);
        match c.call() {
            Call::AllReduce => self.comm.all_reduce(
                self.send,
                self.recv,
                self.count,
                self.dtype,
                self.op,
                self.stream,
            ),
            // SAFETY (the three calls below): send and recv are device buffers of this comm's
            // GPU holding what the collective's counts say (`Collective::counts`).
            Call::AllGather => {
                let rc = unsafe { (nccl.all_gather)(send, recv, count, dtype, raw, stream) };
                self.comm.settle(rc, "ncclAllGather")
            }
            Call::ReduceScatter => {
                let op = self.op as i32;
                let rc =
                    unsafe { (nccl.reduce_scatter)(send, recv, count, dtype, op, raw, stream) };
                self.comm.settle(rc, "ncclReduceScatter")
            }
            Call::Broadcast => {
                let root = self.root as i32;
                let rc = unsafe { (nccl.broadcast)(send, recv, count, dtype, root, raw, stream) };
                self.comm.settle(rc, "ncclBroadcast")
            }
            // `ncclAlltoAll` where the library has it (2.28+), else one send and one receive per
            // peer in a group, exactly as nccl-tests 2.19.6 chooses.
            Call::AlltoAll => self.comm.alltoall(
                self.send,
                self.recv,
                self.count,
                self.dtype,
                self.elt,
                self.nranks,
                self.stream,
            ),
            Call::SendRecv => {
                // Each rank sends to rank+1 and receives from rank-1 in one group (a ring of pairs).
                let n = self.nranks;
                self.comm.send_recv(
                    self.send,
                    (self.rank + 1) % n,
                    self.recv,
                    (self.rank + n - 1) % n,
                    self.count,
                    self.dtype,
                    self.stream,
                )
            }
        }
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

    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: u32,
        op: u32,
        stream: RawStream,
    ) -> Result<(), NcclError> {
        let (send, recv) = (send as *const c_void, recv as *mut c_void);
        let (n, dt, op, raw) = (count as usize, dtype as i32, op as i32, self.raw);
        // SAFETY: send/recv are device buffers of at least count elements on this comm's GPU.
        let rc = unsafe { (self.nccl.all_reduce)(send, recv, n, dt, op, raw, stream) };
        self.settle(rc, "ncclAllReduce")
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
        self.group_start()?;
        let mut result = Ok(());
        for (k, &peer) in peers.iter().enumerate() {
            let off = k as u64;
            let both = ((send + off, peer), (recv + off, peer));
            result = result.and(self.send_and_recv(both.0, both.1, 1, 0, stream));
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

    /// `ncclAlltoAll` when the library has it, else one send and one receive per peer, grouped.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoall(
        &self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: u32,
        elt: u64,
        nranks: u32,
        stream: RawStream,
    ) -> Result<(), NcclError> {
        if let Some(f) = self.nccl.alltoall {
            let (s, r, n) = (send as *const c_void, recv as *mut c_void, count as usize);
            // SAFETY: send/recv hold count*nranks elements on this comm's GPU.
            let rc = unsafe { f(s, r, n, dtype as i32, self.raw, stream) };
            return self.settle(rc, "ncclAlltoAll");
        }
        let chunk = count * elt;
        self.group_start()?;
        let mut result = Ok(());
        for peer in 0..nranks {
            let off = peer as u64 * chunk;
            let both = ((send + off, peer), (recv + off, peer));
            result = result.and(self.send_and_recv(both.0, both.1, count, dtype, stream));
        }
        result.and(self.group_end())
    }
}
