//! Site network profiles: the NCCL/UCX/libfabric/SHARP environment a fabric needs (InfiniBand,
//! RoCE with its GID index, AWS EFA through the OFI plugin, plain TCP, SHARP, NVLS), chosen per
//! Slurm partition and/or node set, so every check runs with exactly the settings the site's
//! jobs use, and what the check may then expect of the transports.
//!
//! In the worker config (`[[network]]` tables, unknown keys rejected):
//! ```toml
//! [[network]]
//! name = "ib-hdr"
//! partitions = ["gpu", "gpu-long"]     # SLURM_JOB_PARTITION; empty or absent = any
//! nodes = ["gpu[001-128]", "dgx-*"]    # Slurm hostlist expressions, `*` = any characters
//! expect_net = "ib"                    # "ib", "socket", or part of a net plugin's name
//! env = { NCCL_IB_HCA = "=mlx5_0:1,mlx5_3:1", NCCL_SOCKET_IFNAME = "ib0" }
//! ```
//! **The first profile that matches wins** (file order), so put specific profiles before general
//! ones; a profile with neither `partitions` nor `nodes` matches everything and may only be last.
//! A profile matches when the partition is listed (or none are) and the host matches one of the
//! `nodes` expressions (or none are given). Commented examples with sources:
//! `bench-core/config/network-examples.toml`.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use nccl_check_host::config_file::{invalid, ConfigError};

/// One `[[network]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkProfile {
    /// Shown in the report (`network_profile`) and in errors.
    pub name: String,
    /// What the profile is for; free text for the admin.
    pub description: Option<String>,
    /// Slurm partitions (exact names) this profile applies to; empty = any partition.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Slurm hostlist expressions (`gpu[001-128,200]`, `rack[1-2]-n[01-16]`), or names with `*`;
    /// empty = any node.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Variables set for every check (`NCCL_*`, `UCX_*`, `FI_*`, `SHARP_*`, `OFI_NCCL_*`,
    /// `HCOLL_*`). They replace the same variables of the job's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The network NCCL must use between nodes: `ib` (InfiniBand or RoCE, NCCL's IB transport or
    /// the rdma-sharp plugin), `socket`, or a case-insensitive part of a net plugin's name
    /// (`libfabric` for AWS EFA's aws-ofi-nccl). Anything else between nodes is a FAIL
    /// (`transport_fallback`).
    pub expect_net: Option<String>,
    /// GPUs of one node talk over NVLink, so SHM or NET between them is a FAIL. Absent: the
    /// worker's default.
    pub expect_nvlink: Option<bool>,
    /// CollNet (SHARP) must carry the collectives (as `--expect-collnet`).
    #[serde(default)]
    pub expect_collnet: bool,
    /// NVLS (NVLink SHARP) must carry the collectives.
    #[serde(default)]
    pub expect_nvls: bool,
}

/// Prefixes of the variables a profile may set: the libraries NCCL and its net plugins read.
pub const ENV_PREFIXES: [&str; 6] = ["NCCL_", "UCX_", "FI_", "SHARP_", "OFI_NCCL_", "HCOLL_"];

/// Variables the worker owns: a profile must not set them.
/// `NCCL_COMM_BLOCKING` would make its bounded, non-blocking init blocking; `NCCL_COMM_ID` is
/// the rendezvous; `NCCL_DEBUG_FILE` would take away the log the transport check reads.
pub const RESERVED_ENV: [&str; 3] = ["NCCL_COMM_BLOCKING", "NCCL_COMM_ID", "NCCL_DEBUG_FILE"];

impl NetworkProfile {
    /// Whether the profile matches every job (no partition, no node constraint).
    pub fn matches_everything(&self) -> bool {
        self.partitions.is_empty() && self.nodes.is_empty()
    }

    /// `expect_net` as the transport check reads it.
    pub fn net_expect(&self) -> Option<NetExpect> {
        let want = self.expect_net.as_deref()?.trim();
        Some(match want.to_ascii_lowercase().as_str() {
            "ib" | "infiniband" | "roce" => NetExpect::Ib,
            "socket" | "tcp" => NetExpect::Socket,
            _ => NetExpect::Plugin(want.to_string()),
        })
    }

