//! The NICs NCCL used, as sysfs describes them: whether each port is up, the rate it trained
//! at, and what a node pair may then be expected to deliver.
//!
//! NCCL names its NICs in its log (`NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE`,
//! `NET/Socket : Using [0]eth0:10.0.0.1<0>`): an RDMA port `device:port` is read from
//! `/sys/class/infiniband/<device>/ports/<port>/{state,phys_state,rate,link_layer}`, a socket
//! interface from `/sys/class/net/<iface>/{operstate,speed}`, all under a configurable root.
//!
//! What counts as a fault (`assess_ports`):
//! - `net_port_down`: an RDMA port not `ACTIVE` or whose physical state is not `LinkUp`, or an
//!   interface whose operstate is neither `up` nor `unknown` (`unknown` is what a driver that
//!   reports no carrier state gives: the loopback and many virtual NICs, which carry traffic).
//! - `net_rate_degraded`: an InfiniBand port trained at fewer lanes than `full_width` (4X: the
//!   width of every ConnectX/BlueField HCA port; 1X or 2X means a bad cable or transceiver), or any
//!   port below its expected rate. The expected rate is the admin's `expect_rate_gbps` when given;
//!   otherwise the highest rate among the other ports NCCL used with the same link layer (sysfs
//!   does not say what a port could do, only what it trained at, so a lone port that trained at a
//!   lower speed is invisible without the admin's number).
//!
//! The node-pair bandwidth to expect is `pair_fraction` x the rate of the RDMA ports that are up,
//! in GB/s. Default 0.75: healthy RDMA reaches 0.9-1.0 of line rate (Azure NDv5 ib_write_bw
//! 380-400 Gb/s on 400 Gb/s ports; OCI's 2-node H100 all_reduce floor 365 GB/s on 3.2 Tb/s of
//! RDMA NICs = 0.91; shared/notes/peer-tools.md), so 0.75 leaves room for NCCL versions and
//! settings. Over sockets nothing is expected: NCCL's socket transport delivers a small and
//! setting-dependent fraction of line rate (2.3-5 GB/s measured between emulated nodes).

use crate::model::finding::Finding;
use nccl_check_contract::report::reason::ReasonCode;
use nccl_check_host::read::{attr, under};
use serde::Serialize;
use std::path::Path;

/// A NIC as NCCL's log names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NicRef {
    /// An RDMA port, `mlx5_0:1`.
    Rdma { device: String, port: u32 },
    /// A socket interface, `eth0`.
    Socket { iface: String },
}

impl NicRef {
    /// `mlx5_0:1` (RDMA device and port) or `eth0` (interface). Names are one sysfs component.
    pub fn parse(text: &str) -> Result<NicRef, String> {
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        };
        match text.split_once(':') {
            Some((dev, port)) if ok(dev) => match port.parse::<u32>() {
                Ok(p) if p >= 1 => Ok(NicRef::Rdma {
                    device: dev.to_string(),
                    port: p,
                }),
                _ => Err(format!(
                    "'{text}': the port after ':' must be a number >= 1"
                )),
            },
            None if ok(text) => Ok(NicRef::Socket {
                iface: text.to_string(),
            }),
            _ => Err(format!("'{text}' is not a NIC name NCCL logs")),
        }
    }

    /// The name as NCCL's log gives it.
    pub fn name(&self) -> String {
        match self {
            NicRef::Rdma { device, port } => format!("{device}:{port}"),
            NicRef::Socket { iface } => iface.clone(),
        }
    }
}

/// The NICs of one NCCL `Using` line (`NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB
/// ib0:10.0.0.1<0>` or `NET/Socket : Using [0]eth0:10.0.0.1<0>`). The OOB (bootstrap)
/// interface is not one of them. Entries that do not parse are skipped.
pub fn nics_from_nccl_log_line(line: &str) -> Vec<NicRef> {
    let Some(after) = line.split(" Using ").nth(1) else {
        return Vec::new();
    };
    let socket = line.contains("NET/Socket");
    let list = after.split(';').next().unwrap_or("");
    list.split_whitespace()
        .filter_map(|item| {
            let body = item.strip_prefix('[')?.split_once(']')?.1;
            // eth0:10.0.0.1<0> over sockets, mlx5_0:1/IB else.
            let name = body.split(if socket { ':' } else { '/' }).next()?;
            NicRef::parse(name).ok()
        })
        .collect()
}

