//! What `nccl-check --check-config [FILE]` prints of the config: every key of the worker's config
//! over the built-in defaults, with where it is set. `facts::node_ready::check_file` loads the
//! file, prints these lines and then whether this node can run a check.

use super::worker::WorkerConfig;
use nccl_check_host::config_file::find_key_line;

/// Where a key of the file is set, for the comment after each value.
struct Source<'a> {
    file: Option<String>,
    cfg: &'a WorkerConfig,
}

impl Source<'_> {
    fn of(&self, field: &str) -> String {
        match (&self.file, find_key_line(&self.cfg.text, field)) {
            (Some(f), Some(l)) => format!("{f}:{l}"),
            _ => "built-in defaults".into(),
        }
    }

    /// `key = value    # where key is set`.
    fn line(&self, key: &str, value: impl std::fmt::Display) -> String {
        format!("{key} = {value}    # {}", self.of(key))
    }
}

/// The effective configuration, one key a line with where it comes from.
pub fn effective_lines(cfg: &WorkerConfig) -> Vec<String> {
    let from = Source {
        file: cfg.path.as_ref().map(|p| p.display().to_string()),
        cfg,
    };
    let mut lines = vec![match &from.file {
        Some(f) => {
            format!("# {f}: valid; the effective configuration (over the built-in defaults):")
        }
        None => "# no config file: the built-in defaults apply:".into(),
    }];
    lines.push(from.line("outliers.fraction", cfg.outliers.fraction));
    lines.push(from.line("outliers.retest", cfg.outliers.retest));
    lines.push(thresholds(cfg, from.file.as_deref()));
    for (name, plan) in &cfg.plans {
        let steps = format!("{} steps", plan.steps.len());
        lines.push(from.line(&format!("plans.{name}"), steps));
    }
    let lib = cfg.nccl_lib.as_ref().map_or(
        "(unset: libnccl.so.2 on the library path)".to_string(),
        |p| format!("{:?}", p.display().to_string()),
    );
    lines.push(from.line("nccl_lib", lib));
    lines.extend(network(cfg, &from));
    lines.extend(expected_gpus(cfg, &from));
    lines
}

/// How many threshold rules apply, and how many of them the file adds.
fn thresholds(cfg: &WorkerConfig, file: Option<&str>) -> String {
    let (rules, file) = (cfg.thresholds.len(), file.unwrap_or("no file"));
    let admin_rules = cfg.thresholds.iter().filter(|t| t.admin).count();
    format!(
        "thresholds = {rules} rules    # {admin_rules} from {file}, then the built-in defaults (first match wins)"
    )
}

/// A selector's list, or "any" when empty.
fn list(v: &[String]) -> String {
    if v.is_empty() {
        "any".to_string()
    } else {
        v.join(",")
    }
}

fn network(cfg: &WorkerConfig, from: &Source) -> Vec<String> {
    (cfg.network.iter().enumerate())
        .map(|(i, n)| {
            let env: Vec<String> = n.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let env = if env.is_empty() {
                "none".into()
            } else {
                env.join(" ")
            };
            let (parts, nodes) = (list(&n.partitions), list(&n.nodes));
            let value = format!("{:?}: partitions {parts}, nodes {nodes}, env {env}", n.name);
            from.line(&format!("network[{i}]"), value)
        })
        .collect()
}

fn expected_gpus(cfg: &WorkerConfig, from: &Source) -> Vec<String> {
    (cfg.expected_gpus.iter().enumerate())
        .map(|(i, e)| {
            let at = if e.bus_ids.is_empty() {
                String::new()
            } else {
                format!(", at {}", e.bus_ids.join(","))
            };
            let (parts, nodes) = (list(&e.partitions), list(&e.nodes));
            let value = format!("{} GPUs: partitions {parts}, nodes {nodes}{at}", e.count);
            from.line(&format!("expected_gpus[{i}]"), value)
        })
        .collect()
}
