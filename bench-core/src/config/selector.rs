//! Which jobs a config entry applies to: `partitions` (single names) and `nodes` (Slurm
//! hostlist expressions), both optional. The one matcher and validator for every entry that
//! selects by them (`network` profiles, `expected_gpus`).

use nccl_check_host::hostlist::Pattern;

/// Whether a job in `partition` on `host` is selected: every given selector must match (an
/// empty one matches all).
pub fn matches(
    partitions: &[String],
    nodes: &[String],
    partition: Option<&str>,
    host: &str,
) -> bool {
    let partition_ok =
        partitions.is_empty() || partition.is_some_and(|p| partitions.iter().any(|q| q == p));
    let node_ok = nodes.is_empty()
        || nodes
            .iter()
            .any(|pattern| hostlist_matches(pattern, host).unwrap_or(false));
    partition_ok && node_ok
}

/// `partitions` are single names and `nodes` readable hostlist expressions; Err names the
/// field (`partitions[1]`, `nodes[0]`) and what is wrong.
pub fn check_lists(partitions: &[String], nodes: &[String]) -> Result<(), (String, String)> {
    for (j, part) in partitions.iter().enumerate() {
        if part.is_empty() || part.contains([',', ' ', '\t']) {
            return Err((
                format!("partitions[{j}]"),
                format!("'{part}' is not one partition name"),
            ));
        }
    }
    for (j, pattern) in nodes.iter().enumerate() {
        if let Err(e) = hostlist_matches(pattern, "") {
            return Err((format!("nodes[{j}]"), e));
        }
    }
    Ok(())
}

/// Whether `host` matches a Slurm hostlist expression, `*` meaning any characters (see
/// [`nccl_check_host::hostlist::Pattern`]: commas only between entries). Err when it cannot be read.
pub fn hostlist_matches(pattern: &str, host: &str) -> Result<bool, String> {
    let pattern = Pattern::parse(pattern).map_err(|e| e.to_string())?;
    Ok(pattern.matches(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_given_selector_must_match_and_bad_ones_are_named() {
        assert!(matches(&[], &[], None, "n1"));
        assert!(matches(&v(&["gpu"]), &v(&["n[1-4]"]), Some("gpu"), "n3"));
        assert!(!matches(&v(&["gpu"]), &v(&["n[1-4]"]), Some("cpu"), "n3"));
        assert!(!matches(&v(&["gpu"]), &[], None, "n3"));
        assert!(!matches(&[], &v(&["n[1-4]"]), Some("gpu"), "n5"));
        assert_eq!(
            check_lists(&v(&["gpu", "a,b"]), &[]).unwrap_err().0,
            "partitions[1]"
        );
        assert_eq!(check_lists(&[], &v(&["n[1-"])).unwrap_err().0, "nodes[0]");
        assert!(check_lists(&v(&["gpu"]), &v(&["n[1-4]", "x*"])).is_ok());
    }

    #[test]
    fn hostlists_match_as_slurm_writes_them() {
        let m = |p: &str, h: &str| hostlist_matches(p, h).expect(p);
        assert!(m("gpu[001-128]", "gpu007"));
        assert!(!m("gpu[001-128]", "gpu7"), "padding is part of the name");
        assert!(!m("gpu[001-128]", "gpu129"));
        assert!(m("n[1-16]", "n16") && m("n[1-16]", "n1") && !m("n[1-16]", "n01"));
        assert!(m("rack[1-2]-n[01-04,7]", "rack2-n7") && m("rack[1-2]-n[01-04,7]", "rack1-n03"));
        assert!(
            !m("rack[1-2]-n[01-04,7]", "rack2-n07"),
            "each range keeps its own width"
        );
        assert!(!m("rack[1-2]-n[01-04,7]", "rack3-n01"));
        assert!(m("a1,b[2-3]", "b3") && m("a1,b[2-3]", "a1") && !m("a1,b[2-3]", "a2"));
        assert!(m("dgx-*", "dgx-h200-17") && !m("dgx-*", "gpu1"));
        assert!(m("n[1-2]0", "n10") && m("n[1-2]0", "n20") && !m("n[1-2]0", "n30"));
        assert!(!m("gpu1", "gpu10"), "whole names only");
        for bad in [
            "gpu[1-", "gpu[a-b]", "gpu[3-1]", "gpu[[1]]", "a,,b", "gpu 1", "n[]",
        ] {
            assert!(hostlist_matches(bad, "x").is_err(), "{bad}");
        }
    }
}