/// What carries the port's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    InfiniBand,
    /// RDMA over Converged Ethernet (an RDMA port whose link layer is Ethernet).
    Roce,
    /// An RDMA port of another link layer (AWS EFA reports "Unspecified").
    OtherRdma,
    /// A socket interface.
    Tcp,
}

/// One NIC's facts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Port {
    pub nic: String,
    pub kind: Kind,
    pub up: bool,
    /// `4: ACTIVE`, or an interface's operstate.
    pub state: String,
    pub phys_state: Option<String>,
    /// The trained rate in Gb/s, when known.
    pub rate_gbps: Option<f64>,
    /// Lanes (the `4` of `4X`), InfiniBand rate strings only.
    pub width: Option<u32>,
    /// The raw rate text (`400 Gb/sec (4X NDR)`, or an interface's `speed` in Mb/s).
    pub rate_text: Option<String>,
}

/// A NIC whose facts could not be read (not a fault: the node may name it differently).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unreadable {
    pub nic: String,
    pub why: String,
}

/// What the admin expects of the NICs, with documented defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetPolicy {
    /// Node-pair bandwidth expected as this fraction of the RDMA line rate.
    pub pair_fraction: f64,
    /// The rate every port NCCL uses should run at, Gb/s (absent: the siblings' highest).
    pub expect_rate_gbps: Option<f64>,
    /// Lanes of a healthy InfiniBand port.
    pub full_width: u32,
}

impl Default for NetPolicy {
    fn default() -> Self {
        NetPolicy {
            pair_fraction: 0.75,
            expect_rate_gbps: None,
            full_width: 4,
        }
    }
}

/// The NICs' facts and what they imply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetFacts {
    pub ports: Vec<Port>,
    pub unreadable: Vec<Unreadable>,
    /// GB/s a node pair should deliver over these NICs; None over sockets or without RDMA ports.
    pub expected_pair_gbs: Option<f64>,
    /// Why nothing is expected, or how the expectation was formed.
    pub note: String,
    pub findings: Vec<Finding>,
}

/// `400 Gb/sec (4X NDR)` -> (400.0, Some(4)); `100 Gb/sec` -> (100.0, None).
pub fn parse_ib_rate(text: &str) -> Option<(f64, Option<u32>)> {
    let mut words = text.split_whitespace();
    let gbps: f64 = words.next()?.parse().ok()?;
    if !gbps.is_finite() || gbps < 0.0 || !words.next()?.starts_with("Gb/s") {
        return None;
    }
    let width = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split('X').next()?.trim().parse().ok());
    Some((gbps, width))
}

fn read_rdma(root: &Path, device: &str, port: u32) -> Result<Port, String> {
    let dir = under(root, "/sys/class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    let get = |name: &str| attr(&dir.join(name)).map_err(|e| format!("{name}: {e}"));
    let state = get("state")?;
    let phys_state = get("phys_state").ok();
    let rate_text = get("rate").ok();
    let rate = rate_text.as_deref().and_then(parse_ib_rate);
    let (rate_gbps, width) = rate.map_or((None, None), |(r, w)| (Some(r), w));
    let kind = match get("link_layer").ok().as_deref() {
        Some("InfiniBand") => Kind::InfiniBand,
        Some("Ethernet") => Kind::Roce,
        _ => Kind::OtherRdma,
    };
    let up =
        state.ends_with("ACTIVE") && phys_state.as_deref().is_none_or(|p| p.ends_with("LinkUp"));
    Ok(Port {
        nic: format!("{device}:{port}"),
        kind,
        up,
        state,
        phys_state,
        rate_gbps,
        width: width.filter(|_| kind == Kind::InfiniBand),
        rate_text,
    })
}

fn read_iface(root: &Path, iface: &str) -> Result<Port, String> {
    let dir = under(root, "/sys/class/net").join(iface);
    let state = attr(&dir.join("operstate")).map_err(|e| format!("operstate: {e}"))?;
    // `speed` fails with EINVAL on a link that is down and reads -1 when unknown.
    let rate_text = attr(&dir.join("speed")).ok();
    let rate_gbps = rate_text
        .as_deref()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&mbps| mbps > 0)
        .map(|mbps| mbps as f64 / 1000.0);
    Ok(Port {
        nic: iface.to_string(),
        kind: Kind::Tcp,
        up: state == "up" || state == "unknown",
        state,
        phys_state: None,
        rate_gbps,
        width: None,
        rate_text,
    })
}

