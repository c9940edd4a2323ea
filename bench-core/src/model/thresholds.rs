//! Which threshold rule applies to a measurement, and why (`--explain-thresholds`).
//!
//! A rule applies when the GPU is what it names (`sku`: the SKU table's key, found by the GPU's
//! PCI device ID; `gpu`: the driver's whole name, never a part of it; `interconnect`: how the
//! node's GPUs reach each other, as read from the node; a key left out matches anything), its
//! collective matches, its `gpus` (when given) equals the measurement's, the check's node count
//! is the rule's `nodes` (absent: 1) or lies in its `min_nodes..=max_nodes` range, and the
//! message size lies in its `min_bytes..=max_bytes` range: a floor holds only for the sizes its
//! source supports (`config/defaults.toml` says why the ranges are what they are), and a size
//! outside every rule is judged by the outlier rule alone. A GPU pair of the pair matrix is looked
//! up as one node whatever the check spans, so `min_nodes = 2` never reaches it.
//!
//! Among the rules that apply the most specific wins, by these criteria in order:
//! 1. the node count: an exact `nodes` beats a range with both ends, which beats a range open at
//!    the top (`min_nodes` alone): a rule for exactly this allocation size says more than one for
//!    every size (`node_count`);
//! 2. a rule bounding the message size beats one that does not;
//! 3. naming the GPU count beats not naming it (a node range takes no `gpus`).
//!
//! On a tie the first in order wins, which puts the admin's rules before the built-in ones.

use crate::model::link_class::Class;
use crate::model::node_count::NodeCount;
use crate::model::sku::Sku;

/// One threshold rule, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The driver's whole GPU name (`NVIDIA H100 PCIe`, the `NVIDIA ` optional); None: any.
    pub gpu: Option<String>,
    /// A key of the SKU table (`sku::SKUS`): the part by its PCI device ID; None: any.
    pub sku: Option<&'static str>,
    /// The interconnect the floor was measured on (`facts::interconnect`); None: any.
    pub interconnect: Option<Class>,
    pub gpus: Option<u32>,
    /// `nodes = N` (absent: 1) or `min_nodes`/`max_nodes`.
    pub nodes: NodeCount,
    pub collective: &'static str,
    /// Smallest message size the floor holds for (`bytes` sets both ends; absent: no bound).
    pub min_bytes: Option<u64>,
    /// Largest message size the floor holds for.
    pub max_bytes: Option<u64>,
    pub min_busbw: f64,
    pub source: String,
    /// File and line it came from, for `--explain-thresholds`.
    pub origin: String,
    /// True for the admin's rules (they win ties over the defaults).
    pub admin: bool,
}

/// What the rules are looked up by: the GPU model (driver name and, when known, its SKU) and
/// the interconnect of the node's GPUs (`Class::Unknown` where it could not be read).
#[derive(Debug, Clone, Copy)]
pub struct GpuKey<'a> {
    pub name: &'a str,
    pub sku: Option<&'static Sku>,
    pub interconnect: Class,
}

/// `Gpu` owned, for the GPU threads of a check.
#[derive(Debug, Clone)]
pub struct GpuModel {
    pub name: String,
    pub sku: Option<&'static Sku>,
    pub interconnect: Class,
}

impl GpuModel {
    pub fn gpu(&self) -> GpuKey<'_> {
        GpuKey {
            name: &self.name,
            sku: self.sku,
            interconnect: self.interconnect,
        }
    }
}

impl<'a> GpuKey<'a> {
    /// A GPU known only by its name (tests, the simulation): its SKU by the whole name, and
    /// the interconnect its form factor implies.
    pub fn by_name(name: &'a str) -> GpuKey<'a> {
        let sku = crate::model::sku::sku_named(name);
        GpuKey {
            name,
            sku,
            interconnect: sku.map_or(Class::Unknown, |s| Class::of_form(s.form)),
        }
    }

    /// Whether rule `t` names this GPU (its `gpu`, `sku` and `interconnect` keys).
    pub fn is_named_by(&self, t: &Threshold) -> bool {
        t.gpu
            .as_deref()
            .is_none_or(|g| crate::model::sku::names_gpu(g, self.name))
            && t.sku.is_none_or(|k| self.sku.is_some_and(|s| s.key == k))
            && t.interconnect.is_none_or(|c| c == self.interconnect)
    }
}

/// What a measurement is, for the lookup.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub gpu: &'a GpuKey<'a>,
    pub gpus: u32,
    pub nodes: u32,
    pub collective: &'a str,
    pub bytes: u64,
}

