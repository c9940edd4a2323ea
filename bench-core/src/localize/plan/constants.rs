//! The cost model's constants, each with its value, its unit and where it comes from: a cited
//! measurement (installed under /usr/share/nccl-check/results/), a public number (a URL), or an
//! estimate where no source exists.

use serde::Serialize;

/// One constant of the cost model and where it comes from.
#[derive(Debug, Clone, Serialize)]
pub struct Constant {
    pub name: &'static str,
    pub value: f64,
    pub unit: &'static str,
    pub estimate: bool,
    pub source: &'static str,
}

pub const CONSTANTS: [Constant; 15] = [
    Constant {
        name: "local_collective_s",
        value: 0.087,
        unit: "s",
        estimate: false,
        source: "all_reduce 256M on one node, allocation 23 + warm-up 47 + timed loop 12 + verification 5 ms (medians, 4x H200): /usr/share/nccl-check/results/2026-11-21-h200x4-session4/time-to-verdict.txt",
    },
    Constant {
        name: "local_pair_round_s",
        value: 0.056,
        unit: "s",
        estimate: false,
        source: "quick plan 2268 ms - all_reduce alone 2101 ms = 167 ms for the 3 rounds of the 4-GPU pair matrix (medians in /usr/share/nccl-check/results/2026-11-21-h200x4-session4/time-to-verdict.txt)",
    },
    Constant {
        name: "start_up_s",
        value: 0.96,
        unit: "s",
        estimate: false,
        source: "before NCCL init: the CUDA driver's start (cuda_init, median 526 ms) and every GPU's context at once (contexts, median 434 ms), 4x H200, the report's phases: /usr/share/nccl-check/results/2026-11-21-h200x4-session4/time-to-verdict.txt",
    },
    Constant {
        name: "exit_s",
        value: 0.40,
        unit: "s",
        estimate: false,
        source: "process start to exit less the report's total_ms (loading the program, writing the report, the driver releasing the GPUs at exit): median 397 ms over 5 all_reduce checks, 4x H200: /usr/share/nccl-check/results/2026-11-21-h200x4-session4/time-to-verdict.txt",
    },
    Constant {
        name: "cached_s",
        value: 0.004,
        unit: "s",
        estimate: false,
        source: "the prolog when the same GPUs passed within cache_seconds (no worker runs): 4 ms on a 4x H200 node: /usr/share/nccl-check/results/2026-11-21-h200x4-session4/README.md",
    },
    Constant {
        name: "nccl_init_base_s",
        value: 0.69,
        unit: "s",
        estimate: false,
        source: "nccl_init phase, median 692 ms at 4 ranks: /usr/share/nccl-check/results/2026-11-21-h200x4-session4/time-to-verdict.txt",
    },
    Constant {
        name: "nccl_init_per_rank_s",
        value: 0.002,
        unit: "s/rank",
        estimate: true,
        source: "estimate: NCCL's bootstrap and ring building grow with the rank count; NVIDIA/nccl#1156 reports 2.5 min at 'certain K GPUs' on the default init path, NVIDIA/nccl PR #1789 tens of seconds from O(N^2) loops at 32K-100K ranks; no published number at 8K ranks",
    },
    Constant {
        name: "connect_all_s",
        value: 0.39,
        unit: "s",
        estimate: false,
        source: "NCCL 'Init timings ... connections 0.39' for every channel of an 8-rank communicator (NVIDIA/nccl#1646 log); charged once to the allocation-wide collective, whose ranks connect to a fixed number of neighbours",
    },
    Constant {
        name: "connect_new_peer_s",
        value: 0.04,
        unit: "s",
        estimate: false,
        source: "a localization round's time beyond its data: measure_ms - 7 x the per-iteration sendrecv time (2 warm-up + 5 timed of 32 MiB; the iteration time from the report's timed loop less its all_reduce rows), median 40 ms over the 48 process-rounds of 3 healthy 8-node checks (range -11..107 ms; the connection to the new peer and the barrier before the timed loop). Real NCCL 2.28.9 over sockets between emulated nodes on one H100 (IB connection set-up not measured): /usr/share/nccl-check/results/2026-11-24-h100x1-visit8/fabric/n8-beats/n8-healthy-1/fab01.json and the other fab*.json of n8-healthy-1..3",
    },
    Constant {
        name: "allocation_busbw_gbs",
        value: 370.0,
        unit: "GB/s",
        estimate: false,
        source: "multi-node all_reduce busbw, H100 8 nodes average 373 GB/s (https://github.com/coreweave/nccl-tests, README 'Expected Performance')",
    },
    Constant {
        name: "nic_busbw_gbs",
        value: 48.0,
        unit: "GB/s",
        estimate: true,
        source: "estimate: a 400 Gb/s NIC is 50 GB/s line rate; a GPU pair across nodes through one NIC each way",
    },
    Constant {
        name: "hop_latency_s",
        value: 5e-6,
        unit: "s",
        estimate: true,
        source: "estimate: per step between nodes (ring all_reduce takes 2(N-1) steps; NCCL's trees take about 2 log2 N, up then down)",
    },
    Constant {
        name: "small_allreduce_s",
        value: 27e-6,
        unit: "s",
        estimate: false,
        source: "an all_reduce of 8 B to 128 KiB on one node costs its launch and the node's own steps: 24.5-27.8 us at 8 B..128 KiB, 4x H200, nccl-tests all_reduce_perf: /usr/share/nccl-check/results/2026-11-21-h200x4-anchors/h200x4-nccl-tests-2.19.6-nccl-2.28.9-sweep.txt",
    },
    Constant {
        name: "control_sum_per_process_s",
        value: 12e-6,
        unit: "s/process",
        estimate: false,
        source: "control plane (a star): a one-value sum or barrier costs the coordinator one read and one write per process, 0.8 ms at 64 and 3.1 ms at 256 processes (12 us each); 31 us each at 1,024 processes sharing 2 cores (512 a core): /usr/share/nccl-check/results/2026-11-23-control-plane-gather/README.md",
    },
    Constant {
        name: "decide_per_node_s",
        value: 2e-6,
        unit: "s/node",
        estimate: false,
        source: "the localizer's decision after a round, which every process now runs itself: <= 1.3 ms at 1,024 and 3-8 ms at 4,096 nodes (8 ms / 4,096 = 2 us a node) on a loaded 2-core machine: /usr/share/nccl-check/results/2026-11-24-control-plane-4096/README.md",
    },
];

/// The value of the constant `name` (NaN for a name the table does not have).
pub fn c(name: &str) -> f64 {
    CONSTANTS
        .iter()
        .find(|k| k.name == name)
        .map_or(f64::NAN, |k| k.value)
}
