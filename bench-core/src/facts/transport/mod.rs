//! Which transport each GPU-to-GPU path really used, taken from NCCL's own `NCCL_DEBUG=INFO` log,
//! and the findings that turn a silent fallback (SHM or sockets where NVLink or InfiniBand is
//! expected, no CollNet/NVLS where they were asked for) into a FAIL with code
//! `transport_fallback`, whatever the bandwidth.
//!
//! Pure: text in, summary out. The formats are NCCL's, read in its source for 2.18.3 to 2.28.9
//! and master (2.30.7):
//!
//! | source | message (after `host:pid:tid [cudaDev] NCCL INFO `) |
//! |---|---|
//! | `transport/p2p.cc` | `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read` (also `P2P/IPC`, `P2P/MNNVL`, `P2P/direct pointer`, `P2P/indirect/2[2]`, suffix `/CE`) |
//! | `transport/shm.cc` | `Channel 00 : 0[0] -> 1[1] via SHM/direct/direct` (2.18-2.28; `SHM/CE/direct` with memcpy), `... via SHM/direct` (2.30) |
//! | `transport/net.cc` | `Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA`, `... [receive] via NET/Socket/1`, PXN `NET/IB/0(1)/GDRDMA`, `(PCI)`, `/Shared`; plugins name themselves (`IBext_v8`, `AWS Libfabric`, `UCX`) |
//! | `transport/coll_net.cc` | `CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA`, `rank 0 Connected CollNet`, `Connected Collnet Chains ...` (2.19+), `Connected collnet + chain` (2.18) |
//! | `transport/nvls.cc` | `NVLS multicast support is [not ]available on dev 0[ (NVLS_NCHANNELS 16)]`, `NVLS comm 0x.. headRank ..`, `Connected NVLS tree` |
//! | `init.cc` | `.. 24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, ..`, `.. comm 0x.. rank 0 nranks 4 .. - Init COMPLETE`, `Using network IB` |
//! | `transport.cc` / WARN | `Cannot initialize CollNet, using point-to-point network instead`, `.. less than CollNet node threshold .., disabling CollNet` |
//! | `enqueue.cc` (subsys TUNING, rank 0) | `AllReduce: 67108864 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}` (2.24+: `RING`, `NVLS_TREE`, `COLLNET_DIRECT`), `AllReduce: 1024 Bytes -> Algo 1 proto 2 time 12.3` (2.22-2.23, 2.21 without the name) |
//! | `graph/search.cc` (subsys GRAPH) | `Pattern 4, crossNic 0, nChannels 16, bw 40.0/40.0, type NVL/PIX, sameChannels 1` |
//!
//! The lines between ranks are printed once per channel by the connecting side (both sides for
//! NET), at communicator init for collectives and lazily at the first send/recv for
//! point-to-point (`Channel 00/1`: connIndex 1). The rings' order lines (`Channel 00/02 : 0 1 2
//! 3`) carry no `via` and are skipped.
//!
//! The ranks are the communicator's. A log holding several communicators of different sizes
//! (sub-communicators for pair tests) must be split per communicator by the caller; this parser
//! does not guess which line belongs to which.

mod expect;
mod log;

pub use expect::check_transports;
pub use log::parse_log;

use crate::measure::rows::Name;
use nccl_check_contract::report::culprit::Culprit;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One transport as NCCL names it; its stable machine name (`p2p`, `net_ib`: [`Transport::name`])
/// is the variant's in snake case.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Transport {
    /// CUDA peer-to-peer: NVLink, or PCIe peer-to-peer (`mode`: `CUMEM/read`, `IPC`, `MNNVL`,
    /// `direct pointer`, `indirect/2[2]`, ...).
    P2p { mode: String },
    /// Through host shared memory.
    Shm,
    /// NCCL's InfiniBand/RoCE transport (`IB`), or the rdma-sharp plugin's (`IBext*`).
    NetIb,
    /// NCCL's TCP socket transport.
    NetSocket,
    /// Any other network plugin, by the name it gives itself (`AWS Libfabric`, `UCX`, ...).
    NetOther(String),
    /// SHARP / in-network reduction through a CollNet plugin.
    #[strum(serialize = "collnet")]
    CollNet,
    /// NVLink SHARP (NVSwitch multicast).
    Nvls,
    /// A `via` NCCL printed that this parser does not know (a newer NCCL); kept verbatim.
    Other(String),
}