fn applies(t: &Threshold, k: &Key) -> bool {
    k.gpu.is_named_by(t)
        && t.collective == k.collective
        && t.gpus.is_none_or(|g| g == k.gpus)
        && t.nodes.contains(k.nodes)
        && in_range(t, k.bytes)
}

/// Whether `bytes` lies in the rule's size range.
pub fn in_range(t: &Threshold, bytes: u64) -> bool {
    t.min_bytes.is_none_or(|lo| bytes >= lo) && t.max_bytes.is_none_or(|hi| bytes <= hi)
}

/// The criteria of the module doc, most significant first (compared as a tuple).
fn specificity(t: &Threshold) -> (u32, bool, bool) {
    let sized = t.min_bytes.is_some() || t.max_bytes.is_some();
    (t.nodes.specificity(), sized, t.gpus.is_some())
}

/// The rule's size range as `--explain-thresholds` shows it: `256 MiB`, `256 MiB..16 GiB`,
/// `>= 1 GiB`, `<= 1 GiB` or `any size`.
pub fn size_range(t: &Threshold) -> String {
    use crate::model::size::human;
    match (t.min_bytes, t.max_bytes) {
        (Some(lo), Some(hi)) if lo == hi => human(lo),
        (Some(lo), Some(hi)) => format!("{}..{}", human(lo), human(hi)),
        (Some(lo), None) => format!(">= {}", human(lo)),
        (None, Some(hi)) => format!("<= {}", human(hi)),
        (None, None) => "any size".to_string(),
    }
}

/// The rule for `key`, if any: the most specific, the first on a tie (`max_by_key` keeps the
/// last of equals, so it walks the rules backwards).
pub fn rule_for<'a>(rules: &'a [Threshold], key: &Key) -> Option<&'a Threshold> {
    rules
        .iter()
        .rev()
        .filter(|t| applies(t, key))
        .max_by_key(|t| specificity(t))
}

/// Whether a measurement is one GPU pair of the pair matrix (sendrecv between 2 GPUs).
pub fn is_pair(collective: &str, gpus: u32) -> bool {
    gpus == 2 && collective == "sendrecv"
}

/// The rule's floor for `gpus` GPUs measured together on a check of `nodes` nodes. A GPU pair
/// lies inside one node whatever the check spans, so it is looked up as one node.
pub fn floor<'r>(
    rules: &'r [Threshold],
    gpu: &GpuKey,
    nodes: u32,
    collective: &str,
    gpus: u32,
    bytes: u64,
) -> Option<&'r Threshold> {
    let key = Key {
        gpu,
        gpus,
        nodes: if is_pair(collective, gpus) { 1 } else { nodes },
        collective,
        bytes,
    };
    rule_for(rules, &key)
}

/// A rule's floor raised by `--min-busbw`, when both apply.
pub fn with_min(rule: Option<f64>, min_busbw: Option<f64>) -> Option<f64> {
    rule.into_iter().chain(min_busbw).reduce(f64::max)
}

/// Every rule for this GPU model, each with whether it applies to a node of `gpus` GPUs on
/// `nodes` nodes and why not: the text of `nccl-check --explain-thresholds`. `identity` and
/// `interconnect` say what the GPU was taken for and how its GPUs were found (or assumed) to be
/// joined.
pub fn explain(
    rules: &[Threshold],
    gpu: &GpuKey,
    identity: &str,
    interconnect: &str,
    gpus: u32,
    nodes: u32,
) -> String {
    let mut out = format!(
        "Thresholds for {gpus} x '{}' on {nodes} node(s) (most specific rule wins; admin rules first):\n  GPU: {identity}\n  interconnect: {interconnect}\n",
        gpu.name
    );
    let mut any = false;
    for t in rules {
        // Rules for this model: its SKU or name; the interconnect is said, not hidden.
        let model_only = GpuKey {
            interconnect: t.interconnect.unwrap_or(gpu.interconnect),
            ..*gpu
        };
        if !model_only.is_named_by(t) {
            continue;
        }
        any = true;
        out += &explain_rule(t, gpu, gpus, nodes);
    }
    if any {
        out +=
            "  Sizes outside a rule's range have no floor: the outlier rule alone judges them.\n";
    } else {
        out += &format!(
            "  no rule names this GPU and interconnect: only the outlier rule (peers' median) judges it.\n  Add [[thresholds]] with sku = \"...\" or gpu = \"{}\" to /etc/nccl-check/nccl-check.toml.\n",
            gpu.name
        );
    }
    out
}

