//! The worker's config (`/etc/nccl-check/nccl-check.toml`): threshold rules, the outlier rule and
//! plans, merged over the built-in defaults (`bench-core/config/defaults.toml`, compiled in).
//! Parsed low (serde structs mirroring the file) then validated high (sizes parsed, collectives
//! resolved), with every error naming file, line and field.

use crate::model::collectives;
use crate::model::node_count::NodeCount;
use crate::model::size::parse_size;
use crate::model::thresholds::Threshold;
use nccl_check_host::config_file::{self, ConfigError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::plans::{resolve_plan, Plan, RawPlan};

/// Where the admin's file is looked for when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/nccl-check/nccl-check.toml";
/// The built-in defaults, shipped inside the binary.
pub const DEFAULTS: &str = include_str!("../../config/defaults.toml");
const DEFAULTS_NAME: &str = "<built-in defaults.toml>";

#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct RawFile {
    /// The site's libnccl.so.2 (absolute), for users who do not set NCCL_CHECK_NCCL_LIB.
    nccl_lib: Option<PathBuf>,
    outliers: Option<RawOutliers>,
    thresholds: Vec<RawThreshold>,
    plans: BTreeMap<String, RawPlan>,
    /// Site network profiles (`config::network`).
    network: Vec<super::network::NetworkProfile>,
    /// GPUs a node should have (`config::expected_gpus`).
    expected_gpus: Vec<super::expected_gpus::ExpectedGpus>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutliers {
    fraction: Option<f64>,
    retest: Option<bool>,
    alltoall_fraction: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThreshold {
    gpu: Option<String>,
    sku: Option<String>,
    interconnect: Option<String>,
    gpus: Option<u32>,
    nodes: Option<u32>,
    min_nodes: Option<u32>,
    max_nodes: Option<u32>,
    collective: String,
    bytes: Option<String>,
    min_bytes: Option<String>,
    max_bytes: Option<String>,
    min_busbw: f64,
    source: Option<String>,
}

/// The outlier rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outliers {
    pub fraction: f64,
    pub retest: bool,
    /// The alltoall beside a multi-node all_reduce is slow below this fraction of what the
    /// all_reduce predicts (`localize::paths`).
    pub alltoall_fraction: f64,
}

/// The merged, validated config.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The admin file that was read, if any.
    pub path: Option<PathBuf>,
    pub outliers: Outliers,
    /// Admin rules first, then the defaults.
    pub thresholds: Vec<Threshold>,
    pub plans: BTreeMap<String, Plan>,
    /// The admin file's `[[network]]` profiles (none are built in).
    pub network: Vec<super::network::NetworkProfile>,
    /// The admin file's `[[expected_gpus]]` (none are built in).
    pub expected_gpus: Vec<super::expected_gpus::ExpectedGpus>,
    /// The admin file's `nccl_lib` (after `--nccl-lib` and `NCCL_CHECK_NCCL_LIB`).
    pub nccl_lib: Option<PathBuf>,
    pub text: String,
}

