//! The GPUs the node should have against the GPUs the driver lists (`gpu_missing`).
//!
//! The driver lists its GPUs in `/proc/driver/nvidia/gpus/<bus id>/information` (`Model:`,
//! `Device Minor:`, `Bus Location:`); a GPU that fell off the bus (Xid 79) disappears from there.
//! What the node should have comes, first match wins, from:
//! 1. the admin's `[[expected_gpus]]` (`config::expected_gpus`), with bus ids when configured;
//! 2. Slurm's configuration as slurmd reads it on this node, without asking slurmctld: the
//!    gres.conf lines `Name=gpu` for this host (`Count=`, or the `/dev/nvidiaN` of `File=`, whose
//!    minors name a missing GPU), else slurm.conf's `NodeName=... Gres=gpu[:type]:N`;
//! 3. nothing: only the driver's list is reported.
//!
//! Under srun a job sees only the GPUs it asked for: `allocation` (the device minors the job
//! was given, e.g. from SLURM_JOB_GPUS when gres.conf lists /dev/nvidia0..N in order) replaces
//! the node's expectation, so GPUs the job did not ask for are never "missing".
//! `Include` lines and `AutoDetect=nvml` without `Count=` give no count (the next source is used).

use crate::config::expected_gpus::{is_bus_id, ExpectedGpus};
use crate::config::selector::hostlist_matches;
use crate::model::finding::Finding;
use nccl_check_contract::report::reason::ReasonCode;
use nccl_check_host::read::{attr, entries, small, under};
use serde::Serialize;
use std::path::Path;

/// Largest Slurm config file read.
pub const CONF_MAX: u64 = 1 << 20;

/// A GPU as the driver lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriverGpu {
    /// `0000:9b:00.0` (lower case).
    pub bus_id: String,
    pub minor: Option<u32>,
    pub model: Option<String>,
}

/// The GPUs the driver lists under `root` (`/` on a node), sorted by bus id; an error when the
/// driver's directory cannot be read (no NVIDIA driver loaded).
pub fn driver_gpus(root: &Path) -> Result<Vec<DriverGpu>, String> {
    let dir = under(root, "/proc/driver/nvidia/gpus");
    let names = entries(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for name in names {
        let bus_id = name.to_ascii_lowercase();
        if !is_bus_id(&bus_id) {
            continue;
        }
        let info = attr(&dir.join(&name).join("information")).unwrap_or_default();
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
                .map(str::to_string)
        };
        out.push(DriverGpu {
            bus_id,
            minor: field("Device Minor").and_then(|m| m.parse().ok()),
            model: field("Model"),
        });
    }
    Ok(out)
}

/// What the node should have, and where that came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeExpectation {
    pub count: u32,
    /// Bus ids of the expected GPUs, when known.
    pub bus_ids: Vec<String>,
    /// Device minors (`/dev/nvidiaN`) of the expected GPUs, when known.
    pub minors: Vec<u32>,
    /// `config: gpu[001-128]`, `gres.conf: /etc/slurm/gres.conf`, `job allocation`.
    pub source: String,
}

impl NodeExpectation {
    /// From the admin's matching `[[expected_gpus]]`.
    pub fn from_config(e: &ExpectedGpus) -> NodeExpectation {
        let named = [&e.nodes, &e.partitions]
            .into_iter()
            .filter(|l| !l.is_empty());
        let named: Vec<String> = named.map(|l| l.join(",")).collect();
        let whom = if named.is_empty() {
            "every node".to_string()
        } else {
            named.join(" ")
        };
        NodeExpectation {
            count: e.count,
            bus_ids: e.bus_ids.clone(),
            source: format!("config [[expected_gpus]] for {whom}"),
            ..NodeExpectation::default()
        }
    }
}

/// `key=value` words of one config line, keys lower-cased; comments removed.
fn words(line: &str) -> Vec<(String, String)> {
    line.split('#')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_ascii_lowercase(), v.to_string()))
        })
        .collect()
}

fn get<'a>(w: &'a [(String, String)], key: &str) -> Option<&'a str> {
    w.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Minors of a gres `File=` value: `/dev/nvidia[0-3,5]`, `/dev/nvidia0,/dev/nvidia1`.