impl Transport {
    /// Stable machine name, for the JSON report and configs.
    pub fn name(&self) -> &'static str {
        self.into()
    }

    pub fn is_net(&self) -> bool {
        matches!(
            self,
            Transport::NetIb | Transport::NetSocket | Transport::NetOther(_)
        )
    }

    /// Classifies the text after `via ` (`P2P/CUMEM/read`, `NET/IB/0/GDRDMA`, ...).
    pub fn from_via(via: &str) -> Transport {
        let via = via.trim();
        if let Some(mode) = via.strip_prefix("P2P/") {
            return Transport::P2p {
                mode: mode.to_string(),
            };
        }
        if via == "SHM" || via.starts_with("SHM/") {
            return Transport::Shm;
        }
        if let Some(rest) = via.strip_prefix("NET/") {
            let name = rest.split('/').next().unwrap_or(rest);
            return match name {
                "IB" => Transport::NetIb,
                n if n.starts_with("IBext") => Transport::NetIb,
                "Socket" => Transport::NetSocket,
                n => Transport::NetOther(n.to_string()),
            };
        }
        if via.starts_with("COLLNET/") {
            return Transport::CollNet;
        }
        if via.starts_with("NVLS") {
            return Transport::Nvls;
        }
        Transport::Other(via.to_string())
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::P2p { mode } if mode.is_empty() => f.write_str("P2P"),
            Transport::P2p { mode } => write!(f, "P2P/{mode}"),
            Transport::Shm => f.write_str("SHM"),
            Transport::NetIb => f.write_str("NET/IB"),
            Transport::NetSocket => f.write_str("NET/Socket"),
            Transport::NetOther(name) => write!(f, "NET/{name}"),
            Transport::CollNet => f.write_str("CollNet"),
            Transport::Nvls => f.write_str("NVLS"),
            Transport::Other(via) => write!(f, "{via}"),
        }
    }
}

/// One `Channel ... via ...` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub channel: u32,
    /// 0 for the collectives' connections, 1 for point-to-point ones; absent on SHM lines.
    pub conn_index: Option<u32>,
    pub from_rank: u32,
    /// The GPU's NVML index (the number in `0[3]`), i.e. the physical GPU on its node.
    pub from_dev: u32,
    pub to_rank: u32,
    pub to_dev: u32,
    pub transport: Transport,
    /// Everything after `via ` (`NET/IB/0(1)/GDRDMA/Shared`).
    pub via: String,
}

/// What was seen for one directed rank pair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairTransports {
    pub from_dev: u32,
    pub to_dev: u32,
    pub transports: BTreeSet<Transport>,
}

