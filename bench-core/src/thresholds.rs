//! Which threshold rule applies to a measurement, and why (`--explain-thresholds`).
//!
//! A rule applies when its GPU name is a case-insensitive substring of the driver's name, its
//! collective matches, its `gpus` and `nodes` (when given) equal the measurement's, and the
//! message size lies in its `min_bytes..=max_bytes` range: a floor holds only for the sizes its
//! source supports (`config/defaults.toml` says why the ranges are what they are), and a size
//! outside every rule is judged by the outlier rule alone. Among the rules that apply the most
//! specific wins (a rule bounding the size beats one that does not, naming the GPU count beats
//! not naming it); on a tie the first in order, which puts the admin's rules before the built-in
//! ones.

use crate::config::worker::Threshold;

/// What a measurement is, for the lookup.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub gpu_name: &'a str,
    pub gpus: u32,
    pub nodes: u32,
    pub collective: &'a str,
    pub bytes: u64,
}

fn applies(t: &Threshold, k: &Key) -> bool {
    k.gpu_name
        .to_ascii_lowercase()
        .contains(&t.gpu.to_ascii_lowercase())
        && t.collective == k.collective
        && t.gpus.is_none_or(|g| g == k.gpus)
        && t.nodes == k.nodes
        && in_range(t, k.bytes)
}

/// Whether `bytes` lies in the rule's size range.
pub fn in_range(t: &Threshold, bytes: u64) -> bool {
    t.min_bytes.is_none_or(|lo| bytes >= lo) && t.max_bytes.is_none_or(|hi| bytes <= hi)
}

fn specificity(t: &Threshold) -> u32 {
    let sized = t.min_bytes.is_some() || t.max_bytes.is_some();
    2 * u32::from(sized) + u32::from(t.gpus.is_some())
}

/// The rule's size range as `--explain-thresholds` shows it: `256 MiB`, `256 MiB..16 GiB`,
/// `>= 1 GiB`, `<= 1 GiB` or `any size`.
pub fn size_range(t: &Threshold) -> String {
    use crate::size::human;
    match (t.min_bytes, t.max_bytes) {
        (Some(lo), Some(hi)) if lo == hi => human(lo),
        (Some(lo), Some(hi)) => format!("{}..{}", human(lo), human(hi)),
        (Some(lo), None) => format!(">= {}", human(lo)),
        (None, Some(hi)) => format!("<= {}", human(hi)),
        (None, None) => "any size".to_string(),
    }
}

/// The rule for `key`, if any.
pub fn lookup<'a>(rules: &'a [Threshold], key: &Key) -> Option<&'a Threshold> {
    let mut best: Option<&Threshold> = None;
    for t in rules.iter().filter(|t| applies(t, key)) {
        if best.is_none_or(|b| specificity(t) > specificity(b)) {
            best = Some(t);
        }
    }
    best
}

/// Whether a measurement is one GPU pair of the pair matrix (sendrecv between 2 GPUs).
pub fn is_pair(collective: &str, gpus: u32) -> bool {
    gpus == 2 && collective == "sendrecv"
}

/// The rule's floor for `gpus` GPUs measured together on a check of `nodes` nodes. A GPU pair
/// lies inside one node whatever the check spans, so it is looked up as one node.
pub fn floor(
    rules: &[Threshold],
    gpu_name: &str,
    nodes: u32,
    collective: &str,
    gpus: u32,
    bytes: u64,
) -> Option<f64> {
    let key = Key {
        gpu_name,
        gpus,
        nodes: if is_pair(collective, gpus) { 1 } else { nodes },
        collective,
        bytes,
    };
    lookup(rules, &key).map(|t| t.min_busbw)
}