/// Reads the facts of `nics` under `root` (`/` on a node) and judges them.
pub fn read_nics(root: &Path, nics: &[NicRef], policy: &NetPolicy) -> NetFacts {
    let mut ports = Vec::new();
    let mut unreadable = Vec::new();
    for nic in nics {
        let got = match nic {
            NicRef::Rdma { device, port } => read_rdma(root, device, *port),
            NicRef::Socket { iface } => read_iface(root, iface),
        };
        match got {
            Ok(p) => ports.push(p),
            Err(why) => unreadable.push(Unreadable {
                nic: nic.name(),
                why,
            }),
        }
    }
    assess_ports(ports, unreadable, policy)
}

/// The findings and the node-pair expectation of already-read ports.
pub fn assess_ports(ports: Vec<Port>, unreadable: Vec<Unreadable>, policy: &NetPolicy) -> NetFacts {
    let findings = (ports.iter())
        .filter_map(|p| port_finding(p, &ports, policy))
        .collect();
    let rdma: Vec<&Port> = ports.iter().filter(|p| p.kind != Kind::Tcp).collect();
    let up: Vec<&&Port> = rdma.iter().filter(|p| p.up).collect();
    let line_gbps: f64 = up.iter().filter_map(|p| p.rate_gbps).sum();
    let (expected_pair_gbs, note) = if rdma.is_empty() {
        let why =
            "NCCL uses sockets (or no NIC was named): no node-pair bandwidth is expected of TCP";
        (None, why.to_string())
    } else if line_gbps <= 0.0 {
        (None, "no RDMA port NCCL uses is up".to_string())
    } else {
        let (fraction, n) = (policy.pair_fraction, up.len());
        let gbs = line_gbps / 8.0 * fraction;
        let note = format!("{fraction} x {line_gbps} Gb/s of {n} RDMA port(s) up = {gbs:.1} GB/s");
        (Some(gbs), note)
    };
    NetFacts {
        ports,
        unreadable,
        expected_pair_gbs,
        note,
        findings,
    }
}