pub fn file_minors(value: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    // The items are split at the commas outside brackets.
    let mut depth = 0;
    let items = value.split(|c| {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        c == ',' && depth == 0
    });
    for item in items {
        let rest = item.strip_prefix("/dev/nvidia")?;
        if let Some(inner) = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            for part in inner.split(',') {
                let (lo, hi) = part.split_once('-').unwrap_or((part, part));
                let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
                if hi < lo || hi - lo >= crate::model::bounds::MAX_GPUS {
                    return None;
                }
                out.extend(lo..=hi);
            }
        } else {
            out.push(rest.parse().ok()?);
        }
    }
    Some(out)
}

fn host_matches(w: &[(String, String)], host: &str) -> bool {
    get(w, "nodename").is_none_or(|n| hostlist_matches(n, host).unwrap_or(false))
}

/// This host's GPUs from gres.conf's text; None when no `Name=gpu` line for it gives a count.
pub fn from_gres_conf(text: &str, host: &str, file: &str) -> Option<NodeExpectation> {
    let (mut count, mut minors, mut any) = (0u32, Vec::new(), false);
    for line in text.lines() {
        let w = words(line);
        if !get(&w, "name").is_some_and(|n| n.eq_ignore_ascii_case("gpu"))
            || !host_matches(&w, host)
        {
            continue;
        }
        let from_file = get(&w, "file").and_then(file_minors);
        let n = match (
            get(&w, "count").and_then(|c| c.parse::<u32>().ok()),
            &from_file,
        ) {
            (Some(c), _) => c,
            (None, Some(m)) => m.len() as u32,
            (None, None) => continue, // AutoDetect without Count: no number here
        };
        any = true;
        count = count.saturating_add(n);
        minors.extend(from_file.unwrap_or_default());
    }
    if minors.len() != count as usize {
        minors.clear();
    }
    any.then(|| NodeExpectation {
        count,
        minors,
        source: format!("Slurm gres.conf ({file})"),
        ..NodeExpectation::default()
    })
}

/// This host's GPU count from slurm.conf's `NodeName=` lines (`NodeName=DEFAULT` applies to
/// the lines after it); None when its line names no gpu gres.
pub fn from_slurm_conf(text: &str, host: &str, file: &str) -> Option<NodeExpectation> {
    let mut default_gres: Option<String> = None;
    for line in text.lines() {
        let w = words(line);
        let Some(name) = get(&w, "nodename") else {
            continue;
        };
        let gres = get(&w, "gres").map(str::to_string);
        if name.eq_ignore_ascii_case("default") {
            default_gres = gres.or(default_gres);
            continue;
        }
        if !hostlist_matches(name, host).unwrap_or(false) {
            continue;
        }
        let gres = gres.or_else(|| default_gres.clone())?;
        // gpu:8, gpu:h100:8, gpu:h100:8(S:0-1), several comma-separated.
        let gpus = gres.split(',').filter_map(|item| {
            let mut parts = item.split('(').next().unwrap_or(item).split(':');
            let gpu = parts.next() == Some("gpu");
            gpu.then(|| parts.next_back().and_then(|n| n.parse().ok()).unwrap_or(1))
        });
        let count = gpus.fold(0u32, u32::saturating_add);
        return (count > 0).then(|| NodeExpectation {
            count,
            source: format!("Slurm slurm.conf ({file})"),
            ..NodeExpectation::default()
        });
    }
    None
}

/// The expectation from Slurm's files (gres.conf first), each read bounded; None when neither
/// exists or names this host's GPUs.
pub fn from_slurm_files(
    gres_conf: &Path,
    slurm_conf: &Path,
    host: &str,
) -> Option<NodeExpectation> {
    (small(gres_conf, CONF_MAX).ok())
        .and_then(|t| from_gres_conf(&t, host, &gres_conf.display().to_string()))
        .or_else(|| {
            // NodeName= lines may live in an Include'd file.
            nccl_check_host::slurm_config::files::read(slurm_conf)
                .ok()
                .and_then(|c| from_slurm_conf(&c.text(), host, &slurm_conf.display().to_string()))
        })
}