/// Everything the log says about transports and algorithms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportSummary {
    /// Per directed (from_rank, to_rank): the transports of all its channels.
    pub pairs: BTreeMap<(u32, u32), PairTransports>,
    /// Host of each rank, from the line prefixes (`host:pid:tid`) of the lines that rank printed.
    pub rank_hosts: BTreeMap<u32, String>,
    /// `Using network IB` (the network NCCL picked for this communicator).
    pub network: Option<String>,
    /// CollNet channels were connected (`CollNet .. via COLLNET/..`, `Connected CollNet`).
    pub collnet_connected: bool,
    /// Why NCCL gave CollNet up (`Cannot initialize CollNet, ...`), if it said so.
    pub collnet_disabled: Option<String>,
    /// `NVLS multicast support is [not ]available`: Some(false) when any GPU said "not".
    pub nvls_available: Option<bool>,
    /// The `N nvls channels` of the channel summary line (largest seen).
    pub nvls_channels: Option<u32>,
    /// NVLS buffers were set up (`NVLS comm ...`, `Connected NVLS tree`).
    pub nvls_connected: bool,
    /// Per collective (`AllReduce`, or `?` before NCCL 2.22): the algorithms the TUNING lines
    /// named (`Ring`, `Tree`, `NVLS`, `CollNetDirect`, ...). Empty without NCCL_DEBUG_SUBSYS=TUNING.
    pub algorithms: BTreeMap<String, BTreeSet<String>>,
    /// Intra-node path types of the searched graphs (`NVL`, `PIX`, `SYS`...; subsys GRAPH).
    pub graph_intra_types: BTreeSet<String>,
    /// Number of `via` lines parsed.
    pub connection_lines: usize,
    /// NCCL's `NET/IB : Using [0]mlx5_0:1/IB ...` lines: the NICs it used (`facts::net`).
    pub net_using: Vec<String>,
}

/// One path of the report: who talked to whom, over what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathReport {
    pub from_rank: u32,
    pub to_rank: u32,
    /// `GPU0->GPU1` (NVML indices), with the hosts when they differ.
    pub path: String,
    /// Stable names (`p2p`, `shm`, `net_ib`, ...).
    pub transports: Vec<Name>,
    /// As NCCL printed them (`P2P/CUMEM/read`, `NET/IB`).
    pub detail: Vec<String>,
}

impl TransportSummary {
    /// True when at least one connection line was found. Without them (NCCL_DEBUG unset, or
    /// NCCL_DEBUG_SUBSYS without INIT) nothing can be said about transports: that is not a pass.
    pub fn has_connections(&self) -> bool {
        self.connection_lines > 0
    }

    /// Whether an NVLS algorithm carried a collective: from TUNING lines when present, else
    /// whether NVLS was set up.
    pub fn nvls_used(&self) -> bool {
        self.carried(|a| a.starts_with("NVLS"))
            .unwrap_or(self.nvls_connected)
    }

    /// Whether CollNet (SHARP) carried a collective: from TUNING lines when present, else
    /// whether CollNet was connected.
    pub fn collnet_used(&self) -> bool {
        self.carried(|a| a.starts_with("CollNet"))
            .unwrap_or(self.collnet_connected)
    }

    fn carried(&self, pred: impl Fn(&str) -> bool) -> Option<bool> {
        let mut algorithms = self.algorithms.values().flatten();
        (!self.algorithms.is_empty()).then(|| algorithms.any(|a| pred(a)))
    }

    /// The path from rank `from` to rank `to`, typed: two GPUs of one node, directed. Written:
    /// `GPU0->GPU1` in a one-host log, `node01 GPU0->GPU1` inside a node of a multi-host log,
    /// `node01 GPU0->node02 GPU0` across hosts.
    pub fn path(&self, from: u32, to: u32) -> Culprit {
        let (fd, td) = self
            .pairs
            .get(&(from, to))
            .map(|p| (p.from_dev, p.to_dev))
            .unwrap_or((from, to));
        let several_hosts = self.rank_hosts.values().collect::<BTreeSet<_>>().len() > 1;
        let directed = |node: Option<&String>| Culprit::GpuPair {
            node: node.cloned(),
            a: fd,
            b: td,
            directed: true,
        };
        match (self.rank_hosts.get(&from), self.rank_hosts.get(&to)) {
            (Some(a), Some(b)) if a != b => Culprit::Path {
                from: a.clone(),
                a: fd,
                to: b.clone(),
                b: td,
            },
            (Some(a), _) if several_hosts => directed(Some(a)),
            _ => directed(None),
        }
    }