/// One line (and its source) of `explain`.
fn explain_rule(t: &Threshold, gpu: &GpuKey, gpus: u32, nodes: u32) -> String {
    let size = size_range(t);
    // The pair-matrix rule applies to every pair whatever the node's GPU count, and a pair is
    // looked up as one node whatever the check spans (`floor`).
    let pair_rule = t.gpus.is_some_and(|g| is_pair(t.collective, g));
    let why_not = if let Some(c) = t.interconnect.filter(|&c| c != gpu.interconnect) {
        Some(format!("for {c} (these GPUs: {})", gpu.interconnect))
    } else if !t.nodes.contains(if pair_rule { 1 } else { nodes }) {
        Some(match t.nodes {
            NodeCount::Exact(n) => format!("for {n} node(s)"),
            range => format!("for {range} nodes"),
        })
    } else if pair_rule {
        None
    } else if t.gpus.is_some_and(|g| g != gpus) {
        Some(format!("for {} GPUs", t.gpus.unwrap_or(0)))
    } else {
        None
    };
    let gpus_text = t
        .gpus
        .map_or("any count".to_string(), |g| format!("{g} GPUs"));
    let nodes_text = format!("nodes {}", t.nodes);
    let on = t.interconnect.map_or("any".to_string(), |c| c.to_string());
    format!(
        "  {} {:<14} {:>12}  {:<10}  {:<11}  on {:<11}  >= {:>7.1} GB/s  [{}]  {}\n      source: {}\n",
        if why_not.is_none() {
            "APPLIES "
        } else {
            "ignored "
        },
        t.collective,
        size,
        gpus_text,
        nodes_text,
        on,
        t.min_busbw,
        t.origin,
        why_not.unwrap_or_default(),
        t.source
    )
}