/// A rule's floor raised by `--min-busbw`, when both apply.
pub fn with_min(rule: Option<f64>, min_busbw: Option<f64>) -> Option<f64> {
    match (rule, min_busbw) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Every rule for this GPU model, each with whether it applies to a node of `gpus` GPUs on
/// `nodes` nodes and why not: the text of `nccl-check --explain-thresholds`.
pub fn explain(rules: &[Threshold], gpu_name: &str, gpus: u32, nodes: u32) -> String {
    let mut out = format!(
        "Thresholds for {gpus} x '{gpu_name}' on {nodes} node(s) (most specific rule wins; admin rules first):\n"
    );
    let mut any = false;
    for t in rules {
        if !gpu_name
            .to_ascii_lowercase()
            .contains(&t.gpu.to_ascii_lowercase())
        {
            continue;
        }
        any = true;
        let size = size_range(t);
        let why_not = if t.nodes != nodes {
            Some(format!("for {} node(s)", t.nodes))
        } else if t.collective == "sendrecv" && t.gpus == Some(2) {
            None // the pair-matrix rule applies to every pair whatever the node's GPU count
        } else if t.gpus.is_some_and(|g| g != gpus) {
            Some(format!("for {} GPUs", t.gpus.unwrap_or(0)))
        } else {
            None
        };
        let gpus_text = t
            .gpus
            .map_or("any count".to_string(), |g| format!("{g} GPUs"));
        out += &format!(
            "  {} {:<14} {:>12}  {:<10}  >= {:>7.1} GB/s  [{}]  {}\n      source: {}\n",
            if why_not.is_none() {
                "APPLIES "
            } else {
                "ignored "
            },
            t.collective,
            size,
            gpus_text,
            t.min_busbw,
            t.origin,
            why_not.unwrap_or_default(),
            t.source
        );
    }
    if any {
        out +=
            "  Sizes outside a rule's range have no floor: the outlier rule alone judges them.\n";
    }
    if !any {
        out += &format!(
            "  no rule names this GPU: only the outlier rule (peers' median) judges it.\n  Add [[thresholds]] with gpu = \"{gpu_name}\" to /etc/nccl-check/nccl-check.toml.\n"
        );
    }
    out
}

#[cfg(test)]
mod table_test;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::worker::WorkerConfig;
    use std::path::Path;

    fn key(gpu: &str, gpus: u32, coll: &'static str, bytes: u64) -> Key<'static> {
        Key {
            gpu_name: Box::leak(gpu.to_string().into_boxed_str()),
            gpus,
            nodes: 1,
            collective: coll,
            bytes,
        }
    }

    #[test]
    fn the_most_specific_rule_wins_and_admin_rules_win_ties() {
        let c = WorkerConfig::from_texts(None).unwrap();
        let t = lookup(
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
        let t = lookup(&c.thresholds, &key("NVIDIA H200", 2, "sendrecv", 1 << 30)).unwrap();
        assert_eq!(t.min_busbw, 300.0);
        let t = lookup(&c.thresholds, &key("NVIDIA H200", 2, "sendrecv", 64 << 20)).unwrap();
        assert_eq!(t.min_busbw, 100.0);
        // An admin rule of the same specificity replaces the default.
        let c = WorkerConfig::from_texts(Some((
            Path::new("/etc/x.toml"),
            "[[thresholds]]\ngpu = \"h200\"\ngpus = 4\ncollective = \"all_reduce\"\nbytes = \"256M\"\nmin_busbw = 330.0\n",
        )))
        .unwrap();
        let t = lookup(
            &c.thresholds,
            &key("NVIDIA H200", 4, "all_reduce", 256 << 20),
        )
        .unwrap();
        assert_eq!((t.min_busbw, t.admin), (330.0, true));
    }

    #[test]
    fn no_rule_for_an_unknown_model_count_or_node_count() {
        let c = WorkerConfig::from_texts(None).unwrap();
        assert!(lookup(&c.thresholds, &key("Tesla T4", 4, "all_reduce", 256 << 20)).is_none());
        assert!(lookup(
            &c.thresholds,
            &key("NVIDIA H200", 3, "all_reduce", 256 << 20)
        )
        .is_none());
        let mut k = key("NVIDIA H200", 4, "all_reduce", 256 << 20);
        k.nodes = 2;
        assert!(
            lookup(&c.thresholds, &k).is_none(),
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
                &format!("[[thresholds]]\ngpu = \"X\"\ncollective = \"all_reduce\"\nmin_busbw = 1.0\n{body}"),
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