/// What is wrong with port `p` (its siblings: the other `ports`): down, trained at fewer lanes
/// than a healthy port, or slower than expected; one finding at most.
fn port_finding(p: &Port, ports: &[Port], policy: &NetPolicy) -> Option<Finding> {
    if !p.up {
        let phys = p
            .phys_state
            .as_deref()
            .map(|s| format!(", physical state {s}"));
        let (state, phys) = (&p.state, phys.unwrap_or_default());
        let message = format!("NIC {} that NCCL uses is down (state {state}{phys})", p.nic);
        return Some(Finding::new(ReasonCode::NetPortDown, &p.nic, message));
    }
    let full = policy.full_width;
    if let Some(w) = p.width.filter(|&w| w < full) {
        let (nic, rate) = (&p.nic, p.rate_text.as_deref().unwrap_or("?"));
        let message = format!(
            "NIC {nic} trained at {w}X instead of {full}X: {rate} (a cable or transceiver fault)"
        );
        let finding = Finding::new(ReasonCode::NetRateDegraded, &p.nic, message);
        return Some(finding.with_values(f64::from(w), f64::from(full)));
    }
    let siblings = (ports.iter())
        .filter(|q| q.up && q.kind == p.kind && q.nic != p.nic)
        .filter_map(|q| q.rate_gbps)
        .reduce(f64::max);
    let (expected, how) = match policy.expect_rate_gbps {
        Some(e) => (Some(e), "the configured rate"),
        None => (siblings, "its sibling ports"),
    };
    let (rate, want) = (p.rate_gbps?, expected?);
    let nic = &p.nic;
    let message = format!("NIC {nic} runs at {rate} Gb/s, below the {want} Gb/s of {how}");
    let finding = Finding::new(ReasonCode::NetRateDegraded, nic, message);
    (rate < want).then(|| finding.with_values(rate, want))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every RDMA port of the node (tests: the ports NCCL's log would name).
    fn all_rdma_ports(root: &Path) -> Vec<NicRef> {
        let base = nccl_check_host::read::under(root, "/sys/class/infiniband");
        let mut out = Vec::new();
        for dev in nccl_check_host::read::entries(&base).unwrap_or_default() {
            for port in
                nccl_check_host::read::entries(&base.join(&dev).join("ports")).unwrap_or_default()
            {
                if let Ok(nic) = NicRef::parse(&format!("{dev}:{port}")) {
                    out.push(nic);
                }
            }
        }
        out
    }
    use std::path::PathBuf;

    fn tree(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/sysfs")
            .join(name)
    }

    fn nics(names: &[&str]) -> Vec<NicRef> {
        names.iter().map(|n| NicRef::parse(n).unwrap()).collect()
    }

    fn codes(f: &NetFacts) -> Vec<(&str, &str)> {
        f.findings
            .iter()
            .map(|x| (x.code.as_str(), x.subject.as_str()))
            .collect()
    }

    #[test]
    fn healthy_ib_hdr_and_ndr_have_no_findings_and_an_expectation() {
        let p = NetPolicy::default();
        let f = read_nics(&tree("ib-hdr"), &all_rdma_ports(&tree("ib-hdr")), &p);
        assert_eq!(f.ports.len(), 4);
        assert!(f.findings.is_empty(), "{:?}", f.findings);
        assert!(f
            .ports
            .iter()
            .all(|p| p.kind == Kind::InfiniBand && p.width == Some(4)));
        // 4 x 200 Gb/s = 100 GB/s of line rate, x 0.75.
        assert_eq!(f.expected_pair_gbs, Some(75.0));
        let f = read_nics(&tree("ib-ndr"), &nics(&["mlx5_0:1", "mlx5_3:1"]), &p);
        assert!(f.findings.is_empty(), "{:?}", f.findings);
        assert_eq!(f.expected_pair_gbs, Some(75.0)); // 2 x 400 Gb/s
    }

    #[test]
    fn a_port_down_and_degraded_rates_are_named() {
        let nics = all_rdma_ports(&tree("ib-ndr-faulty"));
        let f = read_nics(&tree("ib-ndr-faulty"), &nics, &NetPolicy::default());
        assert_eq!(
            codes(&f),
            vec![
                ("net_port_down", "mlx5_1:1"),
                ("net_rate_degraded", "mlx5_2:1"),
                ("net_rate_degraded", "mlx5_3:1"),
            ]
        );
        assert!(
            f.findings[0].message.contains("1: DOWN"),
            "{}",
            f.findings[0].message
        );
        assert!(f.findings[1].message.contains("2X instead of 4X"));
        assert_eq!(
            (f.findings[2].measured, f.findings[2].limit),
            (Some(200.0), Some(400.0))
        );
        // Only the ports that are up carry traffic: 400 + 200 + 200 Gb/s.
        assert_eq!(f.expected_pair_gbs, Some(800.0 / 8.0 * 0.75));
    }

    #[test]
    fn the_admins_rate_finds_a_node_whose_ports_all_trained_low() {
        let p = NetPolicy {
            expect_rate_gbps: Some(400.0),
            ..NetPolicy::default()
        };
        let f = read_nics(&tree("ib-hdr"), &nics(&["mlx5_0:1", "mlx5_1:1"]), &p);
        assert_eq!(
            codes(&f),
            vec![
                ("net_rate_degraded", "mlx5_0:1"),
                ("net_rate_degraded", "mlx5_1:1")
            ]
        );
        assert!(f.findings[0].message.contains("the configured rate"));
    }

    #[test]
    fn roce_and_efa_like_ports_are_rdma_without_the_width_rule() {
        let p = NetPolicy::default();
        let f = read_nics(&tree("roce"), &nics(&["mlx5_0:1", "mlx5_1:1"]), &p);
        assert!(f.findings.is_empty(), "{:?}", f.findings);
        assert!(f
            .ports
            .iter()
            .all(|p| p.kind == Kind::Roce && p.width.is_none()));
        assert_eq!(f.expected_pair_gbs, Some(2.0 * 100.0 / 8.0 * 0.75));
        let f = read_nics(&tree("efa"), &all_rdma_ports(&tree("efa")), &p);
        assert_eq!(f.ports.len(), 4);
        assert!(f.ports.iter().all(|p| p.kind == Kind::OtherRdma));
        assert_eq!(f.expected_pair_gbs, Some(4.0 * 100.0 / 8.0 * 0.75));
    }

    #[test]
    fn tcp_only_expects_nothing_but_still_names_a_down_or_slow_interface() {
        let p = NetPolicy::default();
        let f = read_nics(&tree("tcp"), &nics(&["eth0"]), &p);
        assert!(f.findings.is_empty());
        assert_eq!(f.expected_pair_gbs, None);
        assert!(
            f.note.contains("no node-pair bandwidth is expected"),
            "{}",
            f.note
        );
        assert_eq!(f.ports[0].rate_gbps, Some(10.0));
        let f = read_nics(&tree("tcp"), &nics(&["eth0", "eth1", "eth2"]), &p);
        assert_eq!(
            codes(&f),
            vec![("net_port_down", "eth1"), ("net_rate_degraded", "eth2")]
        );
        assert_eq!(f.expected_pair_gbs, None);
        // The loopback (NCCL_SOCKET_IFNAME=lo) reports no carrier state: `unknown` is up.
        let f = read_nics(&tree("tcp"), &nics(&["lo"]), &p);
        assert!(f.findings.is_empty() && f.ports[0].up, "{:?}", f.findings);
        // The GPU machine without IB: no RDMA device at all.
        assert!(all_rdma_ports(&tree("tcp")).is_empty());
    }

    #[test]
    fn a_nic_sysfs_does_not_know_is_unreadable_not_a_fault() {
        let f = read_nics(
            &tree("ib-hdr"),
            &nics(&["mlx5_9:1", "nope0"]),
            &NetPolicy::default(),
        );
        assert!(f.findings.is_empty());
        assert_eq!(f.unreadable.len(), 2);
        assert_eq!(f.unreadable[0].nic, "mlx5_9:1");
    }

    #[test]
    fn nccl_log_names_and_rate_strings_parse() {
        assert_eq!(
            nics_from_nccl_log_line(
                "node1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>"
            ),
            nics(&["mlx5_0:1", "mlx5_1:1"])
        );
        assert_eq!(
            nics_from_nccl_log_line(
                "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.1.0.1<0>"
            ),
            nics(&["eth0", "eth1"])
        );
        assert!(nics_from_nccl_log_line("NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>").is_empty());
        assert_eq!(parse_ib_rate("400 Gb/sec (4X NDR)"), Some((400.0, Some(4))));
        assert_eq!(parse_ib_rate("25 Gb/sec (1X EDR)"), Some((25.0, Some(1))));
        assert_eq!(parse_ib_rate("100 Gb/sec"), Some((100.0, None)));
        assert_eq!(parse_ib_rate("fast"), None);
        for bad in ["../x:1", "mlx5_0:0", "mlx5_0:x", "", "a/b", ".."] {
            assert!(NicRef::parse(bad).is_err(), "{bad}");
        }
    }
}