#[cfg(test)]
mod table_test;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::worker::WorkerConfig;
    use std::path::Path;

    /// A GPU of this whole name on an NVSwitch fabric (where the built-in rules were measured).
    fn gpu(name: &str) -> &'static GpuKey<'static> {
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        Box::leak(Box::new(GpuKey {
            interconnect: Class::Nvswitch,
            ..GpuKey::by_name(name)
        }))
    }

    fn floor(
        rules: &[Threshold],
        name: &str,
        nodes: u32,
        coll: &str,
        gpus: u32,
        bytes: u64,
    ) -> Option<f64> {
        super::floor(rules, gpu(name), nodes, coll, gpus, bytes).map(|t| t.min_busbw)
    }

    fn explain(rules: &[Threshold], name: &str, gpus: u32, nodes: u32) -> String {
        super::explain(rules, gpu(name), "id", "nvswitch", gpus, nodes)
    }

    fn key(name: &str, gpus: u32, coll: &'static str, bytes: u64) -> Key<'static> {
        Key {
            gpu: gpu(name),
            gpus,
            nodes: 1,
            collective: coll,
            bytes,
        }
    }

    fn admin(text: &str) -> WorkerConfig {
        WorkerConfig::from_texts(Some((Path::new("/etc/x.toml"), text))).unwrap()
    }

    fn all_reduce_on(nodes: u32, gpus: u32) -> Key<'static> {
        Key {
            nodes,
            ..key("NVIDIA H100 80GB HBM3", gpus, "all_reduce", 256 << 20)
        }
    }

    const FROM_2: &str =
        "[[thresholds]]\nsku = \"H100 SXM\"\ncollective = \"all_reduce\"\nmin_nodes = 2\nmin_busbw = 300.0\n";

    #[test]
    fn a_node_range_rule_covers_every_allocation_size_but_one_node() {
        let c = admin(FROM_2);
        for (nodes, gpus) in [(2, 16), (64, 512), (4096, 32768), (3, 12)] {
            let t = rule_for(&c.thresholds, &all_reduce_on(nodes, gpus));
            assert_eq!(t.map(|t| t.min_busbw), Some(300.0), "{nodes} nodes");
        }
        // One node keeps the built-in 8x H100 rule; a GPU count without one has no floor.
        let t = rule_for(&c.thresholds, &all_reduce_on(1, 8)).unwrap();
        assert_eq!((t.min_busbw, t.admin), (400.0, false));
        assert!(rule_for(&c.thresholds, &all_reduce_on(1, 3)).is_none());
        let upto = admin(&FROM_2.replace("min_nodes = 2", "min_nodes = 2\nmax_nodes = 64"));
        assert!(rule_for(&upto.thresholds, &all_reduce_on(64, 512)).is_some());
        assert!(rule_for(&upto.thresholds, &all_reduce_on(65, 520)).is_none());
    }

    #[test]
    fn an_exact_node_count_beats_a_range_and_the_admins_rule_wins_a_tie() {
        let exact = "[[thresholds]]\nsku = \"H100 SXM\"\ncollective = \"all_reduce\"\nnodes = 64\nmin_busbw = 350.0\n";
        // Either order: the exact rule wins at 64 nodes, the range everywhere else.
        for text in [format!("{FROM_2}{exact}"), format!("{exact}{FROM_2}")] {
            let c = admin(&text);
            let at =
                |n: u32| rule_for(&c.thresholds, &all_reduce_on(n, n * 8)).map(|t| t.min_busbw);
            assert_eq!(
                (at(64), at(32), at(128)),
                (Some(350.0), Some(300.0), Some(300.0))
            );
        }
        // The exact count wins even over a range that bounds the message size.
        let sized = FROM_2.replace("min_nodes = 2", "min_nodes = 2\nmin_bytes = \"256M\"");
        let c = admin(&format!("{sized}{exact}"));
        let t = rule_for(&c.thresholds, &all_reduce_on(64, 512)).unwrap();
        assert_eq!(t.min_busbw, 350.0);
        // A range with both ends beats an open one.
        let closed = FROM_2.replace("min_nodes = 2", "min_nodes = 2\nmax_nodes = 64");
        let c = admin(&format!("{FROM_2}{}", closed.replace("300.0", "320.0")));
        let at = |n: u32| rule_for(&c.thresholds, &all_reduce_on(n, n * 8)).map(|t| t.min_busbw);
        assert_eq!((at(64), at(65)), (Some(320.0), Some(300.0)));
        // Equal specificity: the first in order wins, and the admin's rules come before every
        // built-in one.
        let c = admin(&format!("{FROM_2}{}", FROM_2.replace("300.0", "310.0")));
        let t = rule_for(&c.thresholds, &all_reduce_on(8, 64)).unwrap();
        assert_eq!((t.min_busbw, t.admin), (300.0, true));
        let admins = c.thresholds.iter().take_while(|t| t.admin).count();
        assert_eq!(admins, 2);
        assert!(c.thresholds[admins..].iter().all(|t| !t.admin));
    }

    #[test]
    fn gpu_pairs_are_looked_up_as_one_node_whatever_the_range() {
        // A multi-node sendrecv rule does not reach the pair matrix's GPU pairs (one node).
        let c = admin(
            "[[thresholds]]\ngpu = \"NVIDIA H200\"\ncollective = \"sendrecv\"\nmin_nodes = 2\nmin_busbw = 10.0\n",
        );
        let r = &c.thresholds;
        assert_eq!(
            floor(r, "NVIDIA H200", 64, "sendrecv", 2, 256 << 20),
            Some(255.0)
        );
        assert_eq!(
            floor(r, "NVIDIA H200", 64, "sendrecv", 512, 256 << 20),
            Some(10.0)
        );
        assert_eq!(floor(r, "NVIDIA H200", 1, "sendrecv", 8, 256 << 20), None);
    }

    #[test]
    fn node_ranges_are_validated_with_file_line_and_field() {
        let parse = |body: &str| {
            WorkerConfig::from_texts(Some((
                Path::new("/etc/x.toml"),
                &format!("[[thresholds]]\ngpu = \"Tesla X\"\ncollective = \"all_reduce\"\nmin_busbw = 1.0\n{body}"),
            )))
        };
        let c = parse("min_nodes = 2\nmax_nodes = 8\n").unwrap();
        assert_eq!(
            c.thresholds[0].nodes,
            NodeCount::Range {
                min: 2,
                max: Some(8)
            }
        );
        let cases = [
            (
                "nodes = 4\nmin_nodes = 2\n",
                "thresholds[0].nodes",
                5,
                "not both",
            ),
            (
                "max_nodes = 8\nnodes = 4\n",
                "thresholds[0].nodes",
                6,
                "not both",
            ),
            (
                "min_nodes = 9\nmax_nodes = 8\n",
                "thresholds[0].min_nodes",
                5,
                "larger",
            ),
            (
                "min_nodes = 0\n",
                "thresholds[0].min_nodes",
                5,
                "at least 1",
            ),
            (
                "max_nodes = 0\n",
                "thresholds[0].max_nodes",
                5,
                "at least 1",
            ),
            ("nodes = 0\n", "thresholds[0].nodes", 5, "at least 1"),
            (
                "gpus = 16\nmin_nodes = 2\n",
                "thresholds[0].gpus",
                5,
                "every GPU count",
            ),
        ];
        for (body, field, line, says) in cases {
            let e = parse(body).unwrap_err();
            assert_eq!(
                (e.field.as_str(), e.line),
                (field, Some(line)),
                "{body}: {e}"
            );
            assert!(e.message.contains(says), "{body}: {e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("/etc/x.toml:{line}: {field}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn explain_shows_a_node_range_and_why_it_does_not_apply() {
        let c = admin(&format!(
            "{FROM_2}{}",
            FROM_2.replace("min_nodes = 2", "min_nodes = 2\nmax_nodes = 64")
        ));
        let text = explain(&c.thresholds, "NVIDIA H100 80GB HBM3", 8, 1);
        let line = |needle: &str| line_of(&text, needle);
        let open = line("nodes 2.. ");
        assert!(
            open.starts_with("  ignored ") && open.ends_with("for 2.. nodes"),
            "{open}"
        );
        let closed = line("nodes 2..64");
        assert!(closed.ends_with("for 2..64 nodes"), "{closed}");
        assert!(line("nodes 1 ").starts_with("  APPLIES "), "{text}");
        let text = explain(&c.thresholds, "NVIDIA H100 80GB HBM3", 512, 64);
        assert!(
            line_of(&text, "nodes 2.. ").starts_with("  APPLIES "),
            "{text}"
        );
        assert!(
            line_of(&text, "nodes 2..64").starts_with("  APPLIES "),
            "{text}"
        );
        assert!(
            line_of(&text, "nodes 1 ").ends_with("for 1 node(s)"),
            "{text}"
        );
    }

    fn line_of(text: &str, needle: &str) -> String {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no '{needle}' in {text}"))
            .to_string()
    }

    #[test]
    fn the_most_specific_rule_wins_and_admin_rules_win_ties() {
        let c = WorkerConfig::from_texts(None).unwrap();
        let t = rule_for(
            &c.thresholds,
            &key("NVIDIA H200", 4, "all_reduce", 256 << 20),
        )
        .unwrap();
        assert_eq!(t.min_busbw, 290.0);
        // A size-bounded rule beats an unbounded one; between bounded ones the admin's wins.
        let c = WorkerConfig::from_texts(Some((
            Path::new("/etc/x.toml"),
            "[[thresholds]]\ngpu = \"h200\"\ngpus = 2\ncollective = \"sendrecv\"\nmin_busbw = 100.0\n\
             [[thresholds]]\ngpu = \"h200\"\ngpus = 2\ncollective = \"sendrecv\"\nmin_bytes = \"1G\"\nmin_busbw = 300.0\n",
        )))
        .unwrap();
        let t = rule_for(&c.thresholds, &key("NVIDIA H200", 2, "sendrecv", 1 << 30)).unwrap();
        assert_eq!(t.min_busbw, 300.0);
        let t = rule_for(&c.thresholds, &key("NVIDIA H200", 2, "sendrecv", 64 << 20)).unwrap();
        assert_eq!(t.min_busbw, 100.0);
        // An admin rule of the same specificity replaces the default.
        let c = WorkerConfig::from_texts(Some((
            Path::new("/etc/x.toml"),
            "[[thresholds]]\ngpu = \"h200\"\ngpus = 4\ncollective = \"all_reduce\"\nbytes = \"256M\"\nmin_busbw = 330.0\n",
        )))
        .unwrap();
        let t = rule_for(
            &c.thresholds,
            &key("NVIDIA H200", 4, "all_reduce", 256 << 20),
        )
        .unwrap();
        assert_eq!((t.min_busbw, t.admin), (330.0, true));
    }

    #[test]
    fn no_rule_for_an_unknown_model_count_or_node_count() {
        let c = WorkerConfig::from_texts(None).unwrap();
        assert!(rule_for(&c.thresholds, &key("Tesla T4", 4, "all_reduce", 256 << 20)).is_none());
        assert!(rule_for(
            &c.thresholds,
            &key("NVIDIA H200", 3, "all_reduce", 256 << 20)
        )
        .is_none());
        let mut k = key("NVIDIA H200", 4, "all_reduce", 256 << 20);
        k.nodes = 2;
        assert!(
            rule_for(&c.thresholds, &k).is_none(),
            "multi-node runs need rules that say so"
        );
    }

    #[test]
    fn a_gpu_pair_is_judged_as_one_node_and_min_busbw_raises_a_floor() {
        let c = WorkerConfig::from_texts(None).unwrap();
        let r = &c.thresholds;
        assert_eq!(
            floor(r, "NVIDIA H200", 2, "sendrecv", 2, 256 << 20),
            Some(255.0)
        );
        assert_eq!(floor(r, "NVIDIA H200", 2, "all_reduce", 4, 256 << 20), None);
        assert_eq!(with_min(Some(290.0), Some(300.0)), Some(300.0));
        assert_eq!(with_min(None, Some(300.0)), Some(300.0));
        assert_eq!(with_min(Some(290.0), None), Some(290.0));
    }

    #[test]
    fn a_rule_applies_only_inside_its_size_range() {
        let c = WorkerConfig::from_texts(None).unwrap();
        let r = &c.thresholds;
        // The issue-18 case: `all -b 1M -e 4M` on a healthy 2x H200 measured sendrecv 1M at
        // 38.9 GB/s and failed against an any-size 200 GB/s floor.
        for small in [8, 1 << 20, 4 << 20, 64 << 20, (256 << 20) - 1] {
            assert_eq!(
                floor(r, "NVIDIA H200", 1, "sendrecv", 2, small),
                None,
                "{small}"
            );
        }
        assert_eq!(
            floor(r, "NVIDIA H200", 1, "sendrecv", 2, 8 << 30),
            Some(255.0)
        );
        assert_eq!(
            floor(r, "NVIDIA H200", 1, "sendrecv", 2, (16 << 30) + 1),
            None
        );
        // 8x H200: two ranges with a documented gap between them.
        assert_eq!(
            floor(r, "NVIDIA H200", 1, "all_reduce", 8, 1 << 30),
            Some(400.0)
        );
        assert_eq!(floor(r, "NVIDIA H200", 1, "all_reduce", 8, 3 << 29), None);
        assert_eq!(
            floor(r, "NVIDIA H200", 1, "all_reduce", 8, 2 << 30),
            Some(431.0)
        );
        assert_eq!(floor(r, "NVIDIA H100", 1, "all_reduce", 8, 128 << 20), None);
    }

    #[test]
    fn size_ranges_are_validated_and_shown() {
        let rule = |body: &str| {
            WorkerConfig::from_texts(Some((
                Path::new("/etc/x.toml"),
                &format!("[[thresholds]]\ngpu = \"Tesla X\"\ncollective = \"all_reduce\"\nmin_busbw = 1.0\n{body}"),
            )))
        };
        let e = rule("min_bytes = \"1G\"\nmax_bytes = \"1M\"\n").unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("thresholds[0].min_bytes", Some(5)),
            "{e}"
        );
        let e = rule("bytes = \"1G\"\nmax_bytes = \"2G\"\n").unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
        let shown = |body: &str| size_range(&rule(body).unwrap().thresholds[0]);
        assert_eq!(shown("bytes = \"256M\"\n"), "256 MiB");
        assert_eq!(shown("min_bytes = \"1G\"\n"), ">= 1 GiB");
        assert_eq!(shown("max_bytes = \"1G\"\n"), "<= 1 GiB");
        assert_eq!(shown(""), "any size");
    }

    #[test]
    fn explain_says_which_rules_apply_and_where_they_come_from() {
        let c = WorkerConfig::from_texts(None).unwrap();
        let text = explain(&c.thresholds, "NVIDIA H200", 4, 1);
        assert!(text.contains("APPLIES  all_reduce"), "{text}");
        assert!(
            text.contains("ignored  all_reduce") && text.contains("for 8 GPUs"),
            "{text}"
        );
        assert!(text.contains("source: nccl-check measured"), "{text}");
        assert!(text.contains("256 MiB..16 GiB"), "{text}");
        assert!(text.contains("outlier rule alone"), "{text}");
        let text = explain(&c.thresholds, "Tesla T4", 4, 1);
        assert!(text.contains("no rule names this GPU"), "{text}");
    }
}