    /// The variables, in a stable order, for the worker's environment and the report.
    pub fn env_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// The profile for a job in `partition` on `host`: the first that matches, in file order.
pub fn select_profile<'a>(
    profiles: &'a [NetworkProfile],
    partition: Option<&str>,
    host: &str,
) -> Option<&'a NetworkProfile> {
    let matches =
        |p: &&NetworkProfile| super::selector::matches(&p.partitions, &p.nodes, partition, host);
    profiles.iter().find(matches)
}

/// Checks what serde cannot: names, patterns, variable names and values, contradictions, and
/// profiles that can never apply. `path`/`text` are the config file, so errors name the line
/// (`network[2].env.NCCL_IB_GID_INDEX`).
pub fn validate_profiles(
    profiles: &[NetworkProfile],
    path: &Path,
    text: &str,
) -> Result<(), ConfigError> {
    let mut names = BTreeSet::new();
    for (i, p) in profiles.iter().enumerate() {
        let last = i + 1 == profiles.len();
        check_name(p, last, &mut names)
            .and_then(|()| super::selector::check_lists(&p.partitions, &p.nodes))
            .and_then(|()| check_env(p))
            .and_then(|()| check_expectations(p))
            .map_err(|(field, msg)| invalid(path, text, &format!("network[{i}].{field}"), msg))?;
    }
    Ok(())
}

/// What one profile check found wrong: the field under `network[i].` and the message.
type Bad = (String, String);

/// A profile's name: well-formed, unique, and a catch-all profile only last (`last`), since the
/// first match wins.
fn check_name<'a>(
    p: &'a NetworkProfile,
    last: bool,
    names: &mut BTreeSet<&'a str>,
) -> Result<(), Bad> {
    let bad = |msg: String| Err(("name".to_string(), msg));
    if p.name.is_empty()
        || !p
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return bad("must be letters, digits, '-', '_' or '.'".into());
    }
    if !names.insert(p.name.as_str()) {
        return bad(format!("'{}' is used by two profiles", p.name));
    }
    if p.matches_everything() && !last {
        return bad(format!(
            "'{}' has neither partitions nor nodes, so it matches every job and the \
             profiles after it never apply (the first match wins); move it last",
            p.name
        ));
    }
    Ok(())
}

/// `env`: only the fabric's own variables, none nccl-check sets itself, one-line values.
fn check_env(p: &NetworkProfile) -> Result<(), Bad> {
    for (key, value) in &p.env {
        let field = format!("env.{key}");
        if !ENV_PREFIXES.iter().any(|pre| key.starts_with(pre))
            || !key
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            let prefixes = ENV_PREFIXES.join(", ");
            let msg = format!(
                "not a variable a profile may set (upper case, starting with one of {prefixes})"
            );
            return Err((field, msg));
        }
        if RESERVED_ENV.contains(&key.as_str()) {
            return Err((field, "is set by nccl-check itself".into()));
        }
        if value.is_empty() || value.contains(['\0', '\n']) {
            return Err((field, "needs a one-line, non-empty value".into()));
        }
    }
    Ok(())
}

/// `expect_*` keys that the profile's own `env` contradicts (a check that could only FAIL).
fn check_expectations(p: &NetworkProfile) -> Result<(), Bad> {
    let bad = |field: &str, msg: &str| Err((field.to_string(), msg.to_string()));
    if p.expect_net.as_deref().is_some_and(|w| w.trim().is_empty()) {
        return bad("expect_net", "use ib, socket, or a net plugin's name");
    }
    let env = |k: &str| p.env.get(k).map(String::as_str);
    match p.net_expect() {
        Some(NetExpect::Ib) if env("NCCL_IB_DISABLE") == Some("1") => {
            return bad("expect_net", "is ib but env sets NCCL_IB_DISABLE=1");
        }
        Some(NetExpect::Socket)
            if env("NCCL_NET").is_some_and(|n| !n.eq_ignore_ascii_case("socket")) =>
        {
            return bad(
                "expect_net",
                "is socket but env sets NCCL_NET to another network",
            );
        }
        _ => {}
    }
    if p.expect_collnet && env("NCCL_COLLNET_ENABLE") == Some("0") {
        return bad(
            "expect_collnet",
            "is true but env sets NCCL_COLLNET_ENABLE=0",
        );
    }
    if p.expect_collnet && env("NCCL_NET_PLUGIN") == Some("none") {
        return bad(
            "expect_collnet",
            "is true but env sets NCCL_NET_PLUGIN=none; SHARP needs the \
             nccl-rdma-sharp net plugin",
        );
    }
    if p.expect_nvls && env("NCCL_NVLS_ENABLE") == Some("0") {
        return bad("expect_nvls", "is true but env sets NCCL_NVLS_ENABLE=0");
    }
    Ok(())
}