    /// The per-path table for the report.
    pub fn paths(&self) -> Vec<PathReport> {
        self.pairs
            .iter()
            .map(|(&(from, to), p)| {
                // The set is ordered by kind first: each name is one run, `dedup` leaves one.
                let mut names: Vec<&str> = p.transports.iter().map(Transport::name).collect();
                names.dedup();
                PathReport {
                    from_rank: from,
                    to_rank: to,
                    path: self.path(from, to).to_string(),
                    transports: names.into_iter().map(Name::from).collect(),
                    detail: p.transports.iter().map(|t| t.to_string()).collect(),
                }
            })
            .collect()
    }
}

/// What NCCL's log says about the paths of this process's ranks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TransportInfo {
    /// Where the log came from, or why there is none (`NCCL_DEBUG` set by the user).
    pub source: String,
    pub paths: Vec<PathReport>,
    /// `Using network ...`
    pub network: Option<String>,
    pub collnet_used: bool,
    pub nvls_used: bool,
    /// Set when CollNet or NVLS carried collectives: busbw is then not the ring-equivalent
    /// figure (it can exceed the link speed), and only thresholds for that algorithm apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw_note: Option<String>,
}

impl TransportInfo {
    /// The report's entry when there is no log to read (`why`: NCCL_DEBUG set by the caller).
    pub fn not_recorded(why: String) -> Self {
        Self {
            source: why,
            ..Self::default()
        }
    }