impl WorkerConfig {
    /// The defaults merged with `path` (when given, it must exist; when `None`, the default
    /// path is read if it exists).
    pub fn load(path: Option<&Path>) -> Result<WorkerConfig, ConfigError> {
        let admin = match path {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_PATH)).filter(|p| p.exists()),
        };
        let text = admin.as_deref().map(config_file::read).transpose()?;
        Self::from_texts(admin.as_deref().zip(text.as_deref()))
    }

    /// The plan called `name`; else the error that lists the plans there are.
    pub fn plan(&self, name: &str) -> Result<&Plan, String> {
        self.plans.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.plans.keys().map(String::as_str).collect();
            format!("unknown plan '{name}' (plans: {})", names.join(", "))
        })
    }

    /// The defaults merged with an admin file's text (for tests and `load`).
    pub fn from_texts(admin: Option<(&Path, &str)>) -> Result<WorkerConfig, ConfigError> {
        let mut cfg = WorkerConfig {
            path: None,
            outliers: Outliers {
                fraction: 0.85,
                retest: true,
                alltoall_fraction: 0.5,
            },
            thresholds: Vec::new(),
            plans: BTreeMap::new(),
            network: Vec::new(),
            expected_gpus: Vec::new(),
            nccl_lib: None,
            text: String::new(),
        };
        cfg.merge(Path::new(DEFAULTS_NAME), DEFAULTS, false)?;
        if let Some((path, text)) = admin {
            cfg.merge(path, text, true)?;
            cfg.path = Some(path.to_path_buf());
            cfg.text = text.to_string();
        }
        Ok(cfg)
    }

    /// Parses and checks one file (the defaults or the admin's) and lays it over what is merged
    /// so far: its outlier keys and `nccl_lib` where given, its rules first, its plans by name,
    /// its profiles and expected GPUs where it has any.
    fn merge(&mut self, path: &Path, text: &str, admin: bool) -> Result<(), ConfigError> {
        let mut raw: RawFile = config_file::parse(path, text)?;
        let bad = |field: &str, msg: &str| config_file::invalid(path, text, field, msg);
        let fraction = raw.outliers.as_ref().and_then(|o| o.fraction);
        let alltoall_fraction = raw.outliers.as_ref().and_then(|o| o.alltoall_fraction);
        for (key, value, e_g) in [
            ("outliers.fraction", fraction, "0.85"),
            ("outliers.alltoall_fraction", alltoall_fraction, "0.5"),
        ] {
            if let Some(f) = value.filter(|f| !(*f > 0.0 && *f < 1.0)) {
                let msg =
                    format!("{f} is not a fraction: expected a number between 0 and 1, e.g. {e_g}");
                return Err(bad(key, &msg));
            }
        }
        if let Some(lib) = raw.nccl_lib.as_ref().filter(|l| !l.is_absolute()) {
            let msg = format!("'{}' must be an absolute path", lib.display());
            return Err(bad("nccl_lib", &msg));
        }
        super::network::validate_profiles(&raw.network, path, text)?;
        super::expected_gpus::validate_expected(&mut raw.expected_gpus, path, text)?;
        let thresholds: Vec<Threshold> = (raw.thresholds.into_iter().enumerate())
            .map(|(i, t)| threshold(path, text, i, t, admin))
            .collect::<Result<_, _>>()?;
        let plans: Vec<(String, Plan)> = (raw.plans.into_iter())
            .map(|(name, p)| Ok((name.clone(), resolve_plan(path, text, &name, p)?)))
            .collect::<Result<_, _>>()?;
        let o = &mut self.outliers;
        o.fraction = fraction.unwrap_or(o.fraction);
        o.retest = raw.outliers.and_then(|r| r.retest).unwrap_or(o.retest);
        o.alltoall_fraction = alltoall_fraction.unwrap_or(o.alltoall_fraction);
        // The admin's rules go first: lookup prefers them on a tie.
        self.thresholds.splice(0..0, thresholds);
        self.plans.extend(plans);
        if !raw.network.is_empty() {
            self.network = raw.network;
        }
        if !raw.expected_gpus.is_empty() {
            self.expected_gpus = raw.expected_gpus;
        }
        self.nccl_lib = raw.nccl_lib.or(self.nccl_lib.take());
        Ok(())
    }
}

/// One `[[thresholds]]` rule, checked and resolved; errors name `thresholds[i].<key>`.
fn threshold(
    path: &Path,
    text: &str,
    i: usize,
    t: RawThreshold,
    admin: bool,
) -> Result<Threshold, ConfigError> {
    let rule = format!("thresholds[{i}]");
    let bad =
        |key: &str, msg: &str| config_file::invalid(path, text, &format!("{rule}.{key}"), msg);
    let collective = collectives::collective_named(&t.collective)
        .map_err(|e| bad("collective", &e))?
        .name();
    if !(t.min_busbw.is_finite() && t.min_busbw >= 0.0) {
        let msg = format!("{} is not a bandwidth: expected GB/s >= 0", t.min_busbw);
        return Err(bad("min_busbw", &msg));
    }
    let (gpu, sku, interconnect) = selectors(&t).map_err(|(k, m)| bad(k, &m))?;
    if t.gpus == Some(0) {
        return Err(bad("gpus", "must be at least 1"));
    }
    let nodes = NodeCount::from_keys(t.nodes, t.min_nodes, t.max_nodes, t.gpus)
        .map_err(|e| bad(e.key, &e.message))?;
    if interconnect == Some(crate::model::link_class::Class::Bridged)
        && crate::model::thresholds::is_pair(collective, t.gpus.unwrap_or(0))
    {
        // The pair rule would hold every pair of a bridged node, and the pairs between
        // bridge groups run over PCIe: a false FAIL for each of them.
        return Err(bad(
            "interconnect",
            "a GPU-pair rule (sendrecv, gpus = 2) cannot name \"bridged\": it would also hold \
             the pairs between bridge groups, which run over PCIe; on bridged nodes pairs are \
             judged against each other (the outlier rule)",
        ));
    }
    let (min_bytes, max_bytes) = threshold_bytes(&t).map_err(|(k, m)| bad(k, &m))?;
    Ok(Threshold {
        gpu,
        sku,
        interconnect,
        gpus: t.gpus,
        nodes,
        collective,
        min_bytes,
        max_bytes,
        min_busbw: t.min_busbw,
        source: t.source.unwrap_or_default(),
        origin: format!(
            "{}:{}",
            path.display(),
            config_file::find_key_line(text, &rule).unwrap_or(0)
        ),
        admin,
    })
}

