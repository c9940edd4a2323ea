//! The six collectives, each a small table entry: byte counts, bus-bandwidth factor and the
//! expected output for verification; settings and config parse their names, measure issues them
//! (`measure::nccl::Issue::collective`, the one place that names each NCCL call) and never names
//! a specific one elsewhere.
//!
//! Every number here follows NVIDIA nccl-tests 2.19.6 (`src/<collective>.cu`:
//! `*GetCollByteCount`, `*GetBw`), so rows and bandwidths compare one to one.

mod all_gather;
mod all_reduce;
mod alltoall;
mod broadcast;
mod reduce_scatter;
mod sendrecv;

pub use all_gather::AllGather;
pub use all_reduce::AllReduce;
pub use alltoall::AlltoAll;
pub use broadcast::Broadcast;
pub use reduce_scatter::ReduceScatter;
pub use sendrecv::SendRecv;

/// Element counts of one operation, as nccl-tests' `getCollByteCount` returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Elements each rank sends (its input).
    pub send: u64,
    /// Elements each rank receives (its output).
    pub recv: u64,
    /// The count passed to NCCL (and printed in the `count` column).
    pub param: u64,
    /// In-place: the input starts at `recvbuff + send_inplace_offset * rank` (elements).
    pub send_inplace_offset: u64,
    /// In-place: the output starts at `sendbuff + recv_inplace_offset * rank` (elements).
    pub recv_inplace_offset: u64,
}

impl Counts {
    /// Send, receive and NCCL count all `count`, no in-place offsets (all_reduce, broadcast, sendrecv).
    pub fn same(count: u64) -> Counts {
        Counts {
            send: count,
            recv: count,
            param: count,
            send_inplace_offset: 0,
            recv_inplace_offset: 0,
        }
    }

    /// The printed `size` and the bytes algbw counts: max(send, recv) bytes.
    pub fn bytes(&self, elt: u64) -> u64 {
        self.send.max(self.recv) * elt
    }
}

/// What the output of one rank must hold, element by element (see kernels/check.cu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedData {
    /// `out[i] = op over all ranks r of input(r, index_base + i)`.
    Reduction { index_base: u64 },
    /// `out[i] = input(src_rank, index_base + i)`.
    CopyFrom { src_rank: u32, index_base: u64 },
    /// `out[i] = input(i / chunk, index_base + i % chunk)`: one chunk from each rank in rank order.
    Chunks { chunk: u64, index_base: u64 },
}

/// nccl-tests rounds per-rank chunks down to a multiple of 16 bytes (all_gather, reduce_scatter,
/// alltoall): `(count/nranks) & ~(16/elt - 1)`.
pub fn chunk_count(count: u64, elt: u64, nranks: u64) -> u64 {
    let align = (16 / elt).max(1);
    (count / nranks) & !(align - 1)
}

/// The NCCL call a collective makes (`measure::nccl::Issue::collective` matches on it, so a
/// collective without a call does not compile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    AlltoAll,
    SendRecv,
}

/// One collective. Implementations are unit structs listed in [`COLLECTIVES`].
pub trait Collective: Sync {
    /// Our name, as given to `--collective` (`all_reduce`).
    fn name(&self) -> &'static str;
    /// The NCCL call that issues it.
    fn call(&self) -> Call;
    /// The nccl-tests binary that measures the same thing (`all_reduce_perf`).
    fn nccl_tests_binary(&self) -> String {
        format!("{}_perf", self.name())
    }
    /// Element counts for a requested size of `count` elements of `elt` bytes over `nranks`.
    fn counts(&self, count: u64, elt: u64, nranks: u64) -> Counts;
    /// busbw = algbw * factor (nccl-tests `doc/PERFORMANCE.md`).
    fn bus_factor(&self, nranks: u64) -> f64;
    /// Whether the reduction op matters (printed as `none` otherwise).
    fn uses_op(&self) -> bool {
        false
    }
    /// Whether the root matters (printed as `-1` otherwise).
    fn uses_root(&self) -> bool {
        false
    }
    /// nccl-tests does not check in-place alltoall and sendrecv (`N/A`); neither do we.
    fn checks_in_place(&self) -> bool {
        true
    }
    /// The expected output of `rank` for counts `c`.
    fn expected(&self, rank: u32, nranks: u32, root: u32, c: &Counts) -> ExpectedData;
}

impl std::fmt::Debug for dyn Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every collective, in the order nccl-check runs them with `--collective all`.
pub const COLLECTIVES: [&dyn Collective; 6] = [
    &AllReduce,
    &AllGather,
    &ReduceScatter,
    &Broadcast,
    &AlltoAll,
    &SendRecv,
];

/// Finds a collective by name; accepts nccl-tests' binary names and no-underscore spellings.
pub fn collective_named(name: &str) -> Result<&'static dyn Collective, String> {
    let n = name.trim().to_ascii_lowercase();
    let n = n
        .strip_suffix("_perf")
        .unwrap_or(&n)
        .replace(['-', '_'], "");
    COLLECTIVES
        .iter()
        .copied()
        .find(|c| c.name().replace('_', "") == n)
        .ok_or_else(|| {
            let names: Vec<_> = COLLECTIVES.iter().map(|c| c.name()).collect();
            format!(
                "unknown collective '{name}' (choose from {}, or all)",
                names.join(", ")
            )
        })
}