/// What the site expects of the paths (from the worker's options and network profile).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportExpectation {
    /// GPUs of one node talk over NVLink: every intra-node path must be P2P.
    pub intra_node_p2p: bool,
    /// Paths between nodes must use this network (profile `expect_net`).
    pub inter_node_net: Option<NetExpect>,
    /// CollNet (SHARP) must carry the collectives (`--expect-collnet`).
    pub collnet: bool,
    /// NVLS must carry the collectives.
    pub nvls: bool,
}

impl TransportExpectation {
    /// From the site's network profile and the worker's `--expect-collnet`/`--expect-nvls`.
    /// Without a profile saying otherwise, GPUs of one node are expected to use NVLink P2P.
    pub fn new(profile: Option<&NetworkProfile>, collnet: bool, nvls: bool) -> Self {
        Self {
            intra_node_p2p: profile.and_then(|p| p.expect_nvlink).unwrap_or(true),
            inter_node_net: profile.and_then(|p| p.net_expect()),
            collnet: collnet || profile.is_some_and(|p| p.expect_collnet),
            nvls: nvls || profile.is_some_and(|p| p.expect_nvls),
        }
    }
}

/// The network expected between nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetExpect {
    /// InfiniBand or RoCE (NCCL's IB transport or the rdma-sharp plugin).
    Ib,
    /// TCP sockets (a plain-Ethernet site).
    Socket,
    /// A plugin, by a case-insensitive part of its name (`Libfabric` for AWS EFA, `UCX`).
    Plugin(String),
}