/// What a check of a rule's keys found wrong: the key under `thresholds[i].` and the message.
type Bad = (&'static str, String);

/// The byte range a threshold rule holds for: `bytes` (one size) or `min_bytes`/`max_bytes`.
fn threshold_bytes(t: &RawThreshold) -> Result<(Option<u64>, Option<u64>), Bad> {
    let size = |k: &'static str, v: &Option<String>| {
        (v.as_deref().map(|b| parse_size(b).map_err(|e| (k, e)))).transpose()
    };
    let (bytes, min, max) = (
        size("bytes", &t.bytes)?,
        size("min_bytes", &t.min_bytes)?,
        size("max_bytes", &t.max_bytes)?,
    );
    match (bytes, min, max) {
        (Some(b), None, None) => Ok((Some(b), Some(b))),
        (Some(_), _, _) => Err((
            "bytes",
            "give `bytes` (one size) or `min_bytes`/`max_bytes` (a range), not both".into(),
        )),
        (None, Some(lo), Some(hi)) if lo > hi => Err((
            "min_bytes",
            format!("min_bytes {lo} is larger than max_bytes {hi}"),
        )),
        (None, lo, hi) => Ok((lo, hi)),
    }
}

/// A rule's `gpu`, `sku` and `interconnect` keys, validated: `gpu` must be a whole driver
/// name (a part of one, like "H100", would match the H100 PCIe as well as the SXM part: the
/// false drain this rule replaces), `sku` a key of the table, `interconnect` a class name.
type Selectors = (
    Option<String>,
    Option<&'static str>,
    Option<crate::model::link_class::Class>,
);

fn selectors(t: &RawThreshold) -> Result<Selectors, Bad> {
    use crate::model::link_class::Class;
    use crate::model::sku;
    let gpu = match t.gpu.as_deref().map(str::trim) {
        None => None,
        Some("") => return Err(("gpu", "empty GPU name".into())),
        Some(g) => match sku::partial_name(g) {
            Some(whole) => return Err((
                "gpu",
                format!(
                    "'{g}' is part of a GPU name, not a whole one: a rule's gpu matches the driver's \
                     whole name (e.g. \"{whole}\"), so that one model's floor never reaches its \
                     PCIe or NVL sibling; to match a part by its PCI device ID write sku = \"...\" \
                     (`nccl-check --list-skus` lists them)"
                ),
            )),
            None => Some(g.to_string()),
        },
    };
    let sku = t.sku.as_deref().map(|k| {
        sku::by_key(k).map(|s| s.key).ok_or_else(|| {
            let keys = quoted(sku::SKUS.iter().map(|s| s.key));
            let msg = format!("unknown SKU '{k}': one of {keys} (`nccl-check --list-skus`)");
            ("sku", msg)
        })
    });
    let interconnect = t.interconnect.as_deref().map(|c| {
        Class::parse(c).ok_or_else(|| {
            let names = quoted(Class::ALL.iter().filter(|c| **c != Class::Unknown));
            let msg = format!("unknown interconnect '{c}': one of {names}");
            ("interconnect", msg)
        })
    });
    Ok((gpu, sku.transpose()?, interconnect.transpose()?))
}