/// The inventory: what was expected, what the driver lists, and what is missing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inventory {
    pub expected: Option<NodeExpectation>,
    pub listed: Vec<DriverGpu>,
    pub findings: Vec<Finding>,
}

/// Compares the expectation with the driver's list. `allocation`: the device minors a job was
/// given (under srun), which replace the node's expectation.
pub fn compare_with_expected(
    expected: Option<NodeExpectation>,
    listed: Vec<DriverGpu>,
    allocation: Option<&[u32]>,
) -> Inventory {
    let expected = match allocation {
        Some(minors) => Some(NodeExpectation {
            count: minors.len() as u32,
            minors: minors.to_vec(),
            source: "the job's allocation".to_string(),
            ..NodeExpectation::default()
        }),
        None => expected,
    };
    let findings = (expected.as_ref())
        .and_then(|e| missing(e, &listed, allocation.is_some()))
        .into_iter()
        .collect();
    Inventory {
        expected,
        listed,
        findings,
    }
}

/// `gpu_missing` when the driver lists fewer GPUs than `e` says or not those it names;
/// `allocated`: only the allocation's GPUs count, else the driver's whole list.
fn missing(e: &NodeExpectation, listed: &[DriverGpu], allocated: bool) -> Option<Finding> {
    let have_minor = |m: u32| listed.iter().any(|g| g.minor == Some(m));
    let absent: Vec<String> = if !e.bus_ids.is_empty() {
        (e.bus_ids.iter())
            .filter(|b| !listed.iter().any(|g| &g.bus_id == *b))
            .cloned()
            .collect()
    } else {
        (e.minors.iter())
            .filter(|&&m| !have_minor(m))
            .map(|m| format!("/dev/nvidia{m}"))
            .collect()
    };
    // Under an allocation only its GPUs count; otherwise the whole list.
    let listed_n = if allocated {
        e.minors.iter().filter(|&&m| have_minor(m)).count()
    } else {
        listed.len()
    } as u32;
    if listed_n >= e.count && absent.is_empty() {
        return None;
    }
    let absent = absent.join(", ");
    let (subject, named) = if absent.is_empty() {
        ("GPUs".to_string(), String::new())
    } else {
        (format!("GPU {absent}"), format!(": {absent} absent"))
    };
    let (want, from) = (e.count, &e.source);
    let message =
        format!("expected {want} GPUs, driver lists {listed_n}{named} (expected from {from})");
    let finding = Finding::new(ReasonCode::GpuMissing, subject, message);
    Some(finding.with_values(f64::from(listed_n), f64::from(want)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn data(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/inventory")
            .join(name)
    }

    #[test]
    fn the_driver_lists_its_gpus_with_minor_and_model() {
        let g = driver_gpus(&data("node-7of8")).unwrap();
        assert_eq!(g.len(), 7);
        assert_eq!(g[0].bus_id, "0000:18:00.0");
        assert_eq!(g[0].minor, Some(0));
        assert_eq!(g[0].model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert!(!g.iter().any(|x| x.bus_id == "0000:9b:00.0"));
        assert!(driver_gpus(&data("no-such-root")).is_err());
    }

    #[test]
    fn a_configured_bus_id_names_the_missing_gpu() {
        let all = [
            "0000:18:00.0",
            "0000:2a:00.0",
            "0000:3a:00.0",
            "0000:5d:00.0",
            "0000:9a:00.0",
            "0000:9b:00.0",
            "0000:ba:00.0",
            "0000:db:00.0",
        ];
        let e = ExpectedGpus {
            partitions: vec![],
            nodes: vec!["gpu[001-010]".into()],
            count: 8,
            bus_ids: all.iter().map(|s| s.to_string()).collect(),
        };
        let inv = compare_with_expected(
            Some(NodeExpectation::from_config(&e)),
            driver_gpus(&data("node-7of8")).unwrap(),
            None,
        );
        assert_eq!(inv.findings.len(), 1);
        let f = &inv.findings[0];
        assert_eq!(
            (f.code.as_str(), f.subject.as_str()),
            ("gpu_missing", "GPU 0000:9b:00.0")
        );
        assert!(
            f.message
                .starts_with("expected 8 GPUs, driver lists 7: 0000:9b:00.0 absent"),
            "{}",
            f.message
        );
        assert_eq!((f.measured, f.limit), (Some(7.0), Some(8.0)));
        // The full node passes.
        let inv = compare_with_expected(
            Some(NodeExpectation::from_config(&e)),
            driver_gpus(&data("node-8")).unwrap(),
            None,
        );
        assert!(inv.findings.is_empty(), "{:?}", inv.findings);
    }

    #[test]
    fn gres_conf_file_minors_name_the_missing_device() {
        let text = std::fs::read_to_string(data("gres.conf")).unwrap();
        let e = from_gres_conf(&text, "gpu007", "gres.conf").unwrap();
        assert_eq!((e.count, e.minors.len()), (8, 8));
        let inv = compare_with_expected(Some(e), driver_gpus(&data("node-7of8")).unwrap(), None);
        assert!(
            inv.findings[0]
                .message
                .starts_with("expected 8 GPUs, driver lists 7: /dev/nvidia5 absent"),
            "{}",
            inv.findings[0].message
        );
        // Another node set of the same file: Count= without File=, one line per type.
        let e = from_gres_conf(&text, "small01", "gres.conf").unwrap();
        assert_eq!((e.count, e.minors.len()), (4, 0));
        // AutoDetect without Count gives no number: slurm.conf decides.
        assert_eq!(from_gres_conf(&text, "auto01", "gres.conf"), None);
        let e = from_slurm_files(&data("gres.conf"), &data("slurm.conf"), "auto01").unwrap();
        assert_eq!(e.count, 8);
        assert!(e.source.contains("slurm.conf"), "{}", e.source);
        assert_eq!(
            from_slurm_files(&data("gres.conf"), &data("slurm.conf"), "login1"),
            None
        );
    }

    #[test]
    fn slurm_conf_gres_counts_with_types_sockets_and_defaults() {
        let text = std::fs::read_to_string(data("slurm.conf")).unwrap();
        assert_eq!(
            from_slurm_conf(&text, "gpu003", "s").map(|e| e.count),
            Some(8)
        );
        assert_eq!(
            from_slurm_conf(&text, "mix1", "s").map(|e| e.count),
            Some(6)
        );
        assert_eq!(
            from_slurm_conf(&text, "dflt2", "s").map(|e| e.count),
            Some(2)
        );
        assert_eq!(from_slurm_conf(&text, "cpu01", "s"), None);
    }

    #[test]
    fn under_srun_gpus_the_job_did_not_ask_for_are_not_missing() {
        let listed = driver_gpus(&data("node-7of8")).unwrap();
        let node = NodeExpectation {
            count: 8,
            bus_ids: vec![],
            minors: (0..8).collect(),
            source: "gres.conf".into(),
        };
        // The job has GPUs 0-3: all present, though the node misses /dev/nvidia5.
        let inv = compare_with_expected(Some(node.clone()), listed.clone(), Some(&[0, 1, 2, 3]));
        assert!(inv.findings.is_empty(), "{:?}", inv.findings);
        // The job was given GPU 5, which the driver no longer lists.
        let inv = compare_with_expected(Some(node), listed.clone(), Some(&[4, 5]));
        assert_eq!(inv.findings.len(), 1);
        assert!(inv.findings[0]
            .message
            .starts_with("expected 2 GPUs, driver lists 1: /dev/nvidia5 absent"));
        // No expectation at all: the driver's list is reported, nothing is missing.
        let inv = compare_with_expected(None, listed, None);
        assert!(inv.findings.is_empty() && inv.listed.len() == 7);
    }

    #[test]
    fn file_expressions_expand() {
        assert_eq!(file_minors("/dev/nvidia[0-3,5]"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(file_minors("/dev/nvidia0,/dev/nvidia2"), Some(vec![0, 2]));
        assert_eq!(file_minors("/dev/nvidia7"), Some(vec![7]));
        assert_eq!(file_minors("/dev/nvidia[3-1]"), None);
        assert_eq!(file_minors("/dev/nvidia[0-99999999]"), None);
        assert_eq!(file_minors("/dev/dri/card0"), None);
    }
}