impl std::fmt::Display for NetExpect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetExpect::Ib => f.write_str("NET/IB"),
            NetExpect::Socket => f.write_str("NET/Socket"),
            NetExpect::Plugin(p) => write!(f, "NET/{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_host::config_file::parse;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[serde(default)]
        network: Vec<NetworkProfile>,
    }

    const FILE: &str = "/etc/nccl-check/nccl-check.toml";

    fn load(text: &str) -> Result<Vec<NetworkProfile>, ConfigError> {
        let doc: Doc = parse(Path::new(FILE), text)?;
        validate_profiles(&doc.network, Path::new(FILE), text)?;
        Ok(doc.network)
    }

    #[test]
    fn the_first_matching_profile_wins() {
        let text = r#"
[[network]]
name = "roce-a"
partitions = ["a100"]
nodes = ["ra[01-10]"]
env = { NCCL_IB_GID_INDEX = "3" }
expect_net = "ib"

[[network]]
name = "a100-rest"
partitions = ["a100"]
env = { NCCL_IB_DISABLE = "1", NCCL_SOCKET_IFNAME = "eth0" }
expect_net = "socket"

[[network]]
name = "default"
env = { NCCL_IB_HCA = "mlx5" }
"#;
        let p = load(text).expect("valid");
        assert_eq!(
            select_profile(&p, Some("a100"), "ra03").map(|p| &p.name[..]),
            Some("roce-a")
        );
        assert_eq!(
            select_profile(&p, Some("a100"), "ra11").map(|p| &p.name[..]),
            Some("a100-rest")
        );
        assert_eq!(
            select_profile(&p, Some("h200"), "ra03").map(|p| &p.name[..]),
            Some("default")
        );
        assert_eq!(
            select_profile(&p, None, "x").map(|p| &p.name[..]),
            Some("default")
        );
        assert_eq!(
            select_profile(&p[..2], None, "ra03"),
            None,
            "no partition known"
        );
        assert_eq!(p[0].net_expect(), Some(NetExpect::Ib));
        assert_eq!(p[1].net_expect(), Some(NetExpect::Socket));
        assert_eq!(
            p[1].env_pairs().collect::<Vec<_>>(),
            [("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", "eth0")]
        );
    }

    #[test]
    fn a_catch_all_profile_before_others_is_rejected_with_its_line() {
        let text =
            "[[network]]\nname = \"all\"\n\n[[network]]\nname = \"ib\"\npartitions = [\"gpu\"]\n";
        let e = load(text).expect_err("unreachable profile");
        assert_eq!(e.field, "network[0].name");
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("move it last"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_file_line_and_field() {
        let e = load("[[network]]\nname = \"x\"\nenv_vars = {}\n").expect_err("unknown key");
        assert!(e.message.contains("env_vars"), "{e}");
        let text = "[[network]]\nname = \"x\"\nnodes = [\"gpu[1-\"]\n";
        let e = load(text).expect_err("bad hostlist");
        assert_eq!(e.field, "network[0].nodes[0]");
        assert_eq!(e.line, Some(3));
        assert!(e.to_string().starts_with(FILE), "{e}");
        let text = "[[network]]\nname = \"x\"\n[network.env]\nLD_PRELOAD = \"/x.so\"\n";
        let e = load(text).expect_err("not an NCCL variable");
        assert_eq!(e.field, "network[0].env.LD_PRELOAD");
        assert_eq!(e.line, Some(4), "{e}");
        let e = load("[[network]]\nname = \"x\"\nenv = { NCCL_COMM_BLOCKING = \"1\" }\n")
            .expect_err("reserved");
        assert!(e.message.contains("set by nccl-check itself"), "{e}");
        let e =
            load("[[network]]\nname = \"x\"\nenv = { NCCL_IB_HCA = \"\" }\n").expect_err("empty");
        assert!(e.message.contains("non-empty"), "{e}");
        let e = load("[[network]]\nname = \"a b\"\n").expect_err("name");
        assert_eq!(e.field, "network[0].name");
        let e = load("[[network]]\nname = \"a\"\npartitions=[\"x\"]\n[[network]]\nname = \"a\"\n")
            .expect_err("duplicate");
        assert!(e.message.contains("used by two profiles"), "{e}");
    }

    #[test]
    fn contradictions_between_expectations_and_env_are_rejected() {
        for (text, field) in [
            (
                "expect_net = \"ib\"\nenv = { NCCL_IB_DISABLE = \"1\" }",
                "expect_net",
            ),
            (
                "expect_net = \"socket\"\nenv = { NCCL_NET = \"IB\" }",
                "expect_net",
            ),
            (
                "expect_collnet = true\nenv = { NCCL_COLLNET_ENABLE = \"0\" }",
                "expect_collnet",
            ),
            (
                "expect_collnet = true\nenv = { NCCL_NET_PLUGIN = \"none\" }",
                "expect_collnet",
            ),
            (
                "expect_nvls = true\nenv = { NCCL_NVLS_ENABLE = \"0\" }",
                "expect_nvls",
            ),
        ] {
            let e = load(&format!("[[network]]\nname = \"x\"\n{text}\n")).expect_err(text);
            assert_eq!(e.field, format!("network[0].{field}"), "{text}: {e}");
        }
    }

    #[test]
    fn plugin_names_are_kept_for_the_transport_check() {
        let p = load("[[network]]\nname = \"efa\"\nexpect_net = \"Libfabric\"\n").expect("valid");
        assert_eq!(
            p[0].net_expect(),
            Some(NetExpect::Plugin("Libfabric".into()))
        );
    }

    #[test]
    fn the_shipped_examples_are_valid_and_cover_every_fabric() {
        let text = include_str!("../../config/network-examples.toml");
        let doc: Doc = parse(Path::new("network-examples.toml"), text).expect("parses");
        validate_profiles(&doc.network, Path::new("network-examples.toml"), text).expect("valid");
        let names: Vec<&str> = doc.network.iter().map(|p| p.name.as_str()).collect();
        for want in ["infiniband", "roce", "aws-efa", "tcp", "sharp", "nvls"] {
            assert!(names.contains(&want), "no '{want}' example in {names:?}");
        }
        let by = |n: &str| doc.network.iter().find(|p| p.name == n).expect(n);
        assert!(by("roce").env.contains_key("NCCL_IB_GID_INDEX"));
        assert_eq!(
            by("aws-efa").env.get("FI_PROVIDER").map(String::as_str),
            Some("efa")
        );
        assert_eq!(
            by("tcp").env.get("NCCL_IB_DISABLE").map(String::as_str),
            Some("1")
        );
        assert!(by("tcp").env.contains_key("NCCL_SOCKET_IFNAME"));
        assert_eq!(
            by("sharp")
                .env
                .get("NCCL_COLLNET_ENABLE")
                .map(String::as_str),
            Some("1")
        );
        assert!(by("sharp").expect_collnet && by("nvls").expect_nvls);
    }
}
