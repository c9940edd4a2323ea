//! `[[expected_gpus]]`: how many GPUs a node should have (and optionally which, by PCI bus id),
//! per partition and/or node set, chosen like the network profiles (first match wins). Read by
//! `facts::inventory`; without a match the count comes from Slurm's gres.conf/slurm.conf.
//!
//! ```toml
//! [[expected_gpus]]
//! nodes = ["gpu[001-128]"]          # Slurm hostlist expressions, `*` = any characters
//! partitions = ["gpu"]              # SLURM_JOB_PARTITION; empty or absent = any
//! count = 8
//! bus_ids = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
//!            "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]   # optional
//! ```

use crate::model::bounds::MAX_GPUS;
use nccl_check_host::config_file::{invalid, ConfigError};
use serde::Deserialize;
use std::path::Path;

/// One `[[expected_gpus]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedGpus {
    #[serde(default)]
    pub partitions: Vec<String>,
    #[serde(default)]
    pub nodes: Vec<String>,
    pub count: u32,
    /// PCI addresses (`0000:9b:00.0`, lower case after validation) the GPUs sit at, so a
    /// missing one is named.
    #[serde(default)]
    pub bus_ids: Vec<String>,
}

/// The entry for a job in `partition` on `host`: the first that matches, in file order.
pub fn select_expected<'a>(
    list: &'a [ExpectedGpus],
    partition: Option<&str>,
    host: &str,
) -> Option<&'a ExpectedGpus> {
    let matches =
        |e: &&ExpectedGpus| super::selector::matches(&e.partitions, &e.nodes, partition, host);
    list.iter().find(matches)
}

/// A PCI bus id in the driver's form (`0000:9b:00.0`), from NVML's (`00000000:9B:00.0`) or
/// CUDA's; None when it is not one.
pub fn bus_id(text: &str) -> Option<String> {
    let t = text.trim().to_ascii_lowercase();
    let (domain, rest) = t.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let id = format!("{domain:04x}:{rest}");
    is_bus_id(&id).then_some(id)
}

/// Whether `text` is a PCI address `dddd:bb:dd.f` (hex digits).
pub fn is_bus_id(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 12
        && [4, 7, 10]
            .iter()
            .all(|&i| b[i] == if i == 10 { b'.' } else { b':' })
        && b.iter()
            .enumerate()
            .filter(|(i, _)| ![4, 7, 10].contains(i))
            .all(|(_, c)| c.is_ascii_hexdigit())
}

/// Checks what serde cannot, naming the line (`expected_gpus[1].bus_ids[3]`), and lower-cases
/// the bus ids.
pub fn validate_expected(
    list: &mut [ExpectedGpus],
    path: &Path,
    text: &str,
) -> Result<(), ConfigError> {
    let n = list.len();
    for (i, e) in list.iter_mut().enumerate() {
        let at = |field: &str| format!("expected_gpus[{i}].{field}");
        let bad = |field: &str, msg: &str| Err(invalid(path, text, &at(field), msg));
        if e.count == 0 || e.count > MAX_GPUS {
            return bad(
                "count",
                &format!("{} GPUs: expected 1..={MAX_GPUS}", e.count),
            );
        }
        if e.partitions.is_empty() && e.nodes.is_empty() && i + 1 < n {
            return bad(
                "count",
                "an entry with neither partitions nor nodes matches every node, so the entries \
                 after it never apply (the first match wins); move it last",
            );
        }
        if let Err((field, msg)) = super::selector::check_lists(&e.partitions, &e.nodes) {
            return bad(&field, &msg);
        }
        let (ids, count) = (e.bus_ids.len(), e.count);
        if ids > 0 && ids != count as usize {
            return bad("bus_ids", &format!("{ids} bus ids for count = {count}"));
        }
        for j in 0..ids {
            let (field, id) = (format!("bus_ids[{j}]"), e.bus_ids[j].to_ascii_lowercase());
            if !is_bus_id(&id) {
                let msg = format!("'{id}' is not a PCI address like 0000:9b:00.0");
                return bad(&field, &msg);
            }
            if e.bus_ids[..j].contains(&id) {
                return bad(&field, &format!("'{id}' is listed twice"));
            }
            e.bus_ids[j] = id;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::worker::WorkerConfig;
    use std::path::Path;

    fn admin(text: &str) -> Result<WorkerConfig, nccl_check_host::config_file::ConfigError> {
        WorkerConfig::from_texts(Some((Path::new("/etc/nccl-check/nccl-check.toml"), text)))
    }

    #[test]
    fn entries_are_selected_by_partition_and_node_first_match_wins() {
        let c = admin(
            "[[expected_gpus]]\nnodes = [\"gpu[001-004]\"]\ncount = 4\n\
             [[expected_gpus]]\npartitions = [\"big\"]\ncount = 8\nbus_ids = [\"0000:18:00.0\", \"0000:2A:00.0\", \"0000:3a:00.0\", \"0000:5d:00.0\", \"0000:9a:00.0\", \"0000:ab:00.0\", \"0000:ba:00.0\", \"0000:db:00.0\"]\n\
             [[expected_gpus]]\ncount = 2\n",
        )
        .unwrap();
        let l = &c.expected_gpus;
        assert_eq!(
            super::select_expected(l, Some("big"), "gpu003")
                .unwrap()
                .count,
            4
        );
        assert_eq!(
            super::select_expected(l, Some("big"), "gpu010")
                .unwrap()
                .count,
            8
        );
        assert_eq!(super::select_expected(l, None, "gpu010").unwrap().count, 2);
        assert_eq!(l[1].bus_ids[1], "0000:2a:00.0");
        assert!(WorkerConfig::from_texts(None)
            .unwrap()
            .expected_gpus
            .is_empty());
    }

    #[test]
    fn bad_entries_name_file_line_and_field() {
        let e = admin("[[expected_gpus]]\ncount = 8\nbus_ids = [\"0000:18:00.0\"]\n").unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("expected_gpus[0].bus_ids", Some(3)),
            "{e}"
        );
        let e = admin("[[expected_gpus]]\ncount = 1\nbus_ids = [\"18:00.0\"]\n").unwrap_err();
        assert_eq!(e.field, "expected_gpus[0].bus_ids[0]", "{e}");
        let e = admin("[[expected_gpus]]\ncount = 0\n").unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("expected_gpus[0].count", Some(2)),
            "{e}"
        );
        let e = admin("[[expected_gpus]]\ncount = 8\ncont = 8\n").unwrap_err();
        assert!(e.message.contains("cont") && e.line == Some(3), "{e}");
        let e =
            admin("[[expected_gpus]]\ncount = 8\n[[expected_gpus]]\nnodes = [\"a\"]\ncount = 4\n")
                .unwrap_err();
        assert!(e.message.contains("move it last"), "{e}");
        let e = admin("[[expected_gpus]]\nnodes = [\"gpu[1-\"]\ncount = 4\n").unwrap_err();
        assert_eq!(e.field, "expected_gpus[0].nodes[0]", "{e}");
    }
}