    /// The report's entry for a parsed log.
    pub fn from_log(s: &TransportSummary) -> Self {
        let (collnet, nvls, lines) = (s.collnet_used(), s.nvls_used(), s.connection_lines);
        let algorithm = if collnet { "CollNet (SHARP)" } else { "NVLS" };
        Self {
            paths: s.paths(),
            network: s.network.clone(),
            collnet_used: collnet,
            nvls_used: nvls,
            busbw_note: (collnet || nvls).then(|| format!(
                "{algorithm} carried collectives: busbw is not the ring-equivalent figure (it can exceed the link speed); only thresholds written for that algorithm apply"
            )),
            ..Self::not_recorded(format!("NCCL_DEBUG=INFO log, {lines} connection lines"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::log::parse_channel_line;
    use super::*;
    use crate::config::network::{NetExpect, TransportExpectation};

    const P: &str = "node01:12345:12399 [0] NCCL INFO ";

    fn log(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{P}{l}\n")).collect()
    }

    fn p2p(mode: &str) -> Transport {
        Transport::P2p { mode: mode.into() }
    }

    #[test]
    fn every_via_format_of_nccl_2_18_to_2_30_is_classified() {
        let cases = [
            ("P2P/CUMEM/read", p2p("CUMEM/read")),
            ("P2P/CUMEM", p2p("CUMEM")),
            ("P2P/IPC/read", p2p("IPC/read")),
            ("P2P/IPC/CE", p2p("IPC/CE")),
            ("P2P/MNNVL/read", p2p("MNNVL/read")),
            ("P2P/direct pointer/read", p2p("direct pointer/read")),
            ("P2P/indirect/2[2]/read", p2p("indirect/2[2]/read")),
            ("SHM/direct/direct", Transport::Shm),
            ("SHM/CE/direct", Transport::Shm),
            ("SHM/direct", Transport::Shm),
            ("NET/IB/0/GDRDMA", Transport::NetIb),
            ("NET/IB/3(1)/GDRDMA(PCI)/Shared", Transport::NetIb),
            ("NET/IBext_v8/0/GDRDMA", Transport::NetIb),
            ("NET/Socket/0", Transport::NetSocket),
            (
                "NET/AWS Libfabric/0/GDRDMA",
                Transport::NetOther("AWS Libfabric".into()),
            ),
            ("COLLNET/SHARP/0/GDRDMA", Transport::CollNet),
            ("CE/future", Transport::Other("CE/future".into())),
        ];
        for (via, want) in cases {
            assert_eq!(Transport::from_via(via), want, "{via}");
        }
        assert_eq!(p2p("CUMEM/read").to_string(), "P2P/CUMEM/read");
        assert_eq!(Transport::NetSocket.name(), "net_socket");
    }

    /// The report's names of every transport, as they were before strum wrote them.
    #[test]
    fn every_transport_keeps_its_machine_name() {
        let named = [
            (Transport::P2p { mode: "IPC".into() }, "p2p"),
            (Transport::Shm, "shm"),
            (Transport::NetIb, "net_ib"),
            (Transport::NetSocket, "net_socket"),
            (Transport::NetOther("UCX".into()), "net_other"),
            (Transport::CollNet, "collnet"),
            (Transport::Nvls, "nvls"),
            (Transport::Other("CE/future".into()), "other"),
        ];
        for (t, name) in named {
            assert_eq!(t.name(), name, "{t:?}");
        }
    }

    #[test]
    fn channel_lines_give_ranks_devices_channel_and_direction() {
        let (c, rx) =
            parse_channel_line("Channel 03/1 : 0[4] -> 2[6] via P2P/CUMEM/read").expect("p2p");
        assert_eq!((c.channel, c.conn_index), (3, Some(1)));
        assert_eq!((c.from_rank, c.from_dev, c.to_rank, c.to_dev), (0, 4, 2, 6));
        assert!(!rx);
        let (c, _) =
            parse_channel_line("Channel 00 : 1[1] -> 0[0] via SHM/direct/direct").expect("shm");
        assert_eq!((c.channel, c.conn_index), (0, None));
        let (c, rx) =
            parse_channel_line("Channel 01/0 : 4[0] -> 0[0] [receive] via NET/IB/0/GDRDMA")
                .expect("net rx");
        assert!(rx);
        assert_eq!((c.from_rank, c.to_rank), (4, 0));
        assert_eq!(c.via, "NET/IB/0/GDRDMA");
        assert!(
            parse_channel_line("Channel 00/02 : 0 1 2 3").is_none(),
            "ring order line"
        );
        assert!(parse_channel_line("Channel 00/24 :    0   1   2   3").is_none());
    }

    #[test]
    fn a_healthy_nvlink_node_has_only_p2p_and_no_findings() {
        let text = log(&[
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
            "Connected all rings, use ring PXN 0 GDR 1",
        ]);
        let s = parse_log(&text);
        assert!(s.has_connections());
        assert_eq!(s.pairs.len(), 2);
        assert_eq!(s.pairs[&(0, 1)].transports.len(), 1);
        let expect = TransportExpectation {
            intra_node_p2p: true,
            ..Default::default()
        };
        assert!(check_transports(&s, &|_, _| true, &expect).is_empty());
        assert_eq!(s.paths()[0].transports, vec!["p2p"]);
        assert_eq!(s.paths()[0].path, "GPU0->GPU1");
    }

    #[test]
    fn shm_between_gpus_of_one_node_is_a_transport_fallback() {
        let text = log(&[
            "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
            "Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
        ]);
        let s = parse_log(&text);
        let expect = TransportExpectation {
            intra_node_p2p: true,
            ..Default::default()
        };
        let f = check_transports(&s, &|_, _| true, &expect);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].message, "GPU0->GPU1 used SHM, NVLink P2P expected");
        assert_eq!(f[0].subject.to_string(), "GPU0->GPU1");
        // Without the NVLink expectation SHM is just reported.
        assert!(check_transports(&s, &|_, _| true, &TransportExpectation::default()).is_empty());
    }

    #[test]
    fn a_mix_of_p2p_and_shm_on_one_path_is_still_a_fallback() {
        let text = log(&[
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "Channel 01 : 0[0] -> 1[1] via SHM/direct/direct",
        ]);
        let f = check_transports(
            &parse_log(&text),
            &|_, _| true,
            &TransportExpectation {
                intra_node_p2p: true,
                ..Default::default()
            },
        );
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("used SHM"), "{}", f[0].message);
    }

    #[test]
    fn sockets_between_nodes_fail_when_infiniband_is_expected() {
        let text = "\
node01:100:101 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
node02:200:201 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0
node02:200:201 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0/GDRDMA
";
        let s = parse_log(text);
        assert_eq!(s.rank_hosts.get(&0).map(String::as_str), Some("node01"));
        assert_eq!(s.rank_hosts.get(&1).map(String::as_str), Some("node02"));
        assert_ne!(s.rank_hosts.get(&0), s.rank_hosts.get(&1));
        assert!(s.rank_hosts.contains_key(&0) && s.rank_hosts.contains_key(&1));
        let expect = TransportExpectation {
            intra_node_p2p: true,
            inter_node_net: Some(NetExpect::Ib),
            ..Default::default()
        };
        let f = check_transports(&s, &|a, b| a == b, &expect);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].message,
            "node01 GPU0->node02 GPU0 used NET/Socket, NET/IB expected"
        );
        let (from, to) = ("node01".to_string(), "node02".to_string());
        let path = Culprit::Path {
            from,
            a: 0,
            to,
            b: 0,
        };
        assert_eq!(f[0].subject, path);
        let mixed = parse_log(&format!(
            "{text}node01:100:101 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct\n"
        ));
        let f = check_transports(&mixed, &|a, b| a != 1 && b != 1, &expect);
        assert!(
            f.iter()
                .any(|f| f.message == "node01 GPU1->GPU0 used SHM, NVLink P2P expected"),
            "{f:?}"
        );
        let plugin = TransportExpectation {
            inter_node_net: Some(NetExpect::Plugin("libfabric".into())),
            ..Default::default()
        };
        assert_eq!(check_transports(&s, &|a, b| a == b, &plugin).len(), 2);
    }

    #[test]
    fn the_efa_plugin_is_accepted_by_part_of_its_name() {
        let text = log(&["Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA"]);
        let expect = TransportExpectation {
            inter_node_net: Some(NetExpect::Plugin("Libfabric".into())),
            ..Default::default()
        };
        assert!(check_transports(&parse_log(&text), &|_, _| false, &expect).is_empty());
    }

    #[test]
    fn collnet_is_used_when_connected_and_a_fallback_when_nccl_gave_up() {
        let used = parse_log(&log(&[
            "CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
            "rank 0 Connected CollNet",
        ]));
        assert!(used.collnet_connected && used.collnet_used());
        let expect = TransportExpectation {
            collnet: true,
            ..Default::default()
        };
        assert!(check_transports(&used, &|_, _| true, &expect).is_empty());

        let text = "node01:1:2 [0] NCCL WARN Cannot initialize CollNet, using point-to-point network instead\n";
        let gave_up = parse_log(text);
        let f = check_transports(&gave_up, &|_, _| true, &expect);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.starts_with("CollNet (SHARP) did not carry"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("Cannot initialize CollNet"));
        assert_eq!(f[0].subject.to_string(), "CollNet");

        let threshold = parse_log(&log(&[
            "Communicator has 1 nodes which is less than CollNet node threshold 2, disabling CollNet",
        ]));
        assert!(threshold.collnet_disabled.is_some());
    }

    #[test]
    fn tuning_lines_say_which_algorithm_carried_each_collective() {
        let s = parse_log(&log(&[
            "AllReduce: 268435456 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}",
            "AllGather: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
            "ReduceScatter: 8388608 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={0..7}",
            "Broadcast: 1024 Bytes -> Algo 1 proto 2 time 12.500000",
            "4096 Bytes -> Algo 3 proto 2 time 7.000000",
        ]));
        assert!(s.algorithms["AllReduce"].contains("NVLS"));
        assert!(s.algorithms["AllGather"].contains("Ring"));
        assert!(s.algorithms["ReduceScatter"].contains("CollNetDirect"));
        assert!(s.algorithms["Broadcast"].contains("Ring"));
        assert!(s.algorithms["?"].contains("CollNetChain"));
        assert!(s.nvls_used());
        assert!(s.collnet_used(), "CollNetChain carried a collective");
        // TUNING lines win over connection evidence.
        let ring_only = parse_log(&log(&[
            "NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
            "24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
            "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}",
        ]));
        assert!(ring_only.nvls_connected);
        assert!(!ring_only.nvls_used());
    }

    #[test]
    fn nvls_expected_but_unavailable_is_a_fallback_naming_the_cause() {
        let s = parse_log(&log(&[
            "NVLS multicast support is not available on dev 0",
            "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
        ]));
        assert_eq!(s.nvls_available, Some(false));
        assert_eq!(s.nvls_channels, Some(0));
        let f = check_transports(
            &s,
            &|_, _| true,
            &TransportExpectation {
                nvls: true,
                ..Default::default()
            },
        );
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("not available"), "{}", f[0].message);
        // 2.18's channel line has no collnet count.
        let old = parse_log(&log(&[
            "NVLS multicast support is available on dev 0",
            "32 coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
        ]));
        assert_eq!(old.nvls_channels, Some(16));
        assert!(old.nvls_used());
    }

    #[test]
    fn prefixes_with_timestamps_hosts_with_colons_and_other_lines_are_handled() {
        let text = "\
[2026-11-21 10:00:00] gpu-a:10:11 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via P2P/CUMEM/read
some unrelated output with -> and via in it
gpu-b:20:21 [0] NCCL INFO Using network IB
gpu-b:20:21 [0] NCCL INFO ncclCommInitRankConfig comm 0x5555 rank 4 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0xabc - Init COMPLETE
gpu-b:20:21 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1
gpu-b:20:21 [0] NCCL INFO Channel 00/02 : 0 1 2 3 4 5 6 7\r
";
        let s = parse_log(text);
        assert_eq!(s.connection_lines, 1);
        assert_eq!(s.rank_hosts.get(&3).map(String::as_str), Some("gpu-a"));
        assert_eq!(s.rank_hosts.get(&4).map(String::as_str), Some("gpu-b"));
        assert_eq!(s.network.as_deref(), Some("IB"));
        assert!(s.graph_intra_types.contains("NVL"));
    }

    #[test]
    fn no_debug_output_means_no_connections_not_a_pass() {
        let s = parse_log("# nccl-tests output only\n");
        assert!(!s.has_connections());
        assert!(check_transports(
            &s,
            &|_, _| true,
            &TransportExpectation {
                intra_node_p2p: true,
                ..Default::default()
            }
        )
        .is_empty());
    }

    #[test]
    fn lazily_connected_point_to_point_paths_are_included() {
        let s = parse_log(&log(&[
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "Channel 00/1 : 0[0] -> 2[2] via P2P/CUMEM/read",
            "Channel 01/1 : 0[0] -> 3[3] via SHM/direct/direct",
        ]));
        assert_eq!(s.pairs.len(), 3);
        let f = check_transports(
            &s,
            &|_, _| true,
            &TransportExpectation {
                intra_node_p2p: true,
                ..Default::default()
            },
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].subject.to_string(), "GPU0->GPU3");
    }

    // --- real logs: NCCL 2.28.9 on 4x H200 (bench-core/tests/data/nccl-logs/README.md) ---

    fn real(name: &str) -> TransportSummary {
        let path = format!("{}/tests/data/nccl-logs/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        parse_log(&text)
    }

    fn nvlink() -> TransportExpectation {
        TransportExpectation {
            intra_node_p2p: true,
            ..Default::default()
        }
    }

    /// All 12 directed pairs of 4 GPUs (sendrecv and alltoall connect every pair lazily).
    fn all_pairs() -> Vec<(u32, u32)> {
        (0..4)
            .flat_map(|a| (0..4).filter(move |&b| b != a).map(move |b| (a, b)))
            .collect()
    }

    #[test]
    fn real_healthy_h200_node_uses_nvlink_p2p_on_every_path() {
        let s = real("healthy.log");
        assert!(s.has_connections());
        assert_eq!(s.pairs.keys().copied().collect::<Vec<_>>(), all_pairs());
        for (pair, p) in &s.pairs {
            assert!(
                p.transports
                    .iter()
                    .all(|t| matches!(t, Transport::P2p { .. })),
                "{pair:?}: {:?}",
                p.transports
            );
        }
        assert!(check_transports(&s, &|_, _| true, &nvlink()).is_empty());
        assert_eq!(s.network.as_deref(), Some("Socket"));
        assert!(s.graph_intra_types.contains("NVL"));
        assert_eq!(s.nvls_channels, Some(0), "recorded with NCCL_NVLS_ENABLE=0");
        assert!(!s.nvls_used() && !s.collnet_used());
        assert_eq!(
            s.algorithms
                .get("AllReduce")
                .map(|a| a.iter().cloned().collect::<Vec<_>>()),
            Some(vec![String::from("Ring")])
        );
        let paths = s.paths();
        assert_eq!(paths[0].path, "GPU0->GPU1");
        assert_eq!(paths[0].transports, vec!["p2p"]);
    }

    #[test]
    fn real_p2p_disabled_node_is_a_shm_fallback_on_every_path_it_used() {
        let s = real("p2p-disabled.log");
        assert!(s.has_connections());
        assert!(s
            .pairs
            .values()
            .all(|p| p.transports.iter().eq([&Transport::Shm])));
        let f = check_transports(&s, &|_, _| true, &nvlink());
        assert_eq!(f.len(), s.pairs.len());
        assert!(f
            .iter()
            .any(|f| f.message == "GPU0->GPU1 used SHM, NVLink P2P expected"));
    }

    #[test]
    fn real_socket_only_node_is_a_net_fallback() {
        let s = real("socket-only.log");
        assert!(s
            .pairs
            .values()
            .all(|p| p.transports.iter().eq([&Transport::NetSocket])));
        let f = check_transports(&s, &|_, _| true, &nvlink());
        assert!(!f.is_empty());
        assert!(f
            .iter()
            .all(|f| f.message.ends_with("used NET/Socket, NVLink P2P expected")));
    }

    #[test]
    fn real_two_emulated_nodes_use_p2p_inside_and_sockets_between() {
        let text = std::fs::read_to_string(format!(
            "{}/tests/data/nccl-logs/twonode-a.log",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("twonode-a.log")
            + &std::fs::read_to_string(format!(
                "{}/tests/data/nccl-logs/twonode-b.log",
                env!("CARGO_MANIFEST_DIR")
            ))
            .expect("twonode-b.log");
        let s = parse_log(&text);
        // NCCL_HOSTID=nodeA / nodeB: ranks 0,1 and 2,3 are two "nodes" on one host.
        let same_node = |a: u32, b: u32| a / 2 == b / 2;
        for (&(a, b), p) in &s.pairs {
            if same_node(a, b) {
                assert!(
                    p.transports
                        .iter()
                        .all(|t| matches!(t, Transport::P2p { .. })),
                    "{a}->{b}: {:?}",
                    p.transports
                );
            } else {
                assert!(p.transports.iter().eq([&Transport::NetSocket]), "{a}->{b}");
            }
        }
        assert!(s.pairs.keys().any(|&(a, b)| !same_node(a, b)));
        let mut expect = nvlink();
        expect.inter_node_net = Some(NetExpect::Socket);
        assert!(check_transports(&s, &same_node, &expect).is_empty());
        expect.inter_node_net = Some(NetExpect::Ib);
        let f = check_transports(&s, &same_node, &expect);
        assert!(!f.is_empty());
        assert!(
            f.iter()
                .all(|f| f.message.ends_with("used NET/Socket, NET/IB expected")),
            "{f:?}"
        );
    }
}
