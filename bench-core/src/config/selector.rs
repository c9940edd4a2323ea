//! Which jobs a config entry applies to: `partitions` (single names) and `nodes` (Slurm
//! hostlist expressions), both optional. The one matcher and validator for every entry that
//! selects by them (`network` profiles, `expected_gpus`).

use super::network::hostlist_matches;

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
}