/// `"a", "b"`: the values a key may take, for its error.
fn quoted<T: std::fmt::Display>(values: impl Iterator<Item = T>) -> String {
    let values: Vec<String> = values.map(|v| format!("\"{v}\"")).collect();
    values.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::step::Step;

    fn admin(text: &str) -> Result<WorkerConfig, ConfigError> {
        WorkerConfig::from_texts(Some((Path::new("/etc/nccl-check/nccl-check.toml"), text)))
    }

    #[test]
    fn sku_and_interconnect_keys_are_validated_by_name() {
        let load = |body: &str| {
            WorkerConfig::from_texts(Some((
                Path::new("/etc/x.toml"),
                &format!(
                    "[[thresholds]]\ncollective = \"sendrecv\"\ngpus = 2\nmin_busbw = 1.0\n{body}"
                ),
            )))
        };
        let c = load("sku = \"h100 pcie\"\ninterconnect = \"pcie\"\n").unwrap();
        assert_eq!(c.thresholds[0].sku, Some("H100 PCIe"));
        let e = load("sku = \"H100\"\n").unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("thresholds[0].sku", Some(5)),
            "{e}"
        );
        assert!(e.message.contains("\"H100 SXM\""), "{e}");
        let e = load("interconnect = \"NVLink\"\n").unwrap_err();
        assert!(e.message.contains("\"nvswitch\""), "{e}");
        let e = load("interconnect = \"bridged\"\n").unwrap_err();
        assert_eq!(e.field, "thresholds[0].interconnect", "{e}");
        // A whole name, with or without "NVIDIA ", is a name; a part of one is refused.
        assert!(load("gpu = \"H100 PCIe\"\n").is_ok());
        let e = load("gpu = \"H100\"\n").unwrap_err();
        assert_eq!(e.field, "thresholds[0].gpu", "{e}");
    }

    #[test]
    fn the_built_in_defaults_are_valid_and_have_quick_and_full() {
        let c = WorkerConfig::from_texts(None).unwrap();
        assert!(c.plans.contains_key("quick") && c.plans.contains_key("full"));
        for sku in ["A100 SXM4 80GB", "H100 SXM", "H200 SXM", "B200", "GB200"] {
            assert!(c.thresholds.iter().any(|t| t.sku == Some(sku)), "{sku}");
        }
        assert!(c.thresholds.iter().all(|t| !t.source.is_empty()));
        assert_eq!(c.outliers.fraction, 0.85);
    }

    #[test]
    fn admin_rules_come_first_and_plans_replace_by_name() {
        let c = admin(
            "[outliers]\nfraction = 0.9\n[[thresholds]]\ngpu = \"H200\"\ngpus = 4\ncollective = \"all_reduce\"\nmin_busbw = 320.0\n[plans.quick]\nsteps = [{ collective = \"all_reduce\", bytes = \"1G\" }]\n",
        )
        .unwrap();
        assert_eq!(c.outliers.fraction, 0.9);
        assert!(c.thresholds[0].admin && c.thresholds[0].min_busbw == 320.0);
        assert_eq!(c.plans["quick"].steps.len(), 1);
        assert!(c.plans.contains_key("full"));
    }

    /// The site says where NCCL is, once, for every user.
    #[test]
    fn the_site_names_its_nccl_library_with_an_absolute_path() {
        assert_eq!(WorkerConfig::from_texts(None).unwrap().nccl_lib, None);
        let c = admin("nccl_lib = \"/opt/nccl/lib/libnccl.so.2\"\n").unwrap();
        assert_eq!(
            c.nccl_lib,
            Some(PathBuf::from("/opt/nccl/lib/libnccl.so.2"))
        );
        let e = admin("nccl_lib = \"libnccl.so.2\"\n").unwrap_err();
        assert_eq!(e.field, "nccl_lib", "{e}");
        assert!(e.to_string().contains("must be an absolute path"), "{e}");
    }

    #[test]
    fn a_broken_config_names_file_line_and_field() {
        let e =
            admin("[[thresholds]]\ngpu = \"H200\"\ncollective = \"allredux\"\nmin_busbw = 1.0\n")
                .unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert_eq!(e.field, "thresholds[0].collective");
        assert!(e.to_string().starts_with("/etc/nccl-check/nccl-check.toml:3: thresholds[0].collective: unknown collective 'allredux'"), "{e}");

        let e = admin("[outliers]\nalltoall_fraction = 1.5\n").unwrap_err();
        assert!(e.to_string().contains("outliers.alltoall_fraction"), "{e}");
        let c = admin("[outliers]\nalltoall_fraction = 0.3\n").unwrap();
        assert_eq!(c.outliers.alltoall_fraction, 0.3);
        assert_eq!(
            c.outliers.fraction, 0.85,
            "the other keys keep their defaults"
        );
        let e = admin("[outliers]\nfraction = 85\n").unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(2), "outliers.fraction"),
            "{e}"
        );

        let e = admin("[[thresholds]]\ngpu = \"H200\"\ncollective = \"all_reduce\"\nmin_busbw = 1.0\ntreshold = 2\n").unwrap_err();
        assert!(e.message.contains("treshold"), "{e}");

        let e = admin(
            "[plans.mine]\nsteps = [\n  { collective = \"all_reduce\", bytes = \"12Q\" },\n]\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "plans.mine.steps[0].bytes", "{e}");
        assert_eq!(e.line, Some(3), "{e}");
    }

    #[test]
    fn the_shipped_admin_file_and_network_examples_are_valid() {
        admin(include_str!("../../config/nccl-check.toml")).unwrap();
        // The examples file, uncommented as an admin would.
        let examples: String = include_str!("../../config/nccl-check.toml")
            .lines()
            .map(|l| {
                l.strip_prefix('#')
                    .filter(|r| {
                        r.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[' || c == ']')
                            || r.starts_with("  {")
                    })
                    .unwrap_or("")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let c = admin(&examples).unwrap();
        assert_eq!(c.network.len(), 1);
        assert!(c.thresholds[0].admin && c.thresholds[0].min_busbw == 420.0);
        // The multi-node example: one rule for every allocation size.
        let multi = &c.thresholds[1];
        assert!(multi.admin, "{multi:?}");
        assert_eq!(multi.nodes, NodeCount::Range { min: 2, max: None });
    }

    #[test]
    fn a_plan_step_is_either_pairs_or_a_collective() {
        let e = admin(
            "[plans.x]\nsteps = [{ pairs = true, collective = \"all_reduce\", bytes = \"1M\" }]\n",
        )
        .unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
        let e = admin("[plans.x]\nsteps = [{ bytes = \"1M\" }]\n").unwrap_err();
        assert!(e.message.contains("needs"), "{e}");
        let c = admin("[plans.x]\nsteps = [{ collective = \"sendrecv\", min_bytes = \"1M\", max_bytes = \"4M\" }]\n").unwrap();
        match &c.plans["x"].steps[0] {
            Step::Collective { sizes, .. } => assert_eq!(sizes, &vec![1 << 20, 2 << 20, 4 << 20]),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn a_budget_is_positive_seconds_on_a_one_size_step() {
        let c = admin("[plans.x]\nsteps = [{ pairs = true, bytes = \"1M\", budget_s = 0.2 }]\n")
            .unwrap();
        assert!(matches!(c.plans["x"].steps[0], Step::Pairs { budget: Some(b), .. } if b == 0.2));
        for bad in ["0.0", "-1.0", "nan"] {
            let e = admin(&format!(
                "[plans.x]\nsteps = [{{ collective = \"all_reduce\", bytes = \"1M\", budget_s = {bad} }}]\n"
            ))
            .unwrap_err();
            assert_eq!(e.field, "plans.x.steps[0].budget_s", "{e}");
        }
        let e = admin("[plans.x]\nsteps = [{ collective = \"all_reduce\", min_bytes = \"1M\", max_bytes = \"4M\", budget_s = 1.0 }]\n").unwrap_err();
        assert!(e.to_string().contains("one size"), "{e}");
        // The built-in quick plan is budgeted, the full plan counts as nccl-tests does.
        let d = admin("").unwrap();
        let budgets = |p: &str| -> Vec<Option<f64>> {
            d.plans[p]
                .steps
                .iter()
                .map(|s| match s {
                    Step::Collective { budget, .. } | Step::Pairs { budget, .. } => *budget,
                })
                .collect()
        };
        assert!(budgets("quick").iter().all(Option::is_some));
        assert!(budgets("full").iter().all(Option::is_none));
    }
}