/// Parses a comma-separated list of collectives; `all` means every one.
pub fn parse_list(text: &str) -> Result<Vec<&'static dyn Collective>, String> {
    let mut out: Vec<&'static dyn Collective> = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        if part.trim().eq_ignore_ascii_case("all") {
            out.extend(COLLECTIVES.iter().copied());
        } else {
            out.push(collective_named(part)?);
        }
    }
    if out.is_empty() {
        return Err(format!("no collective in '{text}'"));
    }
    out.dedup_by_key(|c| c.name());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB32: u64 = 32 << 20;

    #[test]
    fn byte_counts_match_nccl_tests() {
        // float, 4 ranks, 32 MiB requested: count = 8 Mi elements
        let c = MB32 / 4;
        let ar = AllReduce.counts(c, 4, 4);
        assert_eq!((ar.send, ar.recv, ar.param), (c, c, c));
        let ag = AllGather.counts(c, 4, 4);
        assert_eq!(
            (ag.send, ag.recv, ag.param, ag.send_inplace_offset),
            (c / 4, c, c / 4, c / 4)
        );
        let rs = ReduceScatter.counts(c, 4, 4);
        assert_eq!(
            (rs.send, rs.recv, rs.param, rs.recv_inplace_offset),
            (c, c / 4, c / 4, c / 4)
        );
        let a2a = AlltoAll.counts(c, 4, 4);
        assert_eq!((a2a.send, a2a.recv, a2a.param), (c, c, c / 4));
        for coll in COLLECTIVES {
            assert_eq!(coll.counts(c, 4, 4).bytes(4), MB32, "{}", coll.name());
        }
    }

    #[test]
    fn chunks_round_down_to_16_bytes_like_nccl_tests() {
        // 8 bytes of float over 8 ranks prints size 0 in nccl-tests
        assert_eq!(AllGather.counts(2, 4, 8).bytes(4), 0);
        // 1000 floats over 3 ranks: 333 -> 332 (multiple of 4 floats = 16 bytes)
        assert_eq!(chunk_count(1000, 4, 3), 332);
        assert_eq!(chunk_count(1000, 8, 3), 332);
        assert_eq!(chunk_count(1000, 1, 3), 320);
        assert_eq!(AlltoAll.counts(1000, 4, 3).bytes(4), 332 * 3 * 4);
    }

    #[test]
    fn bus_factors_match_performance_md() {
        assert_eq!(AllReduce.bus_factor(4), 1.5);
        assert_eq!(AllGather.bus_factor(4), 0.75);
        assert_eq!(ReduceScatter.bus_factor(4), 0.75);
        assert_eq!(AlltoAll.bus_factor(4), 0.75);
        assert_eq!(Broadcast.bus_factor(4), 1.0);
        assert_eq!(SendRecv.bus_factor(4), 1.0);
    }

    #[test]
    fn expected_outputs_name_the_right_sources() {
        let c = AllGather.counts(64, 4, 4);
        assert_eq!(
            AllGather.expected(2, 4, 0, &c),
            ExpectedData::Chunks {
                chunk: 16,
                index_base: 0
            }
        );
        let c = ReduceScatter.counts(64, 4, 4);
        assert_eq!(
            ReduceScatter.expected(2, 4, 0, &c),
            ExpectedData::Reduction { index_base: 32 }
        );
        let c = AlltoAll.counts(64, 4, 4);
        assert_eq!(
            AlltoAll.expected(3, 4, 0, &c),
            ExpectedData::Chunks {
                chunk: 16,
                index_base: 48
            }
        );
        let c = SendRecv.counts(64, 4, 4);
        assert_eq!(
            SendRecv.expected(0, 4, 0, &c),
            ExpectedData::CopyFrom {
                src_rank: 3,
                index_base: 0
            }
        );
        assert_eq!(
            Broadcast.expected(1, 4, 2, &c),
            ExpectedData::CopyFrom {
                src_rank: 2,
                index_base: 0
            }
        );
        assert!(!AlltoAll.checks_in_place() && !SendRecv.checks_in_place());
    }

    /// The GPU thread issues the NCCL call a collective names: a collective wired to another's
    /// call would be measured under the wrong name.
    #[test]
    fn each_collective_issues_the_nccl_call_of_its_name() {
        let calls: Vec<_> = COLLECTIVES.iter().map(|c| (c.name(), c.call())).collect();
        assert_eq!(
            calls,
            [
                ("all_reduce", Call::AllReduce),
                ("all_gather", Call::AllGather),
                ("reduce_scatter", Call::ReduceScatter),
                ("broadcast", Call::Broadcast),
                ("alltoall", Call::AlltoAll),
                ("sendrecv", Call::SendRecv),
            ]
        );
    }

    #[test]
    fn each_collective_names_the_nccl_tests_binary_that_measures_it() {
        let binaries: Vec<_> = COLLECTIVES.iter().map(|c| c.nccl_tests_binary()).collect();
        assert_eq!(
            binaries,
            [
                "all_reduce_perf",
                "all_gather_perf",
                "reduce_scatter_perf",
                "broadcast_perf",
                "alltoall_perf",
                "sendrecv_perf",
            ]
        );
    }

    #[test]
    fn names_are_found_in_several_spellings() {
        assert_eq!(collective_named("all_reduce").unwrap().name(), "all_reduce");
        assert_eq!(collective_named("allreduce").unwrap().name(), "all_reduce");
        assert_eq!(
            collective_named("all_gather_perf").unwrap().name(),
            "all_gather"
        );
        assert_eq!(collective_named("AlltoAll").unwrap().name(), "alltoall");
        let e = collective_named("all_reduse").unwrap_err();
        assert!(e.contains("unknown collective 'all_reduse'"), "{e}");
        assert_eq!(parse_list("all").unwrap().len(), 6);
        assert_eq!(parse_list("sendrecv,all_reduce").unwrap().len(), 2);
        assert!(parse_list(",").is_err());
    }
}
